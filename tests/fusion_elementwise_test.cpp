// fuse_elementwise (graphs/pass_fuse_elementwise.cpp) and the fused_elementwise op
// (engine/fused_elementwise.cpp): golden before/after dumps of the chains our models and ONNX
// imports produce (tests/golden/fusion_eltwise/*.txt), fused == unfused on random programs and
// broadcast shapes, and what must stay unfused.
//
// Regenerate the goldens after a deliberate change:
//   HG_UPDATE_GOLDENS=1 build/tests/hg_tests --gtest_filter='FusionElementwise*'
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/error.h"
#include "engine/fused_ops.h"
#include "engine/ops.h"
#include "graphs/passes.h"
#include "tests/fusion_test_util.h"

using namespace hg;
using namespace hg::graphs;
using namespace hg::test::fusion;

namespace {

const OpSchema& op(const char* name) { return op_schema(name); }
Attrs binary(int64_t k) { return Attrs{{k}, {}}; }  // 0 add, 1 sub, 2 mul, 3 div
Attrs scale_by(double s) { return Attrs{{}, {s}}; }
Attrs math(int64_t fn, double e = 0) { return Attrs{{fn}, {e}}; }  // 0 sqrt, 1 erf, 2 exp, 3 pow

// Applies fuse_elementwise once, expects `groups` rewrites and nothing on a second run, and
// checks the fused graph computes what the original does.
Graph fused(const Graph& g, int groups, uint32_t seed = 1) {
  Graph f = g;
  EXPECT_EQ(fuse_elementwise(f), groups);
  const std::string once = f.dump();
  EXPECT_EQ(fuse_elementwise(f), 0) << "a second application still rewrote";
  EXPECT_EQ(f.dump(), once);
  EXPECT_EQ(count_ops(f, "fused_elementwise"), groups);
  const auto data = random_inputs(g, seed);
  expect_near(run_graph(f, data), run_graph(g, data), 1e-5);
  return f;
}

// x * 0.5 * (1 + erf(x / sqrt 2)): GELU as torch.onnx exports it (opset 13).
TEST(FusionElementwise, OnnxGeluBecomesOneNode) {
  Graph g;
  const int x = g.add_input({{4, 96}, DType::F32});
  const int sqrt2 = g.add_input({{}, DType::F32});
  const int one = g.add_input({{}, DType::F32});
  const int half = g.add_input({{}, DType::F32});
  const int d = g.add_op(op("binary"), {x, sqrt2}, binary(3));
  const int e = g.add_op(op("unary_math"), {d}, math(1));
  const int a = g.add_op(op("binary"), {e, one}, binary(0));
  const int m = g.add_op(op("binary"), {x, a}, binary(2));  // x is read twice: it stays an input
  g.outputs = {g.add_op(op("binary"), {m, half}, binary(2))};
  const Graph f = fused(g, 1);
  EXPECT_EQ(f.nodes[f.outputs[0]].fused, (std::vector<std::string>{"div", "erf", "add", "mul", "mul"}));
  EXPECT_EQ(f.nodes[f.outputs[0]].inputs[0], x) << "input 0 has the output's meta (in place)";
  expect_golden("fusion_eltwise", "onnx_gelu", g, f);
}

// LayerNorm's tail as ONNX decomposes it: (x - mean) / sqrt(var + eps) * w + b, with the
// statistics [N, 1] broadcast along rows and w, b [C] along columns.
TEST(FusionElementwise, OnnxLayerNormTailBecomesOneNode) {
  Graph g;
  const int xc = g.add_input({{6, 40}, DType::F32});  // x - mean (read by Pow too: stays an input)
  const int var = g.add_input({{6, 1}, DType::F32});
  const int eps = g.add_input({{}, DType::F32});
  const int w = g.add_input({{40}, DType::F32});
  const int b = g.add_input({{40}, DType::F32});
  const int v = g.add_op(op("binary"), {var, eps}, binary(0));
  const int va = g.add_op(op("unary_math"), {v}, math(2));  // exp keeps the argument of sqrt positive
  const int s = g.add_op(op("unary_math"), {va}, math(0));
  const int n = g.add_op(op("binary"), {xc, s}, binary(3));
  const int sc = g.add_op(op("binary"), {n, w}, binary(2));
  const int sq = g.add_op(op("unary_math"), {xc}, math(3, 2.0));
  g.outputs = {g.add_op(op("binary"), {sc, b}, binary(0)), sq};
  const Graph f = fused(g, 2);  // sqrt(exp(var + eps)) at [6, 1], then the [6, 40] part
  EXPECT_EQ(count_ops(f, "unary_math"), 1) << "the pow reading xc is a graph output of its own";
  EXPECT_EQ(f.nodes[f.outputs[0]].fused, (std::vector<std::string>{"div", "mul", "add"}));
  expect_golden("fusion_eltwise", "onnx_layernorm_tail", g, f);
}

// The GPT/BERT shapes: bias add, GELU (tanh form), residual add, on [B, S, C] with a [C] bias.
TEST(FusionElementwise, BiasGeluResidualChain) {
  Graph g;
  const int h = g.add_input({{2, 16, 64}, DType::F32});
  const int bias = g.add_input({{64}, DType::F32});
  const int res = g.add_input({{2, 16, 64}, DType::F32});
  const int a = g.add_op(op("binary"), {h, bias}, binary(0));
  const int ge = g.add_op(op("gelu"), {a}, Attrs{{1}, {}});
  const int si = g.add_op(op("silu"), {ge}, {});
  const int sg = g.add_op(op("sigmoid"), {si}, {});
  const int th = g.add_op(op("tanh"), {sg}, {});
  const int re = g.add_op(op("relu"), {th}, {});
  g.outputs = {g.add_op(op("binary"), {res, re}, binary(0))};
  const Graph f = fused(g, 1);
  expect_golden("fusion_eltwise", "bias_gelu_residual", g, f);
}

TEST(FusionElementwise, WhereAndMaskedFillFuseWithBoolConditions) {
  Graph g;
  const int x = g.add_input({{3, 5, 8}, DType::F32});
  const int cond = g.add_input({{5, 1}, DType::BOOL});
  const int mask = g.add_input({{1, 8}, DType::BOOL});
  const int fill = g.add_input({{}, DType::F32});
  const int s = g.add_op(op("scale"), {x}, scale_by(0.125));
  const int w = g.add_op(op("where"), {cond, s, fill}, {});
  const int m = g.add_op(op("masked_fill"), {w, mask}, Attrs{{}, {-1e9}});
  g.outputs = {g.add_op(op("binary"), {m, x}, binary(1))};
  const Graph f = fused(g, 1);
  expect_golden("fusion_eltwise", "where_masked_fill", g, f);
}

// Random programs over random broadcast shapes: fused == unfused within 1e-5 relative.
TEST(FusionElementwise, RandomChainsEqualUnfused) {
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const std::vector<Shape> outs = {{7}, {3, 33}, {2, 5, 17}, {4, 3, 2, 9}, {130, 130}};
  for (int trial = 0; trial < 60; ++trial) {
    const Shape out = outs[pick(static_cast<int>(outs.size()))];
    // A shape that broadcasts to `out`: each dim kept or 1, some leading dims dropped.
    auto operand = [&]() {
      Shape s;
      const size_t drop = pick(static_cast<int>(out.size()) + 1) == 0 ? pick(static_cast<int>(out.size())) : 0;
      for (size_t d = drop; d < out.size(); ++d) s.push_back(pick(3) == 0 ? 1 : out[d]);
      return s;
    };
    Graph g;
    int cur = g.add_input({out, DType::F32});
    for (int k = 0, len = 2 + pick(8); k < len; ++k) {
      switch (pick(9)) {
        case 0: case 1: case 2:
          cur = g.add_op(op("binary"), {cur, g.add_input({operand(), DType::F32})}, binary(pick(3)));
          break;
        case 3: cur = g.add_op(op("scale"), {cur}, scale_by(0.5 + pick(4))); break;
        case 4: cur = g.add_op(op(pick(2) ? "tanh" : "sigmoid"), {cur}, {}); break;
        case 5: cur = g.add_op(op("gelu"), {cur}, Attrs{{pick(2)}, {}}); break;
        case 6: cur = g.add_op(op(pick(2) ? "relu" : "silu"), {cur}, {}); break;
        case 7:
          cur = g.add_op(op("where"), {g.add_input({operand(), DType::BOOL}), cur, g.add_input({operand(), DType::F32})}, {});
          break;
        default: cur = g.add_op(op("unary_math"), {g.add_op(op("tanh"), {cur}, {})}, math(2)); break;
      }
    }
    g.outputs = {cur};
    SCOPED_TRACE("trial " + std::to_string(trial) + ":\n" + g.dump());
    fused(g, 1, static_cast<uint32_t>(trial));
  }
}

TEST(FusionElementwise, IntermediatesReadElsewhereAreNotFused) {
  Graph g;
  const int x = g.add_input({{4, 8}, DType::F32});
  const int y = g.add_input({{4, 8}, DType::F32});
  const int a = g.add_op(op("binary"), {x, y}, binary(0));  // a graph output: stays
  const int r = g.add_op(op("relu"), {a}, {});
  const int m = g.add_op(op("binary"), {r, y}, binary(2));
  const int s = g.add_op(op("scale"), {x}, scale_by(3.0));  // two readers: stays
  const int t = g.add_op(op("tanh"), {s}, {});
  const int u = g.add_op(op("binary"), {t, s}, binary(1));
  g.outputs = {m, a, u};
  const Graph f = fused(g, 2);
  EXPECT_EQ(count_ops(f, "binary"), 1) << "a";
  EXPECT_EQ(count_ops(f, "scale"), 1) << "s";
  EXPECT_EQ(f.nodes[f.outputs[0]].fused, (std::vector<std::string>{"relu", "mul"}));
  EXPECT_EQ(f.nodes[f.outputs[2]].fused, (std::vector<std::string>{"tanh", "sub"}));
  expect_golden("fusion_eltwise", "not_fused", g, f);
}

TEST(FusionElementwise, LeavesActivationsOfLinearToPostOpFusion) {
  Graph g;
  const int x = g.add_input({{4, 8}, DType::F32});
  const int w = g.add_input({{16, 8}, DType::F32});
  const int b = g.add_input({{16}, DType::F32});
  const int lin = g.add_op(op("linear"), {x, w, b}, Attrs{{0}, {}});
  const int rs = g.add_op(op("reshape"), {lin}, Attrs{{2, 2, 16}, {}});
  const int ge = g.add_op(op("gelu"), {rs}, Attrs{{0}, {}});
  const int sc = g.add_op(op("scale"), {ge}, scale_by(2.0));
  g.outputs = {g.add_op(op("binary"), {sc, g.add_input({{16}, DType::F32})}, binary(0))};
  const Graph f = fused(g, 1);
  EXPECT_EQ(count_ops(f, "gelu"), 1);
  EXPECT_EQ(f.nodes[f.outputs[0]].fused, (std::vector<std::string>{"scale", "add"}));
}

TEST(FusionElementwise, TooManyInputsSplitsTheChain) {
  Graph g;
  int cur = g.add_input({{3, 10}, DType::F32});
  for (int k = 0; k < 20; ++k) cur = g.add_op(op("binary"), {cur, g.add_input({{10}, DType::F32})}, binary(k % 3));
  g.outputs = {cur};
  const Graph f = fused(g, 2);
  for (const auto& n : f.nodes) EXPECT_LE(n.inputs.size(), static_cast<size_t>(ew::kMaxInputs));
}

// Big enough for the OpenMP path, with every kind of broadcast source.
TEST(FusionElementwise, LargeOutputsWithEveryBroadcastKind) {
  Graph g;
  const int x = g.add_input({{8, 64, 96}, DType::F32});
  const int row = g.add_input({{96}, DType::F32});          // periodic
  const int col = g.add_input({{8, 64, 1}, DType::F32});    // repeat
  const int mid = g.add_input({{8, 1, 96}, DType::F32});    // strided
  const int one = g.add_input({{1}, DType::F32});           // scalar
  const int a = g.add_op(op("binary"), {x, row}, binary(0));
  const int b = g.add_op(op("binary"), {a, col}, binary(1));
  const int c = g.add_op(op("binary"), {b, mid}, binary(2));
  g.outputs = {g.add_op(op("binary"), {c, one}, binary(3))};
  fused(g, 1);
}

TEST(FusionElementwise, KernelRunsInPlaceAndEagerly) {
  const OpSchema& fe = op("fused_elementwise");
  const Attrs prog{{ew::Scale, 0, 0, 0, ew::Add, 2, 1, 0, ew::Relu, 3, 0, 0}, {0.5, 0, 0}};
  const TensorMeta xm{{3, 1000}, DType::F32}, bm{{1000}, DType::F32};
  const TensorMeta out = fe.infer(fe, {xm, bm}, prog);
  EXPECT_EQ(out, xm);
  std::vector<float> x(3000), bias(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = std::cos(static_cast<float>(i));
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = std::max(x[i] * 0.5f + bias[i % 1000], 0.0f);
  const Kernel k = fe.prepare({xm, bm}, out, prog);
  const void* in[] = {x.data(), bias.data()};
  k(in, x.data());  // out == in[0]
  EXPECT_EQ(x, want);

  const Tensor t = ops::reshape(Tensor::from_vector(std::vector<float>{-2, -1, 0, 1}, {4}), {2, 2});
  const Tensor b = Tensor::from_vector(std::vector<float>{10, -10}, {2});
  EXPECT_EQ(dispatch("fused_elementwise", {t, b}, prog).to_vector(), (std::vector<float>{9, 0, 10, 0}));
}

// The arithmetic opcodes run 16 lanes at a time with a scalar tail: every element equals the
// plain float operation, at lengths on and off the vectors, in place, with NaN through relu.
TEST(FusionElementwise, ArithmeticMatchesFloatOnVectorsAndTails) {
  const OpSchema& fe = op("fused_elementwise");
  for (int64_t n : {1, 15, 16, 17, 512, 515, 1043}) {
    std::vector<float> a(static_cast<size_t>(n)), b(a.size());
    for (int64_t i = 0; i < n; ++i) {
      a[i] = std::sin(static_cast<float>(i) * 0.7f) * 3.0f;
      b[i] = std::cos(static_cast<float>(i) * 0.3f) + 1.5f;
    }
    a[0] = NAN;
    const TensorMeta m{{n}, DType::F32};
    struct Case {
      int64_t op;
      float k;
      float (*f)(float, float, float);
    };
    const Case cases[] = {{ew::Add, 0, [](float u, float v, float) { return u + v; }},
                          {ew::Sub, 0, [](float u, float v, float) { return u - v; }},
                          {ew::Mul, 0, [](float u, float v, float) { return u * v; }},
                          {ew::Div, 0, [](float u, float v, float) { return u / v; }},
                          {ew::Scale, 0.37f, [](float u, float, float k) { return u * k; }},
                          {ew::Relu, 0, [](float u, float, float) { return u < 0.0f ? 0.0f : u; }}};
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(ew::opcode_name(c.op)) + " n = " + std::to_string(n));
      std::vector<float> y = a;  // in place of input 0
      const void* in[] = {y.data(), b.data()};
      fe.prepare({m, m}, m, Attrs{{c.op, 0, 1, 0}, {c.k}})(in, y.data());
      for (int64_t i = 0; i < n; ++i) {
        const float want = c.f(a[i], b[i], c.k);
        if (std::isnan(want)) ASSERT_TRUE(std::isnan(y[i])) << i;
        else ASSERT_EQ(y[i], want) << i;
      }
    }
  }
}

// erf and the SIMD sqrt give libm's values.
TEST(FusionElementwise, ErfAndSqrtMatchLibm) {
  const OpSchema& fe = op("fused_elementwise");
  std::vector<float> x;
  for (float v = -7.0f; v <= 7.0f; v += 0.001953125f) x.push_back(v);
  for (float v : {1e-30f, -1e-30f, 1e-6f, 0.49999f, 0.5f, -0.5f, 40.0f, INFINITY, -INFINITY}) x.push_back(v);
  const TensorMeta m{{static_cast<int64_t>(x.size())}, DType::F32};
  std::vector<float> y(x.size());
  const void* in[] = {x.data()};
  fe.prepare({m}, m, Attrs{{ew::Erf, 0, 0, 0}, {0}})(in, y.data());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], std::erf(x[i])) << "erf(" << x[i] << ")";
  for (float& v : x) v = std::fabs(v);
  fe.prepare({m}, m, Attrs{{ew::Sqrt, 0, 0, 0}, {0}})(in, y.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], std::sqrt(x[i])) << "sqrt(" << x[i] << ")";
  x = {NAN, -1.0f};
  const TensorMeta m2{{2}, DType::F32};
  fe.prepare({m2}, m2, Attrs{{ew::Erf, 0, 0, 0}, {0}})(in, y.data());
  EXPECT_TRUE(std::isnan(y[0]));
  fe.prepare({m2}, m2, Attrs{{ew::Sqrt, 0, 0, 0}, {0}})(in, y.data());
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

TEST(FusionElementwise, BadProgramsAreShapeErrorsNamingTheInstruction) {
  const OpSchema& fe = op("fused_elementwise");
  const TensorMeta x{{4}, DType::F32}, c{{4}, DType::BOOL};
  auto infer = [&](std::vector<TensorMeta> in, Attrs a) { return fe.infer(fe, in, a); };
  EXPECT_THROW(infer({x}, Attrs{{ew::Add, 0, 5, 0}, {0}}), ShapeError);       // register 5 undefined
  EXPECT_THROW(infer({x}, Attrs{{99, 0, 0, 0}, {0}}), ShapeError);            // opcode
  EXPECT_THROW(infer({x}, Attrs{{ew::Relu, 0, 0}, {0}}), ShapeError);         // 3 ints
  EXPECT_THROW(infer({x}, Attrs{{ew::Relu, 0, 0, 0}, {}}), ShapeError);       // no float
  EXPECT_THROW(infer({x, c}, Attrs{{ew::Add, 0, 1, 0}, {0}}), ShapeError);    // BOOL as a value
  EXPECT_THROW(infer({x, x}, Attrs{{ew::Where, 0, 1, 0}, {0}}), ShapeError);  // F32 as a condition
  EXPECT_THROW(infer({{{3}, DType::F32}, x}, Attrs{{ew::Add, 0, 1, 0}, {0}}), ShapeError);
  EXPECT_THROW(infer({{{4}, DType::I64}}, Attrs{{ew::Relu, 0, 0, 0}, {0}}), DTypeError);
  try {
    infer({x}, Attrs{{ew::Relu, 0, 0, 0, ew::Add, 1, 7, 0}, {0, 0}});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("instruction 1 (add)"), std::string::npos) << e.what();
  }
}

}  // namespace
