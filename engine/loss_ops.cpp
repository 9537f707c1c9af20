// Loss schemas and public functions: cross_entropy (ignore_index, label smoothing,
// reductions) and mse_loss. Kernels: kernels_loss.cpp.
#include "engine/act_internal.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using namespace schema;
using Ts = std::vector<Tensor>;

void expect_f32_f64(const OpSchema& op, const Metas& in, size_t i) {
  if (in[i].dtype != DType::F32 && in[i].dtype != DType::F64)
    throw DTypeError(op_context(op, in) + ": input " + std::to_string(i) + " must be F32 or F64");
}

int64_t reduction(const OpSchema& op, const Metas& in, const Attrs& a, size_t k) {
  const int64_t r = a.i(k, 1);
  if (r < 0 || r > 2) throw InvalidArgument(op_context(op, in) + ": bad reduction " + std::to_string(r));
  return r;
}

// The loss's shape: a scalar, or `none_shape` for reduction None.
TensorMeta loss_meta(int64_t red, const Shape& none_shape, DType t) {
  return {red == static_cast<int64_t>(ops::Reduction::None) ? none_shape : Shape{}, t};
}

// inputs: logits [N, C], target I64 [N] (+ grad for the backward); ints {ignore_index,
// reduction}, floats {label_smoothing}
TensorMeta infer_cross_entropy(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_f32_f64(op, in, 0), expect_dtype(op, in, 1, DType::I64);
  expect_rank(op, in, 0, 2), expect_rank(op, in, 1, 1);
  if (in[1].shape[0] != in[0].shape[0]) fail(op, in, "target length differs from the batch size");
  if (in[0].shape[1] == 0) fail(op, in, "no classes");
  const double eps = a.f(0);
  if (!(eps >= 0 && eps <= 1))
    throw InvalidArgument(op_context(op, in) + ": label_smoothing must be in [0, 1], got " + std::to_string(eps));
  const TensorMeta loss = loss_meta(reduction(op, in, a, 1), {in[0].shape[0]}, in[0].dtype);
  if (in.size() == 3) {
    expect_same_dtype(op, in, 0, 2);
    if (in[2].shape != loss.shape) fail(op, in, "grad must have the loss's shape " + shape_str(loss.shape));
    return in[0];
  }
  return loss;
}

Ts bw_cross_entropy(const Ts& in, const Tensor& g, const Attrs& a) {
  return {dispatch("cross_entropy_backward", {in[0], in[1], g}, a), Tensor()};
}

// inputs: a, b (+ grad for the backward); ints {reduction (, sign)}
TensorMeta infer_mse_loss(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_f32_f64(op, in, 0), expect_same_dtype(op, in, 0, 1);
  if (in[0].shape != in[1].shape) fail(op, in, "inputs must have the same shape");
  const TensorMeta loss = loss_meta(reduction(op, in, a, 0), in[0].shape, in[0].dtype);
  if (in.size() == 3) {
    expect_same_dtype(op, in, 0, 2);
    if (in[2].shape != loss.shape) fail(op, in, "grad must have the loss's shape " + shape_str(loss.shape));
    return in[0];
  }
  return loss;
}

Ts bw_mse_loss(const Ts& in, const Tensor& g, const Attrs& a) {
  return {dispatch("mse_loss_backward", {in[0], in[1], g}, Attrs{{a.i(0), 1}, {}}),
          dispatch("mse_loss_backward", {in[0], in[1], g}, Attrs{{a.i(0), -1}, {}})};
}

}  // namespace

namespace ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     Reduction reduction) {
  return dispatch("cross_entropy", {logits, target},
                  Attrs{{ignore_index, static_cast<int64_t>(reduction)}, {label_smoothing}});
}

Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  return dispatch("mse_loss", {a, b}, Attrs{{static_cast<int64_t>(reduction)}, {}});
}

}  // namespace ops

void act::register_loss_ops() {
  register_op({"cross_entropy", 2, infer_cross_entropy, act::prepare_cross_entropy, bw_cross_entropy});
  register_op({"cross_entropy_backward", 3, infer_cross_entropy, act::prepare_cross_entropy_backward});
  register_op({"mse_loss", 2, infer_mse_loss, act::prepare_mse_loss, bw_mse_loss});
  register_op({"mse_loss_backward", 3, infer_mse_loss, act::prepare_mse_loss_backward});
}

}  // namespace hg
