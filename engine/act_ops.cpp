// The act family's schemas (activations, dropout, embedding, gather, where, masked_fill) and
// public functions; the losses are in loss_ops.cpp. Kernels: kernels_act.cpp.
#include <cmath>

#include "engine/act_internal.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/op_attrs.h"
#include "engine/op_families.h"
#include "engine/ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using namespace schema;
using act::Act;
using Ts = std::vector<Tensor>;

void expect_index(const OpSchema& op, const Metas& in, size_t i) {
  if (in[i].dtype != DType::I64 && in[i].dtype != DType::I32)
    throw DTypeError(op_context(op, in) + ": input " + std::to_string(i) + " must be I64 or I32 indices");
}

// ---- activations ----

TensorMeta infer_act(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_float(op, in, 0);
  return in[0];
}

// inputs: grad, x
TensorMeta infer_act_backward(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_float(op, in, 0), expect_same_dtype(op, in, 0, 1);
  if (in[0].shape != in[1].shape) fail(op, in, "grad and x must have the same shape");
  return in[1];
}

template <Act A, bool Backward>
Kernel prepare_act(const Metas& in, const TensorMeta& out, const Attrs&) {
  return act::prepare_activation(A, Backward, in, out);
}
template <bool Backward>
Kernel prepare_gelu(const Metas& in, const TensorMeta& out, const Attrs& a) {
  return act::prepare_activation(a.i(0) ? Act::GeluTanh : Act::GeluErf, Backward, in, out);
}

// floats {lo, hi}: numbers with lo <= hi (either may be infinite: a one-sided clamp).
void expect_bounds(const OpSchema& op, const Metas& in, const Attrs& a) {
  if (a.floats.size() != 2 || std::isnan(a.f(0)) || std::isnan(a.f(1)) || a.f(0) > a.f(1))
    fail(op, in, "needs bounds min <= max (floats {min, max})");
}

TensorMeta infer_clamp(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_bounds(op, in, a);
  return infer_act(op, in, a);
}

TensorMeta infer_clamp_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_bounds(op, in, a);
  return infer_act_backward(op, in, a);
}

Kernel prepare_clamp(const Metas& in, const TensorMeta& out, const Attrs& a) {
  return act::prepare_clamp(in, out, a, false);
}
Kernel prepare_clamp_backward(const Metas& in, const TensorMeta& out, const Attrs& a) {
  return act::prepare_clamp(in, out, a, true);
}

Ts bw_clamp(const Ts& in, const Tensor& g, const Attrs& a) { return {dispatch("clamp_backward", {g, in[0]}, a)}; }
Ts bw_gelu(const Ts& in, const Tensor& g, const Attrs& a) { return {dispatch("gelu_backward", {g, in[0]}, a)}; }
Ts bw_silu(const Ts& in, const Tensor& g, const Attrs&) { return {dispatch("silu_backward", {g, in[0]})}; }
Ts bw_tanh(const Ts& in, const Tensor& g, const Attrs&) { return {dispatch("tanh_backward", {g, in[0]})}; }
Ts bw_sigmoid(const Ts& in, const Tensor& g, const Attrs&) { return {dispatch("sigmoid_backward", {g, in[0]})}; }

// ---- dropout ----

// inputs: x, seed (I64, one element); floats {p}
TensorMeta infer_dropout(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_float(op, in, 0), expect_dtype(op, in, 1, DType::I64);
  if (in[1].numel() != 1) fail(op, in, "the seed must have one element");
  const double p = a.f(0);
  if (!(p >= 0 && p <= 1)) throw InvalidArgument(op_context(op, in) + ": p must be in [0, 1], got " + std::to_string(p));
  return in[0];
}

Ts bw_dropout(const Ts& in, const Tensor& g, const Attrs& a) { return {dispatch("dropout", {g, in[1]}, a), Tensor()}; }

// ---- embedding and gather ----

// inputs: indices, weight [num, dim]
TensorMeta infer_embedding(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_index(op, in, 0), expect_float(op, in, 1), expect_rank(op, in, 1, 2);
  Shape s = in[0].shape;
  s.push_back(in[1].shape[1]);
  return {s, in[1].dtype};
}

// inputs: indices, grad [*indices, dim]; ints {num}
TensorMeta infer_embedding_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_index(op, in, 0), expect_float(op, in, 1);
  if (in[1].shape.size() != in[0].shape.size() + 1 || !std::equal(in[0].shape.begin(), in[0].shape.end(), in[1].shape.begin()))
    fail(op, in, "grad must have the indices' shape plus one dimension");
  if (a.i(0) < 0) fail(op, in, "negative number of rows");
  return {{a.i(0), in[1].shape.back()}, in[1].dtype};
}

Ts bw_embedding(const Ts& in, const Tensor& g, const Attrs&) {
  return {Tensor(), dispatch("embedding_backward", {in[0], g}, Attrs{{in[1].shape()[0]}, {}})};
}

// inputs: x, index; ints {dim}
TensorMeta infer_gather(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_index(op, in, 1);
  const int64_t dim = norm_dim(op, in, a.i(0));
  if (dim != a.i(0)) fail(op, in, "dim must be normalised");
  if (in[1].shape.size() != in[0].shape.size()) fail(op, in, "index must have the same rank as x");
  for (size_t d = 0; d < in[0].shape.size(); ++d)
    if (static_cast<int64_t>(d) != dim && in[1].shape[d] > in[0].shape[d])
      fail(op, in, "index is larger than x in dimension " + std::to_string(d));
  return {in[1].shape, in[0].dtype};
}

// inputs: index, grad; ints {dim, x shape...}
TensorMeta infer_gather_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_index(op, in, 0), expect_float(op, in, 1);
  const Shape xs(a.ints.begin() + 1, a.ints.end());
  if (in[1].shape != in[0].shape) fail(op, in, "grad must have the index's shape");
  if (xs.size() != in[0].shape.size() || a.i(0) < 0 || a.i(0) >= static_cast<int64_t>(xs.size()))
    fail(op, in, "bad x shape " + shape_str(xs) + " or dim " + std::to_string(a.i(0)));
  return {xs, in[1].dtype};
}

Ts bw_gather(const Ts& in, const Tensor& g, const Attrs& a) {
  Attrs b{{a.i(0)}, {}};
  b.ints.insert(b.ints.end(), in[0].shape().begin(), in[0].shape().end());
  return {dispatch("gather_backward", {in[1], g}, b), Tensor()};
}

// ---- where and masked_fill ----

TensorMeta infer_where(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_dtype(op, in, 0, DType::BOOL), expect_same_dtype(op, in, 1, 2);
  const Shape ab = broadcast_shape(op, in, in[1].shape, in[2].shape);
  return {broadcast_shape(op, in, in[0].shape, ab), in[1].dtype};
}

// inputs: x, mask; floats {value}
TensorMeta infer_masked_fill(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_dtype(op, in, 1, DType::BOOL);
  return {broadcast_shape(op, in, in[0].shape, in[1].shape), in[0].dtype};
}

// inputs: cond, grad; ints {side, target shape...}
TensorMeta infer_where_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dtype(op, in, 0, DType::BOOL), expect_float(op, in, 1);
  const Shape target(a.ints.begin() + 1, a.ints.end());
  if (broadcast_shape(op, in, in[0].shape, in[1].shape) != in[1].shape ||
      broadcast_shape(op, in, target, in[1].shape) != in[1].shape)
    fail(op, in, "cond and target " + shape_str(target) + " must broadcast to grad");
  return {target, in[1].dtype};
}

Tensor where_grad(const Tensor& cond, const Tensor& g, int64_t side, const Shape& target) {
  Attrs a{{side}, {}};
  a.ints.insert(a.ints.end(), target.begin(), target.end());
  return dispatch("where_backward", {cond, g}, a);
}

Ts bw_where(const Ts& in, const Tensor& g, const Attrs&) {
  return {Tensor(), where_grad(in[0], g, 0, in[1].shape()), where_grad(in[0], g, 1, in[2].shape())};
}
Ts bw_masked_fill(const Ts& in, const Tensor& g, const Attrs&) { return {where_grad(in[1], g, 1, in[0].shape()), Tensor()}; }

// ---- eager index checks ----

std::string position_str(const Shape& shape, int64_t flat) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return shape_str(idx);
}

// Throws InvalidArgument for the first index outside [0, limit) when `idx` holds data.
void check_indices(const char* op, const Tensor& idx, int64_t limit, const std::string& operands) {
  if (idx.is_lazy() || (idx.dtype() != DType::I64 && idx.dtype() != DType::I32)) return;
  const Tensor c = idx.contiguous();
  const void* p = c.raw_data();  // waits for the device
  for (int64_t k = 0; k < c.numel(); ++k) {
    const int64_t v = c.dtype() == DType::I64 ? static_cast<const int64_t*>(p)[k] : static_cast<const int32_t*>(p)[k];
    if (v < 0 || v >= limit)
      throw InvalidArgument(std::string("op '") + op + "': index " + std::to_string(v) + " at position " +
                            position_str(c.shape(), k) + " is out of range [0, " + std::to_string(limit) + ") (" +
                            operands + ")");
  }
}

}  // namespace

namespace ops {

Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate != "none" && approximate != "tanh")
    throw InvalidArgument("op 'gelu': approximate must be \"none\" or \"tanh\", got \"" + std::string(approximate) + "\"");
  return dispatch("gelu", {x}, attrs::Gelu{approximate == "tanh"}.pack());
}
Tensor silu(const Tensor& x) { return dispatch("silu", {x}); }
Tensor tanh(const Tensor& x) { return dispatch("tanh", {x}); }
Tensor sigmoid(const Tensor& x) { return dispatch("sigmoid", {x}); }
Tensor clamp(const Tensor& x, double lo, double hi) { return dispatch("clamp", {x}, Attrs{{}, {lo, hi}}); }

Tensor dropout(const Tensor& x, double p, bool training) {
  if (!(p >= 0 && p <= 1)) throw InvalidArgument("op 'dropout': p must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0) return x;
  const uint64_t seed = default_generator(x.device()).next();
  Tensor s = Tensor::from_indices({static_cast<int64_t>(seed)}, {}, x.device());
  s.impl()->rng_seed = true;  // an HPU graph that captures this draws a new seed per replay
  return dispatch("dropout", {x, s}, Attrs{{}, {p}});
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  if (weight.ndim() == 2)
    check_indices("embedding", indices, weight.shape()[0],
                  "indices " + meta_str(indices.meta()) + ", weight " + meta_str(weight.meta()));
  return dispatch("embedding", {indices, weight});
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = dim < 0 && dim >= -x.ndim() ? dim + x.ndim() : dim;
  if (d >= 0 && d < x.ndim() && index.ndim() == x.ndim())
    check_indices("gather", index, x.shape()[d],
                  "x " + meta_str(x.meta()) + ", dim " + std::to_string(dim) + ", index " + meta_str(index.meta()));
  return dispatch("gather", {x, index}, Attrs{{d}, {}});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return dispatch("where", {cond, a, b}); }
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return dispatch("masked_fill", {x, mask}, attrs::MaskedFill{value}.pack());
}

}  // namespace ops

void register_act_ops() {
  namespace k = act;
  register_op({"gelu", 1, infer_act, prepare_gelu<false>, bw_gelu, /*inplace=*/true});
  register_op({"gelu_backward", 2, infer_act_backward, prepare_gelu<true>});
  register_op({"silu", 1, infer_act, prepare_act<Act::Silu, false>, bw_silu, /*inplace=*/true});
  register_op({"silu_backward", 2, infer_act_backward, prepare_act<Act::Silu, true>});
  register_op({"tanh", 1, infer_act, prepare_act<Act::Tanh, false>, bw_tanh, /*inplace=*/true});
  register_op({"tanh_backward", 2, infer_act_backward, prepare_act<Act::Tanh, true>});
  register_op({"sigmoid", 1, infer_act, prepare_act<Act::Sigmoid, false>, bw_sigmoid, /*inplace=*/true});
  register_op({"sigmoid_backward", 2, infer_act_backward, prepare_act<Act::Sigmoid, true>});
  register_op({"clamp", 1, infer_clamp, prepare_clamp, bw_clamp, /*inplace=*/true});
  register_op({"clamp_backward", 2, infer_clamp_backward, prepare_clamp_backward});
  register_op({"dropout", 2, infer_dropout, k::prepare_dropout, bw_dropout});
  register_op({"embedding", 2, infer_embedding, k::prepare_embedding, bw_embedding});
  register_op({"embedding_backward", 2, infer_embedding_backward, k::prepare_embedding_backward});
  register_op({"gather", 2, infer_gather, k::prepare_gather, bw_gather});
  register_op({"gather_backward", 2, infer_gather_backward, k::prepare_gather_backward});
  register_op({"where", 3, infer_where, k::prepare_where, bw_where});
  register_op({"masked_fill", 2, infer_masked_fill, k::prepare_masked_fill, bw_masked_fill});
  register_op({"where_backward", 2, infer_where_backward, k::prepare_where_backward});
  act::register_loss_ops();
}

}  // namespace hg
