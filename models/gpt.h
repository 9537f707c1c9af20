// A GPT-style decoder language model over bytes, with a key/value cache for generation
// (PyTorch definition with the same state_dict keys: scripts/torch_gpt.py).
//
//   hg::models::GPT gpt({.max_len = 256}, /*seed=*/0);         // vocab 256, d_model 128, 4 heads, 2 layers
//   gpt.load_state_dict(weights);                               // tok_emb.weight, blocks.0.attn.qkv.weight, ...
//   gpt.to(hg::Device::hpu(0));
//   hg::Tensor logits = gpt.forward(ids);                       // I64 [N, S] -> F32 [N, S, 256]
//
//   hg::models::KVCache cache = gpt.new_cache(/*batch=*/1);
//   hg::Tensor last = gpt.prefill(prompt_ids, cache);           // [N, P] -> [N, 256]; cache.length = P
//   last = gpt.decode_step(next_ids, cache);                    // [N] -> [N, 256]; cache.length + 1
//
//   hg::models::SamplingOptions o{.greedy = false, .top_k = 40, .top_p = 0.9, .seed = 7};
//   hg::models::Utf8Text t = gpt.generate("Once upon a time", /*max_new_tokens=*/64, o);
//
// KVCache is the simple cache of one batch of sequences of equal length (eager generation, the
// reference): preallocated for max_len positions ([N, H, max_len, Dh] per layer, for keys and
// values); a decode step writes its key/value with a one-hot position mask (`where`) and attends
// over the first bucket() positions. Serving uses the paged cache instead: paged_step() over a
// KVBlockPool (models/kv_blocks.h), batched and replayed from HPU graphs by PagedDecoder
// (models/gpt_paged.h).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "models/module.h"
#include "models/sampling.h"
#include "models/tokenizer.h"

namespace hg::models {

struct GPTConfig {
  int64_t vocab = kByteVocab, d_model = 128, nhead = 4, layers = 2, ff = 512, max_len = 256;
  void validate() const;  // throws InvalidArgument naming the field
  nlohmann::json to_json() const;
  // model.json's graph.config (models/config_fields.h's read_config): missing fields keep their
  // defaults; unknown fields, non-integers, values outside [1, 2^24] and invalid combinations
  // throw FormatError naming `file` and the field.
  static GPTConfig from_json(const nlohmann::json& config, const std::string& file);
  // Parameter elements of GPT(*this), overflow-checked; FormatError naming `file` past 2^32.
  int64_t parameter_count(const std::string& file) const;
};

// Keys and values of every layer: k[l], v[l] F32 [N, nhead, max_len, d_model / nhead], valid
// for positions < length (zeros after).
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;
};

// The inputs of one decode step; their shapes depend only on the batch N and the bucket B.
struct DecodeInputs {
  Tensor tokens;    // I64 [N, 1]
  Tensor position;  // I64 [1]: the cache length, the new token's position
  Tensor write;     // BOOL [1, 1, max_len, 1]: true at `position`
  Tensor attend;    // BOOL [1, 1, 1, B]: true at positions <= `position`
};

// The inputs of a step over a paged KV cache (models/kv_blocks.h, models/gpt_paged.h): the new
// tokens of B sequences as one flat list of T (PagedDecoder passes [1, T]); padding tokens have
// position -1 and slot -1.
struct PagedInputs {
  Tensor tokens;     // I64 [N, S]
  Tensor pos_ids;    // I64 [N, S]: each token's position for the position embedding (padding: 0)
  Tensor positions;  // I64 [N, S]: the same, -1 for padding (attention skips those)
  Tensor slots;      // I64 [N, S]: the pool slot of each position's keys and values (-1: none)
  Tensor seqs;       // I64 [N, S]: each token's sequence (its row of tables)
  Tensor tables;     // I64 [B, T]: each sequence's blocks
  Tensor last;       // I64 [B]: flat index of each sequence's last new token
};

class GPTBlock;
class KVBlockPool;
struct KVBlockOptions;

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config = {}, uint64_t seed = 0);

  // ids I64 [N, S] with 1 <= S <= max_len, tokens in [0, vocab) -> logits F32 [N, S, vocab].
  // Throws InvalidArgument for a wrong rank or dtype, S > max_len or a token out of range.
  Tensor forward(const Tensor& ids) override;
  nlohmann::json spec() const override;  // {"type": "zoo", "model": "gpt", "config": {...}}
  const GPTConfig& config() const { return config_; }
  Device device() const;  // where the parameters are

  // Inference (no autograd history). An empty cache on device() for a batch of n.
  KVCache new_cache(int64_t n) const;
  // Runs ids [N, P] (P <= max_len) and returns the last position's logits [N, vocab]; the cache
  // then holds the prompt (length P), whatever it held before.
  Tensor prefill(const Tensor& ids, KVCache& cache);
  // Runs one token per sequence (I64 [N] or [N, 1]) at position cache.length and returns its
  // logits [N, vocab]; appends its keys and values. Throws InvalidArgument when the cache is
  // full (length == max_len) or does not match the model.
  Tensor decode_step(const Tensor& tokens, KVCache& cache);

  // Attention span of a decode step at position `length`: the smallest power of two >= 16
  // above `length`, at most max_len. Steps in one bucket have identical shapes.
  int64_t bucket(int64_t length) const;
  DecodeInputs decode_inputs(const Tensor& tokens, const KVCache& cache) const;
  // The step itself: returns logits [N, vocab] and replaces cache.k / cache.v by the updated
  // tensors; leaves cache.length alone (decode_step advances it).
  Tensor decode(const DecodeInputs& in, KVCache& cache);

  // The pool layout for this model: layers, heads and head_dim from the config.
  KVBlockOptions kv_options(int64_t block_size, int64_t blocks, DType dtype = DType::F32) const;
  // One step over a paged KV cache: writes each position's keys and values into its slot and
  // attends over its sequence's earlier positions through the table; returns the logits of each
  // sequence's last new token [B, vocab].
  Tensor paged_step(const PagedInputs& in, KVBlockPool& pool);

  // Appends up to max_new_tokens tokens to `prompt` (prefill, then decode steps; the first
  // token comes from the prompt's logits). Throws InvalidArgument for an empty prompt, a token
  // out of range, or prompt + max_new_tokens > max_len. Returns only the new tokens.
  std::vector<int64_t> generate_ids(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                    const SamplingOptions& options = {});
  // The same over text, with the byte tokenizer; the continuation is returned as UTF-8 with
  // ill-formed bytes replaced (and their offsets reported).
  Utf8Text generate(std::string_view prompt, int64_t max_new_tokens, const SamplingOptions& options = {});
  // The generation loop (with generate_ids' checks) over any prefill/step pair: first(ids [1, P])
  // and next(token [1]) return logits [1, vocab].
  std::vector<int64_t> generate_with(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                     const SamplingOptions& options, const std::function<Tensor(const Tensor&)>& first,
                                     const std::function<Tensor(const Tensor&)>& next);

 private:
  void check_tokens(const Tensor& ids, const char* what) const;
  // Checks ids [N, S] (S <= max_len; `noun` names them in errors) and returns
  // tok_emb(ids) + pos_emb(0..S-1).
  Tensor embed(const Tensor& ids, const char* what, const char* noun);
  Tensor logits(const Tensor& h);  // ln_f then lm_head

  GPTConfig config_;
  std::shared_ptr<Embedding> tok_emb_, pos_emb_;
  std::vector<std::shared_ptr<GPTBlock>> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace hg::models
