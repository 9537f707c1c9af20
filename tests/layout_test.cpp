// Channel-blocked layouts: the to_blocked / from_blocked ops, blocked convolutions, and the
// layout pass (graphs/pass_layout.cpp): golden before/after dump, the optimized graph equal to the
// unoptimized one (padded channel counts, squeeze-and-excitation, residuals, a blocked value as
// a graph output), the fixed point, and what must stay NCHW.
// HG_UPDATE_GOLDENS=1 rewrites tests/golden/layout/*.txt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <cmath>
#include <memory>
#include <random>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/ops_layout.h"
#include "graphs/passes.h"
#include "tests/errors.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

using graphs::Graph;
using test::fusion::count_ops;
using test::fusion::run_graph;

constexpr int64_t kAdd = 0, kMul = 2, kDiv = 3;  // kernels::BinaryOp

struct Builder : test::fusion::GraphBuilder {
  int binary(int64_t k, int a, int b) { return op("binary", {a, b}, Attrs{{k}, {}}); }
  int conv(int x, int64_t out, int64_t k, int64_t stride, int64_t groups = 1) {
    const int64_t c = g.nodes[x].meta.shape[1];
    const int w = weight({out, c / groups, k, k});
    const int b = weight({out});
    return op("conv2d", {x, w, b}, Attrs{{stride, stride, k / 2, k / 2, 1, 1, groups}, {}});
  }
  // EfficientNet's MBConv: expand 1x1 -> SiLU -> depthwise 3x3 -> SiLU -> squeeze-and-excitation
  // -> project 1x1 (+ the block's input when the shapes match).
  int mbconv(int x, int64_t expand, int64_t out, int64_t stride) {
    const int64_t c = g.nodes[x].meta.shape[1];
    const int e = op("silu", {conv(x, expand, 1, 1)});
    const int d = op("silu", {conv(e, expand, 3, stride, expand)});
    const int pooled = op("adaptive_avg_pool2d", {d}, Attrs{{1, 1}, {}});
    const int s = op("sigmoid", {conv(op("silu", {conv(pooled, 8, 1, 1)}), expand, 1, 1)});
    const int y = conv(binary(kMul, s, d), out, 1, 1);
    return stride == 1 && c == out ? binary(kAdd, y, x) : y;
  }
};

Tensor random(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (auto& x : v) x = nd(rng);
  return Tensor::from_vector(v, s);
}

Graph optimized(Graph g) {
  graphs::run_passes(g, {});
  return g;
}

void expect_same_answers(const Graph& g, uint32_t seed = 1) {
  const auto data = test::fusion::scaled_inputs(g, seed);
  test::fusion::expect_near(run_graph(g, data, true), run_graph(g, data), 1e-4, 1e-5);
}

TEST(LayoutOps, ToBlockedAndBackRoundTripWithZeroPadding) {
  for (int64_t block : {8, 16, 20}) {  // 20: channels-last
    const Tensor x = random({2, 20, 3, 5}, 7);
    const Tensor b = ops::to_blocked(x, block);
    ASSERT_EQ(b.shape(), blocked_shape(x.shape(), block));
    const auto v = b.to_vector(), plain = x.to_vector();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < b.shape()[1] * block; ++c)
        for (int64_t p = 0; p < 15; ++p) {
          const float got = v[static_cast<size_t>(((n * b.shape()[1] + c / block) * 15 + p) * block + c % block)];
          const float want = c < 20 ? plain[static_cast<size_t>((n * 20 + c) * 15 + p)] : 0.0f;
          ASSERT_EQ(got, want) << "block " << block << " n " << n << " channel " << c << " pixel " << p;
        }
    EXPECT_EQ(ops::from_blocked(b, 20).to_vector(), plain) << "block " << block;
  }
}

TEST(LayoutOps, RejectBadBlocksAndChannelCounts) {
  const Tensor x = Tensor::zeros({1, 20, 4, 4});
  EXPECT_THAT(test::error_of<Error>([&] { ops::to_blocked(x, 7); }), testing::HasSubstr("block must be 8, 16 or the channel count 20"));
  EXPECT_THAT(test::error_of<Error>([&] { ops::to_blocked(Tensor::zeros({20, 4, 4}), 8); }), testing::HasSubstr("rank"));
  const Tensor b = ops::to_blocked(x, 8);  // 3 blocks: 17..24 channels
  EXPECT_THAT(test::error_of<Error>([&] { ops::from_blocked(b, 16); }),
              testing::HasSubstr("16 channels do not fill 3 blocks of 8"));
  EXPECT_THAT(test::error_of<Error>([&] { ops::from_blocked(b, 25); }), testing::HasSubstr("do not fill"));
}

TEST(LayoutOps, BlockedConvolutionEqualsPlain) {
  const Tensor x = random({2, 24, 9, 9}, 1), w = random({40, 24, 3, 3}, 2), bias = random({40}, 3);
  const Tensor want = dispatch("conv2d", {x, w, bias}, Attrs{{1, 1, 1, 1, 1, 1, 1}, {}});
  for (auto [src, dst] : {std::pair<int64_t, int64_t>{8, 8}, {16, 16}, {24, 40}, {16, 40}}) {  // 24, 40: NHWC
    const Attrs a{{1, 1, 1, 1, 1, 1, 1, 0, src, dst}, {}};
    const Tensor y = dispatch("conv2d", {ops::to_blocked(x, src), w, bias}, a);
    ASSERT_EQ(y.shape(), blocked_shape(want.shape(), dst));
    test::fusion::expect_near({ops::from_blocked(y, 40).to_vector()}, {want.to_vector()}, 1e-5, 1e-4);
    if (HasFailure()) FAIL() << "src block " << src << ", dst block " << dst;
  }
  EXPECT_THAT(test::error_of<Error>([&] { dispatch("conv2d", {x, w, bias}, Attrs{{1, 1, 1, 1, 1, 1, 1, 0, 8, 8}, {}}); }),
              testing::HasSubstr("rank"));
}

// The golden uses oneDNN's AVX2 kernels (8-channel blocks) so that it reads the same on every
// machine: the ISA cap must be set before the process creates its first primitive, as it is
// when ctest runs this test alone.
TEST(PassesLayout, GoldenMBConvBlock) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success ||
      dnnl::get_effective_cpu_isa() != dnnl::cpu_isa::avx2)
    GTEST_SKIP() << "oneDNN already chose its ISA in this process (run this test alone, as ctest does)";
  Builder b;
  const int x = b.in({1, 16, 14, 14});
  const int stem = b.op("relu", {b.conv(x, 16, 3, 1)});
  b.g.outputs = {b.mbconv(stem, 32, 16, 1)};
  const Graph after = optimized(b.g);
  test::fusion::expect_golden("layout", "mbconv", b.g, after);
}

TEST(PassesLayout, OptimizedEqualsUnoptimized) {
  for (int64_t c : {16, 24, 40}) {  // 24 and 40 pad their last block
    Builder b;
    const int x = b.in({2, 3, 32, 32});
    const int stem = b.op("silu", {b.conv(x, c, 3, 2)});
    const int block1 = b.mbconv(stem, 4 * c, c, 1);
    const int block2 = b.mbconv(block1, 4 * c, c + 8, 2);
    const int pooled = b.op("adaptive_avg_pool2d", {block2}, Attrs{{1, 1}, {}});
    b.g.outputs = {pooled, block1};  // a blocked value read only as a graph output
    const Graph after = optimized(b.g);
    // Blocked throughout: the stem reads NCHW (through a to_blocked, or directly where oneDNN's
    // kernel takes NCHW in, as its AVX2 one does) and both outputs leave the blocked layout.
    EXPECT_EQ(count_ops(after, "adaptive_avg_pool2d"), 0) << c << " channels: a mean over the blocked map";
    EXPECT_EQ(count_ops(after, "from_blocked"), 2) << c << " channels: both outputs (the SE blocks read x blocked)";
    EXPECT_EQ(count_ops(after, "squeeze_excite"), 2) << c << " channels";
    expect_same_answers(b.g);
    Graph again = after;  // the fixed point: nothing left to rewrite
    EXPECT_EQ(graphs::propagate_layouts(again), 0);
  }
}

TEST(PassesLayout, ChainsStayBlockedThroughPoolsAndResiduals) {
  Builder b;
  const int x = b.in({1, 32, 28, 28});
  int y = b.op("relu", {b.conv(x, 32, 1, 1)});
  y = b.op("max_pool2d", {y}, Attrs{{3, 3, 2, 2, 1, 1}, {}});  // ResNet's stem pool
  for (int i = 0; i < 3; ++i) y = b.binary(kAdd, b.op("relu", {b.conv(y, 32, 3, 1, 32)}), y);
  y = b.op("slice", {y}, Attrs{{-1, 1, 13, 1}, {}});  // a crop along W
  y = b.op("avg_pool2d", {y}, Attrs{{2, 2, 2, 2, 0, 0}, {}});  // DenseNet's transition pool
  b.g.outputs = {y};
  const Graph after = optimized(b.g);
  EXPECT_EQ(count_ops(after, "to_blocked"), 1);    // the graph's input
  EXPECT_EQ(count_ops(after, "from_blocked"), 1);  // its output
  expect_same_answers(b.g);
}

TEST(PassesLayout, LeavesWhatMustStayPlainAlone) {
  {  // weights that are not frozen (a training graph): no blocked layout
    Builder b;
    const int x = b.in({1, 32, 28, 28}), w = b.in({32, 32, 1, 1});
    b.g.outputs = {b.op("conv2d_nobias", {x, w}, Attrs{{1, 1, 0, 0, 1, 1, 1}, {}})};
    EXPECT_EQ(graphs::propagate_layouts(b.g), 0);
  }
  {  // a lone convolution: nothing to chain, the graph stays as it was
    Builder b;
    b.g.outputs = {b.conv(b.in({1, 32, 28, 28}), 32, 3, 1)};
    EXPECT_EQ(graphs::propagate_layouts(b.g), 0);
    EXPECT_EQ(b.g.nodes.size(), 4u);
  }
  {  // a 1x1 map (squeeze-and-excitation's FC layers) stays NCHW
    Builder b;
    b.g.outputs = {b.conv(b.in({1, 64, 1, 1}), 16, 1, 1)};
    EXPECT_EQ(graphs::propagate_layouts(b.g), 0);
  }
  {  // a division stays NCHW (0 / 0 in padding channels): the blocked chain ends before it
    Builder b;
    const int x = b.in({1, 24, 28, 28}), d = b.in({1, 24, 28, 28});
    const int y = b.op("relu", {b.conv(b.op("relu", {b.conv(x, 24, 1, 1)}), 24, 3, 1, 24)});
    b.g.outputs = {b.conv(b.binary(kDiv, y, d), 24, 3, 1, 24)};
    const Graph after = optimized(b.g);
    EXPECT_GE(count_ops(after, "from_blocked"), 1);
    for (const auto& n : after.nodes)
      if (n.kind == graphs::Node::Kind::Op && n.op->name == "binary") {
        EXPECT_EQ(n.meta.shape.size(), 4u);
      }
    expect_same_answers(b.g);
  }
}

}  // namespace
}  // namespace hg
