// The act family: activations, dropout, embedding, gather, where, masked_fill, cross_entropy
// and mse_loss against PyTorch golden values (tests/golden/act.json, scripts/golden_act.py)
// on cpu, hpu eager and hpu lazy; F64 finite differences; dropout's generator; index checks;
// error messages.
#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "engine/act_math.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/kernels_eltwise.h"
#include "engine/generator.h"
#include "engine/op.h"
#include "engine/ops.h"
#include "golden.h"
#include "gradcheck.h"
#include "graphs/lazy.h"
#include "tests/errors.h"

using namespace hg;
using namespace hg::test;
using ::testing::HasSubstr;

namespace {

// A golden input on `dev` in `float_type` (F32 or F64); BOOL and I32 are made on the cpu
// with a cast and then copied, so indices and masks always hold data.
Tensor golden_tensor(const nlohmann::json& j, Device dev, DType float_type = DType::F32) {
  const std::string t = j.value("dtype", std::string("F32"));
  if (t == "F32") return Tensor::from_vector(j["data"].get<std::vector<float>>(), j["shape"].get<Shape>()).to(float_type).to(dev);
  Tensor i = Tensor::from_indices(j["data"].get<std::vector<int64_t>>(), j["shape"].get<Shape>());
  return (t == "I64" ? i : i.to(dtype_from_name(t))).to(dev);
}

ops::Reduction reduction(const nlohmann::json& attrs) {
  const std::string r = attrs.value("reduction", std::string("mean"));
  return r == "none" ? ops::Reduction::None : r == "sum" ? ops::Reduction::Sum : ops::Reduction::Mean;
}

Tensor run_act_op(const std::string& op, const nlohmann::json& a, const std::vector<Tensor>& in) {
  if (op == "gelu") return ops::gelu(in[0], a.value("approximate", std::string("none")));
  if (op == "silu") return ops::silu(in[0]);
  if (op == "tanh") return ops::tanh(in[0]);
  if (op == "sigmoid") return ops::sigmoid(in[0]);
  if (op == "embedding") return ops::embedding(in[0], in[1]);
  if (op == "gather") return ops::gather(in[0], a["dim"].get<int64_t>(), in[1]);
  if (op == "where") return ops::where(in[0], in[1], in[2]);
  if (op == "masked_fill") return ops::masked_fill(in[0], in[1], a["value"].get<double>());
  if (op == "cross_entropy")
    return ops::cross_entropy(in[0], in[1], a["ignore_index"].get<int64_t>(), a["label_smoothing"].get<double>(),
                              reduction(a));
  if (op == "mse_loss") return ops::mse_loss(in[0], in[1], reduction(a));
  ADD_FAILURE() << "golden case for unknown op " << op;
  return {};
}

// Relative tolerance per op (absolute 1e-6 throughout): F32 activations and losses are a
// few ulps off the correctly rounded golden (measured: within 1e-6); copies and selections
// are exact.
double tolerance(const std::string& op) {
  if (op == "embedding" || op == "gather" || op == "where" || op == "masked_fill") return 0;
  return 5e-6;
}

class ActConformance : public ::testing::TestWithParam<Mode> {};

TEST_P(ActConformance, ForwardAndBackwardMatchPyTorch) {
  ModeGuard guard(GetParam());
  const Device dev = device_of(GetParam());
  const auto cases = test::load_json("act.json");
  ASSERT_GE(cases.size(), 26u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string op = c["op"];
    std::vector<Tensor> in;
    for (const auto& j : c["inputs"]) {
      in.push_back(golden_tensor(j, dev));
      if (in.back().dtype() == DType::F32) in.back().set_requires_grad(true);
    }
    Tensor out = run_act_op(op, c["attrs"], in);
    ASSERT_EQ(out.device(), dev);
    EXPECT_EQ(out.shape(), c["output"]["shape"].get<Shape>());
    test::expect_close(out.to_vector(), c["output"]["data"].get<std::vector<float>>(), tolerance(op), "output");
    Tensor loss = ops::sum(ops::mul(out, golden_tensor(c["upstream"], dev)));
    loss.backward();
    size_t g = 0;
    for (const auto& t : in) {
      if (t.dtype() != DType::F32) continue;
      ASSERT_TRUE(t.grad().defined());
      test::expect_close(t.grad().to_vector(), c["grads"][g++].get<std::vector<float>>(), 5e-6, "grad");
    }
  }
}

// The same cases in F64 (forward): the golden is the float32 rounding of the float64 value.
// Absolute 1e-15: far in GELU's negative tail PyTorch's 0.5 x (1 + erf) cancels to 0 where
// our x * Phi(x) (from erfc) keeps the true value, e.g. gelu(-9) = -1.0e-18.
TEST_P(ActConformance, ForwardInF64MatchesPyTorch) {
  ModeGuard guard(GetParam());
  const Device dev = device_of(GetParam());
  for (const auto& c : test::load_json("act.json")) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<Tensor> in;
    for (const auto& j : c["inputs"]) in.push_back(golden_tensor(j, dev, DType::F64));
    Tensor out = run_act_op(c["op"], c["attrs"], in);
    ASSERT_EQ(out.dtype(), DType::F64);
    const auto got = test::f64_values(out);
    const auto want = c["output"]["data"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15 + 1e-7 * std::fabs(want[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Act, ActConformance, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) {
                           return info.param == Mode::Cpu ? "cpu" : info.param == Mode::HpuEager ? "hpu_eager" : "hpu_lazy";
                         });

Tensor bools(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_indices(v, s).to(DType::BOOL); }

// ---- the F32 SIMD math behind the activations (engine/act_math.h) ----

// Largest relative error of f against ref on [lo, hi] (step 7e-4); NaN as soon as one error is
// not finite (f gave NaN or an infinity where ref is finite), so EXPECT_LT(max_rel_error(...),
// bound) fails then: std::max(worst, NaN) would have kept worst.
template <class F, class R>
double max_rel_error(float lo, float hi, F f, R ref) {
  double worst = 0;
  for (double v = lo; v <= hi; v += 7e-4) {
    const float x = static_cast<float>(v);
    const double want = ref(static_cast<double>(x));
    const double err = std::fabs(f(act::splat4(x))[0] - want) / std::fabs(want);
    if (!std::isfinite(err)) return std::numeric_limits<double>::quiet_NaN();
    worst = std::max(worst, err);
  }
  return worst;
}

TEST(ActMath, MaxRelErrorFailsOnNaNAndInfinity) {
  using act::f32x4;
  auto exp_ref = [](double x) { return std::exp(x); };
  auto exact = [](f32x4 v) { return act::exp4(v); };
  EXPECT_LT(max_rel_error(-1, 1, exact, exp_ref), 2e-7);
  auto nan_at_zero = [](f32x4 v) {
    f32x4 r = act::exp4(v);
    if (std::fabs(v[0]) < 1e-3f) r[0] = std::numeric_limits<float>::quiet_NaN();
    return r;
  };
  auto inf_at_zero = [](f32x4 v) {
    f32x4 r = act::exp4(v);
    if (std::fabs(v[0]) < 1e-3f) r[0] = std::numeric_limits<float>::infinity();
    return r;
  };
  // Static: EXPECT_NONFATAL_FAILURE's statement cannot use the test's locals.
  static double with_nan, with_inf;
  with_nan = max_rel_error(-1, 1, nan_at_zero, exp_ref);
  with_inf = max_rel_error(-1, 1, inf_at_zero, exp_ref);
  EXPECT_NONFATAL_FAILURE(EXPECT_LT(with_nan, 2e-7), "with_nan");
  EXPECT_NONFATAL_FAILURE(EXPECT_LT(with_inf, 2e-7), "with_inf");
}

// oneDNN's failures: a descriptor it rejects falls back to our loop (no dnnl::error out of
// prepare_*), and a failed execute aborts with a message instead of leaving the output unwritten.
TEST(ActDnnl, RejectedDescriptorsGiveNoKernelInsteadOfThrowing) {
  EXPECT_EQ(kernels::dnnl_eltwise(dnnl::algorithm::softmax_accurate, DType::F32, 4096), nullptr);
  EXPECT_NE(kernels::dnnl_eltwise(dnnl::algorithm::eltwise_relu, DType::F32, 4096), nullptr);
}

TEST(ActDnnlDeathTest, FailedExecuteAbortsWithAMessage) {
  const dnnl::memory::desc md({4096}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  const dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, md, 0.f, 0.f),
      kernels::dnnl_engine());
  const kernels::DnnlCall call(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, md}});  // no destination: invalid
  std::vector<float> x(4096);
  const void* ptrs[] = {x.data()};
  EXPECT_DEATH(call.run(ptrs), "oneDNN primitive_execute failed");
}

TEST(ActMath, SimdFunctionsAreAccurate) {
  using act::f32x4;
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  EXPECT_LT(max_rel_error(-87, 88, [](f32x4 v) { return act::exp4(v); }, [](double x) { return std::exp(x); }), 2e-7);
  EXPECT_LT(max_rel_error(-80, 80, [](f32x4 v) { return act::sigmoid4(v); }, [](double x) { return 1 / (1 + std::exp(-x)); }),
            2e-7);
  EXPECT_LT(max_rel_error(-20, 20, [](f32x4 v) { return act::tanh4(v); }, [](double x) { return std::tanh(x); }), 2e-7);
  EXPECT_LT(max_rel_error(0, 12, [](f32x4 v) { return act::normal_cdf4(v); }, cdf), 4e-7);
  EXPECT_LT(max_rel_error(-5, 0, [](f32x4 v) { return act::normal_cdf4(v); }, cdf), 3e-6);
  EXPECT_LT(max_rel_error(-12, -5, [](f32x4 v) { return act::normal_cdf4(v); }, cdf), 3e-5);
  // Saturation: no NaN from infinities, NaN stays NaN.
  const f32x4 sp = {-INFINITY, INFINITY, -1000.0f, 1000.0f};
  const f32x4 s = act::sigmoid4(sp), t = act::tanh4(sp), c = act::normal_cdf4(sp);
  for (int i = 0; i < 4; ++i) {
    const float want = i % 2 ? 1.0f : 0.0f;
    EXPECT_NEAR(s[i], want, 1e-30) << i;
    EXPECT_EQ(t[i], i % 2 ? 1.0f : -1.0f) << i;
    EXPECT_NEAR(c[i], want, 1e-30) << i;
  }
  EXPECT_TRUE(std::isnan(act::exp4(act::splat4(NAN))[0]));
  EXPECT_TRUE(std::isnan(act::tanh4(act::splat4(NAN))[0]));
  EXPECT_EQ(act::tanh4(act::splat4(1e-30f))[0], 1e-30f);  // odd series near 0: no cancellation
}

// BF16 inputs (what autocast's bf16-mixed hands on after a linear) are computed in F32 and
// rounded once; gradients come back in BF16.
TEST(ActBf16, ActivationsDropoutAndSelectionRunInBf16) {
  std::vector<float> v;
  for (int i = 0; i < 37; ++i) v.push_back(-6.0f + 0.33f * static_cast<float>(i));
  const Tensor xr = Tensor::from_vector(v, {37}).to(DType::BF16).to(DType::F32);  // exactly representable
  const std::vector<std::function<Tensor(const Tensor&)>> acts = {
      [](const Tensor& t) { return ops::gelu(t); }, [](const Tensor& t) { return ops::gelu(t, "tanh"); },
      [](const Tensor& t) { return ops::silu(t); }, [](const Tensor& t) { return ops::tanh(t); },
      [](const Tensor& t) { return ops::sigmoid(t); }};
  for (size_t k = 0; k < acts.size(); ++k) {
    SCOPED_TRACE("activation " + std::to_string(k));
    Tensor xb = xr.to(DType::BF16), xf = xr.clone();
    xb.set_requires_grad(true), xf.set_requires_grad(true);
    Tensor yb = acts[k](xb);
    ASSERT_EQ(yb.dtype(), DType::BF16);
    ops::sum(yb.to(DType::F32)).backward();
    ops::sum(acts[k](xf)).backward();
    ASSERT_EQ(xb.grad().dtype(), DType::BF16);
    test::expect_close(yb.to(DType::F32).to_vector(), acts[k](xr).to_vector(), 4e-3, "bf16 forward");
    test::expect_close(xb.grad().to(DType::F32).to_vector(), xf.grad().to_vector(), 4e-3, "bf16 grad");
  }
  manual_seed(Device::cpu(), 3);
  const auto drop_f32 = ops::dropout(Tensor::full({64}, 1.0f), 0.5).to_vector();
  manual_seed(Device::cpu(), 3);
  EXPECT_EQ(ops::dropout(Tensor::full({64}, 1.0f).to(DType::BF16), 0.5).to(DType::F32).to_vector(), drop_f32);
  Tensor a = Tensor::from_vector({1, 2, 3}, {1, 3}).to(DType::BF16), b = Tensor::from_vector({-1, -2}, {2, 1}).to(DType::BF16);
  a.set_requires_grad(true), b.set_requires_grad(true);
  Tensor w = ops::where(bools({1, 0, 0}, {3}), a, b);
  EXPECT_EQ(w.to(DType::F32).to_vector(), (std::vector<float>{1, -1, -1, 1, -2, -2}));
  ops::sum(w.to(DType::F32)).backward();
  EXPECT_EQ(a.grad().to(DType::F32).to_vector(), (std::vector<float>{2, 0, 0}));
  EXPECT_EQ(b.grad().to(DType::F32).to_vector(), (std::vector<float>{2, 2}));
}

// ---- finite differences in F64 ----

Tensor rand_f64(const Shape& s, uint32_t seed, double scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd;
  Tensor t = Tensor::empty(s, DType::F64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = scale * nd(rng);
  return t;
}

void fd_check(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
              const std::vector<size_t>& wrt, const std::string& what) {
  expect_fd_gradients(f, std::move(inputs), wrt, what, {.eps = 1e-6, .rtol = 1e-5, .atol = 1e-6});
}

TEST(ActGradCheck, ActivationsInF64) {
  Tensor x = rand_f64({3, 5}, 1, 2.5);
  x.data<double>()[0] = 12, x.data<double>()[1] = -12;  // saturated tails
  fd_check([](auto& in) { return ops::gelu(in[0]); }, {x}, {0}, "gelu erf");
  fd_check([](auto& in) { return ops::gelu(in[0], "tanh"); }, {x}, {0}, "gelu tanh");
  fd_check([](auto& in) { return ops::silu(in[0]); }, {x}, {0}, "silu");
  fd_check([](auto& in) { return ops::tanh(in[0]); }, {x}, {0}, "tanh");
  fd_check([](auto& in) { return ops::sigmoid(in[0]); }, {x}, {0}, "sigmoid");
}

TEST(ActGradCheck, SelectionAndIndexingInF64) {
  fd_check([](auto& in) { return ops::where(in[0], in[1], in[2]); },
           {bools({1, 0}, {2, 1}), rand_f64({1, 3}, 2), rand_f64({2, 3}, 3)}, {1, 2}, "where [2,1] [1,3] [2,3]");
  fd_check([](auto& in) { return ops::where(in[0], in[1], in[2]); },
           {bools({1, 0, 1}, {3}), rand_f64({2, 1}, 4), rand_f64({1}, 5)}, {1, 2}, "where [3] [2,1] [1]");
  fd_check([](auto& in) { return ops::masked_fill(in[0], in[1], 0.5); }, {rand_f64({2, 1}, 6), bools({0, 1, 0}, {1, 3})},
           {0}, "masked_fill [2,1] mask [1,3]");
  const Tensor i0 = Tensor::from_indices({2, 0, 1, 2, 2, 2, 0, 1}, {2, 4});
  fd_check([&](auto& in) { return ops::gather(in[0], 0, i0); }, {rand_f64({3, 4}, 7)}, {0}, "gather dim 0");
  const Tensor i1 = Tensor::from_indices({3, 3, 0, 1, 2, 0}, {3, 2});
  fd_check([&](auto& in) { return ops::gather(in[0], 1, i1); }, {rand_f64({3, 4}, 8)}, {0}, "gather dim 1");
  const Tensor tok = Tensor::from_indices({1, 3, 1, 0, 3, 3}, {2, 3});
  fd_check([&](auto& in) { return ops::embedding(tok, in[0]); }, {rand_f64({5, 2}, 9)}, {0}, "embedding");
}

TEST(ActGradCheck, LossesInF64) {
  const Tensor t = Tensor::from_indices({1, -100, 3, 0, 2}, {5});
  for (auto red : {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None}) {
    const std::string r = std::to_string(static_cast<int>(red));
    fd_check([&](auto& in) { return ops::cross_entropy(in[0], t, -100, 0.0, red); }, {rand_f64({5, 4}, 10)}, {0},
             "cross_entropy reduction " + r);
    fd_check([&](auto& in) { return ops::cross_entropy(in[0], t, -100, 0.1, red); }, {rand_f64({5, 4}, 11, 3)}, {0},
             "cross_entropy smoothed reduction " + r);
    fd_check([&](auto& in) { return ops::mse_loss(in[0], in[1], red); }, {rand_f64({3, 4}, 12), rand_f64({3, 4}, 13)},
             {0, 1}, "mse_loss reduction " + r);
  }
}

// ---- dropout ----

std::vector<float> dropout_values(Device d, uint64_t seed, int64_t n, double p) {
  manual_seed(d, seed);
  return ops::dropout(Tensor::full({n}, 1.0f, d), p).to_vector();
}

TEST(ActDropout, SameSeedSameMaskOtherSeedOtherMask) {
  const auto a = dropout_values(Device::cpu(), 123, 1000, 0.5);
  const auto b = dropout_values(Device::cpu(), 123, 1000, 0.5);
  const auto c = dropout_values(Device::cpu(), 124, 1000, 0.5);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  manual_seed(Device::cpu(), 123);
  Tensor ones = Tensor::full({1000}, 1.0f);
  const auto first = ops::dropout(ones, 0.5).to_vector(), second = ops::dropout(ones, 0.5).to_vector();
  EXPECT_EQ(first, a);
  EXPECT_NE(first, second);  // the generator advances between calls
  EXPECT_EQ(default_generator(Device::cpu()).offset(), 2u);
  // The mask depends on the seed only: the same on every device and in every mode.
  EXPECT_EQ(dropout_values(Device::hpu(0), 123, 1000, 0.5), a);
  ModeGuard lazy(Mode::HpuLazy);
  EXPECT_EQ(dropout_values(Device::hpu(0), 123, 1000, 0.5), a);
}

TEST(ActDropout, KeptFractionAndScale) {
  const int64_t n = 100000;
  for (double p : {0.1, 0.5, 0.9}) {
    const auto v = dropout_values(Device::cpu(), 7, n, p);
    int64_t kept = 0;
    for (float x : v) {
      if (x == 0) continue;
      ++kept;
      ASSERT_EQ(x, static_cast<float>(1.0 / (1.0 - p)));
    }
    const double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(kept), n * (1 - p), 3 * sigma) << "p = " << p;
  }
}

TEST(ActDropout, IdentityZerosAndBadProbability) {
  Tensor x = Tensor::from_vector({1, -2, 3, 4}, {2, 2});
  EXPECT_EQ(ops::dropout(x, 0.5, /*training=*/false).impl(), x.impl());
  EXPECT_EQ(ops::dropout(x, 0.0).impl(), x.impl());
  EXPECT_EQ(ops::dropout(x, 1.0).to_vector(), (std::vector<float>{0, 0, 0, 0}));
  Tensor d = Tensor::from_vector({1, 2, 3, 4}, {4}).to(DType::F64);
  EXPECT_EQ(ops::dropout(d, 1.0).dtype(), DType::F64);
  for (double p : {-0.1, 1.5, std::nan("")}) {
    try {
      ops::dropout(x, p);
      FAIL() << "no error for p = " << p;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("op 'dropout'"));
    }
  }
  EXPECT_THROW(ops::dropout(Tensor::from_indices({1, 2}, {2}), 0.5), DTypeError);
}

class ActDropoutModes : public ::testing::TestWithParam<Mode> {};

TEST_P(ActDropoutModes, GradientIsMaskTimesScale) {
  ModeGuard guard(GetParam());
  const Device dev = device_of(GetParam());
  const int64_t n = 64;
  const double p = 0.25;
  Tensor x = Tensor::full({n}, 1.0f, dev);
  x.set_requires_grad(true);
  std::vector<float> u(n);
  for (int64_t i = 0; i < n; ++i) u[i] = 0.5f + static_cast<float>(i);
  manual_seed(dev, 5);
  Tensor y = ops::dropout(x, p);
  ops::sum(ops::mul(y, Tensor::from_vector(u, {n}, dev))).backward();
  const auto yv = y.to_vector(), gv = x.grad().to_vector();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += yv[i] != 0;
    EXPECT_EQ(gv[i], u[i] * yv[i]) << i;  // y = mask * scale since x = 1
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, n);
}

INSTANTIATE_TEST_SUITE_P(Act, ActDropoutModes, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) {
                           return info.param == Mode::Cpu ? "cpu" : info.param == Mode::HpuEager ? "hpu_eager" : "hpu_lazy";
                         });

TEST(ActDropout, CachedLazyGraphDrawsANewMaskEachStep) {
  ModeGuard guard(Mode::HpuLazy);
  const Device hpu = Device::hpu(0);
  Tensor x = Tensor::full({256}, 1.0f, hpu);
  manual_seed(hpu, 11);
  std::vector<std::vector<float>> masks;
  graphs::LazyStats before{};
  for (int step = 0; step < 3; ++step) {
    if (step == 1) before = graphs::lazy_stats();
    Tensor y = ops::relu(ops::dropout(x, 0.5));
    graphs::mark_step(hpu);
    masks.push_back(y.to_vector());
  }
  const graphs::LazyStats after = graphs::lazy_stats();
  EXPECT_EQ(after.cache_hits - before.cache_hits, 2u);  // steps 2 and 3 replay step 1's graph
  EXPECT_EQ(after.cache_misses, before.cache_misses);
  EXPECT_NE(masks[0], masks[1]);
  EXPECT_NE(masks[1], masks[2]);
  manual_seed(hpu, 11);  // reseeding replays the same masks
  Tensor y = ops::relu(ops::dropout(x, 0.5));
  EXPECT_EQ(y.to_vector(), masks[0]);
}

// ---- indices: eager range checks, lazy zeros ----

TEST(ActIndex, EagerOutOfRangeIndicesThrowNamingOpPositionAndValue) {
  for (Device dev : {Device::cpu(), Device::hpu(0)}) {
    Tensor w = Tensor::zeros({5, 4}, DType::F32, dev);
    try {
      ops::embedding(Tensor::from_indices({0, 1, 2, 3, 4, 7}, {2, 3}, dev), w);
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("op 'embedding'"));
      EXPECT_THAT(e.what(), HasSubstr("index 7 at position [1, 2]"));
      EXPECT_THAT(e.what(), HasSubstr("[0, 5)"));
    }
    Tensor i32 = Tensor::from_indices({-1, 0}, {2}).to(DType::I32).to(dev);
    EXPECT_THROW(ops::embedding(i32, w), InvalidArgument);
    try {
      ops::gather(Tensor::zeros({3, 4}, DType::F32, dev), 1, Tensor::from_indices({0, 1, 4, 0}, {2, 2}, dev));
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("op 'gather'"));
      EXPECT_THAT(e.what(), HasSubstr("index 4 at position [1, 0]"));
      EXPECT_THAT(e.what(), HasSubstr("[0, 4)"));
    }
    EXPECT_THROW(ops::gather(Tensor::zeros({3}, DType::F32, dev), 0, Tensor::from_indices({-1}, {1}, dev)),
                 InvalidArgument);
  }
}

TEST(ActIndex, LazyOutOfRangeIndicesGiveZerosAndNoGradient) {
  ModeGuard guard(Mode::HpuLazy);
  const Device hpu = Device::hpu(0);
  // argmax makes lazy indices the host cannot check while tracing: [4, 1].
  Tensor idx = ops::argmax(Tensor::from_vector({0, 0, 0, 0, 9, 0, 9, 0, 0, 0}, {2, 5}, hpu), 1);
  ASSERT_TRUE(idx.is_lazy());
  Tensor w = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, hpu);
  w.set_requires_grad(true);
  Tensor e = ops::embedding(idx, w);
  ops::sum(e).backward();
  EXPECT_EQ(e.to_vector(), (std::vector<float>{0, 0, 3, 4}));
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{0, 0, 1, 1, 0, 0}));
  Tensor gidx = ops::argmax(Tensor::from_vector({0, 0, 0, 0, 9, 0, 9, 0, 0, 0}, {2, 5}, hpu), 1).reshape({2, 1});
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, hpu);  // index 4 is outside [0, 3)
  EXPECT_EQ(ops::gather(x, 1, gidx).to_vector(), (std::vector<float>{0, 5}));
}

TEST(ActIndex, EmbeddingKeepsIndexShapeAndAcceptsI32) {
  Tensor w = Tensor::from_vector({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor idx = Tensor::from_indices({2, 0, 2, 1}, {2, 1, 2}).to(DType::I32);
  Tensor e = ops::embedding(idx, w);
  EXPECT_EQ(e.shape(), (Shape{2, 1, 2, 2}));
  EXPECT_EQ(e.to_vector(), (std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11}));
  Tensor x = Tensor::from_indices({5, 6, 7, 8}, {2, 2});  // gather moves any dtype
  EXPECT_EQ(ops::gather(x, 0, Tensor::from_indices({1, 0}, {1, 2})).to_indices(), (std::vector<int64_t>{7, 6}));
  // where and masked_fill on integers; a value out of an integer dtype's range saturates.
  EXPECT_EQ(ops::where(bools({1, 0}, {2, 1}), x, Tensor::from_indices({0}, {1})).to_indices(),
            (std::vector<int64_t>{5, 6, 0, 0}));
  EXPECT_EQ(ops::masked_fill(x, bools({0, 1}, {2}), 1e30).to_indices(),
            (std::vector<int64_t>{5, std::numeric_limits<int64_t>::max(), 7, std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(ops::masked_fill(x.to(DType::I32), bools({1}, {1}), -1e30).to(DType::I64).to_indices(),
            (std::vector<int64_t>(4, std::numeric_limits<int32_t>::min())));
}

// ---- losses: edge cases beyond the golden values ----

TEST(ActLoss, CrossEntropyEdgeCases) {
  Tensor logits = Tensor::from_vector({1, 2, 3, 0, 0, 0}, {2, 3});
  const float row0 = static_cast<float>(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1);
  // The default arguments are PyTorch's: ignore_index -100, no smoothing, mean.
  EXPECT_FLOAT_EQ(ops::cross_entropy(logits, Tensor::from_indices({0, -100}, {2})).item(), row0);
  EXPECT_TRUE(std::isnan(ops::cross_entropy(logits, Tensor::from_indices({-100, -100}, {2})).item()));  // 0/0
  EXPECT_EQ(ops::cross_entropy(logits, Tensor::from_indices({-100, -100}, {2}), -100, 0, ops::Reduction::Sum).item(), 0);
  const auto none = ops::cross_entropy(logits, Tensor::from_indices({0, 5}, {2}), -100, 0, ops::Reduction::None).to_vector();
  EXPECT_FLOAT_EQ(none[0], row0);
  EXPECT_TRUE(std::isnan(none[1]));  // a target outside [0, C)
  // Smoothing 1 leaves only the uniform part: mean over classes of -log p.
  const float uniform = ops::cross_entropy(logits, Tensor::from_indices({2, 1}, {2}), -100, 1.0).item();
  EXPECT_NEAR(uniform, (3 * (row0 + 1) - 6 + 3 * std::log(3.0)) / 6, 1e-6);
  EXPECT_TRUE(std::isnan(ops::mse_loss(Tensor::zeros({0}), Tensor::zeros({0})).item()));
}

// ---- errors name the op, the shapes and the dtypes ----

template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

TEST(ActErrors, BadShapesAndDtypesNameTheOp) {
  const Tensor f = Tensor::zeros({2, 3}), idx = Tensor::from_indices({0, 1}, {2});
  expect_error<DTypeError>([&] { ops::gelu(idx); }, {"op 'gelu'", "I64[2]", "floating-point"});
  expect_error<DTypeError>([&] { ops::dropout(Tensor::zeros({2}, DType::I32), 0.5); }, {"op 'dropout'", "I32[2]"});
  expect_error<InvalidArgument>([&] { ops::gelu(f, "exact"); }, {"op 'gelu'", "exact"});
  expect_error<DTypeError>([&] { ops::where(f, f, f); }, {"op 'where'", "F32[2, 3]", "input 0 must be BOOL"});
  expect_error<ShapeError>([&] { ops::where(bools({1}, {1}), f, Tensor::zeros({4})); },
                           {"op 'where'", "[2, 3]", "[4]", "cannot be broadcast"});
  expect_error<DTypeError>([&] { ops::where(bools({1}, {1}), f, f.to(DType::F64)); }, {"op 'where'", "F64[2, 3]"});
  expect_error<ShapeError>([&] { ops::masked_fill(f, bools({1, 0}, {2}), 0); }, {"op 'masked_fill'", "BOOL[2]"});
  expect_error<ShapeError>([&] { ops::embedding(idx, Tensor::zeros({5})); }, {"op 'embedding'", "F32[5]", "rank 2"});
  expect_error<DTypeError>([&] { ops::embedding(f, Tensor::zeros({5, 2})); }, {"op 'embedding'", "I64 or I32"});
  expect_error<ShapeError>([&] { ops::gather(f, 0, idx); }, {"op 'gather'", "F32[2, 3], I64[2]", "same rank"});
  expect_error<ShapeError>([&] { ops::gather(f, 2, Tensor::from_indices({0, 0}, {1, 2})); }, {"op 'gather'", "dim 2"});
  expect_error<ShapeError>([&] { ops::gather(f, 1, Tensor::from_indices({0, 0, 0}, {3, 1})); },
                           {"op 'gather'", "I64[3, 1]", "dimension 0"});
  expect_error<ShapeError>([&] { ops::cross_entropy(f, Tensor::from_indices({0, 1, 2}, {3})); },
                           {"op 'cross_entropy'", "F32[2, 3], I64[3]", "target length"});
  expect_error<DTypeError>([&] { ops::cross_entropy(f, Tensor::zeros({2})); }, {"op 'cross_entropy'", "input 1 must be I64"});
  expect_error<InvalidArgument>([&] { ops::cross_entropy(f, idx, -100, 1.5); }, {"op 'cross_entropy'", "label_smoothing"});
  expect_error<ShapeError>([&] { ops::mse_loss(f, Tensor::zeros({3, 2})); }, {"op 'mse_loss'", "F32[2, 3], F32[3, 2]"});
  expect_error<DTypeError>([&] { ops::mse_loss(f, f.to(DType::F64)); }, {"op 'mse_loss'", "F32[2, 3], F64[2, 3]"});
}

TEST(ActGenerator, SeedsAreCountersPerDevice) {
  Generator g(42);
  const uint64_t a = g.next(), b = g.next();
  EXPECT_NE(a, b);
  g.manual_seed(42);
  EXPECT_EQ(g.next(), a);
  EXPECT_EQ(g.offset(), 1u);
  manual_seed(Device::hpu(0), 3);
  manual_seed(Device::cpu(), 4);
  EXPECT_EQ(default_generator(Device::hpu(0)).seed(), 3u);
  EXPECT_EQ(default_generator(Device::cpu()).seed(), 4u);
  EXPECT_THROW(default_generator(Device::hpu(99)), DeviceError);
}

}  // namespace

namespace hg {
namespace {

// torch.clamp: bounds inclusive, NaN kept, one-sided with an infinite bound, the gradient where
// min <= x <= max (values from torch.clamp(torch.tensor([...]), -1, 0.5) and its backward).
TEST(ActClamp, ValuesGradientAndBadBounds) {
  const Tensor x = Tensor::from_vector({-3.0f, -1.0f, 0.25f, 0.5f, 2.0f, NAN}, {6});
  const auto y = ops::clamp(x, -1.0, 0.5).to_vector();
  const std::vector<float> want{-1.0f, -1.0f, 0.25f, 0.5f, 0.5f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y[i], want[i]) << i;
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_EQ(ops::clamp(x, -INFINITY, 0.0).to_vector()[0], -3.0f);
  const Tensor g = dispatch("clamp_backward", {Tensor::full({6}, 1.0f), x}, Attrs{{}, {-1.0, 0.5}});
  const auto gv = g.to_vector();
  const std::vector<float> want_g{0, 1, 1, 1, 0, 0};  // PyTorch passes the gradient at the bounds
  for (size_t i = 0; i < want_g.size(); ++i) EXPECT_EQ(gv[i], want_g[i]) << i;
  for (const auto& bad : {Attrs{{}, {1.0, 0.0}}, Attrs{{}, {NAN, 1.0}}, Attrs{{}, {0.0}}})
    EXPECT_THAT(test::error_of<Error>([&] { dispatch("clamp", {x}, bad); }), HasSubstr("bounds min <= max"));
}

}  // namespace
}  // namespace hg
