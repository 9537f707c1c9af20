// Runtime (a compiled program bound to memory): results equal eager ops, outputs land in the
// caller's buffers, bindings bound how far the host runs ahead, completion is the Runtime's own
// event (no device-wide wait), streams are ordered; and the one LRU cache every keyed graph
// store uses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <string>
#include <thread>

#include "engine/ops.h"
#include "engine/stream.h"
#include "graphs/graph_cache.h"
#include "graphs/lru_cache.h"
#include "graphs/runtime.h"
#include "hpu_test_util.h"
#include "tests/errors.h"
#include "wait.h"

using namespace hg;
using namespace hg::graphs;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

namespace {

// y = relu(x W1^T + b1) W2^T + b2 with x [4, 8], hidden 16, 3 outputs; every tensor an input.
std::shared_ptr<const Executable> mlp_program() {
  Graph g;
  const int x = g.add_input({{4, 8}, DType::F32});
  const int w1 = g.add_input({{16, 8}, DType::F32}), b1 = g.add_input({{16}, DType::F32});
  const int w2 = g.add_input({{3, 16}, DType::F32}), b2 = g.add_input({{3}, DType::F32});
  const int h = g.add_op(op_schema("linear"), {x, w1, b1}, Attrs{{0}, {}});
  g.outputs = {g.add_op(op_schema("linear"), {g.add_op(op_schema("relu"), {h}, {}), w2, b2}, Attrs{{0}, {}})};
  return compile_cached(g);
}

struct MlpData {
  std::vector<Tensor> in = {test::ramp({4, 8}, 0.25f, Device()), test::ramp({16, 8}, 0.125f, Device()),
                            test::ramp({16}, 0.5f, Device()), test::ramp({3, 16}, 0.0625f, Device()),
                            test::ramp({3}, 1.0f, Device())};
  std::vector<const void*> ptrs() const {
    std::vector<const void*> p;
    for (const Tensor& t : in) p.push_back(t.raw_data());
    return p;
  }
  std::vector<float> eager() const {
    return ops::linear(ops::relu(ops::linear(in[0], in[1], in[2])), in[3], in[4]).to_vector();
  }
};

// Binds the next invoke of `rt` to d's inputs and to `out` (the 12 outputs, NaN until written).
void setup_into(Runtime& rt, const MlpData& d, std::vector<float>& out) {
  out.assign(12, NAN);
  void* outs[] = {out.data()};
  rt.setup(d.ptrs(), outs);
}

void expect_equal(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
    EXPECT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

// Holds hpu:0's default queue until released (at most 60 s, so a failing test cannot hang).
struct Blocker {
  std::atomic<bool> release{false}, running{false};
  void queue() {
    device_backend(test::kHpu).enqueue([this] {
      running = true;
      const auto until = std::chrono::steady_clock::now() + 60s;
      while (!release && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    });
    ASSERT_TRUE(test::wait_until([&] { return running.load(); }, 60s, "the blocking task to start"));
  }
  ~Blocker() {
    release = true;
    synchronize(test::kHpu);
  }
};

}  // namespace

TEST(Runtime, RunsTheProgramLikeEagerOpsIntoTheCallersBuffer) {
  MlpData d;
  Runtime rt(mlp_program(), test::kHpu);
  std::vector<float> out, out2;
  setup_into(rt, d, out);
  rt.run();
  expect_equal(out, d.eager());  // written where the caller said: no static output, no copy
  setup_into(rt, d, out2);
  rt.invoke();
  rt.wait();
  expect_equal(out2, d.eager());
  EXPECT_EQ(rt.stats().invokes, 2u);
}

TEST(Runtime, SetupRejectsTheWrongNumberOfBuffers) {
  Runtime rt(mlp_program(), test::kHpu);
  std::vector<float> out(12);
  void* outs[] = {out.data()};
  const void* one[] = {out.data()};
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { rt.setup(one, outs); }),
              HasSubstr("1 inputs and 1 outputs given, the program has 5 and 1"));
}

TEST(Runtime, WaitCoversItsOwnInvokesNotTheDevice) {
  MlpData d;
  Runtime rt(mlp_program(), test::kHpu);
  std::vector<float> out;
  setup_into(rt, d, out);
  rt.invoke();
  Blocker later;  // queued behind the invoke
  later.queue();
  // A device-wide wait would last until the blocker is released (60 s); this returns now.
  test::call_within(30s, "Runtime::wait while later work holds the device", [&] { rt.wait(); });
  EXPECT_FALSE(later.release.load());
  expect_equal(out, d.eager());
}

TEST(Runtime, BindingsBoundHowFarTheHostRunsAhead) {
  MlpData d;
  Runtime rt(mlp_program(), test::kHpu, {.depth = 2});
  std::vector<std::vector<float>> out(3, std::vector<float>(12, NAN));
  Blocker first;
  first.queue();
  for (size_t k = 0; k < 2; ++k) {  // two bindings: both invokes queue without waiting
    setup_into(rt, d, out[k]);
    rt.invoke();
  }
  EXPECT_EQ(rt.stats().wait_s, 0.0);
  std::atomic<bool> third_set_up{false};
  auto third = std::async(std::launch::async, [&] {
    setup_into(rt, d, out[2]);  // binding 0 again: waits for the first invoke
    third_set_up = true;
    rt.invoke();
    rt.wait();
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(third_set_up.load()) << "setup reused a binding whose invoke had not run";
  first.release = true;
  ASSERT_TRUE(test::ready_within(third, 60s, "the third invoke"));
  third.get();
  for (const auto& o : out) expect_equal(o, d.eager());
  EXPECT_GT(rt.stats().wait_s, 0.0);
}

TEST(Runtime, AnInvokeOnTheLoadStreamWaitsForTheDefaultStreamsOne) {
  MlpData d;
  Runtime rt(mlp_program(), test::kHpu, {.depth = 2});
  std::vector<float> a(12, NAN), b(12, NAN);
  Blocker first;
  first.queue();
  setup_into(rt, d, a);
  rt.invoke();  // queued on the default stream behind the blocker
  std::atomic<bool> invoked{false};
  auto load = std::async(std::launch::async, [&] {
    LoadStreamGuard guard;  // the arena is shared: this invoke must not run beside the first
    setup_into(rt, d, b);
    rt.invoke();
    invoked = true;
    rt.wait();
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(invoked.load()) << "an invoke on the load stream overtook the queued one";
  first.release = true;
  ASSERT_TRUE(test::ready_within(load, 60s, "the load-stream invoke"));
  load.get();
  expect_equal(a, d.eager());
  expect_equal(b, d.eager());
}

TEST(Runtime, RunIsInlineWhenTheStreamIsIdle) {
  MlpData d;
  Runtime rt(mlp_program(), test::kHpu);
  std::vector<float> out;
  synchronize(test::kHpu);
  setup_into(rt, d, out);
  rt.run();
  EXPECT_EQ(rt.stats().inline_runs, 1u);
  expect_equal(out, d.eager());
}

TEST(LruCache, BoundsByEntriesAndBytesAndCounts) {
  LruCache<std::string, int> c({.max_entries = 3, .max_bytes = 10}, [](const int& v) { return size_t(v); });
  c.put("a", 2);
  c.put("b", 3);
  c.put("c", 4);
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"c", "b", "a"}));
  ASSERT_NE(c.get("a"), nullptr);  // a becomes the most recent
  EXPECT_EQ(c.get("zz"), nullptr);
  c.put("d", 1);  // four entries: the least recent (b) goes
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"d", "a", "c"}));
  c.put("e", 5);  // 1 + 2 + 4 + 5 = 12 bytes > 10: c goes (then 8 bytes, 3 entries)
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"e", "d", "a"}));
  EXPECT_EQ(c.put("huge", 11), nullptr);  // over max_bytes alone: not kept, evicts nothing
  EXPECT_EQ(c.size(), 3u);
  c.put("a", 1);  // replacing recosts it
  const CacheStats s = c.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 5u + 1u + 1u);
  c.set_limits({.max_entries = 1});
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"a"}));
  c.clear();
  EXPECT_EQ(c.stats().bytes, 0u);
  EXPECT_EQ(c.stats().evictions, 4u);
}

TEST(LruCache, UnboundedKeepsEverything) {
  LruCache<int, std::unique_ptr<int>> c;
  for (int i = 0; i < 100; ++i) c.put(i, std::make_unique<int>(i));
  EXPECT_EQ(c.size(), 100u);
  ASSERT_NE(c.get(42), nullptr);
  EXPECT_EQ(**c.get(42), 42);
  EXPECT_TRUE(c.erase(42));
  EXPECT_FALSE(c.erase(42));
  EXPECT_EQ(c.stats().evictions, 0u);
}
