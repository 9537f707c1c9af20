// Graph layer: memory-plan invariants, passes and the executable (lazy mode and HPU graphs:
// tests/hpu_graph_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "engine/error.h"
#include "engine/ops.h"
#include "golden.h"
#include "graphs/executable.h"

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

}  // namespace
