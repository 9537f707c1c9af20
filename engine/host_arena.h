// Internal to hgraph (not installed): the TBB arenas that run host-side work beside the devices
// (decoding large request bodies, making data-loader batches). A HostArena is a
// tbb::task_arena whose `threads` slots are all for TBB workers; while it lives, the process's
// TBB worker limit (tbb::global_control::max_allowed_parallelism) is the sum of the live
// arenas' threads plus one, so each arena gets all its threads at once even where TBB's default
// (one worker fewer than the cores: a single worker on two cores) would give it fewer. That is
// what lets an arena's tasks block (a full output queue, a long parse) without starving another
// arena. The threads are the options that size each arena (KServeOptions::parse_threads,
// DataLoaderOptions::num_workers); TBB creates workers on demand up to that sum and no further.
// Compute never runs here: ops run on each device's worker and its OpenMP team.
//
//   hg::HostArena arena(/*threads=*/2);
//   tbb::task_group group;
//   arena->enqueue(group.defer([] { /* may block */ }));   // returns at once
//   arena->execute([&] { group.wait(); });                 // joins the group's tasks
#pragma once
#include <oneapi/tbb/task_arena.h>

namespace hg {

class HostArena {
 public:
  explicit HostArena(int threads, tbb::task_arena::priority priority = tbb::task_arena::priority::normal);
  ~HostArena();  // the arena's tasks must have finished (wait for them first)
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  tbb::task_arena* operator->() { return &arena_; }
  int threads() const { return threads_; }

 private:
  int threads_;
  tbb::task_arena arena_;
};

}  // namespace hg
