// conv2d in INT8 (engine/conv_int8.cpp, attrs::Conv::int8): against its definition computed in
// double (x per tensor u8 asymmetric, weights per output channel s8 symmetric, the integer sum
// scaled back, then bias, residual and activation) over strides, padding, groups, 1x1 and
// depthwise kernels, NCHW and NHWC outputs; the precision pass lowering a residual CNN's
// convolutions (near FP32, in NHWC); eager calls; the dtype check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/op_attrs.h"
#include "engine/ops.h"
#include "engine/post_ops.h"
#include "graphs/passes.h"
#include "tests/errors.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

using graphs::Graph;
using test::fusion::run_graph;
using ::testing::HasSubstr;

struct Case {
  int64_t n, c, h, o, k, stride, pad, groups;
  bool bias, relu, residual, nhwc;
};

std::vector<float> randv(std::mt19937& rng, size_t count, float scale = 1) {
  std::normal_distribution<float> nd;
  std::vector<float> v(count);
  for (auto& x : v) x = nd(rng) * scale;
  return v;
}

// The quantized convolution in double; x NCHW, w [O, C/g, k, k], output NCHW.
std::vector<float> reference(const Case& t, int64_t oh, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& bias, const std::vector<float>& res) {
  float lo = 0, hi = 0;
  for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
  const double sx = (hi - lo) / 255.0, zp = std::clamp(std::nearbyint(-lo / sx), 0.0, 255.0);
  const int64_t cg = t.c / t.groups, og = t.o / t.groups, per = cg * t.k * t.k;
  std::vector<float> out(static_cast<size_t>(t.n * t.o * oh * oh));
  for (int64_t o = 0; o < t.o; ++o) {
    float amax = 0;
    for (int64_t p = 0; p < per; ++p) amax = std::max(amax, std::abs(w[o * per + p]));
    const double sw = amax / 127.0;
    const int64_t g = o / og;
    for (int64_t b = 0; b < t.n; ++b)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < oh; ++j) {
          int64_t acc = 0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t u = 0; u < t.k; ++u)
              for (int64_t v = 0; v < t.k; ++v) {
                const int64_t y = i * t.stride - t.pad + u, z = j * t.stride - t.pad + v;
                if (y < 0 || z < 0 || y >= t.h || z >= t.h) continue;  // padding: a real 0
                const int64_t c = g * cg + ci;
                const double qx = std::clamp(std::nearbyint(x[((b * t.c + c) * t.h + y) * t.h + z] / sx) + zp, 0.0, 255.0);
                const double qw = std::nearbyint(w[o * per + (ci * t.k + u) * t.k + v] / sw);
                acc += static_cast<int64_t>(qx - zp) * static_cast<int64_t>(qw);
              }
          const size_t at = static_cast<size_t>(((b * t.o + o) * oh + i) * oh + j);
          double r = static_cast<double>(acc) * sx * sw + (t.bias ? bias[o] : 0.0) + (t.residual ? res[at] : 0.0);
          out[at] = static_cast<float>(t.relu ? std::max(r, 0.0) : r);
        }
  }
  return out;
}

TEST(ConvInt8, MatchesTheQuantizedDefinition) {
  const Case cases[] = {
      {2, 8, 9, 16, 3, 1, 1, 1, true, true, false, false},   // 3x3, bias, relu, NCHW out
      {1, 16, 10, 8, 3, 2, 1, 1, false, false, false, true},  // stride 2, no bias, NHWC
      {2, 24, 7, 32, 1, 1, 0, 1, true, true, true, true},     // 1x1 with residual + relu, NHWC
      {1, 32, 8, 32, 3, 1, 1, 32, true, false, false, true},  // depthwise
      {2, 12, 6, 12, 3, 1, 1, 3, true, true, true, false},    // grouped, residual in NCHW
  };
  std::mt19937 rng(5);
  for (const Case& t : cases) {
    SCOPED_TRACE("c " + std::to_string(t.c) + " o " + std::to_string(t.o) + " k " + std::to_string(t.k) + " groups " +
                 std::to_string(t.groups) + (t.nhwc ? " nhwc" : " nchw"));
    const int64_t oh = (t.h + 2 * t.pad - t.k) / t.stride + 1;
    const auto x = randv(rng, static_cast<size_t>(t.n * t.c * t.h * t.h));
    const auto w = randv(rng, static_cast<size_t>(t.o * (t.c / t.groups) * t.k * t.k), 0.2f);
    const auto bias = randv(rng, static_cast<size_t>(t.o));
    const auto res = randv(rng, static_cast<size_t>(t.n * t.o * oh * oh));
    attrs::Conv c;
    c.stride_h = c.stride_w = t.stride;
    c.pad_h = c.pad_w = t.pad;
    c.groups = t.groups;
    c.act = t.relu ? FusedAct::Relu : FusedAct::None;
    c.int8 = true;
    // NHWC: the graph reorders x and the residual in and the output back (to_blocked / from_blocked).
    if (t.nhwc) c.src_block = t.c, c.dst_block = t.o;
    test::fusion::GraphBuilder g;
    int xin = g.in({t.n, t.c, t.h, t.h});
    const int wn = g.weight({t.o, t.c / t.groups, t.k, t.k});
    const int bn = t.bias ? g.weight({t.o}) : -1;
    int rn = t.residual ? g.in({t.n, t.o, oh, oh}) : -1;
    if (t.nhwc) {
      xin = g.op("to_blocked", {xin}, Attrs{{t.c}, {}});
      if (rn >= 0) rn = g.op("to_blocked", {rn}, Attrs{{t.o}, {}});
    }
    std::vector<int> ins{xin, wn};
    if (bn >= 0) ins.push_back(bn);
    if (rn >= 0) ins.push_back(rn);
    int y = g.op(t.bias ? "conv2d" : "conv2d_nobias", ins, c.pack());
    if (t.nhwc) y = g.op("from_blocked", {y}, Attrs{{t.o, oh, oh}, {}});
    g.g.outputs = {y};
    std::vector<test::fusion::Buffer> data(static_cast<size_t>(g.g.num_inputs));
    auto put = [&](int node, const std::vector<float>& v) {
      auto& d = data[static_cast<size_t>(g.g.nodes[node].input_index)];
      d.resize(v.size() * 4);
      std::memcpy(d.data(), v.data(), d.size());
    };
    put(0, x), put(wn, w);
    if (bn >= 0) put(bn, bias);
    if (t.residual) put(t.bias ? 3 : 2, res);
    const auto got = run_graph(g.g, data);
    test::fusion::expect_near(got, {reference(t, oh, x, w, bias, res)}, 1e-4, 1e-4);
  }
}

TEST(ConvInt8, EagerCallsQuantizeTheirWeightsWithEveryCallAndCheckTheDtype) {
  std::mt19937 rng(7);
  const Tensor x = Tensor::from_vector(randv(rng, 2 * 4 * 6 * 6), {2, 4, 6, 6});
  const Tensor w = Tensor::from_vector(randv(rng, 8 * 4 * 9, 0.3f), {8, 4, 3, 3});
  const Tensor b = Tensor::from_vector(randv(rng, 8), {8});
  attrs::Conv c;
  c.pad_h = c.pad_w = 1;
  const std::vector<float> fp32 = dispatch("conv2d", {x, w, b}, c.pack()).to_vector();
  c.int8 = true;
  const std::vector<float> int8 = dispatch("conv2d", {x, w, b}, c.pack()).to_vector();
  ASSERT_EQ(int8.size(), fp32.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    ASSERT_TRUE(std::isfinite(int8[i])) << i;
    err = std::max(err, static_cast<double>(std::abs(int8[i] - fp32[i])));
    scale = std::max(scale, static_cast<double>(std::abs(fp32[i])));
  }
  EXPECT_LT(err / scale, 3e-2);
  EXPECT_GT(err, 0) << "INT8 rounding must show";
  EXPECT_THAT(test::error_of<ShapeError>([&] { dispatch("conv2d", {x.to(DType::BF16), w.to(DType::BF16), b.to(DType::BF16)}, c.pack()); }),
              HasSubstr("an INT8 convolution takes F32 x and weights"));
}

// A stem, a residual block and a head, lowered to INT8 with every pass: the three convolutions
// run in INT8 on NHWC activations and the answers stay near FP32's.
TEST(PassesPrecision, Int8LowersConvolutionsByConstantWeights) {
  test::fusion::GraphBuilder b;
  auto conv = [&](int x, int64_t out) {
    const int64_t c = b.g.nodes[x].meta.shape[1];
    return b.op("conv2d", {x, b.weight({out, c, 3, 3}), b.weight({out})}, Attrs{{1, 1, 1, 1, 1, 1, 1}, {}});
  };
  const int x = b.op("relu", {conv(b.in({2, 3, 12, 12}), 16)});
  const int y = b.op("relu", {conv(x, 16)});
  const int r = b.op("relu", {b.op("binary", {conv(y, 16), x}, Attrs{{0}, {}})});
  b.g.outputs = {b.op("adaptive_avg_pool2d", {r}, Attrs{{1, 1}, {}})};
  auto data = test::fusion::random_inputs(b.g, 9);
  for (const auto& n : b.g.nodes)  // weights scaled by 1 / sqrt(fan-in)
    if (n.kind == graphs::Node::Kind::Input && n.frozen && n.meta.shape.size() == 4) {
      auto* v = reinterpret_cast<float*>(data[static_cast<size_t>(n.input_index)].data());
      for (int64_t i = 0; i < n.meta.numel(); ++i) v[i] /= std::sqrt(static_cast<float>(n.meta.numel() / n.meta.shape[0]));
    }
  Graph opt = b.g;
  graphs::PassOptions passes;
  passes.precision = graphs::Precision::Int8;
  graphs::run_passes(opt, passes);
  int int8 = 0, nhwc = 0;
  for (const auto& n : opt.nodes)
    if (n.kind == graphs::Node::Kind::Op && (n.op->name == "conv2d" || n.op->name == "conv2d_nobias")) {
      const attrs::Conv c = attrs::Conv::of(n.attrs);
      int8 += c.int8;
      nhwc += c.dst_block == n.meta.shape.back();
    }
  EXPECT_EQ(int8, 3) << opt.dump();
  EXPECT_EQ(nhwc, 3) << opt.dump();
  const auto got = run_graph(opt, data), want = run_graph(b.g, data);
  double err = 0, scale = 0;
  for (size_t i = 0; i < want[0].size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[0][i])) << i;
    err = std::max(err, static_cast<double>(std::abs(got[0][i] - want[0][i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[0][i])));
  }
  EXPECT_LT(err / scale, 5e-2);
  EXPECT_GT(err, 0) << "INT8 rounding must show";
}

}  // namespace
}  // namespace hg
