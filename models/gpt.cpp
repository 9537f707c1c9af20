#include "models/gpt.h"

#include <algorithm>
#include <array>
#include <map>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/ops.h"
#include "models/config_fields.h"
#include "models/kv_blocks.h"
#include "models/zoo.h"

namespace hg::models {

namespace {

constexpr std::array<std::pair<const char*, int64_t GPTConfig::*>, 6> kConfigFields{{
    {"vocab", &GPTConfig::vocab},
    {"d_model", &GPTConfig::d_model},
    {"nhead", &GPTConfig::nhead},
    {"layers", &GPTConfig::layers},
    {"ff", &GPTConfig::ff},
    {"max_len", &GPTConfig::max_len},
}};

// Independent initialisation seeds for the sublayers.
uint64_t sub_seed(uint64_t seed, uint64_t k) { return mix64(seed + (k + 1) * kGoldenGamma); }

Tensor bool_mask(const Shape& shape, int64_t true_from, int64_t true_to, Device d) {
  Tensor m = Tensor::zeros(shape, DType::BOOL);
  uint8_t* p = m.data<uint8_t>();
  for (int64_t i = true_from; i < true_to; ++i) p[i] = 1;
  return m.to(d);
}

}  // namespace

// Causal self-attention: qkv = Linear(D, 3D) gives q, k, v (in that order along the last dim),
// split into nhead heads; proj = Linear(D, D) after the heads are joined again.
class GPTAttention : public Module {
 public:
  GPTAttention(int64_t d_model, int64_t nhead, uint64_t seed) : d_(d_model), h_(nhead) {
    qkv_ = register_module("qkv", std::make_shared<Linear>(d_model, 3 * d_model, sub_seed(seed, 0)));
    proj_ = register_module("proj", std::make_shared<Linear>(d_model, d_model, sub_seed(seed, 1)));
  }
  Tensor forward(const Tensor& x) override {
    auto [q, k, v] = heads(x);
    return merge(ops::scaled_dot_product_attention(q, k, v, {}, /*causal=*/true));
  }
  nlohmann::json spec() const override { return {{"op", "causal_self_attention"}, {"d_model", d_}, {"nhead", h_}}; }

  // x [N, S, D] -> q, k, v [N, H, S, D/H].
  std::array<Tensor, 3> heads(const Tensor& x) {
    const int64_t n = x.dim(0), s = x.dim(1);
    auto parts = ops::split(project_qkv(x), d_, -1);
    std::array<Tensor, 3> r;
    for (size_t i = 0; i < 3; ++i) r[i] = ops::permute(ops::reshape(parts[i], {n, s, h_, d_ / h_}), {0, 2, 1, 3});
    return r;
  }
  // o [N, H, S, D/H] -> proj(o as [N, S, D]).
  Tensor merge(const Tensor& o) {
    return project_out(ops::reshape(ops::permute(o, {0, 2, 1, 3}), {o.dim(0), o.dim(2), d_}));
  }
  Tensor project_qkv(const Tensor& x) { return qkv_->forward(x); }  // x [N, S, D] -> q, k, v joined [N, S, 3D]
  Tensor project_out(const Tensor& o) { return proj_->forward(o); }  // heads joined [N, S, D] -> [N, S, D]

 private:
  int64_t d_, h_;
  std::shared_ptr<Linear> qkv_, proj_;
};

// Pre-norm block: x + attn(ln1(x)), then + fc2(gelu(fc1(ln2(x)))).
class GPTBlock : public Module {
 public:
  GPTBlock(const GPTConfig& c, uint64_t seed) {
    ln1_ = register_module("ln1", std::make_shared<LayerNorm>(c.d_model));
    attn_ = register_module("attn", std::make_shared<GPTAttention>(c.d_model, c.nhead, sub_seed(seed, 0)));
    ln2_ = register_module("ln2", std::make_shared<LayerNorm>(c.d_model));
    fc1_ = register_module("fc1", std::make_shared<Linear>(c.d_model, c.ff, sub_seed(seed, 1)));
    fc2_ = register_module("fc2", std::make_shared<Linear>(c.ff, c.d_model, sub_seed(seed, 2)));
  }
  Tensor forward(const Tensor& x) override {
    return run(x, [&](const Tensor& h) { return attn_->forward(h); });
  }
  nlohmann::json spec() const override { return {{"op", "gpt_block"}}; }

  // The block with `attend` (ln1's output -> attention output) in place of attn.
  template <class Attend>
  Tensor run(const Tensor& x, Attend attend) {
    const Tensor h = ops::add(x, attend(ln1_->forward(x)));
    return ops::add(h, fc2_->forward(ops::gelu(fc1_->forward(ln2_->forward(h)))));
  }
  GPTAttention& attn() { return *attn_; }

 private:
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<GPTAttention> attn_;
  std::shared_ptr<Linear> fc1_, fc2_;
};

void GPTConfig::validate() const {
  for (auto& [name, field] : kConfigFields)
    if (this->*field <= 0)
      throw InvalidArgument(std::string("gpt config: ") + name + " must be > 0, got " + std::to_string(this->*field));
  if (d_model % nhead)
    throw InvalidArgument("gpt config: d_model " + std::to_string(d_model) + " is not divisible by nhead " +
                          std::to_string(nhead));
}

nlohmann::json GPTConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (auto& [name, field] : kConfigFields) j[name] = this->*field;
  return j;
}

GPTConfig GPTConfig::from_json(const nlohmann::json& config, const std::string& file) {
  GPTConfig c;
  std::map<std::string, int64_t> values;
  for (auto& [name, field] : kConfigFields) values[name] = c.*field;
  values = read_config({{"config", config}}, file, values);
  for (auto& [name, field] : kConfigFields) c.*field = values[name];
  try {
    c.validate();
  } catch (const InvalidArgument& e) {
    bad_field(file, "graph.config", std::string("is invalid: ") + e.what());
  }
  return c;
}

int64_t GPTConfig::parameter_count(const std::string& file) const {
  // Embeddings; per block two norms, qkv, proj, fc1, fc2; the final norm; lm_head.
  return models::parameter_count(file, {{vocab + max_len, d_model},
                                        {layers, 4 * d_model * d_model + 2 * d_model * ff + 9 * d_model + ff},
                                        {2 * d_model},
                                        {d_model + 1, vocab}});
}

GPT::GPT(const GPTConfig& config, uint64_t seed) : config_(config) {
  config_.validate();
  const auto& c = config_;
  tok_emb_ = register_module("tok_emb", std::make_shared<Embedding>(c.vocab, c.d_model, sub_seed(seed, 0)));
  pos_emb_ = register_module("pos_emb", std::make_shared<Embedding>(c.max_len, c.d_model, sub_seed(seed, 1)));
  auto blocks = register_module("blocks", std::make_shared<Sequential>());
  for (int64_t l = 0; l < c.layers; ++l) {
    blocks_.push_back(std::make_shared<GPTBlock>(c, sub_seed(seed, 2 + static_cast<uint64_t>(l))));
    blocks->add(blocks_.back());
  }
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(c.d_model));
  lm_head_ = register_module("lm_head", std::make_shared<Linear>(c.d_model, c.vocab, sub_seed(seed, 1000)));
}

Device GPT::device() const { return tok_emb_->weight().device(); }

nlohmann::json GPT::spec() const { return {{"type", "zoo"}, {"model", "gpt"}, {"config", config_.to_json()}}; }

void GPT::check_tokens(const Tensor& ids, const char* what) const {
  if (ids.dtype() != DType::I64)
    throw InvalidArgument(std::string("gpt ") + what + ": token ids must be I64, got " + dtype_name(ids.dtype()));
  if (ids.is_lazy()) return;  // cannot be read while tracing (embedding gives zeros for bad ids)
  const std::vector<int64_t> v = ids.to_indices();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0 || v[i] >= config_.vocab)
      throw InvalidArgument(std::string("gpt ") + what + ": token " + std::to_string(v[i]) + " at flat index " +
                            std::to_string(i) + " of " + shape_str(ids.shape()) + " is outside the vocabulary [0, " +
                            std::to_string(config_.vocab) + ")");
}

Tensor GPT::logits(const Tensor& h) { return lm_head_->forward(ln_f_->forward(h)); }

Tensor GPT::embed(const Tensor& ids, const char* what, const char* noun) {
  if (ids.ndim() != 2 || ids.dim(1) < 1)
    throw InvalidArgument(std::string("gpt ") + what + ": ids must be [N, S] with S >= 1, got " + shape_str(ids.shape()));
  const int64_t s = ids.dim(1);
  if (s > config_.max_len)
    throw InvalidArgument(std::string("gpt ") + what + ": " + noun + " of " + std::to_string(s) +
                          " tokens exceeds max_len " + std::to_string(config_.max_len));
  check_tokens(ids, what);
  // Positions 0..S-1 are the first S rows of the table (a slice: the traced export keeps S dynamic).
  return ops::add(tok_emb_->forward(ids), ops::slice(pos_emb_->weight(), 0, 0, s));
}

Tensor GPT::forward(const Tensor& ids) {
  Tensor x = embed(ids, "forward", "sequence");
  for (auto& b : blocks_) x = b->forward(x);
  return logits(x);
}

KVCache GPT::new_cache(int64_t n) const {
  if (n < 1) throw InvalidArgument("gpt new_cache: batch must be >= 1, got " + std::to_string(n));
  const auto& c = config_;
  KVCache cache;
  for (int64_t l = 0; l < c.layers; ++l) {
    cache.k.push_back(Tensor::zeros({n, c.nhead, c.max_len, c.d_model / c.nhead}, DType::F32, device()));
    cache.v.push_back(Tensor::zeros({n, c.nhead, c.max_len, c.d_model / c.nhead}, DType::F32, device()));
  }
  return cache;
}

Tensor GPT::prefill(const Tensor& ids, KVCache& cache) {
  NoGradGuard no_grad;
  Tensor x = embed(ids, "prefill", "prompt");
  const int64_t n = ids.dim(0), p = ids.dim(1), max_len = config_.max_len;
  KVCache filled;
  // Keys and values [N, H, P, Dh] padded with zeros to max_len positions.
  auto pad = [&](const Tensor& t) {
    if (p == max_len) return t;
    Shape s = t.shape();
    s[2] = max_len - p;
    return ops::concat({t, Tensor::zeros(s, DType::F32, t.device())}, 2);
  };
  for (auto& b : blocks_) {
    x = b->run(x, [&](const Tensor& h) {
      auto [q, k, v] = b->attn().heads(h);
      filled.k.push_back(pad(k));
      filled.v.push_back(pad(v));
      return b->attn().merge(ops::scaled_dot_product_attention(q, k, v, {}, /*causal=*/true));
    });
  }
  filled.length = p;
  cache = std::move(filled);
  return ops::reshape(logits(ops::slice(x, 1, p - 1, p)), {n, config_.vocab});
}

int64_t GPT::bucket(int64_t length) const {
  int64_t b = 16;
  while (b <= length) b *= 2;
  return std::min(b, config_.max_len);
}

DecodeInputs GPT::decode_inputs(const Tensor& tokens, const KVCache& cache) const {
  const auto& c = config_;
  const Shape want{cache.k.empty() ? 0 : cache.k[0].dim(0), c.nhead, c.max_len, c.d_model / c.nhead};
  bool ok = static_cast<int64_t>(cache.k.size()) == c.layers && cache.v.size() == cache.k.size();
  for (size_t l = 0; ok && l < cache.k.size(); ++l) ok = cache.k[l].shape() == want && cache.v[l].shape() == want;
  if (!ok || want[0] < 1)
    throw InvalidArgument("gpt decode: the cache does not match the model (want " + std::to_string(c.layers) +
                          " layers of keys and values " + shape_str(want) + "); make it with new_cache or prefill");
  if (cache.length < 0 || cache.length >= c.max_len)
    throw InvalidArgument("gpt decode: the cache holds " + std::to_string(cache.length) + " positions and max_len is " +
                          std::to_string(c.max_len) + ": no room for another token");
  const int64_t n = want[0];
  if (!((tokens.ndim() == 1 && tokens.dim(0) == n) || (tokens.ndim() == 2 && tokens.dim(0) == n && tokens.dim(1) == 1)))
    throw InvalidArgument("gpt decode: tokens must be [" + std::to_string(n) + "] or [" + std::to_string(n) +
                          ", 1] for the cache's batch, got " + shape_str(tokens.shape()));
  check_tokens(tokens, "decode");
  const Device d = device();
  const int64_t b = bucket(cache.length);
  return {ops::reshape(tokens, {n, 1}).to(d), Tensor::from_indices({cache.length}, {1}, d),
          bool_mask({1, 1, c.max_len, 1}, cache.length, cache.length + 1, d), bool_mask({1, 1, 1, b}, 0, cache.length + 1, d)};
}

Tensor GPT::decode(const DecodeInputs& in, KVCache& cache) {
  NoGradGuard no_grad;
  const int64_t n = in.tokens.dim(0), b = in.attend.dim(3);
  Tensor x = ops::add(tok_emb_->forward(in.tokens), pos_emb_->forward(in.position));  // [N, 1, D]
  for (size_t l = 0; l < blocks_.size(); ++l) {
    GPTAttention& attn = blocks_[l]->attn();
    x = blocks_[l]->run(x, [&](const Tensor& h) {
      auto [q, k, v] = attn.heads(h);
      cache.k[l] = ops::where(in.write, k, cache.k[l]);
      cache.v[l] = ops::where(in.write, v, cache.v[l]);
      const Tensor ks = ops::slice(cache.k[l], 2, 0, b), vs = ops::slice(cache.v[l], 2, 0, b);
      return attn.merge(ops::scaled_dot_product_attention(q, ks, vs, in.attend));
    });
  }
  return ops::reshape(logits(x), {n, config_.vocab});
}

KVBlockOptions GPT::kv_options(int64_t block_size, int64_t blocks, DType dtype) const {
  return {.layers = config_.layers, .heads = config_.nhead, .head_dim = config_.d_model / config_.nhead,
          .block_size = block_size, .blocks = blocks, .dtype = dtype};
}

Tensor GPT::paged_step(const PagedInputs& in, KVBlockPool& pool) {
  NoGradGuard no_grad;
  const int64_t n = in.tokens.dim(0), s = in.tokens.dim(1);
  Tensor x = ops::add(tok_emb_->forward(in.tokens), pos_emb_->forward(in.pos_ids));  // [N, S, D]
  for (size_t l = 0; l < blocks_.size(); ++l) {
    GPTAttention& attn = blocks_[l]->attn();
    x = blocks_[l]->run(x, [&](const Tensor& h) {
      const Tensor qkv = attn.project_qkv(h);
      const Tensor written = kv_write(qkv, in.slots, pool, static_cast<int64_t>(l));
      return attn.project_out(
          paged_attention(qkv, written, in.tables, in.positions, in.seqs, pool, static_cast<int64_t>(l)));
    });
  }
  // Only each sequence's last position goes through the final norm and the head.
  return logits(ops::embedding(in.last, ops::reshape(x, {n * s, config_.d_model})));
}

Tensor GPT::decode_step(const Tensor& tokens, KVCache& cache) {
  const DecodeInputs in = decode_inputs(tokens, cache);
  Tensor out = decode(in, cache);
  ++cache.length;
  return out;
}

std::vector<int64_t> GPT::generate_ids(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                       const SamplingOptions& options) {
  KVCache cache;
  return generate_with(
      prompt, max_new_tokens, options, [&](const Tensor& ids) { return prefill(ids, cache); },
      [&](const Tensor& token) { return decode_step(token, cache); });
}

std::vector<int64_t> GPT::generate_with(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                        const SamplingOptions& options, const std::function<Tensor(const Tensor&)>& first,
                                        const std::function<Tensor(const Tensor&)>& next) {
  Sampler sampler(options);
  if (prompt.empty()) throw InvalidArgument("gpt generate: the prompt is empty (at least one token is needed)");
  const auto p = static_cast<int64_t>(prompt.size());
  if (max_new_tokens < 0)
    throw InvalidArgument("gpt generate: max_new_tokens must be >= 0, got " + std::to_string(max_new_tokens));
  if (max_new_tokens > config_.max_len - p)  // no p + max_new_tokens: it may overflow
    throw InvalidArgument("gpt generate: prompt of " + std::to_string(p) + " tokens + " + std::to_string(max_new_tokens) +
                          " new tokens exceeds max_len " + std::to_string(config_.max_len));
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= config_.vocab)
      throw InvalidArgument("gpt generate: prompt token " + std::to_string(prompt[i]) + " at position " +
                            std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(config_.vocab) + ")");
  std::vector<int64_t> out;
  if (max_new_tokens == 0) return out;
  Tensor logits = first(Tensor::from_indices(prompt, {1, p}, device()));
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    out.push_back(sampler.next(logits.to_vector()));
    if (i + 1 < max_new_tokens) logits = next(Tensor::from_indices({out.back()}, {1}));
  }
  return out;
}

Utf8Text GPT::generate(std::string_view prompt, int64_t max_new_tokens, const SamplingOptions& options) {
  return decode_utf8(decode_bytes(generate_ids(encode_bytes(prompt), max_new_tokens, options)));
}

std::unique_ptr<GPT> zoo::gpt(const GPTConfig& c, uint64_t seed) { return std::make_unique<GPT>(c, seed); }

std::unique_ptr<GPT> zoo::build_gpt(const PackageSpec& spec, const std::string& file, int64_t weight_elements) {
  const GPTConfig c = GPTConfig::from_json(spec.graph.value("config", nlohmann::json::object()), file);
  check_parameter_count(file, c.parameter_count(file), weight_elements);
  if (spec.inputs.size() != 1 || spec.outputs.size() != 1) bad_field(file, "inputs", "and outputs must have one entry each for gpt");
  const Shape& in = spec.inputs[0].shape;
  if (in.size() != 2 || in[0] != -1 || in[1] < 1 || in[1] > c.max_len)
    bad_field(file, "inputs[0].shape", "is " + shape_str(in) + ", gpt takes token ids [-1, S] with 1 <= S <= max_len (" +
                               std::to_string(c.max_len) + ")");
  if (spec.inputs[0].datatype != "INT64") bad_field(file, "inputs[0].datatype", "is " + spec.inputs[0].datatype + ", token ids are INT64");
  if (spec.outputs[0].shape != Shape{-1, in[1], c.vocab})
    bad_field(file, "outputs[0].shape", "is " + shape_str(spec.outputs[0].shape) + ", gpt produces logits " +
                                shape_str({-1, in[1], c.vocab}));
  if (spec.outputs[0].datatype != "FP32") bad_field(file, "outputs[0].datatype", "must be FP32");
  return gpt(c);
}

}  // namespace hg::models
