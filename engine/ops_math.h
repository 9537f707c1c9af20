// Element-wise math functions (the `math` op family): square root, error function,
// exponential and a power with a constant exponent, on F32, F64, BF16 and F16 (16-bit computed
// in F32), differentiable. Division (broadcasting, all dtypes) is ops::div in engine/ops.h.
//
//   using namespace hg::ops;
//   auto inv_std = div(ones, sqrt(add(var, eps)));
//   auto cdf = scale(add(erf(scale(x, M_SQRT1_2)), one), 0.5);
//   auto sq = pow(x, 2.0);
#pragma once
#include "engine/tensor.h"

namespace hg::ops {

Tensor sqrt(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);  // x^exponent, as torch.pow(x, float)

}  // namespace hg::ops
