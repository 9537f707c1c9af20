#include "models/gpt_paged.h"

#include <algorithm>
#include <utility>

#include "engine/autograd.h"
#include "engine/error.h"

namespace hg::models {

namespace {

void check_buckets(const std::vector<int64_t>& b, const char* name, int64_t max) {
  if (b.empty()) throw InvalidArgument(std::string("PagedDecoder: ") + name + " is empty");
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i] < 1 || b[i] > max || (i > 0 && b[i] <= b[i - 1]))
      throw InvalidArgument(std::string("PagedDecoder: ") + name + " must be increasing values in [1, " +
                            std::to_string(max) + "], got " + std::to_string(b[i]) + " at " + std::to_string(i));
}

// The smallest bucket >= n, or 0.
int64_t bucket_of(const std::vector<int64_t>& buckets, int64_t n) {
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), n);
  return it == buckets.end() ? 0 : *it;
}

}  // namespace

PagedDecoder::PagedDecoder(GPT& gpt, KVBlockPool& pool, PagedDecoderOptions opt)
    : gpt_(gpt), pool_(pool), opt_(std::move(opt)) {
  if (!gpt.device().is_hpu())
    throw DeviceError("PagedDecoder: HPU graphs need the model on an HPU, it is on " + gpt.device().str());
  const GPTConfig& c = gpt.config();
  const KVBlockOptions want = gpt.kv_options(pool.options().block_size, pool.options().blocks);
  const KVBlockOptions& got = pool.options();
  if (got.layers != want.layers || got.heads != want.heads || got.head_dim != want.head_dim)
    throw InvalidArgument("PagedDecoder: the KV block pool holds " + std::to_string(got.layers) + " layers of " +
                          std::to_string(got.heads) + " heads x " + std::to_string(got.head_dim) + ", the model has " +
                          std::to_string(want.layers) + " of " + std::to_string(want.heads) + " x " +
                          std::to_string(want.head_dim));
  if (opt_.prefill_lengths.empty()) {
    for (int64_t s = 16; s < c.max_len; s *= 2) opt_.prefill_lengths.push_back(s);
    opt_.prefill_lengths.push_back(c.max_len);
  }
  check_buckets(opt_.batch_buckets, "batch_buckets", 4096);
  check_buckets(opt_.prefill_batch_buckets, "prefill_batch_buckets", 4096);
  check_buckets(opt_.prefill_lengths, "prefill_lengths", c.max_len);
  table_width_ = pool.blocks_for(c.max_len);
}

void PagedDecoder::check(const std::vector<PagedRow>& rows, int64_t n_bucket, int64_t s_bucket) const {
  const GPTConfig& c = gpt_.config();
  if (n_bucket == 0 || s_bucket == 0)
    throw InvalidArgument("PagedDecoder: a step of " + std::to_string(rows.size()) + " rows is past the buckets (" +
                          std::to_string(max_batch()) + " decode rows, or " + std::to_string(max_prefill_batch()) +
                          " rows of up to " + std::to_string(max_prefill_tokens()) + " tokens)");
  for (size_t i = 0; i < rows.size(); ++i) {
    const PagedRow& r = rows[i];
    const std::string row = "PagedDecoder: row " + std::to_string(i) + ": ";
    const auto len = static_cast<int64_t>(r.tokens.size());
    if (len == 0) throw InvalidArgument(row + "no tokens");
    if (r.start < 0 || r.start > c.max_len - len)
      throw InvalidArgument(row + std::to_string(len) + " tokens at position " + std::to_string(r.start) +
                            " go past max_len " + std::to_string(c.max_len));
    if (!r.blocks) throw InvalidArgument(row + "no block table");
    const int64_t need = pool_.blocks_for(r.start + len);
    if (static_cast<int64_t>(r.blocks->size()) < need)
      throw InvalidArgument(row + "its block table has " + std::to_string(r.blocks->size()) + " blocks, positions up to " +
                            std::to_string(r.start + len) + " need " + std::to_string(need));
    for (int64_t b = 0; b < need; ++b)
      if ((*r.blocks)[static_cast<size_t>(b)] < 0 || (*r.blocks)[static_cast<size_t>(b)] >= pool_.total_blocks())
        throw InvalidArgument(row + "block table entry " + std::to_string(b) + " (" +
                              std::to_string((*r.blocks)[static_cast<size_t>(b)]) + ") is outside the pool's " +
                              std::to_string(pool_.total_blocks()) + " blocks");
    for (size_t k = 0; k < r.tokens.size(); ++k)
      if (r.tokens[k] < 0 || r.tokens[k] >= c.vocab)
        throw InvalidArgument(row + "token " + std::to_string(r.tokens[k]) + " at " + std::to_string(k) +
                              " is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
  }
}

PagedDecoder::Graph& PagedDecoder::graph_for(int64_t n, int64_t s) {
  const int64_t key = n * (gpt_.config().max_len + 1) + s;
  if (Graph* g = graphs_.get(key)) return *g;
  NoGradGuard no_grad;
  Graph g;
  g.n = n;
  g.s = s;
  g.tokens.assign(static_cast<size_t>(n * s), 0);
  g.pos_ids.assign(g.tokens.size(), 0);
  g.positions.assign(g.tokens.size(), -1);  // all padding
  g.slots.assign(g.tokens.size(), -1);
  g.tables.assign(static_cast<size_t>(n * table_width_), 0);
  g.last.assign(static_cast<size_t>(n), 0);
  g.logits.assign(static_cast<size_t>(n * gpt_.config().vocab), 0);
  const Device d = gpt_.device();
  const PagedInputs in{Tensor::from_indices(g.tokens, {n, s}, d),    Tensor::from_indices(g.pos_ids, {n, s}, d),
                       Tensor::from_indices(g.positions, {n, s}, d), Tensor::from_indices(g.slots, {n, s}, d),
                       Tensor::from_indices(g.tables, {n, table_width_}, d), Tensor::from_indices(g.last, {n}, d)};
  g.graph = std::make_unique<graphs::HPUGraph>(d);
  std::vector<Tensor> weights;  // frozen: folded and pre-packed once
  for (const auto& [name, t] : std::as_const(gpt_).named_parameters()) weights.push_back(*t);
  Tensor logits;
  g.graph->capture_begin({.frozen = std::move(weights)});  // its run writes no slot (all padding)
  try {
    logits = gpt_.paged_step(in, pool_);
    g.graph->capture_end();
  } catch (...) {  // no half-built graph: the outputs go first, then the graph (its destructor ends the capture)
    logits = Tensor();
    g.graph.reset();
    throw;
  }
  g.graph->mark_user_inputs({in.tokens, in.pos_ids, in.positions, in.slots, in.tables, in.last});
  g.graph->mark_user_outputs({logits});
  return *graphs_.put(key, std::move(g));
}

std::vector<float> PagedDecoder::step(const std::vector<PagedRow>& rows) {
  if (rows.empty()) throw InvalidArgument("PagedDecoder: a step needs at least one row");
  size_t longest = 0;
  for (const PagedRow& r : rows) longest = std::max(longest, r.tokens.size());
  const auto n = static_cast<int64_t>(rows.size());
  const bool decode = longest == 1;
  const int64_t nb = bucket_of(decode ? opt_.batch_buckets : opt_.prefill_batch_buckets, n);
  const int64_t sb = decode ? 1 : bucket_of(opt_.prefill_lengths, static_cast<int64_t>(longest));
  check(rows, nb, sb);
  Graph& g = graph_for(nb, sb);
  std::fill(g.tokens.begin(), g.tokens.end(), 0);
  std::fill(g.pos_ids.begin(), g.pos_ids.end(), 0);
  std::fill(g.positions.begin(), g.positions.end(), -1);
  std::fill(g.slots.begin(), g.slots.end(), -1);
  std::fill(g.tables.begin(), g.tables.end(), 0);
  std::fill(g.last.begin(), g.last.end(), 0);
  const int64_t block = pool_.options().block_size;
  for (int64_t i = 0; i < n; ++i) {
    const PagedRow& r = rows[static_cast<size_t>(i)];
    const auto len = static_cast<int64_t>(r.tokens.size());
    for (int64_t k = 0; k < len; ++k) {
      const auto at = static_cast<size_t>(i * sb + k);
      const int64_t pos = r.start + k;
      g.tokens[at] = r.tokens[static_cast<size_t>(k)];
      g.pos_ids[at] = g.positions[at] = pos;
      g.slots[at] = (*r.blocks)[static_cast<size_t>(pos / block)] * block + pos % block;
    }
    const size_t width = std::min(r.blocks->size(), static_cast<size_t>(table_width_));
    std::copy_n(r.blocks->begin(), width, g.tables.begin() + i * table_width_);
    g.last[static_cast<size_t>(i)] = i * sb + len - 1;
  }
  g.graph->replay_host({g.tokens.data(), g.pos_ids.data(), g.positions.data(), g.slots.data(), g.tables.data(),
                        g.last.data()},
                       {g.logits.data()});
  return {g.logits.begin(), g.logits.begin() + n * gpt_.config().vocab};
}

size_t PagedDecoder::warmup() {
  const size_t before = graphs_.size();
  for (int64_t n : opt_.batch_buckets) graph_for(n, 1);
  for (int64_t n : opt_.prefill_batch_buckets)
    for (int64_t s : opt_.prefill_lengths) graph_for(n, s);
  return graphs_.size() - before;
}

size_t PagedDecoder::arena_bytes() const {
  size_t total = 0;
  graphs_.for_each([&](const int64_t&, const Graph& g) { total += g.graph->arena_bytes(); });
  return total;
}

}  // namespace hg::models
