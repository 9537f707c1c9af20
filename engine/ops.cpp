#include "engine/ops.h"

#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/op.h"
#include "engine/op_attrs.h"

namespace hg::ops {

namespace {
Tensor binary(const Tensor& a, const Tensor& b, kernels::BinaryOp op) {
  const DType t = promote_types(a.dtype(), b.dtype());
  return dispatch("binary", {a.to(t), b.to(t)}, attrs::Binary{op}.pack());
}
int64_t norm(const Tensor& x, int64_t dim) { return dim < 0 && dim != kAllDims ? dim + x.ndim() : dim; }
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  if (a.defined() && b.defined() && (a.ndim() > 2 || b.ndim() > 2)) return bmm(a, b, ta, tb);  // batched
  return dispatch("matmul", {a, b}, attrs::Matmul{ta, tb}.pack());
}
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return dispatch("linear", {x, w, b}, attrs::Linear{}.pack()); }
Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, kernels::BinaryOp::Add); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, kernels::BinaryOp::Sub); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, kernels::BinaryOp::Mul); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(a, b, kernels::BinaryOp::Div); }
Tensor scale(const Tensor& a, double s) { return dispatch("scale", {a}, attrs::Scale{s}.pack()); }
Tensor relu(const Tensor& x) { return dispatch("relu", {x}); }
Tensor softmax(const Tensor& x, int64_t dim) { return dispatch("softmax", {x}, attrs::Softmax{norm(x, dim), false}.pack()); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return dispatch("softmax", {x}, attrs::Softmax{norm(x, dim), true}.pack()); }
// The reductions are in reduce_ops.cpp (any set of axes); these are the single-axis forms.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) { return sum(x, dim == kAllDims ? Shape{} : Shape{dim}, keepdim); }
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) { return mean(x, dim == kAllDims ? Shape{} : Shape{dim}, keepdim); }
Tensor expand(const Tensor& x, const Shape& shape) {
  Shape s = shape;  // -1 keeps x's size in that dim (PyTorch); not allowed for new leading dims
  const int64_t lead = static_cast<int64_t>(s.size()) - x.ndim();
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i)
    if (s[i] == -1 && i >= lead) s[i] = x.shape()[i - lead];
  for (int64_t v : s)
    if (v < 0)
      throw ShapeError("op 'expand': input " + meta_str(x.meta()) + ": cannot expand to " + shape_str(shape) +
                       " (-1 only keeps an existing dim)");
  return x.shape() == s ? x : dispatch("expand", {x}, Attrs{s, {}});
}
Tensor sum_to(const Tensor& x, const Shape& shape) {
  return x.shape() == shape ? x : dispatch("sum_to", {x}, Attrs{shape, {}});
}
Tensor argmax(const Tensor& x, int64_t dim) { return argmax(x, dim, false); }

}  // namespace hg::ops
