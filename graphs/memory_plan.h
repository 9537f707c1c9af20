// Static memory planning: every intermediate buffer gets a fixed offset in one arena.
// A pure function of (order, sizes, lifetimes, alias rules) -> (offsets, arena size):
// buffers tied by in-place aliases form one block; blocks are placed greedily by size (largest
// first), each at the lowest 64-byte-aligned offset that overlaps no block live at the same time.
//
//   std::vector<hg::graphs::BufferRequest> reqs{{4096, 0, 2}, {4096, 1, 3}, {1024, 3, 4}};
//   reqs.push_back({4096, 3, 5, /*alias_of=*/1});   // step 3 reads buffer 1 last and writes over it
//   hg::graphs::MemoryPlan p = hg::graphs::plan_memory(reqs);
//   p.offsets[2];      // may reuse buffer 0's bytes: their lifetimes do not meet
//   p.offsets[3];      // == p.offsets[1]
//   p.arena_bytes;     // <= p.total_bytes, the sum of the (aligned) sizes: what no planning would need
#pragma once
#include <cstddef>
#include <vector>

namespace hg::graphs {

struct BufferRequest {
  size_t bytes;
  int first_step;  // step that writes it
  int last_step;   // last step that reads it (inclusive)
  // In-place rule: index of an earlier request this buffer overwrites, or -1. Valid only when
  // both have the same size, the alias is written at the step that reads the other last (and
  // not the step that wrote it), and no other request aliases the same buffer (plan_memory
  // throws InternalError otherwise).
  int alias_of = -1;
};

struct MemoryPlan {
  std::vector<size_t> offsets;
  size_t arena_bytes = 0;  // bytes the arena needs
  size_t total_bytes = 0;  // sum of all buffers' aligned sizes (an arena without reuse)
  size_t inplace = 0;      // requests that took over their alias's bytes
};

inline constexpr size_t kArenaAlignment = 64;

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

}  // namespace hg::graphs
