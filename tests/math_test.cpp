// The math family (sqrt, erf, exp, pow) and ops::div against PyTorch (tests/golden/math.json,
// scripts/golden_math.py): forward and gradients on cpu, hpu eager and hpu lazy; F64 finite
// differences; integer division.
#include <gtest/gtest.h>

#include <limits>

#include "engine/error.h"
#include "engine/ops.h"
#include "golden.h"
#include "gradcheck.h"

namespace hg {
namespace {

using test::Mode;
using test::ModeGuard;

Tensor run_math_op(const std::string& op, const nlohmann::json& attrs, const std::vector<Tensor>& in) {
  if (op == "sqrt") return ops::sqrt(in[0]);
  if (op == "erf") return ops::erf(in[0]);
  if (op == "exp") return ops::exp(in[0]);
  if (op == "pow") return ops::pow(in[0], attrs["exponent"].get<double>());
  if (op == "div") return ops::div(in[0], in[1]);
  ADD_FAILURE() << "unknown op " << op;
  return {};
}

class MathConformance : public ::testing::TestWithParam<Mode> {};

TEST_P(MathConformance, ForwardAndBackwardMatchPyTorch) {
  ModeGuard guard(GetParam());
  const Device dev = test::device_of(GetParam());
  const auto cases = test::load_json("math.json");
  ASSERT_EQ(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<Tensor> in;
    for (const auto& j : c["inputs"]) {
      in.push_back(test::tensor_from(j, dev));
      in.back().set_requires_grad(true);
    }
    Tensor out = run_math_op(c["op"], c["attrs"], in);
    ASSERT_EQ(out.device(), dev);
    EXPECT_EQ(out.shape(), c["output"]["shape"].get<Shape>());
    test::expect_close(out.to_vector(), c["output"]["data"].get<std::vector<float>>(), 2e-6, "output");
    ops::sum(ops::mul(out, test::tensor_from(c["upstream"], dev))).backward();
    for (size_t k = 0; k < in.size(); ++k) {
      ASSERT_TRUE(in[k].grad().defined());
      test::expect_close(in[k].grad().to_vector(), c["grads"][k].get<std::vector<float>>(), 1e-5, "grad");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Math, MathConformance, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) { return std::to_string(static_cast<int>(info.param)); });

TEST(MathGradCheck, FiniteDifferencesInF64) {
  const auto x = Tensor::from_vector({0.3f, 1.7f, 2.2f, 0.9f, 3.1f, 0.6f}, {2, 3}).to(DType::F64);
  const auto y = Tensor::from_vector({1.1f, -0.7f, 2.5f}, {3}).to(DType::F64);
  const test::FdTolerance tol{1e-6, 1e-6, 1e-9};
  auto unary = [&](const char* what, Tensor (*fn)(const Tensor&)) {
    test::expect_fd_gradients([fn](const std::vector<Tensor>& v) { return fn(v[0]); }, {x}, {0}, what, tol);
  };
  unary("sqrt", ops::sqrt);
  unary("erf", ops::erf);
  unary("exp", ops::exp);
  test::expect_fd_gradients([](const std::vector<Tensor>& v) { return ops::pow(v[0], 1.5); }, {x}, {0}, "pow", tol);
  test::expect_fd_gradients([](const std::vector<Tensor>& v) { return ops::div(v[0], v[1]); }, {x, y}, {0, 1}, "div", tol);
}

TEST(MathDiv, IntegersTruncateAndDivisionByZeroGivesZero) {
  const auto a = Tensor::from_indices({7, -7, 9, 5}, {4}), b = Tensor::from_indices({2, 2, 0, -3}, {4});
  EXPECT_EQ(ops::div(a, b).to_indices(), (std::vector<int64_t>{3, -3, 0, -1}));
  EXPECT_THROW(ops::sqrt(a), DTypeError);
}

TEST(MathDiv, MinimumByMinusOneWrapsInsteadOfTrapping) {
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  const auto a = Tensor::from_indices({kMin64, kMin64, 6}, {3}), b = Tensor::from_indices({-1, 1, -1}, {3});
  EXPECT_EQ(ops::div(a, b).to_indices(), (std::vector<int64_t>{kMin64, kMin64, -6}));
  constexpr int64_t kMin32 = std::numeric_limits<int32_t>::min();
  const auto q = ops::div(Tensor::from_indices({kMin32, 6}, {2}).to(DType::I32),
                          Tensor::from_indices({-1, -1}, {2}).to(DType::I32));
  EXPECT_EQ(q.to(DType::I64).to_indices(), (std::vector<int64_t>{kMin32, -6}));
}

}  // namespace
}  // namespace hg
