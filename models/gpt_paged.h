// Batched GPT steps over a paged KV cache (models/kv_blocks.h), each replayed from an HPU graph:
// a step is the new tokens of B sequences as one flat list of T tokens (vLLM's flattened batch),
// so running sequences decode one token each while prompts (or chunks of them) prefill in the
// same step, with no padding between rows. Steps are padded up to a (tokens, sequences) bucket;
// the context length is not a bucket: the paged attention reads each sequence's own positions
// through its block table.
//
//   hg::models::KVBlockPool pool(gpt.kv_options(/*block_size=*/16, /*blocks=*/1024));
//   hg::models::PagedDecoder dec(gpt, pool, {.batch_buckets = {1, 2, 4, 8, 16, 32}, .max_step_tokens = 256});
//   dec.warmup();                                       // captures every bucket of the grid
//   std::vector<int32_t> blocks;  pool.allocate(pool.blocks_for(prompt.size() + 1), blocks);
//   std::vector<float> logits = dec.step({{.tokens = prompt, .start = 0, .blocks = &blocks}});   // prefill
//   logits = dec.step({{.tokens = {next}, .start = int64_t(prompt.size()), .blocks = &blocks},   // decode,
//                      {.tokens = other_prompt, .start = 0, .blocks = &other}});                 // and prefill
//
// step() checks every row on the host first (InvalidArgument naming the row and what is wrong:
// token out of range, positions past max_len, a table that does not cover the row or names a
// block outside the pool), so the graph's kernels only see valid slots.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "graphs/hpu_graph.h"
#include "graphs/lru_cache.h"
#include "models/gpt.h"
#include "models/kv_blocks.h"

namespace hg::models {

struct PagedRow {
  std::vector<int64_t> tokens;                   // the new tokens: a prompt (or a part of one), or the last sampled
  int64_t start = 0;                             // position of tokens[0]; positions before it are in the pool
  const std::vector<int32_t>* blocks = nullptr;  // the sequence's block table, covering start + tokens.size()
};

struct PagedDecoderOptions {
  std::vector<int64_t> batch_buckets = {1, 2, 4, 8, 16, 32};  // sequences per step
  // Tokens per step: 1, 2, 4, ... up to max_step_tokens (included; 0: the model's max_len).
  int64_t max_step_tokens = 0;
  // Bytes of arenas and constants warmup() may spend on the grid (0: no limit): token buckets are
  // captured smallest first, and the one that goes past the budget is left out with every larger
  // one (steps then hold fewer tokens, and at most that many sequences).
  size_t memory_budget = 0;
};

// One captured graph of the grid.
struct StepGraphInfo {
  int64_t tokens = 0, sequences = 0;
  double compile_ms = 0;
  size_t arena_bytes = 0, constant_bytes = 0;
  bool from_cache = false;  // its optimized graph came from the memory or disk graph cache
};

class PagedDecoder {
 public:
  // The model must be on an HPU and stay unchanged (its weights are frozen into the graphs);
  // the pool must match it (GPT::kv_options). Both outlive the decoder. Throws InvalidArgument
  // for empty or unsorted buckets, or a pool that does not match.
  PagedDecoder(GPT& gpt, KVBlockPool& pool, PagedDecoderOptions opt = {});

  // Logits of each row's last new token, row after row: [rows.size() * vocab]. Writes every
  // row's keys and values into its blocks. Up to max_batch() rows of any lengths, max_step_tokens()
  // tokens in all.
  std::vector<float> step(const std::vector<PagedRow>& rows);

  // Captures every (tokens, sequences) bucket not captured yet (sequences <= tokens) within the
  // memory budget; returns how many were captured. Throws InvalidArgument when the budget does
  // not hold the smallest token bucket's graphs.
  size_t warmup();
  size_t captured_graphs() const { return graphs_.size(); }
  // The largest step: after a warmup with a budget, what the budget left.
  size_t max_batch() const { return static_cast<size_t>(opt_.batch_buckets.back()); }
  int64_t max_step_tokens() const { return token_buckets_.back(); }
  size_t graph_bytes() const;  // arenas and constants of every captured graph
  std::vector<StepGraphInfo> grid() const;  // the captured graphs, by tokens then sequences

 private:
  struct Graph {
    std::unique_ptr<graphs::HPUGraph> graph;
    int64_t t = 0, b = 0;  // tokens, sequences
    // Host buffers the replay reads and writes (replay_host: no copies).
    std::vector<int64_t> tokens, pos_ids, positions, slots, seqs, tables, last;
    std::vector<float> logits;
  };
  Graph& graph_for(int64_t t, int64_t b);
  void check(const std::vector<PagedRow>& rows, int64_t t_bucket, int64_t b_bucket) const;

  GPT& gpt_;
  KVBlockPool& pool_;
  PagedDecoderOptions opt_;
  std::vector<int64_t> token_buckets_;
  int64_t table_width_;  // blocks per sequence: max_len / block_size, rounded up
  graphs::LruCache<int64_t, Graph> graphs_;  // by t * 65536 + b; unbounded (the grid)
};

}  // namespace hg::models
