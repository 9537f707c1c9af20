// Finite-difference gradient checks: central differences of L = sum(f(inputs) * upstream)
// against the gradients autograd computes, element by element.
//
//   hg::test::expect_fd_gradients([](auto& in) { return hg::ops::softmax(in[0], -1); },
//                                 {x_f64}, /*wrt=*/{0}, "softmax", {.eps = 1e-6, .rtol = 1e-5, .atol = 1e-6});
// Inputs live on the cpu, in F64 (own kernels) or F32 (oneDNN kernels, with a larger eps).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "tests/golden.h"

namespace hg::test {

struct FdTolerance {
  double eps;   // the step
  double rtol;  // |analytic - numeric| <= atol + rtol * |numeric|
  double atol;
};

inline std::vector<double> f64_values(const Tensor& t) {
  Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

inline void expect_fd_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                std::vector<Tensor> inputs, const std::vector<size_t>& wrt, const std::string& what,
                                FdTolerance tol) {
  SCOPED_TRACE(what);
  for (auto& t : inputs) t = t.detach().clone();  // fresh leaves: no gradient left from another check
  for (size_t k : wrt) inputs[k].set_requires_grad(true);
  Tensor out = f(inputs);
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w(static_cast<size_t>(out.numel()));
  for (auto& v : w) v = u(rng);
  Tensor upstream = Tensor::from_vector(w, out.shape()).to(out.dtype());
  ops::sum(ops::mul(out, upstream)).to(DType::F32).backward();
  const std::vector<double> up = f64_values(upstream);
  auto loss = [&] {
    NoGradGuard g;
    const std::vector<double> o = f64_values(f(inputs));
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * up[i];
    return s;
  };
  auto bump = [](const Tensor& t, int64_t i, double d) {
    if (t.dtype() == DType::F64) t.data<double>()[i] += d;
    else t.data<float>()[i] += static_cast<float>(d);
  };
  for (size_t k : wrt) {
    ASSERT_TRUE(inputs[k].grad().defined()) << "input " << k;
    const std::vector<double> analytic = f64_values(inputs[k].grad());
    ASSERT_EQ(static_cast<int64_t>(analytic.size()), inputs[k].numel());
    for (int64_t i = 0; i < inputs[k].numel(); ++i) {
      bump(inputs[k], i, tol.eps);
      const double plus = loss();
      bump(inputs[k], i, -2 * tol.eps);
      const double minus = loss();
      bump(inputs[k], i, tol.eps);
      const double numeric = (plus - minus) / (2 * tol.eps);
      // Both finite: an infinite numeric gradient would make the bound infinite.
      EXPECT_TRUE(within_tolerance(analytic[i], numeric, tol.rtol, tol.atol))
          << "input " << k << " element " << i << ": analytic " << analytic[i] << ", numeric " << numeric;
    }
  }
}

}  // namespace hg::test
