// The load stream: device work under a LoadStreamGuard runs on a second queue of the HPU, not
// behind the default queue's work; the guard's end waits for it; guards nest.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "engine/device.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "wait.h"

using namespace hg;
using namespace std::chrono_literals;

namespace {

const Device kHpu = Device::hpu(0);

TEST(LoadStream, RunsWhileTheDefaultQueueIsBlocked) {
  // The default queue is held by a task until the load stream's work has run: with one queue
  // this would deadlock (bounded by the waits below), with two it completes.
  test::Event release, blocked;
  device_backend(kHpu).enqueue([&] {
    blocked.set();
    EXPECT_TRUE(release.wait(120s, "the load stream's work to run"));
  });
  ASSERT_TRUE(blocked.wait(120s, "the default queue's blocking task to start"));
  auto loaded = std::async(std::launch::async, [&] {
    LoadStreamGuard load;
    EXPECT_TRUE(on_load_stream());
    Tensor x = Tensor::full({4, 4}, 2.0f, kHpu);
    Tensor y = ops::add(x, x);       // device work, on the load stream
    return y.to(Device()).to_vector();  // waits for the load stream only
  });
  ASSERT_TRUE(test::ready_within(loaded, 120s, "work under the guard while the default queue is blocked"));
  EXPECT_EQ(loaded.get(), std::vector<float>(16, 4.0f));
  release.set();
  synchronize(kHpu);
  EXPECT_FALSE(on_load_stream());
}

TEST(LoadStream, TheGuardsEndWaitsForItsWorkAndGuardsNest) {
  std::atomic<int> ran{0};
  {
    LoadStreamGuard outer;
    {
      LoadStreamGuard inner;
      EXPECT_TRUE(on_load_stream());
    }
    EXPECT_TRUE(on_load_stream());  // the outer guard still holds
    for (int k = 0; k < 50; ++k)
      device_backend(kHpu).enqueue([&] {
        std::this_thread::sleep_for(200us);
        ++ran;
      });
  }
  EXPECT_FALSE(on_load_stream());
  EXPECT_EQ(ran.load(), 50);  // all done when the outermost guard ended
}

TEST(LoadStream, ATensorMadeUnderTheGuardServesOnTheDefaultQueueAfterIt) {
  Tensor w;
  {
    LoadStreamGuard load;
    w = ops::scale(Tensor::full({8}, 1.5f, kHpu), 2.0);
  }
  EXPECT_EQ(ops::add(w, w).to(Device()).to_vector(), std::vector<float>(8, 6.0f));
}

}  // namespace
