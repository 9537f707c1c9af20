// Attention in place (graphs/pass_attention_views.cpp, graphs/strided_view.h): the view algebra,
// the pass on the graph PyTorch's MultiheadAttention export makes (a QKV projection sliced into
// q, k, v, heads split and merged by reshapes and permutes around sdpa) with a golden
// before/after dump and optimized == unoptimized at several batch sizes, masks, transposed keys
// and BF16; the sdpa kernel's view mode against its plain form; and the chains left alone.
// HG_UPDATE_GOLDENS=1 rewrites tests/golden/attention/mha_views.txt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/fused_ops.h"
#include "engine/ops.h"
#include "graphs/passes.h"
#include "graphs/strided_view.h"
#include "tests/errors.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

using graphs::Graph;
using graphs::StridedView;
using test::fusion::count_ops;
using test::fusion::run_graph;
using Factor = StridedView::Factor;

TEST(StridedView, SlicesReshapesAndPermutesOfAQkvBuffer) {
  StridedView v = StridedView::contiguous({128, 8, 384});
  ASSERT_TRUE(v.slice(2, 128, 256, 1));
  EXPECT_EQ(v.offset, 128);
  ASSERT_TRUE(v.reshape({128, 32, 32}));
  ASSERT_TRUE(v.permute({1, 0, 2}));
  EXPECT_EQ(v.shape(), (Shape{32, 128, 32}));
  EXPECT_EQ(v.dims[0], (std::vector<Factor>{{8, 384}, {4, 32}}));  // b and h do not merge
  EXPECT_EQ(v.dims[1], (std::vector<Factor>{{128, 3072}}));
  EXPECT_EQ(v.dims[2], (std::vector<Factor>{{32, 1}}));
  // Merging back what was split, and splitting a dimension of two factors at their boundary.
  ASSERT_TRUE(v.reshape({8, 4, 128, 32}));
  EXPECT_EQ(v.dims[0], (std::vector<Factor>{{8, 384}}));
  EXPECT_EQ(v.dims[1], (std::vector<Factor>{{4, 32}}));
  StridedView c = StridedView::contiguous({6, 4});
  ASSERT_TRUE(c.reshape({24}));
  EXPECT_EQ(c.dims[0], (std::vector<Factor>{{24, 1}}));
  ASSERT_TRUE(c.reshape({2, 3, 4}));
  EXPECT_EQ(c.dims[1], (std::vector<Factor>{{3, 4}}));
}

TEST(StridedView, RefusesWhatIsNotAView) {
  StridedView v = StridedView::contiguous({6, 4});
  ASSERT_TRUE(v.permute({1, 0}));
  EXPECT_TRUE(StridedView(v).slice(0, 0, 2, 1)) << "one factor: a slice is fine";
  StridedView r = v;
  EXPECT_TRUE(StridedView(v).reshape({8, 3})) << "4 x 6 transposed: 8 = 4 x 2 (two factors), 3";
  EXPECT_FALSE(r.reshape({3, 8})) << "3 does not divide the outer factor of 4";
  StridedView m = StridedView::contiguous({4, 6});
  ASSERT_TRUE(m.permute({1, 0}));
  ASSERT_TRUE(m.reshape({24}));  // two factors in one dimension: allowed ...
  EXPECT_FALSE(m.slice(0, 0, 12, 1)) << "... but not sliced";
  EXPECT_FALSE(StridedView::contiguous({4}).slice(0, 1, 5, 1));
  EXPECT_FALSE(StridedView::contiguous({4}).permute({1}));
}

struct Mha {
  int64_t s = 16, b = 2, h = 4, d = 8;
  bool k_transposed = true;  // ONNX: k as [BH, D, S] by permute (1, 2, 0)
  bool mask = false;         // an additive [S, S] mask
  DType dtype = DType::F32;
};

// PyTorch's nn.MultiheadAttention as exported (sequence first): the QKV projection's [S*B, 3E]
// reshaped to [S, B, 3E], q/k/v sliced out, heads split to [B*H, S, D], sdpa, heads merged back to
// [S*B, E], then the out projection. The weights are frozen inputs.
Graph mha_graph(const Mha& m) {
  test::fusion::GraphBuilder g;
  const int64_t e = m.h * m.d;
  const int x = g.in({m.s * m.b, e});
  int qkv = g.op("linear", {x, g.weight({3 * e, e}), g.weight({3 * e})}, Attrs{{0}, {}});
  if (m.dtype == DType::BF16) qkv = g.op("cast", {qkv}, Attrs{{static_cast<int64_t>(DType::BF16)}, {}});
  const int r = g.op("reshape", {qkv}, Attrs{{m.s, m.b, 3 * e}, {}});
  auto head = [&](int part, std::vector<int64_t> perm) {
    const int sl = g.op("slice", {r}, Attrs{{2, part * e, (part + 1) * e, 1}, {}});
    return g.op("permute", {g.op("reshape", {sl}, Attrs{{m.s, m.b * m.h, m.d}, {}})}, Attrs{perm, {}});
  };
  const int q = head(0, {1, 0, 2}), k = head(1, m.k_transposed ? std::vector<int64_t>{1, 2, 0} : std::vector<int64_t>{1, 0, 2});
  const int v = head(2, {1, 0, 2});
  std::vector<int> ins{q, k, v};
  if (m.mask) ins.push_back(g.in({m.s, m.s}));
  const int att = g.op("sdpa", ins,
                       Attrs{{m.mask ? sdpa::kAdd : sdpa::kNoMask, sdpa::kNotCausal, m.k_transposed},
                             {1.0 / std::sqrt(static_cast<double>(m.d)), -INFINITY, 0}});
  int merged = g.op("reshape", {g.op("permute", {att}, Attrs{{1, 0, 2}, {}})}, Attrs{{m.s * m.b, e}, {}});
  if (m.dtype == DType::BF16) merged = g.op("cast", {merged}, Attrs{{static_cast<int64_t>(DType::F32)}, {}});
  g.g.outputs = {g.op("linear", {merged, g.weight({e, e}), g.weight({e})}, Attrs{{0}, {}})};
  return g.g;
}

Graph views_only(Graph g) {
  graphs::fuse_attention_views(g);
  return g;
}

TEST(PassesAttentionViews, GoldenMultiheadAttention) {
  const Graph before = mha_graph({});
  Graph after = before;
  EXPECT_EQ(graphs::fuse_attention_views(after), 1);
  EXPECT_EQ(count_ops(after, "permute") + count_ops(after, "slice"), 0) << after.dump();
  EXPECT_EQ(count_ops(after, "reshape"), 0) << after.dump();
  test::fusion::expect_golden("attention", "mha_views", before, after);
  EXPECT_EQ(graphs::fuse_attention_views(after), 0) << "a second run finds nothing";
}

TEST(PassesAttentionViews, OptimizedEqualsUnoptimized) {
  for (Mha m : {Mha{}, Mha{.b = 1}, Mha{.s = 9, .b = 3, .h = 2, .d = 16, .k_transposed = false}, Mha{.mask = true},
                Mha{.s = 33, .b = 5, .h = 3, .d = 4}}) {
    const Graph g = mha_graph(m);
    const auto data = test::fusion::random_inputs(g, 4);
    const Graph f = views_only(g);
    EXPECT_EQ(count_ops(f, "permute"), 0) << f.dump();
    // oneDNN picks other kernels for strided operands: sums in other orders
    test::fusion::expect_near(run_graph(f, data), run_graph(g, data), 1e-4, 1e-5);
    test::fusion::expect_near(run_graph(g, data, true), run_graph(g, data), 1e-4, 1e-5);  // every pass
    if (HasFailure()) FAIL() << "s " << m.s << " b " << m.b << " h " << m.h << " d " << m.d;
  }
}

TEST(PassesAttentionViews, Bf16AttentionInPlace) {
  const Graph g = mha_graph({.dtype = DType::BF16});
  const auto data = test::fusion::random_inputs(g, 5);
  const Graph f = views_only(g);
  EXPECT_EQ(count_ops(f, "permute"), 0) << f.dump();
  test::fusion::expect_near(run_graph(f, data), run_graph(g, data), 2e-2, 2e-2);  // BF16 sums in other orders
}

// A chain read by another op, a mask that varies along the batch: sdpa keeps its inputs there.
TEST(PassesAttentionViews, LeavesWhatItCannotReadInPlace) {
  Graph g = mha_graph({});
  int q = -1;
  for (const auto& n : g.nodes)
    if (n.kind == graphs::Node::Kind::Op && n.op->name == "sdpa") q = n.inputs[0];
  ASSERT_GE(q, 0);
  g.outputs.push_back(q);  // q's permute is also a graph output: it stays, but sdpa reads in place
  const Graph f = views_only(g);
  EXPECT_EQ(count_ops(f, "permute"), 1) << f.dump();
  const auto data = test::fusion::random_inputs(g, 6);
  test::fusion::expect_near(run_graph(f, data), run_graph(g, data), 1e-4, 1e-5);

  test::fusion::GraphBuilder b;
  const int x = b.in({8, 4, 16});
  const int qp = b.op("permute", {x}, Attrs{{1, 0, 2}, {}});
  b.g.outputs = {b.op("sdpa", {qp, qp, qp, b.in({4, 8, 8})}, Attrs{{sdpa::kAdd, 0, 0}, {0.25, -INFINITY, 0}})};
  Graph batched = b.g;
  EXPECT_EQ(graphs::fuse_attention_views(batched), 0) << "a mask with a batch dim of 4";
}

TEST(SdpaViews, ViewModeEqualsThePlainKernel) {
  const int64_t s = 7, bsz = 3, h = 2, d = 4, e = h * d;
  std::vector<float> qkv(static_cast<size_t>(s * bsz * 3 * e));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.37f * static_cast<float>(i));
  const Tensor base = Tensor::from_vector(qkv, {s, bsz, 3 * e});
  auto part = [&](int64_t p) {  // [B*H, S, D] copies, as the unfused graph makes them
    return ops::permute(ops::slice(base, 2, p * e, (p + 1) * e).contiguous().reshape({s, bsz * h, d}), {1, 0, 2}).contiguous();
  };
  const Tensor want = ops::permute(dispatch("sdpa", {part(0), part(1), part(2)}, Attrs{{0, 0, 0}, {0.5, -INFINITY, 0}}),
                                   {1, 0, 2}).contiguous().reshape({s, bsz, e});
  std::vector<int64_t> ints{0, 0, 0, 1, bsz, h, s, s, d, d};
  for (int64_t p = 0; p < 3; ++p) ints.insert(ints.end(), {p * e, 3 * e, d, bsz * 3 * e});
  ints.insert(ints.end(), {0, e, d, bsz * e, 3, s, bsz, e});
  const Tensor got = dispatch("sdpa", {base, base, base}, Attrs{ints, {0.5, -INFINITY, 0}});
  ASSERT_EQ(got.shape(), (Shape{s, bsz, e}));
  test::fusion::expect_near({got.to_vector()}, {want.to_vector()}, 1e-5, 1e-6);
  ints[11] = 3 * e * 100;  // q's batch stride past the buffer
  EXPECT_THAT(test::error_of<Error>([&] { dispatch("sdpa", {base, base, base}, Attrs{ints, {0.5, -INFINITY, 0}}); }),
              testing::HasSubstr("a view reaches past its buffer"));
}

}  // namespace
}  // namespace hg
