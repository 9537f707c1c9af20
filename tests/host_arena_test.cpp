// engine/host_arena.h: every live HostArena gets all its threads at once (its tasks may block),
// and the process's TBB worker limit follows the live arenas.
#include "engine/host_arena.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_group.h>

#include "engine/error.h"
#include "tests/wait.h"

namespace {

size_t worker_limit() {
  return tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
}

// Two arenas of two threads: four tasks that each block until all four run at once. With TBB's
// default limit on a two-core machine (one worker) they could not.
TEST(HostArenaTest, EveryArenaGetsAllItsThreadsAtOnce) {
  hg::HostArena a(2), b(2);
  tbb::task_group ga, gb;
  std::atomic<int> running{0}, saw_all{0};
  auto task = [&] {
    ++running;
    if (hg::test::wait_until([&] { return running.load() == 4; }, hg::test::kWaitLimit, "four blocking tasks at once"))
      ++saw_all;
  };
  for (int i = 0; i < 2; ++i) {
    a->enqueue(ga.defer(task));
    b->enqueue(gb.defer(task));
  }
  a->execute([&] { ga.wait(); });
  b->execute([&] { gb.wait(); });
  EXPECT_EQ(saw_all.load(), 4);
}

TEST(HostArenaTest, TheWorkerLimitFollowsTheLiveArenas) {
  const size_t before = worker_limit();
  {
    hg::HostArena a(3);
    EXPECT_EQ(worker_limit(), 4u);
    {
      hg::HostArena b(2);
      EXPECT_EQ(worker_limit(), 6u);
    }
    EXPECT_EQ(worker_limit(), 4u);
  }
  EXPECT_EQ(worker_limit(), before);
}

TEST(HostArenaTest, RejectsNoThreads) { EXPECT_THROW(hg::HostArena(0), hg::InvalidArgument); }

}  // namespace
