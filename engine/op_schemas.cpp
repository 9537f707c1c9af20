// The core ops (the MLP path): shape inference, kernel factory and backward formula of each.
// register_builtin_ops() at the end registers every op family (engine/op_families.h).
#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/op_families.h"
#include "engine/ops.h"
#include "engine/post_ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using kernels::BinaryOp;
using namespace schema;

// ---- inference ----

// matmul/linear run in F32 and BF16 (oneDNN) and F64 (a plain loop, for gradient checks).
void expect_matmul_dtypes(const OpSchema& op, const Metas& in) {
  for (size_t i = 1; i < in.size(); ++i) expect_same_dtype(op, in, 0, i);
  const DType t = in[0].dtype;
  if (t != DType::F32 && t != DType::BF16 && t != DType::F64)
    throw DTypeError(op_context(op, in) + ": supports F32, BF16 and F64");
}

// ints[k]: the fused activation (engine/post_ops.h).
void expect_fused_act(const OpSchema& op, const Metas& in, const Attrs& a, size_t k) {
  if (!valid_fused_act(a.i(k))) fail(op, in, "bad fused activation code " + std::to_string(a.i(k)));
}

// A bias of n elements: [n] or [1, n].
void expect_row_bias(const OpSchema& op, const Metas& in, size_t i, int64_t n) {
  const Shape& b = in[i].shape;
  if (!(b == Shape{n} || b == Shape{1, n}))
    fail(op, in, "bias must have shape [" + std::to_string(n) + "] or [1, " + std::to_string(n) + "]");
}

// (a, b[, bias]); ints {ta, tb, act}
TensorMeta infer_matmul(const OpSchema& op, const Metas& in, const Attrs& a) {
  if (in.size() != 2 && in.size() != 3) fail(op, in, "takes 2 or 3 inputs (a, b[, bias])");
  expect_matmul_dtypes(op, in);
  expect_rank(op, in, 0, 2), expect_rank(op, in, 1, 2);
  expect_fused_act(op, in, a, 2);
  const bool ta = a.i(0), tb = a.i(1);
  const int64_t m = in[0].shape[ta], k = in[0].shape[!ta], k2 = in[1].shape[tb], n = in[1].shape[!tb];
  if (k != k2) fail(op, in, "inner dimensions differ (" + std::to_string(k) + " vs " + std::to_string(k2) + ")");
  if (in.size() == 3) expect_row_bias(op, in, 2, n);
  return {{m, n}, in[0].dtype};
}

// (x, w, b); ints {act}
TensorMeta infer_linear(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_matmul_dtypes(op, in);
  expect_rank(op, in, 0, 2), expect_rank(op, in, 1, 2);
  expect_fused_act(op, in, a, 0);
  if (in[0].shape[1] != in[1].shape[1])
    fail(op, in, "x has " + std::to_string(in[0].shape[1]) + " features but weight expects " +
                     std::to_string(in[1].shape[1]));
  expect_row_bias(op, in, 2, in[1].shape[0]);
  return {{in[0].shape[0], in[1].shape[0]}, in[0].dtype};
}

TensorMeta infer_binary(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_same_dtype(op, in, 0, 1);
  if (in[0].dtype == DType::BOOL || in[0].dtype == DType::U8)
    throw DTypeError(op_context(op, in) + ": arithmetic on " + dtype_name(in[0].dtype) + " is not supported");
  return {broadcast_shape(op, in, in[0].shape, in[1].shape), in[0].dtype};
}

TensorMeta infer_same(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_float(op, in, 0);
  for (size_t i = 1; i < in.size(); ++i) {
    expect_same_dtype(op, in, 0, i);
    if (in[i].shape != in[0].shape) fail(op, in, "inputs must have the same shape");
  }
  return in[0];
}

TensorMeta infer_cast(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t t = a.i(0);
  if (t < 0 || t > static_cast<int64_t>(DType::BOOL)) fail(op, in, "bad target dtype " + std::to_string(t));
  return {in[0].shape, static_cast<DType>(t)};
}

TensorMeta infer_softmax(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_float(op, in, 0);
  for (size_t i = 1; i < in.size(); ++i) expect_same_dtype(op, in, 0, i);
  norm_dim(op, in, a.i(0));
  return in.back();
}

TensorMeta infer_reshape(const OpSchema& op, const Metas& in, const Attrs& a) {
  int64_t n = 1;  // the target's numel, overflow-checked: the shape comes from attributes (e.g. a graph-cache file)
  for (int64_t d : a.ints)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) fail(op, in, "cannot reshape to " + shape_str(a.ints));
  if (n != in[0].numel()) fail(op, in, "cannot reshape to " + shape_str(a.ints));
  return {a.ints, in[0].dtype};
}

TensorMeta infer_expand(const OpSchema& op, const Metas& in, const Attrs& a) {
  if (broadcast_shape(op, in, in[0].shape, a.ints) != a.ints) fail(op, in, "cannot expand to " + shape_str(a.ints));
  return {a.ints, in[0].dtype};
}

TensorMeta infer_sum_to(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_float(op, in, 0);
  if (broadcast_shape(op, in, a.ints, in[0].shape) != in[0].shape) fail(op, in, "cannot sum to " + shape_str(a.ints));
  return {a.ints, in[0].dtype};
}

// ---- backward ----

using Ts = std::vector<Tensor>;
Tensor mm(const Tensor& a, const Tensor& b, bool ta, bool tb) { return ops::matmul(a, b, ta, tb); }

// The gradient of a bias of shape `s` ([n] or [1, n]) from the output gradient [m, n].
Tensor bias_grad(const Tensor& g, const Shape& s) { return ops::sum(g, 0).reshape(s); }

Ts bw_matmul(const Ts& in, const Tensor& g, const Attrs& a) {
  if (a.i(2) != 0) throw InternalError("matmul with a fused activation has no backward");
  const Tensor &A = in[0], &B = in[1];
  const bool ta = a.i(0), tb = a.i(1);
  Ts out;
  if (!ta && !tb) out = {mm(g, B, false, true), mm(A, g, true, false)};
  else if (!ta && tb) out = {mm(g, B, false, false), mm(g, A, true, false)};
  else if (ta && !tb) out = {mm(B, g, false, true), mm(A, g, false, false)};
  else out = {mm(B, g, true, true), mm(g, A, true, true)};
  if (in.size() == 3) out.push_back(bias_grad(g, in[2].shape()));
  return out;
}

Ts bw_linear(const Ts& in, const Tensor& g, const Attrs& a) {
  if (a.i(0) != 0) throw InternalError("linear with a fused activation has no backward");
  return {mm(g, in[1], false, false), mm(g, in[0], true, false), bias_grad(g, in[2].shape())};
}

Ts bw_binary(const Ts& in, const Tensor& g, const Attrs& a) {
  switch (static_cast<BinaryOp>(a.i(0))) {
    case BinaryOp::Add: return {ops::sum_to(g, in[0].shape()), ops::sum_to(g, in[1].shape())};
    case BinaryOp::Sub: return {ops::sum_to(g, in[0].shape()), ops::sum_to(ops::scale(g, -1), in[1].shape())};
    case BinaryOp::Mul:
      return {ops::sum_to(ops::mul(g, in[1]), in[0].shape()), ops::sum_to(ops::mul(g, in[0]), in[1].shape())};
    case BinaryOp::Div: {  // d(a/b)/db = -(a/b)/b
      const Tensor ga = ops::div(g, in[1]);
      return {ops::sum_to(ga, in[0].shape()), ops::sum_to(ops::scale(ops::mul(ga, ops::div(in[0], in[1])), -1.0), in[1].shape())};
    }
  }
  return {};
}

Ts bw_cast(const Ts& in, const Tensor& g, const Attrs&) {
  return {is_floating(in[0].dtype()) ? g.to(in[0].dtype()) : Tensor()};
}

Ts bw_scale(const Ts&, const Tensor& g, const Attrs& a) { return {ops::scale(g, a.f(0))}; }
Ts bw_relu(const Ts& in, const Tensor& g, const Attrs&) { return {dispatch("relu_backward", {g, in[0]})}; }
Ts bw_softmax(const Ts& in, const Tensor& g, const Attrs& a) { return {dispatch("softmax_backward", {g, in[0]}, a)}; }
Ts bw_reshape(const Ts& in, const Tensor& g, const Attrs&) { return {g.reshape(in[0].shape())}; }
Ts bw_expand(const Ts& in, const Tensor& g, const Attrs&) { return {ops::sum_to(g, in[0].shape())}; }
Ts bw_sum_to(const Ts& in, const Tensor& g, const Attrs&) { return {ops::expand(g, in[0].shape())}; }

}  // namespace

void register_builtin_ops() {
  register_core_ops();
  register_act_ops();
  register_nn_ops();
  register_layout_ops();
  register_shape_ops();
  register_math_ops();
  register_fused_ops();
  register_recurrent_ops();
  register_int8_ops();
}

void register_core_ops() {
  namespace k = kernels;
  register_op({"cast", 1, infer_cast, k::prepare_cast, bw_cast});
  register_op({"matmul", -1, infer_matmul, k::prepare_matmul, bw_matmul, false, k::prepack_matmul});
  register_op({"linear", 3, infer_linear, k::prepare_linear, bw_linear, false, k::prepack_linear});
  register_op({"binary", 2, infer_binary, k::prepare_binary, bw_binary, /*inplace=*/true});
  register_op({"scale", 1, infer_same, k::prepare_scale, bw_scale, /*inplace=*/true});
  register_op({"relu", 1, infer_same, k::prepare_relu, bw_relu, /*inplace=*/true});
  register_op({"relu_backward", 2, infer_same, k::prepare_relu_backward});
  register_op({"softmax", 1, infer_softmax, k::prepare_softmax, bw_softmax});
  register_op({"softmax_backward", 2, infer_softmax, k::prepare_softmax_backward});
  register_op({"reshape", 1, infer_reshape, k::prepare_copy, bw_reshape, true});
  register_op({"expand", 1, infer_expand, k::prepare_expand, bw_expand});
  register_op({"sum_to", 1, infer_sum_to, k::prepare_sum_to, bw_sum_to});
}

}  // namespace hg
