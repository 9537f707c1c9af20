// Small-batch kernels: the small-batch GEMM (engine/small_gemm.cpp) against the product computed
// in double over row counts 1-4, inner sizes on and off the 16 lanes, both weight orientations
// and the activations it takes; when the linear / matmul prepack picks it (and when not); the
// choice in the graph dump; a compiled MLP at batch 1 equal to the same graph at batch 8 (oneDNN)
// row for row; the small-convolution choices (NCHW on small maps, one thread) in the dump; packed
// weight copies shared between kernels and graphs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/kernels.h"
#include "engine/ops.h"
#include "graphs/executable.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

using ::testing::HasSubstr;

std::vector<float> values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& e : v) e = nd(rng);
  return v;
}

TEST(SmallGemm, MatchesTheProductInDouble) {
  for (int64_t m : {1, 2, 3, 4})
    for (int64_t k : {1, 15, 16, 17, 100})
      for (int64_t n : {1, 7, 33, 70})
        for (bool nk : {true, false})
          for (FusedAct act : {FusedAct::None, FusedAct::Relu, FusedAct::Relu6}) {
            SCOPED_TRACE("m " + std::to_string(m) + " k " + std::to_string(k) + " n " + std::to_string(n) +
                         (nk ? " [n, k] " : " [k, n] ") + fused_act_name(act));
            const auto x = values(m * k, 1), w = values(n * k, 2), b = values(n, 3);
            ASSERT_TRUE(kernels::small_gemm_fits(DType::F32, m, k, n, act));
            const Kernel kern = kernels::small_gemm(m, k, n, w.data(), nk, true, act);
            std::vector<float> y(static_cast<size_t>(m * n));
            const void* in[] = {x.data(), nullptr, b.data()};
            kern(in, y.data());
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double s = b[j];
                for (int64_t p = 0; p < k; ++p) s += static_cast<double>(x[i * k + p]) * (nk ? w[j * k + p] : w[p * n + j]);
                const double want = apply_fused_act(act, s), got = y[i * n + j];
                ASSERT_TRUE(std::isfinite(got));
                ASSERT_NEAR(got, want, 1e-5 * (1 + std::abs(want))) << i << ", " << j;
              }
          }
}

TEST(SmallGemm, LinearPrepackPicksItOnlyForFewRowsLittleWorkAndSimpleActivations) {
  const OpSchema& op = op_schema("linear");
  auto choice = [&](int64_t m, int64_t k, int64_t n, FusedAct act) {
    const std::vector<float> w(static_cast<size_t>(n * k), 0.5f);
    const std::vector<TensorMeta> metas{{{m, k}, DType::F32}, {{n, k}, DType::F32}, {{n}, DType::F32}};
    kernels::take_kernel_choice();
    op.prepack(metas, {{m, n}, DType::F32}, Attrs{{static_cast<int64_t>(act)}, {}}, {nullptr, w.data(), nullptr});
    return kernels::take_kernel_choice();
  };
  EXPECT_THAT(choice(1, 120, 84, FusedAct::Relu), HasSubstr("small-batch GEMM (1 rows <= 4, 10080 multiply-adds)"));
  EXPECT_THAT(choice(4, 128, 256, FusedAct::Relu6), HasSubstr("small-batch GEMM (4 rows <= 4, 131072 multiply-adds)"));
  EXPECT_EQ(choice(5, 64, 64, FusedAct::None), "") << "five rows: oneDNN";
  EXPECT_EQ(choice(1, 400, 120, FusedAct::None), "") << "48000 weights, more than 2^15: oneDNN";
  EXPECT_EQ(choice(1, 64, 64, FusedAct::GeluErf), "") << "GELU: oneDNN's post-op";
  EXPECT_EQ(kernels::take_kernel_choice(), "") << "taking clears it";
}

// The digits MLP (64-64-10 with ReLU) compiled with frozen weights: batch 1 runs the small-batch
// GEMM (the dump says so), batch 8 oneDNN; the rows agree.
TEST(SmallGemm, CompiledMlpAtBatchOneAgreesWithOneDnnAndTheDumpSaysWhy) {
  auto mlp = [](int64_t batch) {
    test::fusion::GraphBuilder g;
    const int x = g.in({batch, 64});
    const int h = g.op("linear", {x, g.weight({64, 64}), g.weight({64})}, Attrs{{1}, {}});
    g.g.outputs = {g.op("linear", {h, g.weight({10, 64}), g.weight({10})}, Attrs{{0}, {}})};
    return g.g;
  };
  const graphs::Graph g8 = mlp(8), g1 = mlp(1);
  auto data8 = test::fusion::scaled_inputs(g8, 4);
  auto data1 = data8;
  data1[0].resize(64 * sizeof(float));  // the first row of the batch
  const auto y8 = test::fusion::run_graph(g8, data8, true), y1 = test::fusion::run_graph(g1, data1, true);
  ASSERT_EQ(y1[0].size(), 10u);
  for (size_t j = 0; j < 10; ++j) EXPECT_NEAR(y1[0][j], y8[0][j], 1e-5 * (1 + std::abs(y8[0][j]))) << j;

  std::vector<const void*> frozen(g1.num_inputs);
  for (const auto& n : g1.nodes)
    if (n.kind == graphs::Node::Kind::Input && n.frozen) frozen[n.input_index] = data1[n.input_index].data();
  const auto exe = graphs::Executable::compile(g1, graphs::CompileOptions{.optimize = true}, frozen);
  EXPECT_THAT(exe->dump(), HasSubstr("prepacked, small-batch GEMM (1 rows <= 4, 4096 multiply-adds)"));
  const auto exe8 = graphs::Executable::compile(g8, graphs::CompileOptions{.optimize = true}, frozen);
  EXPECT_THAT(exe8->dump(), ::testing::Not(HasSubstr("small-batch GEMM")));
}

// Prepacked weights are shared (engine/packed_weights.h): a second kernel packing the same bytes
// the same way keeps no copy of its own; weights changed in place get a fresh copy while the
// kernels packed before keep theirs; a copy no kernel holds is freed.
TEST(PackedWeights, KernelsShareOneCopyPerContentAndLayout) {
  const int64_t m = 2, k = 40, n = 50;
  auto w = values(n * k, 7);
  const auto x = values(m * k, 8), b = values(n, 9);
  auto run = [&](const Kernel& kern) {
    std::vector<float> y(static_cast<size_t>(m * n));
    const void* in[] = {x.data(), nullptr, b.data()};
    kern(in, y.data());
    return y;
  };
  kernels::take_prepacked_bytes();
  const Kernel first = kernels::small_gemm(m, k, n, w.data(), true, true, FusedAct::None);
  EXPECT_GE(kernels::take_prepacked_bytes(), static_cast<size_t>(k * n) * sizeof(float));
  const std::vector<float> want = run(first);
  {
    const Kernel second = kernels::small_gemm(m, k, n, w.data(), true, true, FusedAct::Relu);
    EXPECT_EQ(kernels::take_prepacked_bytes(), 0u) << "the same bytes packed the same way: shared";
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(run(second)[i], std::max(want[i], 0.0f)) << i;
    const Kernel transposed = kernels::small_gemm(m, k, n, w.data(), false, true, FusedAct::None);
    EXPECT_GT(kernels::take_prepacked_bytes(), 0u) << "the same bytes read as [k, n]: another layout";
  }
  for (float& v : w) v *= 2;  // changed in place, as training does between captures
  const Kernel changed = kernels::small_gemm(m, k, n, w.data(), true, true, FusedAct::None);
  EXPECT_GT(kernels::take_prepacked_bytes(), 0u);
  const std::vector<float> doubled = run(changed), again = run(first);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(doubled[i] - b[i % n], 2 * (want[i] - b[i % n]), 1e-4) << i;
    EXPECT_EQ(again[i], want[i]) << "the first kernel keeps its copy of the old weights";
  }
}

// Two graphs compiled from one model's frozen weights (a Predictor's buckets, a generator's grid):
// the second keeps no copy of its own while the first lives, and its constant bytes say so.
TEST(PackedWeights, SecondGraphOfTheSameWeightsCountsNoCopy) {
  test::fusion::GraphBuilder g;
  const int x = g.in({1, 64});
  g.g.outputs = {g.op("linear", {x, g.weight({64, 64}), g.weight({64})}, Attrs{{0}, {}})};
  const auto data = test::fusion::scaled_inputs(g.g, 4);
  std::vector<const void*> frozen(g.g.num_inputs);
  for (const auto& node : g.g.nodes)
    if (node.kind == graphs::Node::Kind::Input && node.frozen) frozen[node.input_index] = data[node.input_index].data();
  const auto one = graphs::Executable::compile(g.g, graphs::CompileOptions{.optimize = true}, frozen);
  EXPECT_GE(one->constant_bytes(), 64u * 64u * sizeof(float)) << one->dump();
  const auto two = graphs::Executable::compile(g.g, graphs::CompileOptions{.optimize = true}, frozen);
  EXPECT_EQ(two->constant_bytes(), 0u) << two->dump();
}

// A LeNet-sized conv on a 10x10 input (8x8 output: blocked) and one on a 9x9 input (7x7 output:
// NCHW), compiled without passes so that no layout pass chooses for them.
TEST(SmallConv, TheDumpNamesTheLayoutAndThreadChoices) {
  test::fusion::GraphBuilder g;
  const int a = g.in({1, 4, 10, 10}), b = g.in({1, 4, 9, 9});
  const Attrs conv{{1, 1, 0, 0, 1, 1, 1}, {}};
  g.g.outputs = {g.op("conv2d", {a, g.weight({6, 4, 3, 3}), g.weight({6})}, conv),
                 g.op("conv2d", {b, g.weight({6, 4, 3, 3}), g.weight({6})}, conv)};
  const auto data = test::fusion::scaled_inputs(g.g, 1);
  std::vector<const void*> frozen(g.g.num_inputs);
  for (const auto& n : g.g.nodes)
    if (n.kind == graphs::Node::Kind::Input && n.frozen) frozen[n.input_index] = data[n.input_index].data();
  const std::string dump = graphs::Executable::compile(g.g, graphs::CompileOptions{.optimize = false}, frozen)->dump();
  EXPECT_THAT(dump, HasSubstr("prepacked, one thread (13824 multiply-adds < 2^20)")) << dump;
  EXPECT_THAT(dump, HasSubstr("prepacked, NCHW (a 7x7 map: its reorders would cost more than they save), one thread "
                              "(10584 multiply-adds < 2^20)"))
      << dump;
}

}  // namespace
}  // namespace hg
