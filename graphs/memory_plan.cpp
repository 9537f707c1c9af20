#include "graphs/memory_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "engine/error.h"

namespace hg::graphs {

namespace {

size_t align_up(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// A group of buffers that share bytes through in-place aliases: one size, the union of lifetimes.
struct Block {
  size_t bytes;
  int first_step, last_step;
};

bool lifetimes_meet(const Block& a, const Block& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

void check_alias(const std::vector<BufferRequest>& reqs, size_t i, const std::vector<char>& aliased) {
  const BufferRequest& r = reqs[i];
  const int a = r.alias_of;
  auto bad = [&](const std::string& why) {
    throw InternalError("memory plan: buffer " + std::to_string(i) + " cannot alias buffer " + std::to_string(a) +
                        ": " + why);
  };
  if (a < 0 || static_cast<size_t>(a) >= i) bad("an alias must name an earlier buffer");
  const BufferRequest& t = reqs[a];
  if (t.bytes != r.bytes) bad("sizes differ (" + std::to_string(t.bytes) + " vs " + std::to_string(r.bytes) + " bytes)");
  if (t.last_step != r.first_step)
    bad("it is written at step " + std::to_string(r.first_step) + " but the other is last read at step " +
        std::to_string(t.last_step));
  if (t.first_step == r.first_step) bad("both are written at step " + std::to_string(r.first_step));
  if (aliased[a]) bad("another buffer already took it over");
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs) {
  MemoryPlan plan;
  plan.offsets.assign(reqs.size(), 0);
  // Union the alias chains into blocks; block_of[i] is the block of request i.
  std::vector<size_t> block_of(reqs.size());
  std::vector<Block> blocks;
  std::vector<char> aliased(reqs.size(), 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const BufferRequest& r = reqs[i];
    plan.total_bytes += align_up(r.bytes);
    if (r.first_step > r.last_step)
      throw InternalError("memory plan: buffer " + std::to_string(i) + " is last read (step " +
                          std::to_string(r.last_step) + ") before it is written (step " +
                          std::to_string(r.first_step) + ")");
    if (r.alias_of != -1) {
      check_alias(reqs, i, aliased);
      aliased[r.alias_of] = 1;
      block_of[i] = block_of[r.alias_of];
      Block& b = blocks[block_of[i]];
      b.last_step = std::max(b.last_step, r.last_step);
      ++plan.inplace;
    } else {
      block_of[i] = blocks.size();
      blocks.push_back({r.bytes, r.first_step, r.last_step});
    }
  }

  std::vector<size_t> order(blocks.size()), block_offset(blocks.size(), 0);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;
  for (size_t i : order) {
    const size_t size = align_up(blocks[i].bytes);
    // Occupied ranges of already placed blocks whose lifetimes meet this one, by offset.
    busy.clear();
    for (size_t j : placed)
      if (lifetimes_meet(blocks[i], blocks[j])) busy.push_back({block_offset[j], block_offset[j] + align_up(blocks[j].bytes)});
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + size <= lo) break;
      offset = std::max(offset, hi);
    }
    block_offset[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(i);
  }
  for (size_t i = 0; i < reqs.size(); ++i) plan.offsets[i] = block_offset[block_of[i]];
  return plan;
}

}  // namespace hg::graphs
