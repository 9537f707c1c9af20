// Squeeze-and-excitation (graphs/pass_squeeze_excite.cpp, engine/squeeze_excite.cpp): the golden
// before/after dump, optimized == unoptimized for plain and channel-blocked x (the layout pass
// keeps x blocked through the block), the pool spelled as adaptive_avg_pool2d or a mean, with
// and without biases, the kernel against the block computed in double, BF16 x, the blocks it
// must leave alone, and the op's checks.
// HG_UPDATE_GOLDENS=1 rewrites tests/golden/passes/squeeze_excite.txt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/ops_layout.h"
#include "engine/post_ops.h"
#include "graphs/passes.h"
#include "tests/errors.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

using graphs::Graph;
using graphs::Precision;
using test::fusion::count_ops;
using test::fusion::GraphBuilder;
using test::fusion::run_graph;
using ::testing::HasSubstr;

Attrs conv_attrs(FusedAct act, int64_t k = 1, int64_t groups = 1) {
  return Attrs{{1, 1, k / 2, k / 2, 1, 1, groups, static_cast<int64_t>(act)}, {}};
}
const Attrs kMul{{2}, {}};

struct Spec {
  int64_t n = 2, c = 40, h = 7, w = 5, cr = 10;
  bool mean_op = false;     // reduce mean instead of adaptive_avg_pool2d
  bool biases = true;       // conv2d, else conv2d_nobias
  FusedAct act = FusedAct::Silu;
  bool convs_around = false;  // a 3x3 conv before and a 1x1 conv after (the layout pass blocks x)
};

// x -> [conv3x3 + silu ->] SE -> [conv1x1]: the MBConv block's middle as PyTorch exports it once
// post-ops are fused.
Graph se_graph(const Spec& s) {
  GraphBuilder g;
  int x = g.in({s.n, s.c, s.h, s.w});
  if (s.convs_around)
    x = g.op("conv2d", {x, g.weight({s.c, s.c, 3, 3}), g.weight({s.c})}, conv_attrs(FusedAct::Silu, 3));
  const int p = s.mean_op ? g.op("reduce", {x}, Attrs{{1, 1, 2, 3}, {}}) : g.op("adaptive_avg_pool2d", {x}, Attrs{{1, 1}, {}});
  auto layer = [&](int in, int64_t o, int64_t i, FusedAct act) {
    if (s.biases) return g.op("conv2d", {in, g.weight({o, i, 1, 1}), g.weight({o})}, conv_attrs(act));
    return g.op("conv2d_nobias", {in, g.weight({o, i, 1, 1})}, conv_attrs(act));
  };
  const int gate = layer(layer(p, s.cr, s.c, s.act), s.c, s.cr, FusedAct::Sigmoid);
  int y = g.op("binary", {x, gate}, kMul);
  if (s.convs_around) y = g.op("conv2d", {y, g.weight({24, s.c, 1, 1}), g.weight({24})}, conv_attrs(FusedAct::None));
  g.g.outputs = {y};
  return g.g;
}

TEST(SqueezeExcite, GoldenAndOptimizedEqualsUnoptimized) {
  const Graph g = se_graph({.n = 1, .c = 8, .h = 3, .w = 3, .cr = 2});
  Graph f = g;
  EXPECT_EQ(graphs::fuse_squeeze_excite(f), 1);
  EXPECT_EQ(graphs::fuse_squeeze_excite(f), 0) << "a second run finds nothing";
  EXPECT_EQ(count_ops(f, "squeeze_excite"), 1);
  EXPECT_EQ(count_ops(f, "conv2d") + count_ops(f, "binary") + count_ops(f, "adaptive_avg_pool2d"), 0) << f.dump();
  test::fusion::expect_golden("passes", "squeeze_excite", g, f);

  std::vector<Spec> specs = {
      {},                                                          // plain x, C off the 16 lanes
      {.n = 3, .c = 64, .h = 4, .w = 4, .cr = 16, .mean_op = true},  // a mean, vectors only
      {.biases = false, .act = FusedAct::Relu},                    // conv2d_nobias layers, ReLU
      {.n = 2, .c = 40, .h = 9, .w = 9, .cr = 10, .convs_around = true},  // x channel-blocked
      {.n = 1, .c = 96, .h = 6, .w = 6, .cr = 24, .convs_around = true},
  };
  for (const Spec& s : specs) {
    SCOPED_TRACE("c = " + std::to_string(s.c) + (s.convs_around ? ", between convolutions" : ""));
    const Graph gs = se_graph(s);
    const auto data = test::fusion::scaled_inputs(gs, 5);
    Graph opt = gs;
    graphs::run_passes(opt, graphs::PassOptions{});
    EXPECT_EQ(count_ops(opt, "squeeze_excite"), 1) << opt.dump();
    EXPECT_EQ(count_ops(opt, "adaptive_avg_pool2d") + count_ops(opt, "reduce") + count_ops(opt, "binary"), 0) << opt.dump();
    if (s.convs_around) {
      for (const auto& n : opt.nodes)
        if (n.kind == graphs::Node::Kind::Op && n.op->name == "squeeze_excite") {
          EXPECT_GT(n.attrs.i(2), 0) << "x stays channel-blocked through the block\n" << opt.dump();
        }
    }
    test::fusion::expect_near(run_graph(opt, data), run_graph(gs, data), 1e-5, 1e-5);
  }
}

// The block in double, from the same F32 values.
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w1, const std::vector<float>& b1,
                              const std::vector<float>& w2, const std::vector<float>& b2, int64_t n, int64_t c,
                              int64_t hw, int64_t cr, FusedAct act) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> mean(c), h(cr);
    for (int64_t k = 0; k < c; ++k) {
      for (int64_t p = 0; p < hw; ++p) mean[k] += x[(i * c + k) * hw + p];
      mean[k] /= static_cast<double>(hw);
    }
    for (int64_t j = 0; j < cr; ++j) {
      double s = b1[j];
      for (int64_t k = 0; k < c; ++k) s += w1[j * c + k] * mean[k];
      h[j] = apply_fused_act(act, s);
    }
    for (int64_t k = 0; k < c; ++k) {
      double s = b2[k];
      for (int64_t j = 0; j < cr; ++j) s += w2[k * cr + j] * h[j];
      const double gate = 1.0 / (1.0 + std::exp(-s));
      for (int64_t p = 0; p < hw; ++p) y[(i * c + k) * hw + p] = x[(i * c + k) * hw + p] * gate;
    }
  }
  return y;
}

std::vector<float> values(int64_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& e : v) e = nd(rng) * scale;
  return v;
}

TEST(SqueezeExcite, KernelMatchesTheBlockInDoublePlainBlockedAndBf16) {
  const int64_t n = 3, c = 37, h = 5, w = 6, cr = 9, hw = h * w;
  const auto xv = values(n * c * hw, 1, 2.0f), w1 = values(cr * c, 2, 0.3f), b1 = values(cr, 3, 0.5f),
             w2 = values(c * cr, 4, 0.5f), b2 = values(c, 5, 0.5f);
  const Tensor x = Tensor::from_vector(xv, {n, c, h, w});
  const std::vector<Tensor> layers{Tensor::from_vector(w1, {cr, c, 1, 1}), Tensor::from_vector(w2, {c, cr, 1, 1}), Tensor::from_vector(b1, {cr}),
                                   Tensor::from_vector(b2, {c})};
  for (FusedAct act : {FusedAct::Silu, FusedAct::Relu, FusedAct::None}) {
    SCOPED_TRACE(fused_act_name(act));
    const auto want = reference(xv, w1, b1, w2, b2, n, c, hw, cr, act);
    auto check = [&](const Tensor& got, double tol, const char* what) {
      ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
      const float* p = got.data<float>();
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_TRUE(std::isfinite(p[i])) << what << " at " << i;
        worst = std::max(worst, std::abs(p[i] - want[i]) / (std::abs(want[i]) + 1e-3));
      }
      EXPECT_LT(worst, tol) << what;
    };
    const Attrs a{{static_cast<int64_t>(act), 3, 0}, {}};
    check(dispatch("squeeze_excite", {x, layers[0], layers[1], layers[2], layers[3]}, a), 1e-5, "plain");
    for (int64_t b : {int64_t{8}, int64_t{16}, c}) {  // padded blocks, and channels-last
      Attrs ab = a;
      ab.ints[2] = b;
      const Tensor yb = dispatch("squeeze_excite", {ops::to_blocked(x, b), layers[0], layers[1], layers[2], layers[3]}, ab);
      check(ops::from_blocked(yb, c), 1e-5, "blocked");
    }
    const Tensor xb = x.to(DType::BF16);
    const Tensor yb = dispatch("squeeze_excite", {xb, layers[0], layers[1], layers[2], layers[3]}, a);
    EXPECT_EQ(yb.dtype(), DType::BF16);
    check(yb.to(DType::F32), 2e-2, "bf16");
  }
}

TEST(SqueezeExcite, Bf16GraphsKeepXInBf16) {
  const Graph g = se_graph({.n = 2, .c = 32, .h = 6, .w = 6, .cr = 8, .convs_around = true});
  Graph opt = g;
  graphs::PassOptions bf16;
  bf16.precision = Precision::Bf16;
  graphs::run_passes(opt, bf16);
  bool seen = false;
  for (const auto& n : opt.nodes)
    if (n.kind == graphs::Node::Kind::Op && n.op->name == "squeeze_excite") {
      seen = true;
      EXPECT_EQ(n.meta.dtype, DType::BF16) << opt.dump();
      for (size_t i = 1; i < n.inputs.size(); ++i) EXPECT_EQ(opt.nodes[n.inputs[i]].meta.dtype, DType::F32) << "layers stay F32";
    }
  EXPECT_TRUE(seen) << opt.dump();
  const auto data = test::fusion::scaled_inputs(g, 9);
  const double err = test::fusion::max_rel(run_graph(opt, data), run_graph(g, data));
  EXPECT_LT(err, 5e-2);
  EXPECT_GT(err, 0) << "BF16 rounding must show";
}

TEST(SqueezeExcite, LeavesOtherBlocksAlone) {
  auto unchanged = [](Graph g, const char* why) {
    const std::string before = g.dump();
    EXPECT_EQ(graphs::fuse_squeeze_excite(g), 0) << why;
    EXPECT_EQ(g.dump(), before) << why;
  };
  {  // the means are also an output
    Graph g = se_graph({});
    for (const auto& n : g.nodes)
      if (n.kind == graphs::Node::Kind::Op && n.op->name == "adaptive_avg_pool2d") g.outputs.push_back(static_cast<int>(&n - g.nodes.data()));
    unchanged(g, "pool read twice");
  }
  {  // a gate that is not a sigmoid
    GraphBuilder g;
    const int x = g.in({1, 8, 3, 3});
    const int p = g.op("adaptive_avg_pool2d", {x}, Attrs{{1, 1}, {}});
    const int h = g.op("conv2d", {p, g.weight({2, 8, 1, 1}), g.weight({2})}, conv_attrs(FusedAct::Relu));
    const int s = g.op("conv2d", {h, g.weight({8, 2, 1, 1}), g.weight({8})}, conv_attrs(FusedAct::Tanh));
    g.g.outputs = {g.op("binary", {x, s}, kMul)};
    unchanged(g.g, "tanh gate");
  }
  {  // the means of another tensor than the one scaled
    GraphBuilder g;
    const int x = g.in({1, 8, 3, 3}), z = g.in({1, 8, 3, 3});
    const int p = g.op("adaptive_avg_pool2d", {z}, Attrs{{1, 1}, {}});
    const int h = g.op("conv2d", {p, g.weight({2, 8, 1, 1}), g.weight({2})}, conv_attrs(FusedAct::Relu));
    const int s = g.op("conv2d", {h, g.weight({8, 2, 1, 1}), g.weight({8})}, conv_attrs(FusedAct::Sigmoid));
    g.g.outputs = {g.op("binary", {x, s}, kMul)};
    unchanged(g.g, "pool of another tensor");
  }
  {  // layers whose weights are not constant
    GraphBuilder g;
    const int x = g.in({1, 8, 3, 3}), w1 = g.in({2, 8, 1, 1});
    const int p = g.op("adaptive_avg_pool2d", {x}, Attrs{{1, 1}, {}});
    const int h = g.op("conv2d", {p, w1, g.weight({2})}, conv_attrs(FusedAct::Relu));
    const int s = g.op("conv2d", {h, g.weight({8, 2, 1, 1}), g.weight({8})}, conv_attrs(FusedAct::Sigmoid));
    g.g.outputs = {g.op("binary", {x, s}, kMul)};
    unchanged(g.g, "w1 an input");
  }
}

TEST(SqueezeExcite, OpChecksItsInputs) {
  const Tensor x = Tensor::zeros({1, 8, 3, 3}), w1 = Tensor::zeros({2, 8, 1, 1}), w2 = Tensor::zeros({8, 2, 1, 1});
  const Attrs a{{1, 0, 0}, {}};
  EXPECT_THAT(test::error_of<ShapeError>([&] { dispatch("squeeze_excite", {x, w1, Tensor::zeros({8, 3, 1, 1})}, a); }),
              HasSubstr("w2 must be [C, Cr] for w1 [Cr, C]"));
  EXPECT_THAT(test::error_of<ShapeError>([&] { dispatch("squeeze_excite", {x, w1, w2}, Attrs{{1, 1, 0}, {}}); }),
              HasSubstr("expects x, w1, w2, b1 (4 inputs)"));
  EXPECT_THAT(test::error_of<ShapeError>([&] { dispatch("squeeze_excite", {Tensor::zeros({1, 6, 3, 3}), w1, w2}, a); }),
              HasSubstr("x has 6 channels, the layers 8 channels"));
  EXPECT_THAT(test::error_of<ShapeError>([&] { dispatch("squeeze_excite", {x, w1, w2}, Attrs{{1, 0, 4}, {}}); }),
              HasSubstr("x (input 0) must be [N, C/4, H, W, 4]"));
  EXPECT_THAT(test::error_of<ShapeError>([&] { dispatch("squeeze_excite", {x, w1, w2}, Attrs{{99, 0, 0}, {}}); }),
              HasSubstr("bad activation code 99"));
}

}  // namespace
}  // namespace hg
