// The op functions users call. Each goes through hg::dispatch (engine/op.h).
//
//   using namespace hg::ops;
//   auto h = relu(linear(x, w1, b1));                  // x [N,K], w1 [M,K] (PyTorch layout), b1 [M]
//   auto loss = cross_entropy(linear(h, w2, b2), y);   // y: I64 class indices [N]
//   auto p = softmax(logits, -1);
#pragma once
#include "engine/tensor.h"
#include "engine/ops_act.h"
#include "engine/ops_nn.h"

namespace hg::ops {

inline constexpr int64_t kAllDims = INT64_MIN;

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);  // x @ weight^T + bias
Tensor add(const Tensor& a, const Tensor& b);  // NumPy broadcasting
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // integer division truncates (x / 0 gives 0)
Tensor scale(const Tensor& a, double s);
Tensor relu(const Tensor& x);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor sum(const Tensor& x, int64_t dim = kAllDims, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim = kAllDims, bool keepdim = false);
Tensor expand(const Tensor& x, const Shape& shape);   // broadcast to `shape` (copies)
Tensor sum_to(const Tensor& x, const Shape& shape);   // the reverse: sum broadcast dims away
Tensor argmax(const Tensor& x, int64_t dim);          // I64

}  // namespace hg::ops

#include "engine/ops_math.h"   // sqrt, erf, exp, pow
#include "engine/ops_shape.h"  // permute, slice, concat, axis reductions, bmm, attention (needs kAllDims)
