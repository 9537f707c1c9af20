// Dtypes: 16-bit float conversions, casts, promotion, ops in F64/BF16/I32/I64, autocast,
// and finite-difference gradient checks in F64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "golden.h"
#include "gradcheck.h"

using namespace hg;
using ::testing::HasSubstr;

namespace {

TEST(Float16, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16::from_float(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16::from_float(-2.0f).bits, 0xc000);
  // 1 + 2^-8 lies exactly between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16::from_float(1.0f + 1.0f / 256).bits, 0x3f80);
  EXPECT_EQ(bf16::from_float(1.0f + 3.0f / 256).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(bf16::from_float(NAN).to_float()));
  EXPECT_EQ(bf16::from_float(INFINITY).to_float(), INFINITY);
  for (uint32_t b = 0; b < 0x10000; ++b) {  // every finite bf16 survives a round trip
    const bf16 h{static_cast<uint16_t>(b)};
    const float f = h.to_float();
    if (std::isfinite(f)) {
      ASSERT_EQ(bf16::from_float(f).bits, h.bits) << b;
    }
  }
}

TEST(Float16, F16MatchesIeeeHalf) {
  EXPECT_EQ(f16::from_float(1.0f).bits, 0x3c00);
  EXPECT_EQ(f16::from_float(65504.0f).bits, 0x7bff);             // largest finite
  EXPECT_EQ(f16::from_float(65520.0f).bits, 0x7c00);             // rounds to inf
  EXPECT_EQ(f16::from_float(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(f16::from_float(std::ldexp(1.0f, -26)).bits, 0x0000);  // below half of it
  EXPECT_EQ(f16::from_float(-0.0f).bits, 0x8000);
  EXPECT_EQ(f16{0x3555}.to_float(), 0.333251953125f);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const f16 h{static_cast<uint16_t>(b)};
    const float f = h.to_float();
    if (std::isfinite(f)) {
      ASSERT_EQ(f16::from_float(f).bits, h.bits) << b;
    }
  }
}

TEST(Cast, BetweenAllDtypes) {
  const std::vector<float> v{0, 1, -2, 3.5f, 100};
  Tensor x = Tensor::from_vector(v, {5});
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Tensor y = x.to(t);
    EXPECT_EQ(y.dtype(), t);
    const std::vector<double> back = test::f64_values(y);
    for (size_t i = 0; i < v.size(); ++i) {
      double want = v[i];
      if (!is_floating(t)) want = std::trunc(want);
      if (t == DType::U8) want = std::max(0.0, want);  // float -> integer saturates
      if (t == DType::BOOL) want = v[i] != 0;
      EXPECT_EQ(back[i], want) << i;
    }
  }
}

// The F32 <-> BF16 casts (vectorized) round as bf16::from_float on every BF16 value with the
// dropped bits at 0, just below a tie, the tie, just above it and all ones: NaNs, infinities,
// subnormals and overflow to infinity included; 37 tail elements after the vectors.
TEST(Cast, F32ToBf16AndBackMatchTheScalarConversionsOnEveryPattern) {
  const uint32_t lows[] = {0, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::vector<float> v;
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) v.push_back(std::bit_cast<float>(hi << 16 | lo));
  for (int k = 0; k < 37; ++k) v.push_back(static_cast<float>(k) / 7);
  const std::vector<float> back = Tensor::from_vector(v, {static_cast<int64_t>(v.size())})
                                      .to(DType::BF16)
                                      .to(DType::F32)
                                      .to_vector();
  ASSERT_EQ(back.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(bf16::from_float(v[i]).to_float()))
        << "element " << i << ": bits " << std::hex << std::bit_cast<uint32_t>(v[i]);
}

TEST(Cast, FloatToIntSaturatesAndNanIsZero) {
  Tensor x = Tensor::from_vector({NAN, 1e30f, -1e30f, 2.9f}, {4});
  EXPECT_EQ(x.to(DType::I32).to(DType::I64).to_indices(),
            (std::vector<int64_t>{0, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 2}));
  EXPECT_EQ(x.to(DType::I64).to_indices()[1], std::numeric_limits<int64_t>::max());
}

TEST(Promotion, FollowsPyTorch) {
  EXPECT_EQ(promote_types(DType::F32, DType::I64), DType::F32);
  EXPECT_EQ(promote_types(DType::BF16, DType::F16), DType::F32);
  EXPECT_EQ(promote_types(DType::BF16, DType::F64), DType::F64);
  EXPECT_EQ(promote_types(DType::I32, DType::I64), DType::I64);
  EXPECT_EQ(promote_types(DType::BOOL, DType::U8), DType::U8);
  EXPECT_EQ(promote_types(DType::BF16, DType::I64), DType::BF16);
  Tensor f = Tensor::from_vector({1.5f, 2.5f}, {2});
  Tensor i = Tensor::from_indices({2, 3}, {2});
  Tensor s = ops::mul(f, i);
  EXPECT_EQ(s.dtype(), DType::F32);
  EXPECT_EQ(s.to_vector(), (std::vector<float>{3.0f, 7.5f}));
  EXPECT_EQ(ops::add(i, i).to_indices(), (std::vector<int64_t>{4, 6}));  // integer arithmetic
  EXPECT_THROW(ops::add(i.to(DType::BOOL), i.to(DType::BOOL)), DTypeError);
}

// Every golden case of the core ops whose inputs are all float, in F64 and BF16.
TEST(DtypeConformance, CoreOpsInF64AndBf16) {
  const auto cases = test::load_json("ops.json");
  int checked = 0;
  for (const auto& c : cases) {
    const std::string op = c["op"];
    if (op != "matmul" && op != "linear" && op != "relu" && op != "add" && op != "sub" && op != "mul" &&
        op != "softmax" && op != "log_softmax")
      continue;
    for (DType t : {DType::F64, DType::BF16, DType::F32}) {
      for (Device d : {Device::cpu(), Device::hpu(0)}) {
        SCOPED_TRACE(c["name"].get<std::string>() + " " + dtype_name(t) + " " + d.str());
        std::vector<Tensor> in;
        for (const auto& j : c["inputs"]) in.push_back(test::tensor_from(j, d).to(t));
        Tensor out = op == "matmul" ? ops::matmul(in[0], in[1])
                     : op == "linear" ? ops::linear(in[0], in[1], in[2])
                     : op == "relu"   ? ops::relu(in[0])
                     : op == "add"    ? ops::add(in[0], in[1])
                     : op == "sub"    ? ops::sub(in[0], in[1])
                     : op == "softmax" ? ops::softmax(in[0], -1)
                     : op == "log_softmax" ? ops::log_softmax(in[0], -1)
                                      : ops::mul(in[0], in[1]);
        EXPECT_EQ(out.dtype(), t);
        const double rtol = t == DType::BF16 ? 3e-2 : 1e-6, atol = t == DType::BF16 ? 3e-2 : 1e-6;
        test::expect_close(out.to(DType::F32).to_vector(), c["output"]["data"].get<std::vector<float>>(), rtol,
                           "output", atol);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 11 * 3 * 2);
}

TEST(Autocast, LowersMatmulKeepsLossInF32AndGradsReachF32Weights) {
  Tensor x = Tensor::from_vector({0.5f, -1, 2, 0.25f, 1, -0.5f}, {2, 3});
  Tensor w = Tensor::from_vector({0.1f, 0.2f, -0.3f, 0.4f, -0.5f, 0.6f, 0.7f, 0.8f, -0.9f}, {3, 3});
  Tensor b = Tensor::from_vector({0.01f, -0.02f, 0.03f}, {3});
  Tensor y = Tensor::from_indices({2, 0}, {2});
  w.set_requires_grad(true);
  Tensor ref_loss = ops::cross_entropy(ops::linear(x, w, b), y);
  ref_loss.backward();
  const std::vector<float> ref_grad = w.grad().to_vector();
  w.zero_grad();
  {
    AutocastGuard autocast;
    Tensor logits = ops::linear(x, w, b);
    EXPECT_EQ(logits.dtype(), DType::BF16);
    Tensor loss = ops::cross_entropy(logits, y);
    EXPECT_EQ(loss.dtype(), DType::F32);
    EXPECT_NEAR(loss.item(), ref_loss.item(), 2e-2);
    loss.backward();
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  test::expect_close(w.grad().to_vector(), ref_grad, 5e-2, "bf16-mixed weight grad", 2e-2);
  EXPECT_FALSE(autocast_enabled());
}

// Central differences in F64 against the analytic backward, in every input.
void check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                     const std::string& what) {
  std::vector<size_t> all(inputs.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = k;
  test::expect_fd_gradients(f, std::move(inputs), all, what, {.eps = 1e-6, .rtol = 1e-4, .atol = 1e-5});
}

Tensor rand_f64(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (auto& x : v) x = nd(rng) + (nd(rng) > 0 ? 0.1f : -0.1f);  // away from relu's kink
  return Tensor::from_vector(v, s).to(DType::F64);
}

TEST(FiniteDifferences, CoreOpsInF64) {
  check_gradients([](auto& in) { return ops::matmul(in[0], in[1]); }, {rand_f64({3, 4}, 1), rand_f64({4, 2}, 2)},
                  "matmul");
  check_gradients([](auto& in) { return ops::matmul(in[0], in[1], true, true); },
                  {rand_f64({4, 3}, 3), rand_f64({2, 4}, 4)}, "matmul transposed");
  check_gradients([](auto& in) { return ops::linear(in[0], in[1], in[2]); },
                  {rand_f64({2, 3}, 5), rand_f64({4, 3}, 6), rand_f64({4}, 7)}, "linear");
  check_gradients([](auto& in) { return ops::mul(in[0], in[1]); }, {rand_f64({2, 1}, 8), rand_f64({1, 3}, 9)},
                  "mul broadcast");
  check_gradients([](auto& in) { return ops::sub(in[0], in[1]); }, {rand_f64({2, 3}, 10), rand_f64({3}, 11)},
                  "sub broadcast");
  check_gradients([](auto& in) { return ops::relu(ops::scale(in[0], 1.5)); }, {rand_f64({3, 3}, 12)}, "relu");
  check_gradients([](auto& in) { return ops::expand(in[0], {3, 2, 4}); }, {rand_f64({2, 1}, 13)}, "expand");
  check_gradients([](auto& in) { return ops::softmax(in[0], -1); }, {rand_f64({2, 5}, 14)}, "softmax");
  check_gradients([](auto& in) { return ops::log_softmax(in[0], 0); }, {rand_f64({3, 2}, 15)}, "log_softmax dim 0");
}

TEST(Errors, DtypeMismatchNamesTheOp) {
  Tensor a = Tensor::zeros({2, 2}), b = Tensor::zeros({2, 2}).to(DType::F64);
  try {
    ops::matmul(a, b);
    FAIL() << "no error";
  } catch (const DTypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 'matmul'"));
    EXPECT_THAT(e.what(), HasSubstr("F32[2, 2], F64[2, 2]"));
  }
  EXPECT_THROW(ops::relu(Tensor::from_indices({1}, {1})), DTypeError);
}

}  // namespace
