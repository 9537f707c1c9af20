// Parallel projections as one GEMM (graphs/pass_merge_projections.cpp): the golden before/after
// dump (q, k, v with narrower k and v, as grouped-query attention has), the Hugging Face style
// attention block (separate q/k/v matmuls, heads split by reshape + permute) optimized into one
// QKV GEMM read in place by sdpa and equal to the unoptimized graph in FP32, BF16 and INT8,
// projections that wait for their post-ops, and those it must leave alone.
// HG_UPDATE_GOLDENS=1 rewrites tests/golden/passes/merge_projections.txt.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/fused_ops.h"
#include "engine/ops.h"
#include "graphs/passes.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

using graphs::Graph;
using graphs::Precision;
using test::fusion::count_ops;
using test::fusion::GraphBuilder;
using test::fusion::run_graph;

const Attrs kLinear{{0}, {}};
const Attrs kAdd{{0}, {}};

TEST(MergeProjections, GoldenQkvWithNarrowerKeysAndValues) {
  GraphBuilder g;
  const int x = g.in({6, 16}), other = g.in({6, 16});
  auto linear = [&](int in, int64_t n, Attrs a = kLinear) { return g.op("linear", {in, g.weight({n, 16}), g.weight({n})}, a); };
  const int q = linear(x, 16), k = linear(x, 8), v = linear(x, 8);
  const int relu = linear(x, 4, Attrs{{1}, {}});  // a fused ReLU: another kind, stays
  g.g.outputs = {q, k, v, relu, linear(other, 16)};
  Graph f = g.g;
  EXPECT_EQ(graphs::merge_projections(f), 1);
  EXPECT_EQ(graphs::merge_projections(f), 0) << "a second run finds nothing";
  EXPECT_EQ(count_ops(f, "linear"), 3) << f.dump();
  EXPECT_EQ(count_ops(f, "slice"), 3);
  test::fusion::expect_golden("passes", "merge_projections", g.g, f);
  const auto data = test::fusion::scaled_inputs(g.g, 2);
  test::fusion::expect_near(run_graph(f, data), run_graph(g.g, data), 1e-6, 1e-6);
}

struct HfCase {
  int64_t b = 2, s = 12, h = 4, d = 8;
  bool mask = true;
};

// BertSelfAttention as exported: separate q, k, v MatMul + Add (after flatten_matmul: 2-D
// matmuls with a bias), heads split by reshape [B, S, H, D] + permute, k permuted to [B, H, D, S],
// sdpa with an additive [S, S] mask, heads merged, the output projection.
Graph hf_attention(const HfCase& c) {
  GraphBuilder g;
  const int64_t e = c.h * c.d;
  const int x = g.in({c.b * c.s, e});
  auto proj = [&](int in) { return g.op("matmul", {in, g.weight({e, e}), g.weight({e})}, Attrs{{0, 0}, {}}); };
  auto heads = [&](int p, std::vector<int64_t> perm) {
    return g.op("permute", {g.op("reshape", {p}, Attrs{{c.b, c.s, c.h, c.d}, {}})}, Attrs{perm, {}});
  };
  const int q = heads(proj(x), {0, 2, 1, 3}), k = heads(proj(x), {0, 2, 3, 1}), v = heads(proj(x), {0, 2, 1, 3});
  std::vector<int> ins{q, k, v};
  if (c.mask) ins.push_back(g.in({c.s, c.s}));  // sdpa's view mode takes a mask without batch dims
  const int att = g.op("sdpa", ins,
                       Attrs{{c.mask ? sdpa::kAdd : sdpa::kNoMask, sdpa::kNotCausal, 1},
                             {1.0 / std::sqrt(static_cast<double>(c.d)), -INFINITY, 0}});
  const int merged = g.op("reshape", {g.op("permute", {att}, Attrs{{0, 2, 1, 3}, {}})}, Attrs{{c.b * c.s, e}, {}});
  g.g.outputs = {proj(merged)};
  return g.g;
}

Graph optimized(Graph g, Precision p) {
  graphs::PassOptions o;
  o.precision = p;
  graphs::run_passes(g, o);
  return g;
}

TEST(MergeProjections, HuggingFaceAttentionRunsOneQkvGemmReadInPlace) {
  for (const HfCase& c : {HfCase{}, HfCase{.b = 1, .s = 7, .h = 2, .d = 16, .mask = false}}) {
    SCOPED_TRACE("s = " + std::to_string(c.s));
    const Graph g = hf_attention(c);
    const Graph opt = optimized(g, Precision::Fp32);
    EXPECT_EQ(count_ops(opt, "matmul"), 2) << "QKV and the output projection\n" << opt.dump();
    EXPECT_EQ(count_ops(opt, "slice") + count_ops(opt, "permute") + count_ops(opt, "contiguous"), 0)
        << "sdpa reads q, k, v in place\n" << opt.dump();
    const auto data = test::fusion::scaled_inputs(g, 4);
    const auto want = run_graph(g, data);
    test::fusion::expect_near(run_graph(opt, data), want, 1e-5, 1e-5);

    const Graph bf16 = optimized(g, Precision::Bf16);
    EXPECT_EQ(count_ops(bf16, "matmul"), 2) << bf16.dump();
    EXPECT_LT(test::fusion::max_rel(run_graph(bf16, data), want), 3e-2);
    const Graph int8 = optimized(g, Precision::Int8);
    EXPECT_EQ(count_ops(int8, "matmul_int8"), 2) << int8.dump();
    EXPECT_LT(test::fusion::max_rel(run_graph(int8, data), want), 5e-2);
  }
}

TEST(MergeProjections, WaitsForPendingBiasAdds) {
  GraphBuilder g;
  const int x = g.in({5, 16});
  auto proj = [&] {
    const int m = g.op("matmul", {x, g.weight({16, 16})}, Attrs{{0, 0}, {}});
    return g.op("binary", {m, g.weight({16})}, kAdd);
  };
  g.g.outputs = {proj(), proj()};
  Graph f = g.g;
  EXPECT_EQ(graphs::merge_projections(f), 0) << "the bias adds are not fused yet";
  EXPECT_EQ(graphs::fuse_post_ops(f), 2);
  EXPECT_EQ(graphs::merge_projections(f), 1);
  EXPECT_EQ(count_ops(f, "binary"), 0) << "the biases went in before the merge\n" << f.dump();
  const auto data = test::fusion::scaled_inputs(g.g, 5);
  test::fusion::expect_near(run_graph(f, data), run_graph(g.g, data), 1e-6, 1e-6);
}

TEST(MergeProjections, LeavesOtherProjectionsAlone) {
  GraphBuilder g;
  const int x = g.in({5, 16}), w = g.in({16, 16});  // w: not a weight
  const int a = g.op("matmul", {x, w}, Attrs{{0, 0}, {}});
  const int b = g.op("matmul", {x, g.weight({16, 16})}, Attrs{{0, 0}, {}});
  const int c = g.op("matmul", {x, g.weight({16, 16})}, Attrs{{0, 1}, {}});  // weight the other way round
  const int d = g.op("linear", {x, g.weight({16, 16}), g.weight({16})}, kLinear);  // another op
  g.g.outputs = {a, b, c, d};
  const std::string before = g.g.dump();
  EXPECT_EQ(graphs::merge_projections(g.g), 0);
  EXPECT_EQ(g.g.dump(), before);
}

}  // namespace
}  // namespace hg
