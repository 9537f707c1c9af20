// Graph layer: memory-plan invariants, passes, lazy mode and HPU graph replay == eager.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/ops.h"
#include "golden.h"
#include "graphs/hpu_graph.h"
#include "graphs/lazy.h"
#include "models/zoo.h"

using namespace hg;
using namespace hg::graphs;
using ::testing::HasSubstr;

namespace {

size_t aligned(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

void check_plan(const std::vector<BufferRequest>& reqs, const MemoryPlan& p) {
  ASSERT_EQ(p.offsets.size(), reqs.size());
  size_t total = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    total += aligned(reqs[i].bytes);
    EXPECT_EQ(p.offsets[i] % kArenaAlignment, 0u);
    EXPECT_LE(p.offsets[i] + reqs[i].bytes, p.arena_bytes);
    for (size_t j = i + 1; j < reqs.size(); ++j) {
      const bool live_together = reqs[i].first_step <= reqs[j].last_step && reqs[j].first_step <= reqs[i].last_step;
      const bool overlap = p.offsets[i] < p.offsets[j] + reqs[j].bytes && p.offsets[j] < p.offsets[i] + reqs[i].bytes;
      EXPECT_FALSE(live_together && overlap) << "buffers " << i << " and " << j << " overlap while both live";
    }
  }
  EXPECT_LE(p.arena_bytes, total);
}

TEST(MemoryPlan, InvariantsHoldOnRandomLifetimes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> reqs;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const int a = static_cast<int>(rng() % 30), len = static_cast<int>(rng() % 8);
      reqs.push_back({1 + rng() % 5000, a, a + len});
    }
    check_plan(reqs, plan_memory(reqs));
  }
}

TEST(MemoryPlan, ReusesMemoryOfDeadBuffers) {
  const std::vector<BufferRequest> chain{{4096, 0, 1}, {4096, 1, 2}, {4096, 2, 3}, {4096, 3, 4}};
  const MemoryPlan p = plan_memory(chain);
  check_plan(chain, p);
  EXPECT_EQ(p.arena_bytes, 2u * 4096u);  // a chain needs only two live buffers at a time
}

Graph mlp_graph(int64_t batch) {
  Graph g;
  const int x = g.add_input({{batch, 8}, DType::F32});
  const int w1 = g.add_input({{16, 8}, DType::F32}), b1 = g.add_input({{16}, DType::F32});
  const int w2 = g.add_input({{4, 16}, DType::F32}), b2 = g.add_input({{4}, DType::F32});
  const int h = g.add_op(op_schema("relu"), {g.add_op(op_schema("linear"), {x, w1, b1}, Attrs{{0}, {}})}, {});
  const int dead = g.add_op(op_schema("scale"), {h}, Attrs{{}, {2.0}});
  (void)dead;
  g.outputs = {g.add_op(op_schema("linear"), {h, w2, b2}, Attrs{{0}, {}})};
  return g;
}

TEST(Passes, DeadCodeEliminationAndLinearReluFusion) {
  Graph g = mlp_graph(2);
  run_passes(g, {.fusion = true});
  int linears = 0, relus = 0, fused = 0;
  for (const auto& n : g.nodes) {
    if (n.kind != Node::Kind::Op) continue;
    linears += n.op->name == "linear";
    relus += n.op->name == "relu";
    fused += n.op->name == "linear" && n.attrs.i(0) == 1;
    EXPECT_NE(n.op->name, "scale") << "dead node survived";
  }
  EXPECT_EQ(linears, 2);
  EXPECT_EQ(relus, 0);
  EXPECT_EQ(fused, 1);

  Graph unfused = mlp_graph(2);
  run_passes(unfused, {.fusion = false});
  EXPECT_EQ(unfused.nodes.size(), 5u + 3u);  // 5 inputs, linear, relu, linear
}

TEST(Executable, FusedAndUnfusedAgree) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> data;
  const std::vector<size_t> sizes{2 * 8, 16 * 8, 16, 4 * 16, 4};
  for (size_t s : sizes) {
    data.emplace_back(s);
    for (auto& v : data.back()) v = nd(rng);
  }
  std::vector<const void*> in;
  for (auto& d : data) in.push_back(d.data());
  std::vector<float> out_a(8), out_b(8);
  auto run = [&](bool fusion, std::vector<float>& out) {
    auto exe = Executable::compile(mlp_graph(2), {.passes = {.fusion = fusion}});
    std::vector<std::byte> arena(exe->arena_bytes() + 64);
    void* o = out.data();
    exe->run(arena.data(), in.data(), &o);
  };
  run(true, out_a);
  run(false, out_b);
  test::expect_close(out_a, out_b, 1e-6, "fused vs unfused");
}

TEST(Lazy, MarkStepCompilesOnceThenHitsTheCache) {
  enable_lazy_mode(true);
  const Device d = Device::hpu(0);
  Tensor w = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, d);
  const LazyStats s0 = lazy_stats();
  std::vector<float> last;
  for (int i = 0; i < 5; ++i) {
    Tensor x = Tensor::from_vector({float(i), 1, 0, float(-i)}, {2, 2}, d);
    Tensor y = ops::relu(ops::matmul(x, w));
    EXPECT_TRUE(y.is_lazy());
    mark_step(d);
    EXPECT_FALSE(y.is_lazy());
    last = y.to_vector();
  }
  const LazyStats s1 = lazy_stats();
  EXPECT_EQ(s1.cache_misses - s0.cache_misses, 1u);
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 4u);
  // x = [[4, 1], [0, -4]] @ [[1, 2], [3, 4]] = [[7, 12], [-12, -16]] -> relu
  EXPECT_EQ(last, (std::vector<float>{7, 12, 0, 0}));
  enable_lazy_mode(false);
}

TEST(Lazy, ReadingAValueRunsThePendingGraph) {
  enable_lazy_mode(true);
  Tensor x = Tensor::from_vector({-1, 2}, {2}, Device::hpu(0));
  Tensor y = ops::scale(ops::relu(x), 3);
  EXPECT_TRUE(y.is_lazy());
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 6}));
  enable_lazy_mode(false);
}

TEST(HPUGraph, ReplayEqualsEagerForTheGoldenMlp) {
  const auto golden = test::load_json("mlp.json");
  auto net = models::zoo::mlp({64, 32, 10});
  for (auto& [name, p] : net->named_parameters()) p->copy_from(test::tensor_from(golden["weights"][name], Device::cpu()));
  NoGradGuard no_grad;
  Tensor x_cpu = test::tensor_from(golden["input"], Device::cpu());
  const std::vector<float> eager = net->forward(x_cpu).to_vector();
  test::expect_close(eager, golden["output"]["data"].get<std::vector<float>>(), 1e-5, "eager vs PyTorch");

  net->to(Device::hpu(0));
  Tensor static_in = Tensor::zeros(x_cpu.shape(), DType::F32, Device::hpu(0));
  HPUGraph g(Device::hpu(0));
  g.capture_begin();
  Tensor out = net->forward(static_in);
  EXPECT_TRUE(out.is_lazy());
  g.capture_end();
  EXPECT_FALSE(out.is_lazy());
  EXPECT_GT(g.arena_bytes(), 0u);
  for (int rep = 0; rep < 3; ++rep) {
    static_in.copy_from(x_cpu.to(Device::hpu(0)));
    g.replay();
    test::expect_close(out.to_vector(), eager, 1e-6, "replay vs eager", 0);
  }
  // New data through the same static buffers.
  Tensor x2 = ops::scale(x_cpu, 0.5);
  static_in.copy_from(x2.to(Device::hpu(0)));
  g.replay();
  net->to(Device::cpu());
  test::expect_close(out.to_vector(), net->forward(x2).to_vector(), 1e-6, "replay vs eager (second input)", 0);
}

TEST(HPUGraph, DropoutDrawsANewMaskPerReplay) {
  const Device d = Device::hpu(0);
  Tensor x = Tensor::full({256}, 1.0f, d);
  HPUGraph g(d);
  g.capture_begin();
  Tensor y = ops::dropout(x, 0.5, true);
  g.capture_end();
  auto replay_mask = [&] {
    g.replay();
    return y.to_vector();
  };
  const auto a = replay_mask(), b = replay_mask();
  EXPECT_NE(a, b);  // 2^-256 odds of a false failure
  for (float v : a) EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
  manual_seed(d, 7);
  const auto c = replay_mask();
  manual_seed(d, 7);
  EXPECT_EQ(replay_mask(), c);  // reproducible from a seed
}

TEST(HPUGraph, ReadingAValueDuringCaptureIsAnError) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, Device::hpu(0));
  HPUGraph g(Device::hpu(0));
  g.capture_begin();
  Tensor y = ops::relu(x);
  try {
    y.to_vector();
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("capture"));
  }
  g.capture_end();
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2}));
  EXPECT_THROW(HPUGraph(Device::cpu()), DeviceError);
  HPUGraph empty(Device::hpu(0));
  EXPECT_THROW(empty.replay(), InvalidArgument);
}

}  // namespace
