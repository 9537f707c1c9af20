#include "models/gpt_graphs.h"

#include <cstring>
#include <utility>

#include "engine/autograd.h"
#include "engine/error.h"

namespace hg::models {

GPTGraphDecoder::GPTGraphDecoder(GPT& gpt, int64_t batch) : gpt_(gpt), cache_(gpt.new_cache(batch)) {
  if (!gpt.device().is_hpu())
    throw DeviceError("GPTGraphDecoder: HPU graphs need the model on an HPU, it is on " + gpt.device().str());
}

Tensor GPTGraphDecoder::prefill(const Tensor& ids) {
  if (ids.ndim() >= 1 && ids.dim(0) != cache_.k[0].dim(0))
    throw InvalidArgument("GPTGraphDecoder prefill: batch " + std::to_string(ids.dim(0)) + ", the decoder's is " +
                          std::to_string(cache_.k[0].dim(0)));
  KVCache filled;
  Tensor logits = gpt_.prefill(ids, filled);
  for (size_t l = 0; l < cache_.k.size(); ++l) {
    cache_.k[l].copy_from(filled.k[l]);
    cache_.v[l].copy_from(filled.v[l]);
  }
  cache_.length = filled.length;
  return logits;
}

Tensor GPTGraphDecoder::step(const Tensor& tokens) {
  NoGradGuard no_grad;
  DecodeInputs in = gpt_.decode_inputs(tokens, cache_);
  const int64_t bucket = in.attend.dim(3);
  Bucket* hit = buckets_.get(bucket);
  if (!hit) {  // capture: these inputs become the static ones; capture_end runs the step once
    Bucket c;
    c.in = std::move(in);
    c.out = cache_;
    c.graph = std::make_unique<graphs::HPUGraph>(gpt_.device());
    std::vector<Tensor> weights;  // frozen: folded and pre-packed once
    for (const auto& [name, t] : std::as_const(gpt_).named_parameters()) weights.push_back(*t);
    c.graph->capture_begin({.frozen = std::move(weights)});
    try {
      c.logits = gpt_.decode(c.in, c.out);
      c.graph->capture_end();
    } catch (...) {  // as Predictor::capture: drop the outputs, then the graph (its destructor ends the capture)
      c.logits = Tensor();
      c.out = {};
      c.graph.reset();
      throw;  // no half-built graph to replay: the next step captures afresh
    }
    hit = buckets_.put(bucket, std::move(c));
  } else {
    hit->in.tokens.copy_from(in.tokens);
    hit->in.position.copy_from(in.position);
    hit->in.write.copy_from(in.write);
    hit->in.attend.copy_from(in.attend);
    hit->graph->replay();
  }
  const Bucket& b = *hit;
  for (size_t l = 0; l < cache_.k.size(); ++l) {
    cache_.k[l].copy_from(b.out.k[l]);
    cache_.v[l].copy_from(b.out.v[l]);
  }
  ++cache_.length;
  return b.logits.clone();
}

size_t GPTGraphDecoder::warmup() {
  const size_t before = buckets_.size();
  const int64_t batch = cache_.k[0].dim(0), max_len = gpt_.config().max_len;
  for (int64_t length = 0; length < max_len; length = gpt_.bucket(length)) {
    cache_.length = length;
    step(Tensor::zeros({batch}, DType::I64));
  }
  reset();
  return buckets_.size() - before;
}

void GPTGraphDecoder::reset() {
  for (auto* kv : {&cache_.k, &cache_.v})
    for (Tensor& t : *kv) std::memset(t.raw_data(), 0, t.meta().bytes());
  cache_.length = 0;
}

std::vector<int64_t> GPTGraphDecoder::generate_ids(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                                   const SamplingOptions& options) {
  return gpt_.generate_with(
      prompt, max_new_tokens, options, [&](const Tensor& ids) { return prefill(ids); },
      [&](const Tensor& token) { return step(token); });
}

}  // namespace hg::models
