// The nn family: conv2d, max/avg/adaptive pooling, batch_norm and layer_norm against PyTorch
// golden values (tests/golden/nn.json, scripts/golden_nn.py) on cpu, hpu eager and hpu lazy;
// BF16 runs against the F32 goldens; finite differences (F32 for the oneDNN ops, F64 for our
// own loops); error messages; concurrency of prepared oneDNN kernels.
#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/op.h"
#include "engine/ops.h"
#include "errors.h"
#include "golden.h"
#include "graphs/lazy.h"

using namespace hg;
using namespace hg::test;
using ::testing::HasSubstr;
using json = nlohmann::json;

namespace {

const json& cases() {
  static const json c = test::load_json("nn.json");
  return c;
}

const json& golden_case(const std::string& name) {
  for (const auto& c : cases())
    if (c["name"] == name) return c;
  throw std::runtime_error("no golden case " + name);
}

Tensor golden_tensor(const json& j, Device dev, DType t = DType::F32) {
  return Tensor::from_vector(j["data"].get<std::vector<float>>(), j["shape"].get<Shape>()).to(t).to(dev);
}

std::vector<double> as_f64(const Tensor& t) {
  Tensor c = t.to(DType::F64).to(Device::cpu()).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

ops::Size2 size2(const json& a, const char* key, ops::Size2 dflt = {0, 0}) {
  if (!a.contains(key)) return dflt;
  return {a[key][0].get<int64_t>(), a[key][1].get<int64_t>()};
}

Tensor resnet_block(const std::vector<Tensor>& in) {
  auto bn = [](const Tensor& t, const Tensor& w, const Tensor& b) { return ops::batch_norm(t, w, b, {}, {}, true); };
  Tensor h = ops::relu(bn(ops::conv2d(in[0], in[1], {1, 1}, {1, 1}), in[2], in[3]));
  return ops::relu(ops::add(bn(ops::conv2d(h, in[4], {1, 1}, {1, 1}), in[5], in[6]), in[0]));
}

Tensor run_nn_op(const std::string& op, const json& a, const std::vector<Tensor>& in) {
  if (op == "conv2d") {
    const ops::Size2 s = size2(a, "stride"), p = size2(a, "padding"), d = size2(a, "dilation");
    const int64_t g = a["groups"].get<int64_t>();
    return in.size() == 3 ? ops::conv2d(in[0], in[1], in[2], s, p, d, g) : ops::conv2d(in[0], in[1], s, p, d, g);
  }
  if (op == "resnet_block") return resnet_block(in);
  if (op == "max_pool2d") return ops::max_pool2d(in[0], size2(a, "kernel"), size2(a, "stride"), size2(a, "padding"));
  if (op == "avg_pool2d")
    return ops::avg_pool2d(in[0], size2(a, "kernel"), size2(a, "stride"), size2(a, "padding"),
                           a["count_include_pad"].get<bool>());
  if (op == "adaptive_avg_pool2d") return ops::adaptive_avg_pool2d(in[0], size2(a, "output_size"));
  if (op == "batch_norm_train") return ops::batch_norm(in[0], in[1], in[2], {}, {}, true, 0.1, a["eps"].get<double>());
  if (op == "batch_norm_eval") return ops::batch_norm(in[0], in[1], in[2], in[3], in[4], false, 0.1, a["eps"].get<double>());
  if (op == "bn_update_mean") return ops::batch_norm_update_stats(in[0], in[1], in[2], a["momentum"]).running_mean;
  if (op == "bn_update_var") return ops::batch_norm_update_stats(in[0], in[1], in[2], a["momentum"]).running_var;
  if (op == "layer_norm") {
    const Shape shape = a["normalized_shape"].get<Shape>();
    const double eps = a["eps"].get<double>();
    return in.size() == 3 ? ops::layer_norm(in[0], shape, in[1], in[2], eps) : ops::layer_norm(in[0], shape, {}, {}, eps);
  }
  ADD_FAILURE() << "golden case for unknown op " << op;
  return {};
}

// Relative tolerance per op in F32 (absolute: a tenth of it). oneDNN accumulates in float in
// its own order (observed error up to ~1e-5 relative), as layer_norm does (F32 over 16 lanes:
// ~4e-7 absolute where a row's mean is 5, F32's spacing there); our other loops accumulate in
// double or per window, and max pooling only selects.
double tolerance(const std::string& op) {
  if (op == "adaptive_avg_pool2d" || op == "max_pool2d") return 2e-6;
  if (op == "bn_update_mean" || op == "bn_update_var") return 1e-6;
  return 5e-5;
}

// |got - want| <= atol + rtol * |want| element-wise, all finite.
void expect_close(const std::vector<double>& got, const std::vector<float>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(test::within_tolerance(got[i], want[i], rtol, atol))
        << what << " element " << i << ": got " << got[i] << " want " << want[i];
}

TEST(NnHelpers, ExpectCloseFailsOnNaNAndInfinity) {
  static const std::vector<float> want = {1.f, 2.f};
  static const std::vector<double> ok = {1.0, 2.0}, nan_got = {1.0, NAN}, inf_got = {1.0, INFINITY};
  static const std::vector<float> inf_want = {1.f, INFINITY};
  expect_close(ok, want, 1e-6, 1e-6, "equal");
  EXPECT_NONFATAL_FAILURE(expect_close(nan_got, want, 1e-6, 1e-6, "nan got"), "nan got element 1");
  EXPECT_NONFATAL_FAILURE(expect_close(inf_got, want, 1e-6, 1e-6, "inf got"), "inf got element 1");
  EXPECT_NONFATAL_FAILURE(expect_close(ok, inf_want, 1e-6, 1e-6, "inf want"), "inf want element 1");
}

std::vector<int64_t> grad_inputs(const json& c) {
  return c.contains("grad_inputs") ? c["grad_inputs"].get<std::vector<int64_t>>() : std::vector<int64_t>{};
}

// Runs golden case `c`: inputs in `t` (BF16 casts only the inputs `low` selects), forward and
// loss = sum(out * upstream) backward; compares to the F32 goldens.
void check_case(const json& c, Device dev, DType t, double rtol, double atol,
                const std::function<bool(size_t)>& low = [](size_t) { return true; }) {
  SCOPED_TRACE(c["name"].get<std::string>() + " in " + dtype_name(t));
  std::vector<Tensor> in;
  const auto gi = grad_inputs(c);
  for (size_t i = 0; i < c["inputs"].size(); ++i) {
    in.push_back(golden_tensor(c["inputs"][i], dev, low(i) ? t : DType::F32));
    if (std::count(gi.begin(), gi.end(), static_cast<int64_t>(i))) in.back().set_requires_grad(true);
  }
  Tensor out = run_nn_op(c["op"], c["attrs"], in);
  ASSERT_EQ(out.device(), dev);
  EXPECT_EQ(out.dtype(), low(0) ? t : DType::F32);
  EXPECT_EQ(out.shape(), c["output"]["shape"].get<Shape>());
  expect_close(as_f64(out), c["output"]["data"].get<std::vector<float>>(), rtol, atol, "output");
  if (gi.empty()) return;
  Tensor upstream = golden_tensor(c["upstream"], dev, out.dtype());
  ops::sum(ops::mul(out, upstream)).backward();
  for (size_t k = 0; k < gi.size(); ++k) {
    const Tensor& x = in[static_cast<size_t>(gi[k])];
    ASSERT_TRUE(x.grad().defined()) << "input " << gi[k];
    EXPECT_EQ(x.grad().dtype(), x.dtype());
    expect_close(as_f64(x.grad()), c["grads"][k].get<std::vector<float>>(), rtol, atol,
                 "grad of input " + std::to_string(gi[k]));
  }
}

class NnConformance : public ::testing::TestWithParam<Mode> {};

TEST_P(NnConformance, ForwardAndBackwardMatchPyTorch) {
  ModeGuard guard(GetParam());
  ASSERT_GE(cases().size(), 25u);
  for (const auto& c : cases()) {
    const double tol = tolerance(c["op"]);
    check_case(c, device_of(GetParam()), DType::F32, tol, tol / 10);
  }
}

// BF16 inputs (accumulation in F32 inside oneDNN) against the F32 goldens: 2e-2 relative,
// plus 2e-2 of the case's largest magnitude for elements near zero. Batch norm keeps its
// weight, bias and running statistics in F32.
TEST_P(NnConformance, Bf16MatchesF32GoldenLoosely) {
  ModeGuard guard(GetParam());
  int n = 0;
  for (const auto& c : cases()) {
    if (!c.value("bf16", false)) continue;
    ++n;
    const auto want = c["output"]["data"].get<std::vector<float>>();
    double scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(double(v)));
    const bool bn = c["op"].get<std::string>().rfind("batch_norm", 0) == 0;
    check_case(c, device_of(GetParam()), DType::BF16, 2e-2, 2e-2 * scale, [bn](size_t i) { return !bn || i == 0; });
  }
  EXPECT_GE(n, 18);
}

INSTANTIATE_TEST_SUITE_P(AllDevices, NnConformance, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) {
                           return info.param == Mode::Cpu ? "cpu" : info.param == Mode::HpuEager ? "hpu_eager" : "hpu_lazy";
                         });

// Central differences of loss = sum(f(inputs) * u) against the analytic gradients.
void finite_difference_check(const json& c, DType t, double eps, double rtol, double atol) {
  SCOPED_TRACE(c["name"].get<std::string>() + " finite differences in " + dtype_name(t));
  std::vector<Tensor> in;
  for (const auto& j : c["inputs"]) in.push_back(golden_tensor(j, Device::cpu(), t));
  const auto gi = grad_inputs(c);
  for (int64_t i : gi) in[static_cast<size_t>(i)].set_requires_grad(true);
  const Tensor u = golden_tensor(c["upstream"], Device::cpu(), t);
  const std::vector<double> uv = as_f64(u);
  ops::sum(ops::mul(run_nn_op(c["op"], c["attrs"], in), u)).backward();
  auto loss = [&] {
    NoGradGuard ng;
    const std::vector<double> y = as_f64(run_nn_op(c["op"], c["attrs"], in));
    double l = 0;
    for (size_t k = 0; k < y.size(); ++k) l += y[k] * uv[k];
    return l;
  };
  for (int64_t i : gi) {
    Tensor& x = in[static_cast<size_t>(i)];
    const std::vector<double> analytic = as_f64(x.grad());
    Tensor base = x.detach().clone();
    const std::vector<double> xv = as_f64(base);
    for (size_t k = 0; k < xv.size(); ++k) {
      auto set = [&](double v) {
        std::vector<double> p = xv;
        p[k] = v;
        Tensor h = Tensor::empty(x.shape(), DType::F64);
        std::copy(p.begin(), p.end(), h.data<double>());
        x.detach().copy_from(h.to(t));
      };
      set(xv[k] + eps);
      const double lp = loss();
      set(xv[k] - eps);
      const double lm = loss();
      set(xv[k]);
      const double numeric = (lp - lm) / (2 * eps);
      EXPECT_TRUE(test::within_tolerance(analytic[k], numeric, rtol, atol))
          << "input " << i << " element " << k << ": analytic " << analytic[k] << ", numeric " << numeric;
    }
  }
}

TEST(NnFiniteDifferences, OneDnnOpsInF32) {
  for (const char* name : {"conv_stride2_pad1", "conv_dilation2", "conv_depthwise_stride2", "conv_groups2",
                           "max_pool_3x3_s2_p1", "avg_pool_3x3_s2_p1_exclude_pad", "bn_train_4d", "bn_eval_4d"})
    finite_difference_check(golden_case(name), DType::F32, 1e-3, 2e-2, 5e-3);
}

TEST(NnFiniteDifferences, OwnLoopsInF64) {
  for (const char* name : {"adaptive_7x5_to_3x2", "adaptive_rank3_10x7_to_4x3", "adaptive_upsample_3x3_to_5x4",
                           "ln_last_dim", "ln_two_dims", "ln_no_affine"}) {
    const json& c = golden_case(name);
    check_case(c, Device::cpu(), DType::F64, 1e-6, 1e-7);  // F64 forward and backward match the goldens too
    finite_difference_check(c, DType::F64, 1e-6, 1e-6, 1e-8);
  }
}

// ---- errors ----

using test::error_of;

TEST(NnErrors, ConvNamesTheOpShapesAndDtypes) {
  const Tensor x = Tensor::zeros({1, 3, 5, 5}), w = Tensor::zeros({4, 2, 3, 3}), b = Tensor::zeros({4});
  std::string e = error_of<ShapeError>([&] { ops::conv2d(x, w, b); });
  EXPECT_THAT(e, HasSubstr("op 'conv2d'"));
  EXPECT_THAT(e, HasSubstr("F32[1, 3, 5, 5], F32[4, 2, 3, 3], F32[4]"));
  EXPECT_THAT(e, HasSubstr("weight expects 2 input channels but x has 3"));
  e = error_of<ShapeError>([&] { ops::conv2d(x, Tensor::zeros({4, 3, 7, 7})); });
  EXPECT_THAT(e, HasSubstr("op 'conv2d_nobias'"));
  EXPECT_THAT(e, HasSubstr("larger than the padded input [5, 5]"));
  e = error_of<ShapeError>([&] { ops::conv2d(Tensor::zeros({1, 4, 5, 5}), Tensor::zeros({3, 2, 3, 3}), {1, 1}, {0, 0}, {1, 1}, 2); });
  EXPECT_THAT(e, HasSubstr("must be divisible by groups (2)"));
  e = error_of<ShapeError>([&] { ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5})); });
  EXPECT_THAT(e, HasSubstr("bias must have shape [4]"));
  e = error_of<ShapeError>([&] { ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}), {0, 1}); });
  EXPECT_THAT(e, HasSubstr("stride must be positive"));
  e = error_of<DTypeError>([&] { ops::conv2d(x.to(DType::F64), Tensor::zeros({4, 3, 3, 3}).to(DType::F64)); });
  EXPECT_THAT(e, HasSubstr("F64[1, 3, 5, 5]"));
  EXPECT_THAT(e, HasSubstr("must be F32 or BF16"));
  e = error_of<DTypeError>([&] { ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}).to(DType::BF16)); });
  EXPECT_THAT(e, HasSubstr("inputs 0 and 1 must have the same dtype"));
  e = error_of<ShapeError>([&] { ops::conv2d(Tensor::zeros({3, 5, 5}), Tensor::zeros({4, 3, 3, 3})); });
  EXPECT_THAT(e, HasSubstr("input 0 must have rank 4"));
}

TEST(NnErrors, PoolingNamesTheOpAndShapes) {
  const Tensor x = Tensor::zeros({1, 2, 6, 6});
  std::string e = error_of<ShapeError>([&] { ops::max_pool2d(x, {3, 3}, {1, 1}, {2, 2}); });
  EXPECT_THAT(e, HasSubstr("op 'max_pool2d': inputs F32[1, 2, 6, 6]"));
  EXPECT_THAT(e, HasSubstr("pad should be at most half of kernel size"));
  e = error_of<ShapeError>([&] { ops::avg_pool2d(x, {7, 7}); });
  EXPECT_THAT(e, HasSubstr("op 'avg_pool2d'"));
  EXPECT_THAT(e, HasSubstr("kernel [7, 7] is larger than the padded input [6, 6]"));
  e = error_of<ShapeError>([&] { ops::max_pool2d(Tensor::zeros({2, 6, 6}), {2, 2}); });
  EXPECT_THAT(e, HasSubstr("F32[2, 6, 6]: input 0 must have rank 4"));
  e = error_of<ShapeError>([&] { ops::adaptive_avg_pool2d(x, {0, 2}); });
  EXPECT_THAT(e, HasSubstr("op 'adaptive_avg_pool2d'"));
  EXPECT_THAT(e, HasSubstr("output size must be positive"));
  e = error_of<DTypeError>([&] { ops::adaptive_avg_pool2d(x.to(DType::I64), {1, 1}); });
  EXPECT_THAT(e, HasSubstr("I64[1, 2, 6, 6]: input 0 must be F32, F64 or BF16"));
  e = error_of<DTypeError>([&] { ops::max_pool2d(x.to(DType::F64), {2, 2}); });
  EXPECT_THAT(e, HasSubstr("must be F32 or BF16"));
}

TEST(NnErrors, NormsNameTheOpAndShapes) {
  const Tensor x = Tensor::zeros({4, 3, 2, 2}), c3 = Tensor::zeros({3}), c4 = Tensor::zeros({4});
  std::string e = error_of<ShapeError>([&] { ops::batch_norm(Tensor::zeros({1, 3, 1, 1}), c3, c3, {}, {}, true); });
  EXPECT_THAT(e, HasSubstr("op 'batch_norm_train': inputs F32[1, 3, 1, 1], F32[3], F32[3]"));
  EXPECT_THAT(e, HasSubstr("expected more than 1 value per channel when training"));
  e = error_of<ShapeError>([&] { ops::batch_norm(x, c4, c3, {}, {}, true); });
  EXPECT_THAT(e, HasSubstr("input 1 must have shape [3]"));
  e = error_of<DTypeError>([&] { ops::batch_norm(x, c3.to(DType::BF16), c3, {}, {}, true); });
  EXPECT_THAT(e, HasSubstr("input 1 must be F32"));
  e = error_of<InvalidArgument>([&] { ops::batch_norm(x, c3, c3, {}, {}, false); });
  EXPECT_THAT(e, HasSubstr("running_mean and running_var are required"));
  e = error_of<ShapeError>([&] { ops::batch_norm(x, c3, c3, c4, c3, false); });
  EXPECT_THAT(e, HasSubstr("op 'batch_norm_eval'"));
  EXPECT_THAT(e, HasSubstr("input 3 must have shape [3]"));
  e = error_of<ShapeError>([&] { ops::layer_norm(Tensor::zeros({2, 3}), {5}, Tensor::zeros({5}), Tensor::zeros({5})); });
  EXPECT_THAT(e, HasSubstr("op 'layer_norm': inputs F32[2, 3], F32[5], F32[5]"));
  EXPECT_THAT(e, HasSubstr("given normalized_shape=[5], expected input with shape [*, 5], but got input of size[2, 3]"));
  e = error_of<ShapeError>([&] { ops::layer_norm(Tensor::zeros({2, 3}), {3}, Tensor::zeros({2}), {}); });
  EXPECT_THAT(e, HasSubstr("input 1 must have shape [3]"));
  e = error_of<DTypeError>([&] { ops::layer_norm(Tensor::zeros({2, 3}).to(DType::BF16), {3}, {}, {}); });
  EXPECT_THAT(e, HasSubstr("must be F32 or F64"));
  e = error_of<ShapeError>([&] { ops::batch_norm_update_stats(x, c4, c3); });
  EXPECT_THAT(e, HasSubstr("op 'batch_norm_update_stats'"));
  EXPECT_THAT(e, HasSubstr("running statistic must have shape [3]"));
}

// ---- edge cases ----

TEST(NnEdgeCases, EmptyBatchGivesEmptyOutputs) {
  const Tensor x = Tensor::zeros({0, 3, 5, 5});
  EXPECT_EQ(ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({4})).shape(), (Shape{0, 4, 3, 3}));
  EXPECT_EQ(ops::max_pool2d(x, {2, 2}).shape(), (Shape{0, 3, 2, 2}));
  EXPECT_EQ(ops::adaptive_avg_pool2d(x, {2, 2}).shape(), (Shape{0, 3, 2, 2}));
  // The weight gradient of an empty batch is zero, not garbage.
  Tensor w = Tensor::full({4, 3, 3, 3}, 1.0f);
  w.set_requires_grad(true);
  ops::sum(ops::conv2d(x, w)).backward();
  const auto g = w.grad().to_vector();
  EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return v == 0; }));
}

TEST(NnEdgeCases, OmittedAffineParametersAreOneAndZero) {
  const Tensor x = golden_tensor(golden_case("bn_train_4d")["inputs"][0], Device::cpu());
  const Tensor c = Tensor::full({3}, 1.0f), z = Tensor::zeros({3});
  EXPECT_EQ(ops::batch_norm(x, {}, {}, {}, {}, true).to_vector(), ops::batch_norm(x, c, z, {}, {}, true).to_vector());
  const Tensor y = Tensor::from_vector({1, 2, 3, 4, 6, 8}, {2, 3}).to(DType::F64);
  const auto v = as_f64(ops::layer_norm(y, {3}, {}, {}, 0.0 + 1e-12));
  EXPECT_NEAR(v[0], -std::sqrt(1.5), 1e-9);  // (1 - 2) / sqrt(2/3)
  EXPECT_NEAR(v[4], 0.0, 1e-9);
}

TEST(NnEdgeCases, PreparedConvKernelRunsOnTwoThreadsAtOnce) {
  const json& c = golden_case("conv_stride2_pad1");
  const Tensor x = golden_tensor(c["inputs"][0], Device::cpu()), w = golden_tensor(c["inputs"][1], Device::cpu()),
               b = golden_tensor(c["inputs"][2], Device::cpu());
  const auto want = c["output"]["data"].get<std::vector<float>>();
  std::vector<std::vector<double>> got(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) got[t] = as_f64(ops::conv2d(x, w, b, {2, 2}, {1, 1}));
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) expect_close(g, want, 1e-4, 1e-5, "threaded conv");
}

}  // namespace
