// Residual + LayerNorm (graphs/pass_residual_norm.cpp): the post-norm block's layer_norm(x + r)
// becomes one layer_norm reading the residual, with a golden before/after dump, optimized ==
// unoptimized at row widths on and off the kernel's 16-lane vectors, the adds it must leave
// alone (pre-norm sums read twice, graph outputs, broadcasts, subtractions), the op's checks,
// and the step profile (graphs/step_profile.h) naming the fused op.
// HG_UPDATE_GOLDENS=1 rewrites tests/golden/passes/residual_norm.txt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/passes.h"
#include "graphs/step_profile.h"
#include "tests/errors.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

using graphs::Graph;
using test::fusion::count_ops;
using test::fusion::GraphBuilder;
using test::fusion::run_graph;
using ::testing::HasSubstr;

const Attrs kAdd{{0}, {}};
const Attrs kSub{{1}, {}};
Attrs ln_attrs(int64_t d) { return Attrs{{d}, {1e-5}}; }

// A post-norm encoder block's two sublayers over [rows, d]: h = LN(x + x W1), y = LN(h + relu(h W2)).
Graph post_norm_block(int64_t rows, int64_t d) {
  GraphBuilder g;
  const int x = g.in({rows, d});
  auto ln = [&](int in) { return g.op("layer_norm", {in, g.weight({d}), g.weight({d})}, ln_attrs(d)); };
  const int a = g.op("linear", {x, g.weight({d, d}), g.weight({d})}, Attrs{{0}, {}});
  const int h = ln(g.op("binary", {x, a}, kAdd));
  const int f = g.op("relu", {g.op("linear", {h, g.weight({d, d}), g.weight({d})}, Attrs{{0}, {}})});
  g.g.outputs = {ln(g.op("binary", {f, h}, kAdd))};
  return g.g;
}

TEST(ResidualNorm, PostNormBlockGoldenAndOptimizedEqualsUnoptimized) {
  const Graph g = post_norm_block(10, 48);
  Graph f = g;
  EXPECT_EQ(graphs::fuse_residual_norm(f), 2);
  EXPECT_EQ(graphs::fuse_residual_norm(f), 0) << "a second run finds nothing";
  graphs::eliminate_dead_code(f);
  EXPECT_EQ(count_ops(f, "binary"), 0);
  for (const auto& n : f.nodes)
    if (n.kind == graphs::Node::Kind::Op && n.op->name == "layer_norm") {
      EXPECT_EQ(n.inputs.size(), 4u);
      EXPECT_EQ(n.fused, std::vector<std::string>{"add"});
    }
  test::fusion::expect_golden("passes", "residual_norm", g, f);
  for (int64_t d : {16, 48, 100, 768}) {  // vectors only, vectors + tail, wide rows
    SCOPED_TRACE("d = " + std::to_string(d));
    const Graph gd = post_norm_block(21, d);
    const auto data = test::fusion::random_inputs(gd, 11);
    test::fusion::expect_near(run_graph(gd, data, /*optimize=*/true), run_graph(gd, data), 1e-5, 1e-5);
  }
}

TEST(ResidualNorm, LeavesPreNormSumsOutputsBroadcastsAndOtherOpsAlone) {
  const int64_t d = 32;
  GraphBuilder g;
  const int x = g.in({4, d}), r = g.in({4, d}), row = g.in({d});
  auto ln = [&](int in) { return g.op("layer_norm", {in, g.weight({d}), g.weight({d})}, ln_attrs(d)); };
  const int pre = g.op("binary", {x, r}, kAdd);  // pre-norm: the sum is also the next residual
  const int out = g.op("binary", {r, r}, kAdd);  // a graph output
  g.g.outputs = {ln(pre), pre,
                 ln(out), out,
                 ln(g.op("binary", {x, row}, kAdd)),  // broadcast
                 ln(g.op("binary", {x, r}, kSub))};
  const std::string before = g.g.dump();
  EXPECT_EQ(graphs::fuse_residual_norm(g.g), 0);
  EXPECT_EQ(g.g.dump(), before);
}

TEST(ResidualNorm, LayerNormChecksItsResidualAndHasNoBackward) {
  const Tensor x = Tensor::zeros({2, 8}), w = Tensor::full({8}, 1.0f), b = Tensor::zeros({8});
  const std::string e = test::error_of<ShapeError>(
      [&] { dispatch("layer_norm", {x, w, b, Tensor::zeros({2, 4})}, Attrs{{8}, {1e-5}}); });
  EXPECT_THAT(e, HasSubstr("the residual (input 3) differs in shape from x"));
  const std::string n = test::error_of<ShapeError>([&] { dispatch("layer_norm", {x, w}, Attrs{{8}, {1e-5}}); });
  EXPECT_THAT(n, HasSubstr("expects x, weight, bias and optionally a residual"));
  Tensor xg = Tensor::full({2, 8}, 1.0f);
  xg.set_requires_grad(true);
  const std::string bw = test::error_of<InvalidArgument>([&] {
    const Tensor y = dispatch("layer_norm", {xg, w, b, Tensor::full({2, 8}, 2.0f)}, Attrs{{8}, {1e-5}});
    ops::sum(y).backward();
  });
  EXPECT_THAT(bw, HasSubstr("has no backward"));
}

// The profile's rows name each step's op with what was fused into it; calls count runs x steps.
TEST(StepProfile, NamesFusedStepsAndCountsCalls) {
  const Graph g = post_norm_block(10, 48);
  const auto data = test::fusion::random_inputs(g, 3);
  graphs::StepProfile::start();
  for (int k = 0; k < 3; ++k) run_graph(g, data, /*optimize=*/true);
  const auto rows = graphs::StepProfile::stop();
  ASSERT_FALSE(rows.empty());
  uint64_t norm_calls = 0;
  for (const auto& r : rows) {
    EXPECT_GE(r.seconds, 0.0) << r.op;
    EXPECT_GT(r.calls, 0u) << r.op;
    if (r.op == "layer_norm[add]") {
      EXPECT_EQ(r.dtype, "F32");
      EXPECT_EQ(r.shape, "[10, 48]");
      norm_calls += r.calls;
    }
  }
  EXPECT_EQ(norm_calls, 6u) << "two fused norms per run, three runs";
  EXPECT_THAT(graphs::StepProfile::table(rows, 3), HasSubstr("layer_norm[add] F32"));
  run_graph(g, data, true);
  EXPECT_TRUE(graphs::StepProfile::stop().empty()) << "off after stop: nothing recorded";
}

}  // namespace
}  // namespace hg
