// GPT decode steps replayed from HPU graphs: one graph per attention bucket (GPT::bucket: 16,
// 32, 64, ... positions), captured the first time a step falls into it and replayed for every
// later step of that bucket, over static input buffers and one static KV cache.
//
//   hg::models::GPT gpt;  gpt.to(hg::Device::hpu(0));
//   hg::models::GPTGraphDecoder dec(gpt, /*batch=*/1);
//   hg::Tensor logits = dec.prefill(prompt_ids);              // eager; fills the static cache
//   logits = dec.step(next_tokens);                           // replays the bucket's graph
//   auto ids = dec.generate_ids(prompt, 64, {.greedy = false, .top_p = 0.9, .seed = 1});  // reuses the graphs
//   dec.warmup();                                             // captures every bucket up front (serving)
//   dec.reset();                                              // an empty cache for the next sequence
#pragma once
#include <memory>

#include "graphs/hpu_graph.h"
#include "graphs/lru_cache.h"
#include "models/gpt.h"

namespace hg::models {

class GPTGraphDecoder {
 public:
  // The model must stay on its HPU (DeviceError otherwise) and outlive the decoder; its
  // weights are frozen into the graphs (folded, pre-packed): do not change them meanwhile.
  GPTGraphDecoder(GPT& gpt, int64_t batch);

  // ids I64 [N, P] -> logits [N, vocab] of the last position (as GPT::prefill); the cache then
  // holds the prompt.
  Tensor prefill(const Tensor& ids);
  // tokens I64 [N] or [N, 1] at position length() -> logits [N, vocab] (a tensor of its own);
  // the same checks and errors as GPT::decode_step.
  Tensor step(const Tensor& tokens);
  // GPT::generate_ids for batch 1 through prefill() and step().
  std::vector<int64_t> generate_ids(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                    const SamplingOptions& options = {});

  // Captures the graph of every attention bucket not captured yet (one step at the first
  // position of each, token 0), then reset(): later steps only replay. Returns the number of
  // graphs captured.
  size_t warmup();
  // Empties the cache (length 0, zeros) for a new sequence; the graphs stay.
  void reset();

  int64_t length() const { return cache_.length; }
  size_t captured_graphs() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::unique_ptr<graphs::HPUGraph> graph;
    DecodeInputs in;  // static inputs
    KVCache out;      // the updated cache (static outputs)
    Tensor logits;    // static output
  };
  GPT& gpt_;
  KVCache cache_;  // static: every bucket's graph reads it; steps copy their updated cache back
  graphs::LruCache<int64_t, Bucket> buckets_;  // by attention bucket; unbounded (a few per model)
};

}  // namespace hg::models
