#include "graphs/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace hg::graphs {

namespace {
size_t align_up(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }
bool lifetimes_meet(const BufferRequest& a, const BufferRequest& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}
}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs) {
  MemoryPlan plan;
  plan.offsets.assign(reqs.size(), 0);
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return reqs[a].bytes > reqs[b].bytes; });
  std::vector<size_t> placed;
  for (size_t i : order) {
    const size_t size = align_up(reqs[i].bytes);
    // Occupied ranges of already placed buffers whose lifetimes meet this one, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed)
      if (lifetimes_meet(reqs[i], reqs[j])) busy.push_back({plan.offsets[j], plan.offsets[j] + align_up(reqs[j].bytes)});
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + size <= lo) break;
      offset = std::max(offset, hi);
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace hg::graphs
