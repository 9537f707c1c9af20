#include "engine/ops.h"

#include "engine/kernels.h"
#include "engine/op.h"

namespace hg::ops {

namespace {
Tensor binary(const Tensor& a, const Tensor& b, kernels::BinaryOp op) {
  const DType t = promote_types(a.dtype(), b.dtype());
  return dispatch("binary", {a.to(t), b.to(t)}, Attrs{{static_cast<int64_t>(op)}, {}});
}
int64_t norm(const Tensor& x, int64_t dim) { return dim < 0 && dim != kAllDims ? dim + x.ndim() : dim; }
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) { return dispatch("matmul", {a, b}, Attrs{{ta, tb}, {}}); }
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return dispatch("linear", {x, w, b}, Attrs{{0}, {}}); }
Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, kernels::BinaryOp::Add); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, kernels::BinaryOp::Sub); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, kernels::BinaryOp::Mul); }
Tensor scale(const Tensor& a, double s) { return dispatch("scale", {a}, Attrs{{}, {s}}); }
Tensor relu(const Tensor& x) { return dispatch("relu", {x}); }
Tensor softmax(const Tensor& x, int64_t dim) { return dispatch("softmax", {x}, Attrs{{norm(x, dim), 0}, {}}); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return dispatch("softmax", {x}, Attrs{{norm(x, dim), 1}, {}}); }
Tensor cross_entropy(const Tensor& logits, const Tensor& target) { return dispatch("cross_entropy", {logits, target}); }
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return dispatch("reduce", {x}, Attrs{{norm(x, dim), keepdim, 0}, {}});
}
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return dispatch("reduce", {x}, Attrs{{norm(x, dim), keepdim, 1}, {}});
}
Tensor expand(const Tensor& x, const Shape& shape) {
  return x.shape() == shape ? x : dispatch("expand", {x}, Attrs{shape, {}});
}
Tensor sum_to(const Tensor& x, const Shape& shape) {
  return x.shape() == shape ? x : dispatch("sum_to", {x}, Attrs{shape, {}});
}
Tensor argmax(const Tensor& x, int64_t dim) { return dispatch("argmax", {x}, Attrs{{norm(x, dim)}, {}}); }

}  // namespace hg::ops
