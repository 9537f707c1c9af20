// Graph passes: the rewrite utilities, then each simplifying pass with a golden before/after
// dump (tests/golden/passes/*.txt), the optimized graph run against the unoptimized one, the
// fixed point, and the cases a pass must leave alone.
//
// Regenerate the goldens after a deliberate change to a pass or to Graph::dump():
//   HG_UPDATE_GOLDENS=1 build/tests/hg_tests --gtest_filter='Passes*'   # then review `git diff tests/golden`
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "engine/atomic_file.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "graphs/executable.h"
#include "graphs/passes.h"
#include "graphs/lazy.h"
#include "graphs/rewrite.h"
#include "graphs/trace.h"
#include "models/zoo.h"
#include "fusion_test_util.h"

using namespace hg;
using namespace hg::graphs;

namespace {

const OpSchema& op(const char* name) { return op_schema(name); }

bool ops_in_order(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in >= static_cast<int>(i)) return false;
  return true;
}

TEST(PassesRewrite, ReplaceUsesRewiresConsumersAndOutputs) {
  Graph g;
  const int x = g.add_input({{4}, DType::F32});
  const int y = g.add_op(op("scale"), {x}, Attrs{{}, {1.0}});
  const int r = g.add_op(op("relu"), {y}, {});
  const int s = g.add_op(op("binary"), {y, y}, Attrs{{0}, {}});
  g.outputs = {y, s, r};
  EXPECT_EQ(replace_uses(g, y, x), 4);  // relu, both binary inputs, one output slot
  EXPECT_EQ(g.nodes[r].inputs, std::vector<int>{x});
  EXPECT_EQ(g.nodes[s].inputs, (std::vector<int>{x, x}));
  EXPECT_EQ(g.outputs, (std::vector<int>{x, s, r}));
  EXPECT_EQ(replace_uses(g, y, x), 0);
  EXPECT_THROW(replace_uses(g, y, 99), InternalError);
}

TEST(PassesRewrite, InsertOpBeforeRenumbersLaterNodes) {
  Graph g;
  const int x = g.add_input({{4}, DType::F32});
  const int w = g.add_input({{4}, DType::F32});
  const int m = g.add_op(op("binary"), {x, w}, Attrs{{2}, {}});
  g.outputs = {g.add_op(op("relu"), {m}, {}), m};
  const int s = insert_op_before(g, m, op("scale"), {w}, Attrs{{}, {2.0}});
  EXPECT_EQ(s, 2);
  EXPECT_EQ(g.nodes[s].op->name, "scale");
  EXPECT_EQ(g.nodes[s].meta.shape, (Shape{4}));
  EXPECT_EQ(g.nodes[3].op->name, "binary");
  EXPECT_EQ(g.nodes[4].inputs, std::vector<int>{3});
  EXPECT_EQ(g.outputs, (std::vector<int>{4, 3}));
  EXPECT_TRUE(ops_in_order(g));
  EXPECT_THROW(insert_op_before(g, 1, op("relu"), {3}, {}), InternalError);  // reads a later node
  EXPECT_THROW(insert_op_before(g, 9, op("relu"), {0}, {}), InternalError);
}

TEST(PassesRewrite, TopoSortRestoresOrderAndKeepsAnOrderedGraph) {
  Graph g;
  const int x = g.add_input({{4}, DType::F32});
  const int a = g.add_op(op("relu"), {x}, {});
  const int b = g.add_op(op("scale"), {a}, Attrs{{}, {3.0}});
  g.outputs = {b};
  const std::string before = g.dump();
  topo_sort(g);
  EXPECT_EQ(g.dump(), before);

  const int late = g.add_op(op("scale"), {x}, Attrs{{}, {2.0}});  // appended after its new reader
  g.nodes[a].inputs = {late};
  topo_sort(g);
  EXPECT_TRUE(ops_in_order(g));
  EXPECT_EQ(g.nodes[1].op->name, "scale");
  EXPECT_EQ(g.nodes[2].op->name, "relu");
  EXPECT_EQ(g.nodes[g.outputs[0]].attrs.f(0), 3.0);
  EXPECT_EQ(g.nodes[0].input_index, 0);

  g.nodes[1].inputs = {g.outputs[0]};  // a cycle
  EXPECT_THROW(topo_sort(g), InternalError);
}

TEST(PassesRewrite, ConsumersConstantsAndRandomOps) {
  Graph g;
  const int x = g.add_input({{4}, DType::F32});
  const int w = g.add_input({{4}, DType::F32});
  const int seed = g.add_input({{}, DType::I64});
  g.nodes[w].frozen = true;
  const int m = g.add_op(op("binary"), {x, x}, Attrs{{2}, {}});
  const int d = g.add_op(op("dropout"), {m, seed}, Attrs{{}, {0.5}});
  const int c = g.add_op(op("cast"), {seed}, Attrs{{static_cast<int64_t>(DType::F32)}, {}});
  g.outputs = {d, c};
  const auto users = consumers(g);
  EXPECT_EQ(users[x], std::vector<int>{m});  // read twice, listed once
  EXPECT_EQ(users[seed], (std::vector<int>{d, c}));
  EXPECT_TRUE(is_graph_output(g, d));
  EXPECT_FALSE(is_graph_output(g, m));
  EXPECT_TRUE(is_constant_value(g, w));
  EXPECT_FALSE(is_constant_value(g, x));
  const auto rnd = random_ops(g);
  EXPECT_FALSE(rnd[m]);
  EXPECT_TRUE(rnd[d]);
  EXPECT_TRUE(rnd[c]);  // reads a seed
}


// ---- harness ----

using Buffer = std::vector<std::byte>;

// A value per input: normal F32 data (positive where `positive` lists the input, e.g. variances),
// an I64 seed for I64 inputs.
std::vector<Buffer> random_inputs(const Graph& g, uint32_t seed, const std::vector<int>& positive = {}) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<Buffer> data(g.num_inputs);
  for (const auto& n : g.nodes) {
    if (n.kind != Node::Kind::Input) continue;
    Buffer& b = data[n.input_index];
    b.resize(n.meta.bytes());
    if (n.meta.dtype == DType::I64) {
      for (size_t k = 0; k < b.size() / 8; ++k) {
        const int64_t v = 1234 + static_cast<int64_t>(k);
        std::memcpy(b.data() + 8 * k, &v, 8);
      }
      continue;
    }
    const bool pos = std::find(positive.begin(), positive.end(), n.input_index) != positive.end();
    for (size_t k = 0; k < b.size() / 4; ++k) {
      const float v = pos ? 0.5f + std::fabs(nd(rng)) : nd(rng);
      std::memcpy(b.data() + 4 * k, &v, 4);
    }
  }
  return data;
}

// Runs `g` through Executable (passes only when `optimize`) and returns each output as floats.
std::vector<std::vector<float>> run(const Graph& g, const std::vector<Buffer>& data, bool optimize,
                                    PassOptions passes = {.fusion = true}) {
  std::vector<const void*> frozen(g.num_inputs, nullptr), in(g.num_inputs);
  for (const auto& n : g.nodes)
    if (n.kind == Node::Kind::Input) {
      in[n.input_index] = data[n.input_index].data();
      if (n.frozen) frozen[n.input_index] = data[n.input_index].data();
    }
  auto exe = Executable::compile(g, CompileOptions{.passes = passes, .optimize = optimize}, frozen);
  std::vector<std::byte> arena(exe->arena_bytes() + kArenaAlignment);
  void* base = arena.data();
  size_t space = arena.size();
  std::align(kArenaAlignment, std::max<size_t>(exe->arena_bytes(), 1), base, space);
  std::vector<std::vector<float>> out;
  std::vector<void*> out_ptrs;
  for (const auto& m : exe->output_metas()) {
    EXPECT_EQ(m.dtype, DType::F32) << "the harness reads F32 outputs";
    out.emplace_back(m.numel());
  }
  for (auto& o : out) out_ptrs.push_back(o.data());
  exe->run(base, in.data(), out_ptrs.data());
  return out;
}

// `g` after one application of `pass`; expects `rewrites` and that a second application does nothing.
Graph applied(Graph g, int (*pass)(Graph&), int rewrites) {
  EXPECT_EQ(pass(g), rewrites);
  const std::string once = g.dump();
  EXPECT_EQ(pass(g), 0) << "a second application still rewrote";
  EXPECT_EQ(g.dump(), once);
  EXPECT_TRUE(ops_in_order(g));
  return g;
}

// Compares "before" and "after" dumps to tests/golden/passes/<name>.txt; HG_UPDATE_GOLDENS=1 writes it.
void expect_golden(const std::string& name, const Graph& before, const Graph& after) {
  hg::test::fusion::expect_golden("passes", name, before, after);
}

void expect_equal(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "output " << k;
    EXPECT_EQ(std::memcmp(got[k].data(), want[k].data(), got[k].size() * sizeof(float)), 0)
        << "output " << k << " differs";
  }
}

// The whole pipeline includes the fusion passes (oneDNN post-ops change the summation order
// with the CPU's ISA: AVX2 and AVX-512 kernels differ at about 3e-5), hence a looser bound than
// the 1e-5 that batch-norm folding alone keeps.
constexpr double kPipelineTol = 1e-4, kBnFoldTol = 1e-5;

// |got - want| <= atol + rtol * |want| element-wise, all finite.
void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                  double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "output " << k;
    for (size_t i = 0; i < got[k].size(); ++i)
      ASSERT_TRUE(hg::test::within_tolerance(got[k][i], want[k][i], rtol, atol))
          << "output " << k << " element " << i << ": got " << got[k][i] << " want " << want[k][i];
  }
}

TEST(PassesHelpers, ExpectCloseFailsOnNaNAndInfinity) {
  static const std::vector<std::vector<float>> want = {{1.f, 2.f}}, nan_got = {{1.f, NAN}}, inf_got = {{1.f, INFINITY}},
                                               inf_want = {{1.f, INFINITY}};
  expect_close(want, want, 1e-6, 1e-6);
  EXPECT_FATAL_FAILURE(expect_close(nan_got, want, 1e-6, 1e-6), "output 0 element 1");
  EXPECT_FATAL_FAILURE(expect_close(inf_got, want, 1e-6, 1e-6), "output 0 element 1");
  EXPECT_FATAL_FAILURE(expect_close(want, inf_want, 1e-6, 1e-6), "output 0 element 1");
}

int count_ops(const Graph& g, const char* name) {
  int c = 0;
  for (const auto& n : g.nodes) c += is_op(n, &op_schema(name));
  return c;
}
int count_run_time_ops(const Graph& g, const char* name) {  // not constant: run on every run
  int c = 0;
  for (const auto& n : g.nodes) c += is_op(n, &op_schema(name)) && !n.constant;
  return c;
}

int frozen_input(Graph& g, const TensorMeta& m) {
  const int id = g.add_input(m);
  g.nodes[id].frozen = true;
  return id;
}

Attrs f32_cast() { return Attrs{{static_cast<int64_t>(DType::F32)}, {}}; }
Attrs binary(int64_t k) { return Attrs{{k}, {}}; }  // 0 add, 1 sub, 2 mul, 3 div
Attrs scale_by(double s) { return Attrs{{}, {s}}; }

// ---- CSE ----

Graph cse_graph() {
  Graph g;
  const int x = g.add_input({{2, 5}, DType::F32});
  const int w = g.add_input({{2, 5}, DType::F32});
  const int a = g.add_op(op("binary"), {x, w}, binary(0));
  const int b = g.add_op(op("binary"), {w, x}, binary(0));  // same as a: add commutes
  const int sub = g.add_op(op("binary"), {x, w}, binary(1));  // other attrs: kept
  const int bus = g.add_op(op("binary"), {w, x}, binary(1));  // sub does not commute: kept
  const int ra = g.add_op(op("relu"), {a}, {});
  const int rb = g.add_op(op("relu"), {b}, {});  // same as ra once b is a
  const int s1 = g.add_op(op("scale"), {x}, scale_by(0.0));
  const int s2 = g.add_op(op("scale"), {x}, scale_by(-0.0));  // other float bits: kept
  const int s3 = g.add_op(op("scale"), {x}, scale_by(0.0));   // same as s1
  g.outputs = {g.add_op(op("binary"), {ra, rb}, binary(2)), sub, s1, s2, s3, bus};
  return g;
}

TEST(PassesDce, RemovesOpsNoOutputNeedsAndKeepsEveryInput) {
  Graph g;
  const int x = g.add_input({{2, 3}, DType::F32});
  const int unused = g.add_input({{3}, DType::F32});  // inputs stay: their numbering is the interface
  const int kept = g.add_op(op("relu"), {x}, {});
  const int dead = g.add_op(op("tanh"), {kept}, {});
  g.add_op(op("scale"), {dead}, Attrs{{}, {2.0}});  // reads a dead node: dead too
  g.outputs = {g.add_op(op("sigmoid"), {kept}, {})};
  (void)unused;
  const Graph opt = applied(g, eliminate_dead_code, 2);
  EXPECT_EQ(opt.num_inputs, 2);
  EXPECT_EQ(count_ops(opt, "tanh") + count_ops(opt, "scale"), 0);
  expect_golden("dce", g, opt);
  const auto data = random_inputs(g, 7);
  expect_equal(run(opt, data, false), run(g, data, false));
}

TEST(PassesCse, MergesEqualNodesKeepsDifferentAttrs) {
  const Graph g = cse_graph();
  const Graph opt = applied(g, eliminate_common_subexpressions, 3);
  EXPECT_EQ(count_ops(opt, "binary"), 4);  // add, both subs, mul
  EXPECT_EQ(count_ops(opt, "relu"), 1);
  EXPECT_EQ(count_ops(opt, "scale"), 2);   // 0.0 and -0.0
  EXPECT_EQ(opt.outputs[2], opt.outputs[4]);
  expect_golden("cse", g, opt);
  const auto data = random_inputs(g, 1);
  expect_equal(run(opt, data, false), run(g, data, false));
}

TEST(PassesCse, NeverMergesRandomOps) {
  Graph g;
  const int x = g.add_input({{64}, DType::F32});
  const int seed = g.add_input({{}, DType::I64});
  const int d1 = g.add_op(op("dropout"), {x, seed}, Attrs{{}, {0.5}});
  const int d2 = g.add_op(op("dropout"), {x, seed}, Attrs{{}, {0.5}});
  const int c1 = g.add_op(op("cast"), {seed}, f32_cast());  // reads the seed: random too
  const int c2 = g.add_op(op("cast"), {seed}, f32_cast());
  g.outputs = {d1, d2, c1, c2};
  Graph opt = g;
  EXPECT_EQ(eliminate_common_subexpressions(opt), 0);
  EXPECT_EQ(opt.dump(), g.dump());
}

// ---- constant folding ----

Graph fold_graph() {
  Graph g;
  const int x = g.add_input({{3, 4}, DType::F32});
  const int w = frozen_input(g, {{4, 3}, DType::F32});
  const int seed = frozen_input(g, {{}, DType::I64});
  const int wt = g.add_op(op("permute"), {w}, Attrs{{1, 0}, {}});       // constant
  const int w2 = g.add_op(op("scale"), {wt}, scale_by(0.5));            // constant
  const int wr = g.add_op(op("reshape"), {w2}, Attrs{{3, 4}, {}});       // constant
  const int y = g.add_op(op("binary"), {x, wr}, binary(0));              // reads x: not constant
  const int dw = g.add_op(op("dropout"), {w2, seed}, Attrs{{}, {0.25}});  // random: never constant
  const int dws = g.add_op(op("scale"), {dw}, scale_by(2.0));           // reads a random value
  g.outputs = {y, dws};
  return g;
}

TEST(PassesFold, MarksNodesOfFrozenInputsConstantButNotRandomOnes) {
  const Graph g = fold_graph();
  const Graph opt = applied(g, fold_constants, 3);
  for (const auto& n : opt.nodes) {
    if (n.kind != Node::Kind::Op) continue;
    const bool want = n.op->name == "permute" || n.op->name == "reshape" || (is_op(n, &op_schema("scale")) && n.attrs.f(0) == 0.5);
    EXPECT_EQ(n.constant, want) << n.op->name;
  }
  expect_golden("constant_fold", g, opt);
  const auto data = random_inputs(g, 2);
  expect_equal(run(opt, data, false), run(g, data, false));
}

// ---- algebraic simplification ----

Graph algebra_graph() {
  Graph g;
  const int x = g.add_input({{2, 3, 4}, DType::F32});
  const int one = g.add_op(op("scale"), {x}, scale_by(1.0));                        // x
  const int r1 = g.add_op(op("reshape"), {one}, Attrs{{6, 4}, {}});
  const int r2 = g.add_op(op("reshape"), {r1}, Attrs{{4, 6}, {}});                   // reshape(x, [4, 6])
  const int back = g.add_op(op("reshape"), {r2}, Attrs{{2, 3, 4}, {}});              // x
  const int p1 = g.add_op(op("permute"), {back}, Attrs{{0, 2, 1}, {}});
  const int p2 = g.add_op(op("permute"), {p1}, Attrs{{0, -1, 1}, {}});               // x
  const int q1 = g.add_op(op("permute"), {x}, Attrs{{1, 0, 2}, {}});
  const int q2 = g.add_op(op("permute"), {q1}, Attrs{{0, 2, 1}, {}});                // permute(x, [1, 2, 0])
  const int c1 = g.add_op(op("contiguous"), {q2}, {});
  const int c2 = g.add_op(op("contiguous"), {c1}, {});                              // q2
  const int f64 = g.add_op(op("cast"), {p2}, Attrs{{static_cast<int64_t>(DType::F64)}, {}});
  const int cast = g.add_op(op("cast"), {f64}, f32_cast());                         // x: F64 holds every F32
  const int pw = g.add_op(op("unary_math"), {cast}, Attrs{{3}, {1.0}});             // x
  const int kept = g.add_op(op("scale"), {pw}, scale_by(2.0));
  const int flat = g.add_op(op("reshape"), {kept}, Attrs{{24}, {}});
  g.outputs = {flat, c2, pw};  // the last output becomes the input itself
  return g;
}

TEST(PassesAlgebra, RemovesIdentitiesAndMergesChains) {
  const Graph g = algebra_graph();
  const Graph opt = applied(g, simplify_algebra, 11);
  EXPECT_EQ(count_ops(opt, "contiguous"), 0);
  EXPECT_EQ(count_ops(opt, "cast"), 0);
  EXPECT_EQ(count_ops(opt, "unary_math"), 0);
  ASSERT_EQ(count_ops(opt, "permute"), 1);
  EXPECT_EQ(opt.nodes[opt.outputs[1]].attrs.ints, (Shape{1, 2, 0}));
  EXPECT_EQ(opt.nodes[opt.outputs[2]].kind, Node::Kind::Input);  // filled by a copy
  EXPECT_EQ(count_ops(opt, "scale"), 1);
  EXPECT_EQ(count_ops(opt, "reshape"), 1);
  expect_golden("algebra", g, opt);
  const auto data = random_inputs(g, 3);
  expect_equal(run(opt, data, false), run(g, data, false));
}

TEST(PassesAlgebra, LeavesRealWorkAlone) {
  Graph g;
  const int x = g.add_input({{3, 3}, DType::F32});
  const int t = g.add_op(op("permute"), {x}, Attrs{{1, 0}, {}});  // same meta, not an identity
  const int s = g.add_op(op("scale"), {t}, scale_by(-1.0));
  const int p = g.add_op(op("unary_math"), {s}, Attrs{{3}, {2.0}});
  const int m = g.add_op(op("binary"), {p, x}, binary(2));        // x * tensor: data unknown
  const int d = g.add_op(op("cast"), {m}, Attrs{{static_cast<int64_t>(DType::BF16)}, {}});
  g.outputs = {g.add_op(op("cast"), {d}, f32_cast())};  // BF16 rounds: not an identity
  Graph opt = g;
  EXPECT_EQ(simplify_algebra(opt), 0);
  EXPECT_EQ(opt.dump(), g.dump());
}

// ---- batch-norm folding ----

Attrs conv_attrs(int64_t stride, int64_t pad, int64_t groups) { return Attrs{{stride, stride, pad, pad, 1, 1, groups}, {}}; }

struct BnParams {
  int gamma, beta, mean, var;
};

BnParams bn_params(Graph& g, int64_t c, bool frozen) {
  auto param = [&] { return frozen ? frozen_input(g, {{c}, DType::F32}) : g.add_input({{c}, DType::F32}); };
  return {param(), param(), param(), param()};
}

int batch_norm(Graph& g, int x, const BnParams& p, double eps = 1e-5) {
  return g.add_op(op("batch_norm_eval"), {x, p.gamma, p.beta, p.mean, p.var}, Attrs{{}, {eps}});
}

// Input numbers of every batch norm's running variance (their data must be positive).
std::vector<int> var_inputs(const Graph& g) {
  std::vector<int> v;
  for (const auto& n : g.nodes)
    if (is_op(n, &op_schema("batch_norm_eval")) && g.nodes[n.inputs[4]].kind == Node::Kind::Input)
      v.push_back(g.nodes[n.inputs[4]].input_index);
  return v;
}

TEST(PassesBnFold, FoldsConvAndConvNobiasIntoOneConv) {
  Graph g;
  const int x = g.add_input({{2, 4, 9, 9}, DType::F32});
  const int w1 = frozen_input(g, {{8, 4, 3, 3}, DType::F32}), b1 = frozen_input(g, {{8}, DType::F32});
  const BnParams bn1 = bn_params(g, 8, true);
  const int c1 = g.add_op(op("conv2d"), {x, w1, b1}, conv_attrs(1, 1, 1));
  const int y1 = g.add_op(op("relu"), {batch_norm(g, c1, bn1)}, {});
  const int w2 = frozen_input(g, {{8, 4, 3, 3}, DType::F32});  // grouped, no bias
  const BnParams bn2 = bn_params(g, 8, true);
  const int c2 = g.add_op(op("conv2d_nobias"), {y1, w2}, conv_attrs(2, 1, 2));
  g.outputs = {batch_norm(g, c2, bn2, 1e-3)};

  Graph opt = g;
  fold_constants(opt);  // nothing to mark yet: every BN parameter is a frozen input
  opt = applied(opt, fold_batch_norm, 2);
  EXPECT_EQ(count_ops(opt, "conv2d_nobias"), 0);
  EXPECT_EQ(count_ops(opt, "conv2d"), 2);
  for (const auto& n : opt.nodes) {
    if (!is_op(n, &op_schema("conv2d"))) continue;
    EXPECT_FALSE(n.constant);
    EXPECT_TRUE(is_constant_value(opt, n.inputs[1]));
    EXPECT_TRUE(is_constant_value(opt, n.inputs[2]));
    EXPECT_EQ(n.fused.back(), "batch_norm_eval");
  }
  expect_golden("bn_fold", g, opt);
  const auto data = random_inputs(g, 4, var_inputs(g));
  const auto want = run(g, data, false);
  expect_close(run(opt, data, false), want, kBnFoldTol, kBnFoldTol);
  expect_close(run(g, data, true), want, kPipelineTol, kPipelineTol);  // the whole pipeline
}

TEST(PassesBnFold, FoldsLinearIntoOneLinear) {
  Graph g;
  const int x = g.add_input({{5, 12}, DType::F32});
  const int w = frozen_input(g, {{6, 12}, DType::F32}), b = frozen_input(g, {{6}, DType::F32});
  const BnParams p = bn_params(g, 6, true);
  const int lin = g.add_op(op("linear"), {x, w, b}, Attrs{{0}, {}});
  g.outputs = {batch_norm(g, lin, p, 1e-3)};
  const Graph opt = applied(g, fold_batch_norm, 1);
  EXPECT_EQ(count_run_time_ops(opt, "batch_norm_eval"), 0);
  ASSERT_EQ(count_ops(opt, "linear"), 1);
  EXPECT_EQ(opt.nodes[opt.outputs[0]].fused, (std::vector<std::string>{"linear", "batch_norm_eval"}));
  const auto data = random_inputs(g, 8, var_inputs(g));
  expect_close(run(opt, data, false), run(g, data, false), kBnFoldTol, kBnFoldTol);

  Graph fused_act = g;  // a linear with a fused ReLU is not a plain linear any more
  fused_act.nodes[lin].attrs = Attrs{{1}, {}};
  EXPECT_EQ(fold_batch_norm(fused_act), 0);
}

TEST(PassesBnFold, LeavesSharedConvsAndNonConstantParametersAlone) {
  Graph g;
  const int x = g.add_input({{1, 3, 6, 6}, DType::F32});
  const int w = frozen_input(g, {{3, 3, 1, 1}, DType::F32}), b = frozen_input(g, {{3}, DType::F32});
  const int live_w = g.add_input({{3, 3, 1, 1}, DType::F32});  // weight not frozen
  const BnParams frozen_bn = bn_params(g, 3, true), live_bn = bn_params(g, 3, false);
  // A conv read by its BN and by a relu: folding would change what the relu sees.
  const int shared = g.add_op(op("conv2d"), {x, w, b}, conv_attrs(1, 0, 1));
  const int y1 = batch_norm(g, shared, frozen_bn);
  const int y2 = g.add_op(op("relu"), {shared}, {});
  // A conv whose BN statistics are graph inputs (training-style running stats).
  const int y3 = batch_norm(g, g.add_op(op("conv2d"), {x, w, b}, conv_attrs(1, 0, 1)), live_bn);
  // A conv whose weight is not frozen.
  const int y4 = batch_norm(g, g.add_op(op("conv2d_nobias"), {x, live_w}, conv_attrs(1, 0, 1)), frozen_bn);
  // A conv that is itself a graph output.
  const int c5 = g.add_op(op("conv2d_nobias"), {x, w}, conv_attrs(1, 0, 1));
  g.outputs = {y1, y2, y3, y4, batch_norm(g, c5, frozen_bn), c5};
  Graph opt = g;
  EXPECT_EQ(fold_batch_norm(opt), 0);
  EXPECT_EQ(opt.dump(), g.dump());
  const auto data = random_inputs(g, 5, var_inputs(g));
  expect_close(run(g, data, true), run(g, data, false), kPipelineTol, kPipelineTol);
}

TEST(PassesBnFold, CompiledConvBnReluRunsAsOneStep) {
  Graph g;
  const int x = g.add_input({{1, 3, 16, 16}, DType::F32});
  const int w = frozen_input(g, {{16, 3, 3, 3}, DType::F32});
  const BnParams p = bn_params(g, 16, true);
  const int conv = g.add_op(op("conv2d_nobias"), {x, w}, conv_attrs(1, 1, 1));
  g.outputs = {g.add_op(op("relu"), {batch_norm(g, conv, p)}, {})};
  const auto data = random_inputs(g, 7, var_inputs(g));
  std::vector<const void*> frozen(g.num_inputs, nullptr);
  for (int k = 1; k < g.num_inputs; ++k) frozen[k] = data[k].data();
  const auto exe = Executable::compile(g, {.passes = {.fusion = true}}, frozen);
  EXPECT_EQ(exe->num_steps(), 1u) << exe->dump();  // the weight and bias are computed at compile
  EXPECT_GT(exe->constant_bytes(), 0u);
  expect_close(run(g, data, true), run(g, data, false), kPipelineTol, kPipelineTol);
}

TEST(PassesBnFold, IsAFusionPass) {
  Graph g;
  const int x = g.add_input({{1, 2, 4, 4}, DType::F32});
  const int w = frozen_input(g, {{2, 2, 1, 1}, DType::F32});
  const BnParams p = bn_params(g, 2, true);
  g.outputs = {batch_norm(g, g.add_op(op("conv2d_nobias"), {x, w}, conv_attrs(1, 0, 1)), p)};
  Graph off = g;
  run_passes(off, {.fusion = false});
  EXPECT_EQ(count_ops(off, "batch_norm_eval"), 1);
  Graph on = g;
  run_passes(on, {.fusion = true});
  EXPECT_EQ(count_ops(on, "conv2d_nobias") + count_run_time_ops(on, "batch_norm_eval"), 0);

  const char* prev = std::getenv("HG_DISABLE_FUSION");
  const std::string saved = prev ? prev : "";
  ::setenv("HG_DISABLE_FUSION", "1", 1);
  const PassOptions from_env = default_pass_options();
  if (prev) ::setenv("HG_DISABLE_FUSION", saved.c_str(), 1);
  else ::unsetenv("HG_DISABLE_FUSION");
  Graph env_off = g;
  run_passes(env_off, from_env);
  EXPECT_EQ(env_off.dump(), off.dump());
}

// ---- the pipeline ----

// A ResNet basic block in eval mode with frozen weights, plus duplicated and redundant work.
Graph resnet_block() {
  Graph g;
  const int x = g.add_input({{2, 8, 8, 8}, DType::F32});
  const int w1 = frozen_input(g, {{8, 8, 3, 3}, DType::F32}), w2 = frozen_input(g, {{8, 8, 3, 3}, DType::F32});
  const BnParams bn1 = bn_params(g, 8, true), bn2 = bn_params(g, 8, true);
  const int xc = g.add_op(op("contiguous"), {x}, {});
  const int h = g.add_op(op("relu"), {batch_norm(g, g.add_op(op("conv2d_nobias"), {xc, w1}, conv_attrs(1, 1, 1)), bn1)}, {});
  const int h2 = batch_norm(g, g.add_op(op("conv2d_nobias"), {h, w2}, conv_attrs(1, 1, 1)), bn2);
  const int sum = g.add_op(op("binary"), {h2, x}, binary(0));
  const int out = g.add_op(op("relu"), {sum}, {});
  const int flat1 = g.add_op(op("reshape"), {g.add_op(op("reshape"), {out}, Attrs{{2, 8, 64}, {}})}, Attrs{{2, 512}, {}});
  const int flat2 = g.add_op(op("reshape"), {out}, Attrs{{2, 512}, {}});  // equal to flat1 once merged
  g.outputs = {flat1, flat2};
  return g;
}

TEST(PassesFlattenMatmul, SharedWeightBmmBecomesOneGemmWithItsBias) {
  Graph g;
  const int a = g.add_input({{4, 3, 8}, DType::F32});        // [S, B, K] activations
  const int w = frozen_input(g, {{8, 6}, DType::F32});       // [K, N]
  const int wt = frozen_input(g, {{6, 8}, DType::F32});      // [N, K], used transposed
  const int bias = frozen_input(g, {{6}, DType::F32});
  const int w3 = g.add_input({{4, 8, 6}, DType::F32});        // a batched right operand
  const int y = g.add_op(op("bmm"), {a, w}, Attrs{{0, 0}, {}});
  const int with_bias = g.add_op(op("binary"), {bias, y}, Attrs{{0}, {}});  // add, bias first as ONNX has it
  const int no_bias = g.add_op(op("bmm"), {a, wt}, Attrs{{0, 1}, {}});
  const int batched = g.add_op(op("bmm"), {a, w3}, Attrs{{0, 0}, {}});                    // stays a bmm
  g.outputs = {with_bias, no_bias, batched};
  const Graph opt = applied(g, flatten_matmul, 2);
  EXPECT_EQ(count_ops(opt, "bmm"), 1);
  EXPECT_EQ(count_ops(opt, "matmul"), 2);
  for (const auto& n : opt.nodes)
    if (n.kind == Node::Kind::Op && n.op->name == "matmul") {
      ASSERT_EQ(n.meta.shape.size(), 2u);  // one GEMM over all 12 rows
      EXPECT_EQ(n.meta.shape[0], 12);
    }
  expect_golden("flatten_matmul", g, opt);
  const auto data = random_inputs(g, 5);
  expect_close(run(opt, data, false), run(g, data, false), 1e-5, 1e-5);
  expect_close(run(g, data, true), run(g, data, false), kPipelineTol, kPipelineTol);
}

TEST(PassesPipeline, ReachesAFixedPointAndMatchesTheUnoptimizedGraph) {
  const Graph g = resnet_block();
  Graph opt = g;
  const PassReport first = run_passes(opt, {.fusion = true});
  EXPECT_EQ(count_run_time_ops(opt, "batch_norm_eval"), 0) << "only constant weight and bias builders remain";
  EXPECT_EQ(count_ops(opt, "contiguous"), 0);
  EXPECT_EQ(opt.outputs[0], opt.outputs[1]);
  int total = 0;
  for (const auto& [name, n] : first.applied) total += n;
  EXPECT_GT(total, 0);
  const std::string once = opt.dump();
  const PassReport second = run_passes(opt, {.fusion = true});
  EXPECT_EQ(second.rounds, 2) << "one round before the layout pass, one with it";
  for (const auto& [name, n] : second.applied) EXPECT_EQ(n, 0) << name;
  EXPECT_EQ(opt.dump(), once);

  const auto data = random_inputs(g, 6, var_inputs(g));
  expect_close(run(g, data, true), run(g, data, false), kPipelineTol, kPipelineTol);
}


// ---- the user: ResNet-18 in eval mode, traced on an HPU with frozen weights ----

// Random batch-norm state (a fresh ResNet has gamma 1, beta 0, mean 0, var 1: folding those
// would prove little).
void randomize_batch_norms(models::Module& net) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  auto fill = [&](Tensor* t, auto f) {
    std::vector<float> v(t->numel());
    for (auto& e : v) e = f();
    *t = Tensor::from_vector(v, t->shape());
  };
  auto ends_with = [](const std::string& s, const char* suffix) {
    return s.size() >= std::strlen(suffix) && s.compare(s.size() - std::strlen(suffix), std::string::npos, suffix) == 0;
  };
  for (auto& [name, t] : net.named_parameters()) {
    if (t->ndim() != 1 || name.rfind("fc.", 0) == 0) continue;
    if (ends_with(name, ".weight")) fill(t, [&] { return 1.0f + 0.2f * nd(rng); });
    else fill(t, [&] { return 0.1f * nd(rng); });
  }
  for (auto& [name, t] : net.named_buffers()) {
    if (ends_with(name, "running_mean")) fill(t, [&] { return 0.1f * nd(rng); });
    if (ends_with(name, "running_var")) fill(t, [&] { return 0.5f + std::fabs(nd(rng)); });
  }
}

TEST(PassesResNet18, EvalGraphWithFrozenWeightsFoldsEveryBatchNorm) {
  const Device hpu = Device::hpu(0);
  auto net = models::zoo::resnet18(10, 5);
  randomize_batch_norms(*net);
  net->eval();
  net->to(hpu);
  std::vector<float> xv(2 * 3 * 64 * 64);
  std::mt19937 rng(12);
  std::normal_distribution<float> nd;
  for (auto& v : xv) v = nd(rng);
  const Tensor x = Tensor::from_vector(xv, {2, 3, 64, 64}, hpu);

  enable_lazy_mode(true);
  Tensor y;
  {
    NoGradGuard no_grad;  // inference: autograd keeps no intermediate value alive as an output
    y = net->forward(x);
  }
  ClosedTrace c;
  {
    Trace& t = trace_for(hpu);
    std::lock_guard lk(t.mu);
    c = close_trace(t);
  }
  enable_lazy_mode(false);
  abort_values(c, "the test runs this graph itself");

  // Parameters and buffers become frozen inputs, as in an HPU graph captured with frozen weights.
  std::vector<const TensorImpl*> weights;
  for (auto& [name, t] : net->named_parameters()) weights.push_back(t->impl());
  for (auto& [name, t] : net->named_buffers()) weights.push_back(t->impl());
  Graph g = c.graph;
  std::vector<Buffer> data(g.num_inputs);
  for (auto& n : g.nodes) {
    if (n.kind != Node::Kind::Input) continue;
    const Tensor& in = c.inputs[n.input_index];
    n.frozen = std::find(weights.begin(), weights.end(), in.impl()) != weights.end();
    ASSERT_EQ(in.dtype(), DType::F32);
    const std::vector<float> v = in.to_vector();
    data[n.input_index].resize(v.size() * sizeof(float));
    std::memcpy(data[n.input_index].data(), v.data(), data[n.input_index].size());
  }
  ASSERT_EQ(count_ops(g, "batch_norm_eval"), 20);
  ASSERT_EQ(g.outputs.size(), 1u);

  Graph opt = g;
  const PassReport report = run_passes(opt, {.fusion = true});
  EXPECT_EQ(count_run_time_ops(opt, "batch_norm_eval"), 0) << "every conv -> bn pair is one conv";
  EXPECT_EQ(count_run_time_ops(opt, "conv2d_nobias"), 0);
  for (const auto& [name, n] : report.applied) {
    if (name == std::string("bn_fold")) {
      EXPECT_EQ(n, 20);
    }
  }
  const std::string once = opt.dump();
  for (const auto& [name, n] : run_passes(opt, {.fusion = true}).applied) {
    EXPECT_EQ(n, 0) << name;
  }
  EXPECT_EQ(opt.dump(), once);
  const auto want = run(g, data, false);
  expect_close(run(g, data, true), want, kPipelineTol, kPipelineTol);
  Graph folded = g;  // batch-norm folding alone
  fold_constants(folded);
  EXPECT_EQ(fold_batch_norm(folded), 20);
  expect_close(run(folded, data, false), want, kBnFoldTol, kBnFoldTol);
}

}  // namespace
