// Reductions over any set of axes (sum, mean, amax) and argmax: schemas, backward formulas
// and the public wrappers (engine/ops_shape.h; the single-axis forms of engine/ops.h call these).
//
//   reduce:          ints {kind (kernels::ReduceKind), keepdim, dims...}; no dims = every dim
//   reduce_backward: grad (keepdim shape) -> x shape; ints: x shape; floats {scale}
//   amax_backward:   grad (keepdim shape), x -> x shape
//   argmax:          ints {dim (ops::kAllDims = flattened), keepdim} -> I64
#include <algorithm>

#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/kernels_shape.h"
#include "engine/ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using Ts = std::vector<Tensor>;
using kernels::ReduceKind;
using namespace schema;

std::vector<int64_t> dims_of(const Attrs& a) {
  return a.ints.size() > 2 ? std::vector<int64_t>(a.ints.begin() + 2, a.ints.end()) : std::vector<int64_t>{};
}

TensorMeta infer_reduce(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_float(op, in, 0);
  const int64_t kind = a.i(0);
  if (kind < 0 || kind > 2) fail(op, in, "unknown reduction " + std::to_string(kind));
  const std::vector<int64_t> dims = dims_of(a);
  std::vector<bool> seen(in[0].shape.size(), false);
  for (int64_t d : dims) {
    const int64_t nd = norm_dim(op, in, d);
    if (seen[nd]) fail(op, in, "dim " + std::to_string(nd) + " appears more than once in " + shape_str(dims));
    seen[nd] = true;
  }
  const std::vector<bool> mask = kernels::reduce_mask(in[0].shape, dims);
  Shape out;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d] && in[0].shape[d] == 0 && static_cast<ReduceKind>(kind) == ReduceKind::Max)
      fail(op, in, "max over the empty dim " + std::to_string(d) + " has no identity");
    if (!mask[d]) out.push_back(in[0].shape[d]);
    else if (a.i(1)) out.push_back(1);
  }
  return {out, in[0].dtype};
}

Ts bw_reduce(const Ts& in, const Tensor& g, const Attrs& a) {
  const Tensor& x = in[0];
  const std::vector<bool> mask = kernels::reduce_mask(x.shape(), dims_of(a));
  Shape keep = x.shape();
  int64_t count = 1;
  for (size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) count *= keep[d], keep[d] = 1;
  const Tensor gk = (g.dtype() == x.dtype() ? g : g.to(x.dtype())).reshape(keep);  // the grad has x's dtype
  const auto kind = static_cast<ReduceKind>(a.i(0));
  if (kind == ReduceKind::Max) return {dispatch("amax_backward", {gk, x})};
  // (count is 0 only when x is empty, and then so is its gradient)
  const double s = kind == ReduceKind::Mean && count ? 1.0 / static_cast<double>(count) : 1.0;
  return {dispatch("reduce_backward", {gk}, Attrs{x.shape(), {s}})};
}

// The gradient in keepdim shape must broadcast to the target (x) shape without new dims.
void expect_keepdim_grad(const OpSchema& op, const Metas& in, const Shape& target) {
  expect_float(op, in, 0);
  const Shape& g = in[0].shape;
  bool ok = g.size() == target.size();
  for (size_t d = 0; ok && d < g.size(); ++d) ok = g[d] == target[d] || g[d] == 1;
  if (!ok) fail(op, in, "gradient does not broadcast to " + shape_str(target) + " dim by dim");
}

TensorMeta infer_reduce_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_keepdim_grad(op, in, a.ints);
  return {a.ints, in[0].dtype};
}

TensorMeta infer_amax_backward(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_same_dtype(op, in, 0, 1);
  expect_keepdim_grad(op, in, in[1].shape);
  return in[1];
}

TensorMeta infer_argmax(const OpSchema& op, const Metas& in, const Attrs& a) {
  if (in[0].dtype == DType::BOOL) throw DTypeError(op_context(op, in) + ": argmax of BOOL is not supported");
  const bool keepdim = a.i(1);
  if (a.i(0) == ops::kAllDims) {
    if (in[0].numel() == 0) fail(op, in, "argmax of an empty tensor");
    return {keepdim ? Shape(in[0].shape.size(), 1) : Shape{}, DType::I64};
  }
  Shape s = in[0].shape;
  const int64_t d = norm_dim(op, in, a.i(0));
  if (s[d] == 0) fail(op, in, "argmax over an empty dimension");
  if (keepdim) s[d] = 1;
  else s.erase(s.begin() + d);
  return {s, DType::I64};
}

}  // namespace

void register_reduce_ops() {
  namespace k = kernels;
  register_op({"reduce", 1, infer_reduce, k::prepare_reduce, bw_reduce});
  register_op({"reduce_backward", 1, infer_reduce_backward, k::prepare_reduce_backward});
  register_op({"amax_backward", 2, infer_amax_backward, k::prepare_amax_backward});
  register_op({"argmax", 1, infer_argmax, k::prepare_argmax});
}

namespace ops {

namespace {
Tensor reduce(const Tensor& x, ReduceKind kind, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> ints{static_cast<int64_t>(kind), keepdim};
  const int64_t n = x.defined() ? x.ndim() : 0;
  for (int64_t d : dims) ints.push_back(d < 0 && d >= -n ? d + n : d);  // in-range negatives wrap
  std::sort(ints.begin() + 2, ints.end());  // one kernel per set of axes
  return dispatch("reduce", {x}, Attrs{ints, {}});
}
std::vector<int64_t> one(int64_t dim) { return dim == kAllDims ? std::vector<int64_t>{} : std::vector<int64_t>{dim}; }
}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return reduce(x, ReduceKind::Sum, dims, keepdim); }
Tensor sum(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim) { return reduce(x, ReduceKind::Sum, dims, keepdim); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return reduce(x, ReduceKind::Mean, dims, keepdim); }
Tensor mean(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim) { return reduce(x, ReduceKind::Mean, dims, keepdim); }
Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return reduce(x, ReduceKind::Max, one(dim), keepdim); }
Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return reduce(x, ReduceKind::Max, dims, keepdim); }
Tensor max(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim) { return reduce(x, ReduceKind::Max, dims, keepdim); }
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return reduce(x, ReduceKind::Max, dims, keepdim); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t n = x.defined() ? x.ndim() : 0;
  return dispatch("argmax", {x}, Attrs{{dim < 0 && dim >= -n ? dim + n : dim, keepdim}, {}});
}

}  // namespace ops
}  // namespace hg
