// Static memory planning: every intermediate buffer gets a fixed offset in one arena.
// A pure function of sizes and lifetimes: greedy by size (largest first), each buffer at the
// lowest 64-byte-aligned offset that overlaps no buffer live at the same time.
//
//   std::vector<hg::graphs::BufferRequest> reqs{{4096, 0, 2}, {4096, 1, 3}, {1024, 3, 4}};
//   hg::graphs::MemoryPlan p = hg::graphs::plan_memory(reqs);
//   p.offsets[2];     // may reuse buffer 0's bytes: their lifetimes do not meet
//   p.arena_bytes;    // <= the sum of the (aligned) sizes
#pragma once
#include <cstddef>
#include <vector>

namespace hg::graphs {

struct BufferRequest {
  size_t bytes;
  int first_step;  // step that writes it
  int last_step;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;
  size_t arena_bytes = 0;
};

inline constexpr size_t kArenaAlignment = 64;

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

}  // namespace hg::graphs
