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
  check_buckets(opt_.batch_buckets, "batch_buckets", 4096);
  const int64_t most = opt_.max_step_tokens ? opt_.max_step_tokens : c.max_len;
  if (most < opt_.batch_buckets.back() || most > (int64_t{1} << 16))
    throw InvalidArgument("PagedDecoder: max_step_tokens " + std::to_string(most) + " must be in [the largest batch bucket " +
                          std::to_string(opt_.batch_buckets.back()) + ", 65536]");
  for (int64_t t = 1; t < most; t *= 2) token_buckets_.push_back(t);
  token_buckets_.push_back(most);
  table_width_ = pool.blocks_for(c.max_len);
}

void PagedDecoder::check(const std::vector<PagedRow>& rows, int64_t t_bucket, int64_t b_bucket) const {
  const GPTConfig& c = gpt_.config();
  if (t_bucket == 0 || b_bucket == 0) {
    size_t tokens = 0;
    for (const PagedRow& r : rows) tokens += r.tokens.size();
    throw InvalidArgument("PagedDecoder: a step of " + std::to_string(rows.size()) + " rows and " + std::to_string(tokens) +
                          " tokens is past the buckets (" + std::to_string(max_batch()) + " rows, " +
                          std::to_string(max_step_tokens()) + " tokens)");
  }
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

PagedDecoder::Graph& PagedDecoder::graph_for(int64_t t, int64_t b) {
  const int64_t key = t * 65536 + b;
  if (Graph* g = graphs_.get(key)) return *g;
  NoGradGuard no_grad;
  Graph g;
  g.t = t;
  g.b = b;
  g.tokens.assign(static_cast<size_t>(t), 0);
  g.pos_ids.assign(g.tokens.size(), 0);
  g.positions.assign(g.tokens.size(), -1);  // all padding
  g.slots.assign(g.tokens.size(), -1);
  g.seqs.assign(g.tokens.size(), 0);
  g.tables.assign(static_cast<size_t>(b * table_width_), 0);
  g.last.assign(static_cast<size_t>(b), 0);
  g.logits.assign(static_cast<size_t>(b * gpt_.config().vocab), 0);
  const Device d = gpt_.device();
  auto flat = [&](const std::vector<int64_t>& v) { return Tensor::from_indices(v, {1, t}, d); };
  const PagedInputs in{flat(g.tokens), flat(g.pos_ids), flat(g.positions), flat(g.slots), flat(g.seqs),
                       Tensor::from_indices(g.tables, {b, table_width_}, d), Tensor::from_indices(g.last, {b}, d)};
  g.graph = std::make_unique<graphs::HPUGraph>(d);
  std::vector<Tensor> weights;  // frozen: folded and pre-packed once
  for (const auto& [name, w] : std::as_const(gpt_).named_parameters()) weights.push_back(*w);
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
  g.graph->mark_user_inputs({in.tokens, in.pos_ids, in.positions, in.slots, in.seqs, in.tables, in.last});
  g.graph->mark_user_outputs({logits});
  return *graphs_.put(key, std::move(g));
}

std::vector<float> PagedDecoder::step(const std::vector<PagedRow>& rows) {
  if (rows.empty()) throw InvalidArgument("PagedDecoder: a step needs at least one row");
  int64_t tokens = 0;
  for (const PagedRow& r : rows) tokens += static_cast<int64_t>(r.tokens.size());
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t bb = bucket_of(opt_.batch_buckets, n);
  const int64_t tb = bucket_of(token_buckets_, std::max(tokens, bb));
  check(rows, tb, bb);
  Graph& g = graph_for(tb, bb);
  std::fill(g.tokens.begin(), g.tokens.end(), 0);
  std::fill(g.pos_ids.begin(), g.pos_ids.end(), 0);
  std::fill(g.positions.begin(), g.positions.end(), -1);
  std::fill(g.slots.begin(), g.slots.end(), -1);
  std::fill(g.seqs.begin(), g.seqs.end(), 0);
  std::fill(g.tables.begin(), g.tables.end(), 0);
  std::fill(g.last.begin(), g.last.end(), 0);
  const int64_t block = pool_.options().block_size;
  size_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const PagedRow& r = rows[static_cast<size_t>(i)];
    for (size_t k = 0; k < r.tokens.size(); ++k, ++at) {
      const int64_t pos = r.start + static_cast<int64_t>(k);
      g.tokens[at] = r.tokens[k];
      g.pos_ids[at] = g.positions[at] = pos;
      g.slots[at] = (*r.blocks)[static_cast<size_t>(pos / block)] * block + pos % block;
      g.seqs[at] = i;
    }
    const size_t width = std::min(r.blocks->size(), static_cast<size_t>(table_width_));
    std::copy_n(r.blocks->begin(), width, g.tables.begin() + i * table_width_);
    g.last[static_cast<size_t>(i)] = static_cast<int64_t>(at) - 1;
  }
  g.graph->replay_host({g.tokens.data(), g.pos_ids.data(), g.positions.data(), g.slots.data(), g.seqs.data(),
                        g.tables.data(), g.last.data()},
                       {g.logits.data()});
  return {g.logits.begin(), g.logits.begin() + n * gpt_.config().vocab};
}

size_t PagedDecoder::warmup() {
  const size_t before = graphs_.size();
  for (size_t i = 0; i < token_buckets_.size(); ++i) {
    const int64_t t = token_buckets_[i];
    for (int64_t b : opt_.batch_buckets)
      if (b <= t) graph_for(t, b);
    if (opt_.memory_budget == 0 || graph_bytes() <= opt_.memory_budget) continue;
    const size_t over = graph_bytes();
    for (size_t j = i; j < token_buckets_.size(); ++j)  // this bucket and every larger one
      for (int64_t b : opt_.batch_buckets) graphs_.erase(token_buckets_[j] * 65536 + b);
    if (i == 0)
      throw InvalidArgument("PagedDecoder: a memory budget of " + std::to_string(opt_.memory_budget) +
                            " bytes holds no step graph (steps of 1 token take " + std::to_string(over) + ")");
    token_buckets_.resize(i);
    while (opt_.batch_buckets.back() > token_buckets_.back()) opt_.batch_buckets.pop_back();
    break;
  }
  return graphs_.size() - std::min(before, graphs_.size());
}

size_t PagedDecoder::graph_bytes() const {
  size_t total = 0;
  graphs_.for_each([&](const int64_t&, const Graph& g) {
    total += g.graph->arena_bytes() + g.graph->executable().constant_bytes();
  });
  return total;
}

std::vector<StepGraphInfo> PagedDecoder::grid() const {
  std::vector<StepGraphInfo> out;
  graphs_.for_each([&](const int64_t&, const Graph& g) {
    const graphs::HPUGraphStats& s = g.graph->stats();
    out.push_back({.tokens = g.t,
                   .sequences = g.b,
                   .compile_ms = s.compile_ms,
                   .arena_bytes = g.graph->arena_bytes(),
                   .constant_bytes = g.graph->executable().constant_bytes(),
                   .from_cache = s.memory_cache_hit || s.disk_cache_hit});
  });
  std::sort(out.begin(), out.end(), [](const StepGraphInfo& a, const StepGraphInfo& b) {
    return std::pair(a.tokens, a.sequences) < std::pair(b.tokens, b.sequences);
  });
  return out;
}

}  // namespace hg::models
