// Post-op fusion (graphs/pass_fuse_postops.cpp) and weight pre-packing (OpSchema::prepack of
// linear, matmul, conv2d): golden before/after dumps per pattern, fused == unfused numerically,
// cases that must not fuse, the post-op kernels run eagerly, prepacked == plain kernels.
// HG_UPDATE_GOLDEN=1 rewrites tests/golden/fusion/*.txt from the current pass.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/post_ops.h"
#include "engine/autograd.h"
#include "graphs/executable.h"
#include "graphs/hpu_graph.h"
#include "golden.h"
#include "models/zoo.h"

namespace hg {
namespace {

using graphs::Executable;
using graphs::Graph;
using graphs::Node;

constexpr int64_t kAdd = 0;  // binary op code of add (kernels::BinaryOp::Add)

std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

// |got - want| <= 1e-5 |want| + 1e-5 max|want|: relative, with a floor at the scale of the
// tensor for elements that cancel to near zero. NaN or an infinity on either side fails (a
// non-finite want makes the floor non-finite, which fails every element).
void expect_rel_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double peak = 0;
  for (float w : want) peak = std::isfinite(w) ? std::max(peak, std::fabs(double(w))) : HUGE_VAL;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!test::within_tolerance(got[i], want[i], 1e-5, 1e-5 * peak)) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
}

TEST(FusionHelpers, ExpectRelCloseFailsOnNaNAndInfinity) {
  static const std::vector<float> want = {1.f, -2.f, 3.f}, nan_got = {1.f, NAN, 3.f}, inf_got = {1.f, -INFINITY, 3.f},
                                  nan = {NAN}, one = {1.f}, inf_want = {INFINITY};
  expect_rel_close(want, want, "equal");
  EXPECT_NONFATAL_FAILURE(expect_rel_close(nan_got, want, "nan got"), "nan got element 1");
  EXPECT_NONFATAL_FAILURE(expect_rel_close(inf_got, want, "inf got"), "inf got element 1");
  // A non-finite want fails the elements beside it too (its scale floor is infinite).
  EXPECT_NONFATAL_FAILURE(expect_rel_close(nan, nan, "nan both"), "nan both element 0");
  EXPECT_NONFATAL_FAILURE(expect_rel_close(one, inf_want, "inf want"), "inf want element 0");
}

// ---- graph patterns ----

struct Builder {
  Graph g;
  int in(const Shape& s) { return g.add_input({s, DType::F32}); }
  int op(const char* name, std::vector<int> ins, Attrs a = {}) { return g.add_op(op_schema(name), std::move(ins), a); }
  int add(int a, int b) { return op("binary", {a, b}, Attrs{{kAdd}, {}}); }
  int conv(int x, int w, int b, int64_t stride, int64_t pad) {
    const Attrs a{{stride, stride, pad, pad, 1, 1, 1}, {}};
    return b < 0 ? op("conv2d_nobias", {x, w}, a) : op("conv2d", {x, w, b}, a);
  }
};

struct Pattern {
  const char* name;
  std::function<Graph()> build;
  int fused_nodes;  // nodes with a non-empty `fused` list after the pass
};

// Inputs are created in separate statements: the order of evaluation of function arguments
// is unspecified, and input numbering shows in the dumps.
std::vector<Pattern> patterns() {
  return {
      {"linear_relu", [] {
         Builder b;
         const int x = b.in({4, 32}), w = b.in({16, 32}), bias = b.in({16});
         b.g.outputs = {b.op("relu", {b.op("linear", {x, w, bias}, Attrs{{0}, {}})})};
         return b.g;
       }, 1},
      {"linear_reshape_gelu", [] {  // the zoo's Linear on [B, S, E] (BERT's feed-forward)
         Builder b;
         const int x = b.in({16, 32}), w = b.in({64, 32}), bias = b.in({64});
         const int r = b.op("reshape", {b.op("linear", {x, w, bias}, Attrs{{0}, {}})}, Attrs{{2, 8, 64}, {}});
         b.g.outputs = {b.op("gelu", {r}, Attrs{{0}, {}})};
         return b.g;
       }, 1},
      {"matmul_bias_gelu_tanh", [] {
         Builder b;
         const int x = b.in({8, 32}), w = b.in({32, 24}), bias = b.in({24});
         const int y = b.op("matmul", {x, w}, Attrs{{0, 0}, {}});
         b.g.outputs = {b.op("gelu", {b.add(y, bias)}, Attrs{{1}, {}})};
         return b.g;
       }, 1},
      {"matmul_bias_first_silu", [] {  // add(bias [1, N], x w^T): the bias is the first operand
         Builder b;
         const int x = b.in({8, 32}), w = b.in({24, 32}), bias = b.in({1, 24});
         const int y = b.op("matmul", {x, w}, Attrs{{0, 1}, {}});
         b.g.outputs = {b.op("silu", {b.add(bias, y)})};
         return b.g;
       }, 1},
      {"matmul_transposed_sigmoid", [] {
         Builder b;
         const int x = b.in({32, 8}), w = b.in({32, 24});
         b.g.outputs = {b.op("sigmoid", {b.op("matmul", {x, w}, Attrs{{1, 0}, {}})})};
         return b.g;
       }, 1},
      {"matmul_tanh", [] {
         Builder b;
         const int x = b.in({8, 32}), w = b.in({32, 24});
         b.g.outputs = {b.op("tanh", {b.op("matmul", {x, w}, Attrs{{0, 0}, {}})})};
         return b.g;
       }, 1},
      {"conv_nobias_bias_relu", [] {  // conv -> add [1, O, 1, 1] -> relu
         Builder b;
         const int x = b.in({2, 8, 14, 14}), w = b.in({16, 8, 3, 3}), bias = b.in({1, 16, 1, 1});
         b.g.outputs = {b.op("relu", {b.add(b.conv(x, w, -1, 1, 1), bias)})};
         return b.g;
       }, 1},
      {"conv_sigmoid_mul_silu", [] {  // nn.SiLU as ONNX exports it: mul(sigmoid(y), y)
         Builder b;
         const int x = b.in({1, 8, 14, 14}), w = b.in({16, 8, 3, 3}), bias = b.in({16});
         const int y = b.conv(x, w, bias, 1, 1);
         b.g.outputs = {b.op("binary", {b.op("sigmoid", {y}), y}, Attrs{{2}, {}})};
         return b.g;
       }, 1},
      {"conv_clamp_relu6", [] {  // MobileNetV2's ReLU6 (ONNX Clip(0, 6)) as a post-op
         Builder b;
         const int x = b.in({1, 8, 14, 14}), w = b.in({16, 8, 3, 3}), bias = b.in({16});
         b.g.outputs = {b.op("clamp", {b.conv(x, w, bias, 1, 1)}, Attrs{{}, {0.0, 6.0}})};
         return b.g;
       }, 1},
      {"linear_mul_sigmoid_silu", [] {  // mul(y, sigmoid(y)): the other operand order
         Builder b;
         const int x = b.in({4, 32}), w = b.in({16, 32}), bias = b.in({16});
         const int y = b.op("linear", {x, w, bias}, Attrs{{0}, {}});
         b.g.outputs = {b.op("binary", {y, b.op("sigmoid", {y})}, Attrs{{2}, {}})};
         return b.g;
       }, 1},
      {"resnet_block_28x28", [] {  // after batch-norm folding: conv -> add(identity) -> relu
         Builder b;
         const int x = b.in({1, 16, 28, 28}), w = b.in({16, 16, 3, 3}), bias = b.in({16});
         b.g.outputs = {b.op("relu", {b.add(b.conv(x, w, bias, 1, 1), x)})};
         return b.g;
       }, 1},
      {"resnet_block_7x7", [] {  // small maps: the conv runs on NCHW activations
         Builder b;
         const int x = b.in({2, 32, 7, 7}), w = b.in({32, 32, 3, 3}), bias = b.in({32});
         b.g.outputs = {b.op("relu", {b.add(x, b.conv(x, w, bias, 1, 1))})};
         return b.g;
       }, 1},
      {"conv_nobias_bias_residual_tanh", [] {
         Builder b;
         const int x = b.in({1, 8, 10, 10}), w = b.in({8, 8, 3, 3}), bias = b.in({8, 1, 1}), res = b.in({1, 8, 10, 10});
         const int z = b.add(bias, b.conv(x, w, -1, 1, 1));
         b.g.outputs = {b.op("tanh", {b.add(z, res)})};
         return b.g;
       }, 1},
      {"conv_nobias_residual_then_bias", [] {  // the bias goes in before the residual input
         Builder b;
         const int x = b.in({1, 8, 10, 10}), w = b.in({8, 8, 3, 3}), res = b.in({1, 8, 10, 10}), bias = b.in({1, 8, 1, 1});
         const int z = b.add(b.conv(x, w, -1, 1, 1), res);
         b.g.outputs = {b.add(z, bias)};
         return b.g;
       }, 1},
      {"conv_stride2_silu", [] {
         Builder b;
         const int x = b.in({1, 3, 32, 32}), w = b.in({8, 3, 7, 7}), bias = b.in({8});
         b.g.outputs = {b.op("silu", {b.conv(x, w, bias, 2, 3)})};
         return b.g;
       }, 1},
      // ---- must not fuse (or only partly) ----
      {"no_fuse_graph_output", [] {  // the linear's value is also an output
         Builder b;
         const int x = b.in({4, 32}), w = b.in({16, 32}), bias = b.in({16});
         const int y = b.op("linear", {x, w, bias}, Attrs{{0}, {}});
         b.g.outputs = {b.op("relu", {y}), y};
         return b.g;
       }, 0},
      {"no_fuse_second_consumer", [] {  // the conv's value feeds the relu and an add
         Builder b;
         const int x = b.in({1, 8, 10, 10}), w = b.in({8, 8, 3, 3}), bias = b.in({8});
         const int y = b.conv(x, w, bias, 1, 1);
         b.g.outputs = {b.add(b.op("relu", {y}), y)};
         return b.g;
       }, 0},
      {"no_fuse_reshape_output", [] {  // the reshape between linear and gelu is an output
         Builder b;
         const int x = b.in({16, 32}), w = b.in({64, 32}), bias = b.in({64});
         const int r = b.op("reshape", {b.op("linear", {x, w, bias}, Attrs{{0}, {}})}, Attrs{{2, 8, 64}, {}});
         b.g.outputs = {b.op("gelu", {r}, Attrs{{0}, {}}), r};
         return b.g;
       }, 0},
      {"no_fuse_row_broadcast", [] {  // + [M, 1] is not a bias
         Builder b;
         const int x = b.in({8, 32}), w = b.in({32, 24}), col = b.in({8, 1});
         b.g.outputs = {b.add(b.op("matmul", {x, w}, Attrs{{0, 0}, {}}), col)};
         return b.g;
       }, 0},
      {"no_fuse_conv_last_dim_vector", [] {  // + [W] broadcasts along W, not the channels
         Builder b;
         const int x = b.in({1, 8, 16, 16}), w = b.in({16, 8, 3, 3}), v = b.in({16});
         b.g.outputs = {b.add(b.conv(x, w, -1, 1, 1), v)};
         return b.g;
       }, 0},
      {"no_fuse_linear_residual", [] {  // a residual post-op only for convs
         Builder b;
         const int x = b.in({4, 16}), w = b.in({16, 16}), bias = b.in({16});
         b.g.outputs = {b.add(b.op("linear", {x, w, bias}, Attrs{{0}, {}}), x)};
         return b.g;
       }, 0},
      {"partial_act_then_add", [] {  // conv -> relu fuses; the add after the activation stays
         Builder b;
         const int x = b.in({1, 8, 10, 10}), w = b.in({8, 8, 3, 3}), bias = b.in({8});
         b.g.outputs = {b.add(b.op("relu", {b.conv(x, w, bias, 1, 1)}), x)};
         return b.g;
       }, 1},
      {"partial_two_activations", [] {  // linear -> relu fuses; the second activation stays
         Builder b;
         const int x = b.in({4, 32}), w = b.in({16, 32}), bias = b.in({16});
         b.g.outputs = {b.op("sigmoid", {b.op("relu", {b.op("linear", {x, w, bias}, Attrs{{0}, {}})})})};
         return b.g;
       }, 1},
  };
}

Graph fused_copy(Graph g) {
  while (graphs::fuse_silu(g) + graphs::fuse_post_ops(g) > 0) {
  }
  return g;
}

std::string golden_path(const std::string& name) {
  return std::string(HG_SOURCE_DIR) + "/tests/golden/fusion/" + name + ".txt";
}

TEST(FusionPass, GoldenBeforeAfterDumps) {
  const bool update = std::getenv("HG_UPDATE_GOLDEN") && std::string(std::getenv("HG_UPDATE_GOLDEN")) == "1";
  for (const Pattern& p : patterns()) {
    const Graph before = p.build();
    const Graph after = fused_copy(before);
    const std::string text = "before:\n" + before.dump() + "after:\n" + after.dump();
    if (update) {
      std::ofstream(golden_path(p.name)) << text;
      continue;
    }
    std::ifstream in(golden_path(p.name));
    ASSERT_TRUE(in.good()) << "missing golden " << golden_path(p.name) << " (HG_UPDATE_GOLDEN=1 writes it)";
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_EQ(text, want.str()) << p.name;
    int fused = 0;
    for (const Node& n : after.nodes) fused += !n.fused.empty();
    EXPECT_EQ(fused, p.fused_nodes) << p.name;
  }
}

TEST(FusionPass, ReturnsZeroWhenNothingChanges) {
  for (const Pattern& p : patterns()) {
    Graph g = fused_copy(p.build());
    const std::string dump = g.dump();
    EXPECT_EQ(graphs::fuse_post_ops(g), 0) << p.name;
    EXPECT_EQ(g.dump(), dump) << p.name;
  }
}

// mul(x, sigmoid(x)) is silu only when nothing else reads the sigmoid and the operands are one x.
TEST(FusionPass, SiluLeavesSharedSigmoidsAndOtherProductsAlone) {
  Builder b;
  const int x = b.in({4, 8}), other = b.in({4, 8});
  const int shared = b.op("sigmoid", {x});
  const int s2 = b.op("sigmoid", {x});
  b.g.outputs = {b.op("binary", {x, shared}, Attrs{{2}, {}}), shared,
                 b.op("binary", {other, s2}, Attrs{{2}, {}})};
  EXPECT_EQ(graphs::fuse_silu(b.g), 0);
  const int s3 = b.op("sigmoid", {x});
  b.g.outputs.push_back(b.op("binary", {s3, x}, Attrs{{2}, {}}));
  EXPECT_EQ(graphs::fuse_silu(b.g), 1);
  EXPECT_EQ(b.g.nodes[b.g.outputs.back()].op->name, "silu");
}

// Runs `g` compiled with the fusion passes on or off; returns its outputs.
std::vector<std::vector<float>> run_graph(const Graph& g, bool fusion, const std::vector<std::vector<float>>& inputs) {
  auto exe = Executable::compile(g, {.passes = {.fusion = fusion}});
  const size_t align = graphs::kArenaAlignment;
  std::vector<std::byte> arena(exe->arena_bytes() + align);
  void* base = arena.data();
  size_t space = arena.size();
  void* aligned = std::align(align, exe->arena_bytes(), base, space);
  std::vector<const void*> in;
  for (const auto& v : inputs) in.push_back(v.data());
  std::vector<std::vector<float>> out;
  std::vector<void*> outp;
  for (const auto& m : exe->output_metas()) out.emplace_back(static_cast<size_t>(m.numel()));
  for (auto& o : out) outp.push_back(o.data());
  exe->run(aligned, in.data(), outp.data());
  return out;
}

std::vector<std::vector<float>> random_inputs(const Graph& g, uint32_t seed) {
  std::vector<std::vector<float>> in;
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::Input) in.push_back(random_vec(n.meta.numel(), seed++, 0.5f));
  return in;
}

TEST(FusionNumerics, FusedEqualsUnfusedForEveryPattern) {
  for (const Pattern& p : patterns()) {
    const Graph g = p.build();
    const auto in = random_inputs(g, 11);
    const auto fused = run_graph(g, true, in), plain = run_graph(g, false, in);
    ASSERT_EQ(fused.size(), plain.size()) << p.name;
    for (size_t k = 0; k < fused.size(); ++k) expect_rel_close(fused[k], plain[k], std::string(p.name) + " output " + std::to_string(k));
  }
}

TEST(FusionNumerics, CompiledGraphKeepsTheFusedNodes) {
  for (const Pattern& p : patterns()) {
    auto exe = Executable::compile(p.build(), {.passes = {.fusion = true}});
    int fused = 0;
    for (const Node& n : exe->graph().nodes) fused += !n.fused.empty();
    EXPECT_GE(fused, p.fused_nodes) << p.name;
    auto plain = Executable::compile(p.build(), {.passes = {.fusion = false}});
    for (const Node& n : plain->graph().nodes) EXPECT_TRUE(n.fused.empty()) << p.name;
  }
}

// ---- post-ops run eagerly ----

// x spans [-10, 10]; the identity weight makes linear(x) == x, so the fused activation meets
// our activation kernels on the same values. 64 elements run our loops, 1024 oneDNN's eltwise.
TEST(FusionEager, ActivationPostOpsMatchTheActivationOps) {
  const std::vector<std::pair<FusedAct, std::function<Tensor(const Tensor&)>>> acts{
      {FusedAct::Relu, [](const Tensor& t) { return ops::relu(t); }},
      {FusedAct::GeluErf, [](const Tensor& t) { return ops::gelu(t, "none"); }},
      {FusedAct::GeluTanh, [](const Tensor& t) { return ops::gelu(t, "tanh"); }},
      {FusedAct::Silu, [](const Tensor& t) { return ops::silu(t); }},
      {FusedAct::Sigmoid, [](const Tensor& t) { return ops::sigmoid(t); }},
      {FusedAct::Tanh, [](const Tensor& t) { return ops::tanh(t); }},
      {FusedAct::Relu6, [](const Tensor& t) { return ops::clamp(t, 0.0, 6.0); }},
  };
  std::vector<float> eye(16 * 16, 0.0f);
  for (int i = 0; i < 16; ++i) eye[i * 17] = 1.0f;
  const Tensor w = Tensor::from_vector(eye, {16, 16}), b = Tensor::zeros({16});
  for (int64_t rows : {4, 64}) {
    std::vector<float> xs(static_cast<size_t>(rows * 16));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = -10.0f + 20.0f * static_cast<float>(i) / (xs.size() - 1);
    const Tensor x = Tensor::from_vector(xs, {rows, 16});
    for (const auto& [act, f] : acts) {
      const auto code = static_cast<int64_t>(act);
      const std::string what = std::string(fused_act_name(act)) + " rows " + std::to_string(rows);
      const auto want = f(x).to_vector();
      test::expect_close(dispatch("linear", {x, w, b}, Attrs{{code}, {}}).to_vector(), want, 1e-5, what + " linear");
      test::expect_close(dispatch("matmul", {x, w}, Attrs{{0, 1, code}, {}}).to_vector(), want, 1e-5, what + " matmul");
      const Tensor w1 = Tensor::from_vector(eye, {16, 16}).reshape({16, 16, 1, 1});
      // the same values as channels of a [1, 16, rows, 1] map through a 1x1 identity conv
      const Tensor xc = ops::permute(x.reshape({1, rows, 16}), {0, 2, 1}).contiguous().reshape({1, 16, rows, 1});
      const auto want_c = f(xc).to_vector();
      test::expect_close(dispatch("conv2d_nobias", {xc, w1}, Attrs{{1, 1, 0, 0, 1, 1, 1, code}, {}}).to_vector(),
                         want_c, 1e-5, what + " conv2d");
    }
  }
}

TEST(FusionEager, BiasAndResidualInputs) {
  const Tensor x = Tensor::from_vector(random_vec(2 * 4 * 6 * 6, 1), {2, 4, 6, 6});
  const Tensor w = Tensor::from_vector(random_vec(4 * 4 * 3 * 3, 2), {4, 4, 3, 3});
  const Tensor b = Tensor::from_vector(random_vec(4, 3), {1, 4, 1, 1});
  const Tensor r = Tensor::from_vector(random_vec(2 * 4 * 6 * 6, 4), {2, 4, 6, 6});
  const Attrs relu{{1, 1, 1, 1, 1, 1, 1, static_cast<int64_t>(FusedAct::Relu)}, {}};
  const Tensor want = ops::relu(ops::add(ops::add(ops::conv2d(x, w, {1, 1}, {1, 1}), b), r));
  expect_rel_close(dispatch("conv2d", {x, w, b, r}, relu).to_vector(), want.to_vector(), "conv2d (x, w, b, res)");
  const Tensor want_nb = ops::relu(ops::add(ops::conv2d(x, w, {1, 1}, {1, 1}), r));
  expect_rel_close(dispatch("conv2d_nobias", {x, w, r}, relu).to_vector(), want_nb.to_vector(), "conv2d_nobias (x, w, res)");

  const Tensor a = Tensor::from_vector(random_vec(5 * 7, 5), {5, 7}), m = Tensor::from_vector(random_vec(7 * 3, 6), {7, 3});
  const Tensor mb = Tensor::from_vector(random_vec(3, 7), {3});
  expect_rel_close(dispatch("matmul", {a, m, mb}).to_vector(), ops::add(ops::matmul(a, m), mb).to_vector(),
                   "matmul (a, b, bias)");
  // an empty inner dimension: act(bias) in every row
  const Tensor e = dispatch("linear", {Tensor::zeros({3, 0}), Tensor::zeros({2, 0}), Tensor::from_vector({-1, 2}, {2})},
                            Attrs{{static_cast<int64_t>(FusedAct::Relu)}, {}});
  EXPECT_EQ(e.to_vector(), (std::vector<float>{0, 2, 0, 2, 0, 2}));
  // F64 runs the loop kernel: same post-ops
  const Tensor a64 = a.to(DType::F64), m64 = m.to(DType::F64), mb64 = mb.to(DType::F64);
  const auto got = dispatch("matmul", {a64, m64, mb64}, Attrs{{0, 0, static_cast<int64_t>(FusedAct::GeluErf)}, {}});
  expect_rel_close(got.to(DType::F32).to_vector(), ops::gelu(ops::add(ops::matmul(a, m), mb)).to_vector(), "matmul F64 gelu");
}

TEST(FusionEager, Bf16PostOpsMatchUnfused) {
  const Tensor x = Tensor::from_vector(random_vec(32 * 64, 1), {32, 64}).to(DType::BF16);
  const Tensor w = Tensor::from_vector(random_vec(48 * 64, 2, 0.2f), {48, 64}).to(DType::BF16);
  const Tensor b = Tensor::from_vector(random_vec(48, 3), {48}).to(DType::BF16);
  const Tensor fused = dispatch("linear", {x, w, b}, Attrs{{static_cast<int64_t>(FusedAct::GeluTanh)}, {}});
  EXPECT_EQ(fused.dtype(), DType::BF16);
  const Tensor plain = ops::gelu(ops::linear(x, w, b), "tanh");
  test::expect_close(fused.to(DType::F32).to_vector(), plain.to(DType::F32).to_vector(), 1e-2, "bf16 linear gelu_tanh",
                     1e-2);
  const Tensor xc = Tensor::from_vector(random_vec(2 * 8 * 9 * 9, 4), {2, 8, 9, 9}).to(DType::BF16);
  const Tensor wc = Tensor::from_vector(random_vec(8 * 8 * 9, 5, 0.3f), {8, 8, 3, 3}).to(DType::BF16);
  const Tensor fc = dispatch("conv2d_nobias", {xc, wc, xc}, Attrs{{1, 1, 1, 1, 1, 1, 1, static_cast<int64_t>(FusedAct::Silu)}, {}});
  const Tensor pc = ops::silu(ops::add(ops::conv2d(xc, wc, {1, 1}, {1, 1}), xc));
  test::expect_close(fc.to(DType::F32).to_vector(), pc.to(DType::F32).to_vector(), 2e-2, "bf16 conv residual silu", 2e-2);
}

TEST(FusionEager, FusedNodesRejectBadPostOps) {
  const Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3}), b = Tensor::zeros({4});
  EXPECT_THROW(dispatch("linear", {x, w, b}, Attrs{{8}, {}}), ShapeError);  // no activation code 8
  EXPECT_THROW(dispatch("matmul", {x, w, Tensor::zeros({3})}, Attrs{{0, 1}, {}}), ShapeError);
  const Tensor xc = Tensor::zeros({1, 2, 5, 5}), wc = Tensor::zeros({3, 2, 3, 3});
  EXPECT_THROW(dispatch("conv2d_nobias", {xc, wc, Tensor::zeros({1, 3, 5, 5})}, Attrs{{1, 1, 0, 0, 1, 1, 1}, {}}),
               ShapeError);  // the residual must have the output's shape [1, 3, 3, 3]
  EXPECT_THROW(dispatch("conv2d", {xc, wc, Tensor::zeros({3, 1})}, Attrs{{1, 1, 0, 0, 1, 1, 1}, {}}), ShapeError);
}

TEST(FusionEager, FusedNodesHaveNoBackward) {
  Tensor x = Tensor::from_vector(random_vec(6, 1), {2, 3});
  x.set_requires_grad(true);
  const Tensor w = Tensor::from_vector(random_vec(12, 2), {4, 3}), b = Tensor::zeros({4});
  const Tensor y = dispatch("linear", {x, w, b}, Attrs{{static_cast<int64_t>(FusedAct::Relu)}, {}});
  EXPECT_THROW(ops::sum(y).backward(), InternalError);
}

// ---- prepack ----

struct KernelCase {
  std::string op;
  std::vector<TensorMeta> in;
  Attrs attrs;
  std::vector<bool> constant;  // which inputs are handed to prepack
};

// prepack(constant inputs) == prepare, on the same data; the constant data handed to prepack
// is a copy freed before the kernel runs (the prepacked kernel must own what it keeps).
void expect_prepack_equals_prepare(const KernelCase& c) {
  const OpSchema& op = op_schema(c.op);
  ASSERT_NE(op.prepack, nullptr) << c.op;
  const TensorMeta out = op.infer(op, c.in, c.attrs);
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < c.in.size(); ++i) data.push_back(random_vec(c.in[i].numel(), 100 + uint32_t(i)));
  std::vector<const void*> ptrs;
  for (auto& d : data) ptrs.push_back(d.data());
  Kernel packed;
  {
    std::vector<std::vector<float>> copies(data);
    std::vector<const void*> constant(c.in.size(), nullptr);
    for (size_t i = 0; i < c.in.size(); ++i)
      if (c.constant[i]) constant[i] = copies[i].data();
    packed = op.prepack(c.in, out, c.attrs, constant);
  }
  const Kernel plain = op.prepare(c.in, out, c.attrs);
  std::vector<float> a(static_cast<size_t>(out.numel())), b(a.size());
  plain(ptrs.data(), a.data());
  packed(ptrs.data(), b.data());
  packed(ptrs.data(), b.data());  // twice: the packed weights are not consumed
  std::string what = c.op;
  for (const auto& m : c.in) what += " " + meta_str(m);
  expect_rel_close(b, a, what);
}

TensorMeta f32(const Shape& s) { return {s, DType::F32}; }

TEST(FusionPrepack, LinearAndMatmulEqualPlainKernels) {
  const int64_t gelu = static_cast<int64_t>(FusedAct::GeluErf);
  const std::vector<KernelCase> cases{
      {"linear", {f32({1, 768}), f32({768, 768}), f32({768})}, Attrs{{0}, {}}, {false, true, true}},
      {"linear", {f32({128, 256}), f32({1024, 256}), f32({1024})}, Attrs{{gelu}, {}}, {false, true, true}},
      {"linear", {f32({7, 33}), f32({65, 33}), f32({65})}, Attrs{{1}, {}}, {false, true, false}},
      {"linear", {f32({32, 64}), f32({64, 64}), f32({64})}, Attrs{{1}, {}}, {false, true, true}},
      {"matmul", {f32({16, 64}), f32({64, 48})}, Attrs{{0, 0}, {}}, {false, true}},
      {"matmul", {f32({64, 16}), f32({48, 64}), f32({48})}, Attrs{{1, 1, gelu}, {}}, {false, true, true}},
      {"matmul", {f32({1, 512}), f32({512, 1000}), f32({1, 1000})}, Attrs{{0, 0, 0}, {}}, {false, true, true}},
      {"matmul", {f32({9, 5}), f32({7, 5})}, Attrs{{0, 1}, {}}, {false, false}},  // nothing constant
  };
  for (const auto& c : cases) expect_prepack_equals_prepare(c);
}

TEST(FusionPrepack, ConvEqualsPlainKernel) {
  const int64_t relu = static_cast<int64_t>(FusedAct::Relu);
  const std::vector<KernelCase> cases{
      // ResNet-18 shapes (batch 1): stem, a 56x56 block with residual, a strided 1x1 downsample, a 7x7 block
      {"conv2d", {f32({1, 3, 64, 64}), f32({64, 3, 7, 7}), f32({64})}, Attrs{{2, 2, 3, 3, 1, 1, 1, relu}, {}},
       {false, true, true}},
      {"conv2d", {f32({1, 64, 56, 56}), f32({64, 64, 3, 3}), f32({64}), f32({1, 64, 56, 56})},
       Attrs{{1, 1, 1, 1, 1, 1, 1, relu}, {}}, {false, true, true, false}},
      {"conv2d_nobias", {f32({2, 64, 28, 28}), f32({128, 64, 1, 1})}, Attrs{{2, 2, 0, 0, 1, 1, 1}, {}}, {false, true}},
      {"conv2d", {f32({1, 512, 7, 7}), f32({512, 512, 3, 3}), f32({512}), f32({1, 512, 7, 7})},
       Attrs{{1, 1, 1, 1, 1, 1, 1, relu}, {}}, {false, true, true, false}},
      {"conv2d_nobias", {f32({1, 8, 9, 9}), f32({8, 4, 3, 3})}, Attrs{{1, 1, 1, 1, 2, 2, 2}, {}}, {false, true}},
  };
  for (const auto& c : cases) expect_prepack_equals_prepare(c);
}

// A step binds its memory objects per thread: one prepacked conv kernel (blocked layouts,
// residual reorder, packed weights) run from several threads at once gives every thread the
// single-thread result.
TEST(FusionPrepack, ConvKernelRunsOnSeveralThreadsAtOnce) {
  const OpSchema& op = op_schema("conv2d");
  const std::vector<TensorMeta> in{f32({1, 16, 28, 28}), f32({16, 16, 3, 3}), f32({16}), f32({1, 16, 28, 28})};
  const Attrs a{{1, 1, 1, 1, 1, 1, 1, static_cast<int64_t>(FusedAct::Relu)}, {}};
  const TensorMeta out = op.infer(op, in, a);
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < in.size(); ++i) data.push_back(random_vec(in[i].numel(), 40 + uint32_t(i)));
  const std::vector<const void*> ptrs{data[0].data(), data[1].data(), data[2].data(), data[3].data()};
  const Kernel k = op.prepack(in, out, a, {nullptr, data[1].data(), nullptr, nullptr});
  std::vector<float> want(static_cast<size_t>(out.numel()));
  k(ptrs.data(), want.data());
  std::vector<std::vector<float>> got(4, std::vector<float>(want.size()));
  std::vector<std::thread> threads;
  for (auto& g : got)
    threads.emplace_back([&k, &ptrs, &g] {
      for (int rep = 0; rep < 20; ++rep) k(ptrs.data(), g.data());
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) expect_rel_close(g, want, "conv on another thread");
}

TEST(FusionPrepack, FrozenWeightsThroughTheExecutable) {
  Builder b;
  const int x = b.in({1, 16, 14, 14}), w = b.in({16, 16, 3, 3}), bias = b.in({16});
  const int lw = b.in({10, 16 * 14 * 14}), lb = b.in({10});
  const int y = b.op("relu", {b.add(b.conv(x, w, bias, 1, 1), x)});
  const int flat = b.op("reshape", {y}, Attrs{{1, 16 * 14 * 14}, {}});
  b.g.outputs = {b.op("gelu", {b.op("linear", {flat, lw, lb}, Attrs{{0}, {}})}, Attrs{{0}, {}})};
  const auto in = random_inputs(b.g, 3);
  const auto plain = run_graph(b.g, false, in);
  for (int k : {w, bias, lw, lb}) b.g.nodes[k].frozen = true;
  std::vector<const void*> frozen(in.size(), nullptr);
  for (size_t i = 1; i < in.size(); ++i) frozen[i] = in[i].data();
  auto exe = Executable::compile(b.g, {.passes = {.fusion = true}}, frozen);
  int prepacked = 0, fused = 0;
  for (size_t i = 0; i < exe->graph().nodes.size(); ++i) {
    prepacked += exe->prepacked(static_cast<int>(i));
    fused += !exe->graph().nodes[i].fused.empty();
  }
  EXPECT_EQ(fused, 2);      // conv + add + relu, linear + gelu
  EXPECT_EQ(prepacked, 2);  // both weights frozen
  std::vector<std::byte> arena(exe->arena_bytes() + graphs::kArenaAlignment);
  void* base = arena.data();
  size_t space = arena.size();
  void* aligned = std::align(graphs::kArenaAlignment, exe->arena_bytes(), base, space);
  std::vector<float> out(10);
  void* o = out.data();
  std::vector<const void*> ptrs{in[0].data(), nullptr, nullptr, nullptr, nullptr};
  exe->run(aligned, ptrs.data(), &o);
  expect_rel_close(out, plain[0], "fused + prepacked vs plain");
}

// ---- zoo models through an HPU graph with frozen weights ----

struct ZooRun {
  std::vector<float> eager, replay;
  int conv_act = 0, conv_residual = 0, linear_gelu = 0, prepacked = 0;
};

// Captures m(x) with every parameter and buffer frozen (batch norm folds, weights pre-pack)
// and counts the fused nodes of the compiled graph.
ZooRun run_zoo(models::Module& m, const Tensor& x_cpu) {
  const Device d = Device::hpu(0);
  m.to(d);
  m.eval();
  NoGradGuard no_grad;
  ZooRun r;
  const Tensor x = x_cpu.to(d);
  r.eager = m.forward(x).to_vector();
  std::vector<Tensor> frozen;
  for (const auto& [name, t] : m.state_dict()) frozen.push_back(t);
  graphs::HPUGraph g(d);
  g.capture_begin({.frozen = frozen});
  const Tensor out = m.forward(x);
  g.capture_end();
  g.replay();
  r.replay = out.to_vector();
  const Graph& cg = g.executable().graph();
  for (size_t i = 0; i < cg.nodes.size(); ++i) {
    const Node& n = cg.nodes[i];
    if (n.kind != Node::Kind::Op) continue;
    r.prepacked += g.executable().prepacked(static_cast<int>(i));
    const std::string& op = n.op->name;
    if ((op == "conv2d" || op == "conv2d_nobias") && n.attrs.i(7) != 0) ++r.conv_act;
    if (op == "conv2d" && n.inputs.size() == 4) ++r.conv_residual;
    if (op == "linear" && n.attrs.i(0) == static_cast<int64_t>(FusedAct::GeluErf)) ++r.linear_gelu;
  }
  return r;
}

TEST(FusionZoo, ResNet18FusesEveryBlockAndEqualsEager) {
  auto m = models::zoo::resnet18(10, 0);
  const ZooRun r = run_zoo(*m, Tensor::from_vector(random_vec(2 * 3 * 64 * 64, 9), {2, 3, 64, 64}));
  expect_rel_close(r.replay, r.eager, "resnet18 replay vs eager");
  EXPECT_EQ(r.conv_residual, 8);  // conv -> bn -> add(identity) -> relu in each basic block
  EXPECT_EQ(r.conv_act, 17);      // the stem, the first conv of each block, the 8 residual convs
  EXPECT_EQ(r.prepacked, 21);     // 20 convs and the fc, all with frozen weights
}

TEST(FusionZoo, BertFusesTheFeedForwardGeluAndEqualsEager) {
  auto m = models::zoo::bert_classifier({}, 0);
  std::vector<int64_t> ids(2 * 128);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37) % 1000);
  const ZooRun r = run_zoo(*m, Tensor::from_indices(ids, {2, 128}));
  expect_rel_close(r.replay, r.eager, "bert replay vs eager");
  EXPECT_EQ(r.linear_gelu, 2);  // one feed-forward per encoder layer
  EXPECT_GE(r.prepacked, 2 * 4 + 1);
}

}  // namespace
}  // namespace hg
