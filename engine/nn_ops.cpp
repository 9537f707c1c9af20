// The nn op family: schemas (shape/dtype inference, kernel factory, backward formula) and
// the public wrappers of engine/ops_nn.h.
//
// Registered ops and their attributes (ints / floats):
//   conv2d (x, w, b), conv2d_nobias (x, w)      {stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups[, act]}
//     (+ a residual input and a fused activation: engine/post_ops.h)
//   conv2d_backward_input (g, w)                 conv attrs + {H, W}
//   conv2d_backward_weight (g, x)                conv attrs + {kh, kw}
//   channel_sum (g)                              {out dtype}: [N, C, ...] -> [C] (bias gradients)
//   max_pool2d (x), avg_pool2d (x)               {kh, kw, stride_h, stride_w, pad_h, pad_w[, count_include_pad]}
//   max_pool2d_backward (g, x)                   max_pool2d attrs
//   avg_pool2d_backward (g)                      {kh, kw, sh, sw, ph, pw, count_include_pad, H, W}
//   adaptive_avg_pool2d (x)                      {out_h, out_w}
//   adaptive_avg_pool2d_backward (g)             {out_h, out_w, H, W}
//   batch_norm_train (x, w, b)                   / {eps}
//   batch_norm_eval (x, w, b, rm, rv)            / {eps}
//   batch_norm_train_backward (g, x, w)          {which: 0 x, 1 weight} / {eps}
//   batch_norm_eval_backward (g, x, w, rm, rv)   {which} / {eps}
//   batch_norm_update_stats (x, running)         {which: 0 mean, 1 var} / {momentum}
//   layer_norm (x, w, b[, residual])             {normalized shape...} / {eps}
//   layer_norm_backward (g, x, w)                {which: 0 x, 1 weight, 2 bias, normalized shape...} / {eps}
#include <cmath>

#include "engine/error.h"
#include "engine/kernels_nn.h"
#include "engine/op_attrs.h"
#include "engine/op_families.h"
#include "engine/ops_layout.h"
#include "engine/ops_nn.h"
#include "engine/post_ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using Ts = std::vector<Tensor>;
using namespace schema;
namespace knn = kernels::nn;
using knn::window_out_size;

std::string str(int64_t v) { return std::to_string(v); }

// oneDNN ops take F32 or BF16.
void expect_dnnl_float(const OpSchema& op, const Metas& in, size_t i) {
  if (in[i].dtype != DType::F32 && in[i].dtype != DType::BF16)
    throw DTypeError(op_context(op, in) + ": input " + str(i) + " must be F32 or BF16");
}

void expect_f32_or_f64(const OpSchema& op, const Metas& in, size_t i) {
  if (in[i].dtype != DType::F32 && in[i].dtype != DType::F64)
    throw DTypeError(op_context(op, in) + ": input " + str(i) + " must be F32 or F64");
}

void expect_shape(const OpSchema& op, const Metas& in, size_t i, const Shape& s, const char* what) {
  if (in[i].shape != s) fail(op, in, std::string(what) + " must have shape " + shape_str(s));
}

// Gradients arrive in the forward output's dtype (the autograd seed may be F32 for a BF16 loss).
Tensor as_dtype(const Tensor& g, DType t) { return g.dtype() == t ? g : g.to(t); }

Attrs with(Attrs a, size_t keep, std::initializer_list<int64_t> extra) {
  a.ints.resize(keep, 0);
  a.ints.insert(a.ints.end(), extra);
  return a;
}

// ---- convolution ----

attrs::Conv conv_attrs(const OpSchema& op, const Metas& in, const Attrs& a) {
  const attrs::Conv c = attrs::Conv::of(a);
  if (c.stride_h <= 0 || c.stride_w <= 0) fail(op, in, "stride must be positive");
  if (c.pad_h < 0 || c.pad_w < 0) fail(op, in, "padding must be non-negative");
  if (c.dilation_h <= 0 || c.dilation_w <= 0) fail(op, in, "dilation must be positive");
  if (c.groups <= 0) fail(op, in, "groups must be positive");
  return c;
}

// Checks x [N, C, H, W] against weight [O, C/groups, kh, kw]; returns the output shape.
Shape conv_out_shape(const OpSchema& op, const Metas& in, const Shape& x, const Shape& w, const attrs::Conv& c) {
  if (x[1] % c.groups || w[0] % c.groups)
    fail(op, in, "in_channels (" + str(x[1]) + ") and out_channels (" + str(w[0]) + ") must be divisible by groups (" +
                     str(c.groups) + ")");
  if (w[1] * c.groups != x[1])
    fail(op, in, "weight expects " + str(w[1] * c.groups) + " input channels but x has " + str(x[1]));
  if (w[2] <= 0 || w[3] <= 0) fail(op, in, "empty kernel");
  const int64_t oh = window_out_size(x[2], w[2], c.stride_h, c.pad_h, c.dilation_h),
                ow = window_out_size(x[3], w[3], c.stride_w, c.pad_w, c.dilation_w);
  if (oh <= 0 || ow <= 0)
    fail(op, in, "kernel (dilated) is larger than the padded input " + shape_str({x[2] + 2 * c.pad_h, x[3] + 2 * c.pad_w}));
  return {x[0], w[0], oh, ow};
}

// conv2d (x, w, b[, residual]), conv2d_nobias (x, w[, residual]); ints[7]: fused activation.
TensorMeta infer_conv2d(const OpSchema& op, const Metas& in, const Attrs& a) {
  const size_t plain = op.name == "conv2d" ? 3 : 2;
  if (in.size() != plain && in.size() != plain + 1)
    fail(op, in, "takes " + str(static_cast<int64_t>(plain)) + " inputs, or one more: a residual added before the activation");
  for (size_t i = 0; i < in.size(); ++i) expect_dnnl_float(op, in, i), expect_same_dtype(op, in, 0, i);
  const attrs::Conv c = conv_attrs(op, in, a);
  expect_rank(op, in, 0, c.src_block ? 5 : 4), expect_rank(op, in, 1, 4);
  if (c.int8 && in[0].dtype != DType::F32) fail(op, in, "an INT8 convolution takes F32 x and weights");
  if (c.int8 < 0 || c.int8 > attrs::Conv::kInt8Static) fail(op, in, "bad INT8 mode " + str(c.int8));
  if (c.int8 == attrs::Conv::kInt8Static && !(std::isfinite(c.lo) && std::isfinite(c.hi) && c.lo <= c.hi))
    fail(op, in, "a static INT8 range needs finite lo <= hi (floats 0 and 1)");
  if (!valid_fused_act(a.i(7))) fail(op, in, "bad fused activation code " + str(a.i(7)));
  if (c.src_block < 0 || c.dst_block < 0) fail(op, in, "negative channel block");
  Shape x = in[0].shape;
  if (c.src_block) {  // [N, C/b, H, W, b]: C is the weight's
    x = {x[0], in[1].shape[1] * c.groups, x[2], x[3]};
    if (blocked_shape(x, c.src_block) != in[0].shape)
      fail(op, in, "x is not the weight's " + str(x[1]) + " channels in blocks of " + str(c.src_block));
  }
  Shape out = conv_out_shape(op, in, x, in[1].shape, c);
  if (c.dst_block) out = blocked_shape(out, c.dst_block);
  if (plain == 3) {
    const int64_t o = in[1].shape[0];
    const Shape& b = in[2].shape;
    if (!(b == Shape{o} || b == Shape{o, 1, 1} || b == Shape{1, o, 1, 1}))
      fail(op, in, "bias must have shape [" + str(o) + "], [" + str(o) + ", 1, 1] or [1, " + str(o) + ", 1, 1]");
  }
  if (in.size() > plain) expect_shape(op, in, plain, out, "residual");
  return {out, in[0].dtype};
}

// (g, w) -> grad of x [N, C, H, W]; H, W in ints 7, 8.
TensorMeta infer_conv2d_backward_input(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dnnl_float(op, in, 0), expect_same_dtype(op, in, 0, 1);
  expect_rank(op, in, 0, 4), expect_rank(op, in, 1, 4);
  const attrs::Conv c = conv_attrs(op, in, a);
  const Shape x{in[0].shape[0], in[1].shape[1] * c.groups, a.i(7), a.i(8)};
  if (conv_out_shape(op, in, x, in[1].shape, c) != in[0].shape) fail(op, in, "grad does not match the conv output");
  return {x, in[0].dtype};
}

// (g, x) -> grad of the weight [O, C/groups, kh, kw]; kh, kw in ints 7, 8.
TensorMeta infer_conv2d_backward_weight(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dnnl_float(op, in, 0), expect_same_dtype(op, in, 0, 1);
  expect_rank(op, in, 0, 4), expect_rank(op, in, 1, 4);
  const attrs::Conv c = conv_attrs(op, in, a);
  if (in[1].shape[1] % c.groups) fail(op, in, "channels not divisible by groups");
  const Shape w{in[0].shape[1], in[1].shape[1] / c.groups, a.i(7), a.i(8)};
  if (conv_out_shape(op, in, in[1].shape, w, c) != in[0].shape) fail(op, in, "grad does not match the conv output");
  return {w, in[0].dtype};
}

TensorMeta infer_channel_sum(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_float(op, in, 0);
  if (in[0].shape.size() < 2) fail(op, in, "input must have rank >= 2");
  const auto t = static_cast<DType>(a.i(0, static_cast<int64_t>(in[0].dtype)));
  if (!is_floating(t)) fail(op, in, "output dtype must be floating-point");
  return {{in[0].shape[1]}, t};
}

// in: x, w[, bias] (a residual input is rejected by the callers below).
Ts conv2d_grads(const Ts& in, const Tensor& grad, const Attrs& a) {
  if (a.i(7) != 0 || a.i(8) || a.i(9) || a.i(10))
    throw InternalError("conv2d with a fused activation, a blocked layout or INT8 arithmetic has no backward");
  const Tensor &x = in[0], &w = in[1];
  const Tensor g = as_dtype(grad, x.dtype());
  Ts out(in.size());
  if (x.requires_grad()) out[0] = dispatch("conv2d_backward_input", {g, w}, with(a, 7, {x.dim(2), x.dim(3)}));
  if (w.requires_grad()) out[1] = dispatch("conv2d_backward_weight", {g, x}, with(a, 7, {w.dim(2), w.dim(3)}));
  if (in.size() == 3 && in[2].requires_grad())
    out[2] = dispatch("channel_sum", {g}, Attrs{{static_cast<int64_t>(in[2].dtype())}, {}}).reshape(in[2].shape());
  return out;
}

Ts bw_conv2d(const Ts& in, const Tensor& grad, const Attrs& a) {
  if (in.size() != 3) throw InternalError("conv2d with a fused residual has no backward");
  return conv2d_grads(in, grad, a);
}

Ts bw_conv2d_nobias(const Ts& in, const Tensor& grad, const Attrs& a) {
  if (in.size() != 2) throw InternalError("conv2d_nobias with a fused residual has no backward");
  return conv2d_grads(in, grad, a);
}

// ---- pooling ----

// x [N, C, H, W] pooled with ints {kh, kw, sh, sw, ph, pw}: the output shape.
Shape pool_out_shape(const OpSchema& op, const Metas& in, const Shape& x, const Attrs& a) {
  const int64_t kh = a.i(0), kw = a.i(1), sh = a.i(2), sw = a.i(3), ph = a.i(4), pw = a.i(5);
  if (kh <= 0 || kw <= 0) fail(op, in, "kernel size must be positive");
  if (sh <= 0 || sw <= 0) fail(op, in, "stride must be positive");
  if (ph < 0 || pw < 0 || 2 * ph > kh || 2 * pw > kw) fail(op, in, "pad should be at most half of kernel size");
  const int64_t oh = window_out_size(x[2], kh, sh, ph), ow = window_out_size(x[3], kw, sw, pw);
  if (oh <= 0 || ow <= 0)
    fail(op, in, "kernel " + shape_str({kh, kw}) + " is larger than the padded input " +
                     shape_str({x[2] + 2 * ph, x[3] + 2 * pw}));
  return {x[0], x[1], oh, ow};
}

// ints[7] > 0: x is channel-blocked [N, C/b, H, W, b] (engine/ops_layout.h), C a multiple of b.
TensorMeta infer_pool(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dnnl_float(op, in, 0);
  const int64_t b = a.i(7);
  if (b == 0) {
    expect_rank(op, in, 0, 4);
    return {pool_out_shape(op, in, in[0].shape, a), in[0].dtype};
  }
  expect_rank(op, in, 0, 5);
  const Shape& s = in[0].shape;
  if (s[4] != b) fail(op, in, "x is not in channel blocks of " + str(b));
  return {blocked_shape(pool_out_shape(op, in, {s[0], s[1] * b, s[2], s[3]}, a), b), in[0].dtype};
}

TensorMeta infer_max_pool2d_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dnnl_float(op, in, 0), expect_same_dtype(op, in, 0, 1), expect_rank(op, in, 1, 4);
  if (pool_out_shape(op, in, in[1].shape, a) != in[0].shape) fail(op, in, "grad does not match the pooled shape");
  return in[1];
}

TensorMeta infer_avg_pool2d_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dnnl_float(op, in, 0), expect_rank(op, in, 0, 4);
  const Shape x{in[0].shape[0], in[0].shape[1], a.i(7), a.i(8)};
  if (pool_out_shape(op, in, x, a) != in[0].shape) fail(op, in, "grad does not match the pooled shape");
  return {x, in[0].dtype};
}

TensorMeta infer_adaptive(const OpSchema& op, const Metas& in, const Attrs& a) {
  const Shape& s = in[0].shape;
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::F64 && in[0].dtype != DType::BF16)
    throw DTypeError(op_context(op, in) + ": input 0 must be F32, F64 or BF16");
  if (s.size() != 3 && s.size() != 4) fail(op, in, "input must have rank 3 or 4");
  if (a.i(0) <= 0 || a.i(1) <= 0) fail(op, in, "output size must be positive");
  if (s[s.size() - 2] <= 0 || s.back() <= 0) fail(op, in, "empty spatial dimensions");
  Shape out = s;
  out[s.size() - 2] = a.i(0), out.back() = a.i(1);
  return {out, in[0].dtype};
}

TensorMeta infer_adaptive_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  const size_t r = in[0].shape.size();
  if (r != 3 && r != 4) fail(op, in, "grad must have rank 3 or 4");
  Metas x{in[0]};
  x[0].shape[r - 2] = a.i(2), x[0].shape[r - 1] = a.i(3);
  if (infer_adaptive(op, x, Attrs{{a.i(0), a.i(1)}, {}}).shape != in[0].shape)
    fail(op, in, "grad does not match the pooled shape");
  return x[0];
}

Ts bw_max_pool2d(const Ts& in, const Tensor& g, const Attrs& a) {
  return {dispatch("max_pool2d_backward", {as_dtype(g, in[0].dtype()), in[0]}, a)};
}
Ts bw_avg_pool2d(const Ts& in, const Tensor& g, const Attrs& a) {
  return {dispatch("avg_pool2d_backward", {as_dtype(g, in[0].dtype())}, with(a, 7, {in[0].dim(2), in[0].dim(3)}))};
}
Ts bw_adaptive(const Ts& in, const Tensor& g, const Attrs& a) {
  return {dispatch("adaptive_avg_pool2d_backward", {as_dtype(g, in[0].dtype())},
                   with(a, 2, {in[0].dim(-2), in[0].dim(-1)}))};
}

// ---- batch norm ----

// x [N, C, ...] with F32 [C] weight, bias (and running stats from input 3 on).
void check_bn(const OpSchema& op, const Metas& in, size_t first_param) {
  const size_t r = in[0].shape.size();
  if (r < 2 || r > 5) fail(op, in, "input must have rank 2 to 5 ([N, C, ...])");
  for (size_t i = first_param; i < in.size(); ++i) {
    expect_dtype(op, in, i, DType::F32);
    expect_shape(op, in, i, {in[0].shape[1]}, ("input " + str(i)).c_str());
  }
}

TensorMeta infer_bn(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dnnl_float(op, in, 0);
  check_bn(op, in, 1);
  if (a.f(0) <= 0) fail(op, in, "eps must be positive");
  if (in.size() == 3 && in[0].numel() / in[0].shape[1] <= 1)
    fail(op, in, "expected more than 1 value per channel when training");
  return in[0];
}

// (g, x, w[, rm, rv]) -> grad of x (which 0) or of the weight (which 1).
TensorMeta infer_bn_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_dnnl_float(op, in, 1), expect_same_dtype(op, in, 0, 1);
  if (in[0].shape != in[1].shape) fail(op, in, "grad and x differ in shape");
  const Metas x(in.begin() + 1, in.end());
  check_bn(op, x, 1);
  if (a.i(0) != 0 && a.i(0) != 1) fail(op, in, "which must be 0 or 1");
  return a.i(0) == 0 ? in[1] : TensorMeta{{in[1].shape[1]}, DType::F32};
}

TensorMeta infer_bn_update_stats(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_float(op, in, 0), expect_f32_or_f64(op, in, 1);
  if (in[0].shape.size() < 2) fail(op, in, "input must have rank >= 2 ([N, C, ...])");
  expect_shape(op, in, 1, {in[0].shape[1]}, "running statistic");
  if (in[0].numel() / std::max<int64_t>(in[0].shape[1], 1) <= 1)
    fail(op, in, "expected more than 1 value per channel when training");
  if (a.i(0) != 0 && a.i(0) != 1) fail(op, in, "which must be 0 or 1");
  return in[1];
}

Ts bw_bn(const Ts& in, const Tensor& grad, const Attrs& a) {
  const Tensor g = as_dtype(grad, in[0].dtype());
  const bool train = in.size() == 3;
  const std::string name = train ? "batch_norm_train_backward" : "batch_norm_eval_backward";
  Ts args{g, in[0], in[1]};
  if (!train) args.insert(args.end(), {in[3], in[4]});
  Ts out(in.size());
  if (in[0].requires_grad()) out[0] = dispatch(name, args, Attrs{{0}, a.floats});
  if (in[1].requires_grad()) out[1] = dispatch(name, args, Attrs{{1}, a.floats});
  if (in[2].requires_grad()) out[2] = dispatch("channel_sum", {g}, Attrs{{static_cast<int64_t>(DType::F32)}, {}});
  return out;
}

// ---- layer norm ----

void check_ln(const OpSchema& op, const Metas& in, const Shape& norm, size_t x, size_t w) {
  expect_f32_or_f64(op, in, x);
  const Shape& s = in[x].shape;
  if (norm.empty()) fail(op, in, "normalized_shape must not be empty");
  if (s.size() < norm.size() || !std::equal(norm.begin(), norm.end(), s.end() - static_cast<ptrdiff_t>(norm.size())))
    fail(op, in, "given normalized_shape=" + shape_str(norm) + ", expected input with shape [*, " +
                     shape_str(norm).substr(1) + ", but got input of size" + shape_str(s));
  for (size_t i = w; i < in.size(); ++i) {
    expect_same_dtype(op, in, x, i);
    expect_shape(op, in, i, norm, ("input " + str(i)).c_str());
  }
}

// inputs x, weight, bias[, residual]: with a residual (the fuse_residual_norm pass), x + residual
// is normalized.
TensorMeta infer_layer_norm(const OpSchema& op, const Metas& in, const Attrs& a) {
  if (in.size() != 3 && in.size() != 4) fail(op, in, "expects x, weight, bias and optionally a residual");
  check_ln(op, Metas(in.begin(), in.begin() + 3), a.ints, 0, 1);
  if (in.size() == 4) {
    expect_same_dtype(op, in, 0, 3);
    if (in[3].shape != in[0].shape) fail(op, in, "the residual (input 3) differs in shape from x");
  }
  if (a.f(0) <= 0) fail(op, in, "eps must be positive");
  return in[0];
}

TensorMeta infer_layer_norm_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  const Shape norm(a.ints.begin() + std::min<size_t>(1, a.ints.size()), a.ints.end());
  check_ln(op, in, norm, 1, 2);
  expect_same_dtype(op, in, 0, 1);
  if (in[0].shape != in[1].shape) fail(op, in, "grad and x differ in shape");
  if (a.i(0) < 0 || a.i(0) > 2) fail(op, in, "which must be 0, 1 or 2");
  return a.i(0) == 0 ? in[1] : in[2];
}

Ts bw_layer_norm(const Ts& in, const Tensor& grad, const Attrs& a) {
  if (in.size() != 3) throw InvalidArgument("layer_norm with a residual input (an inference fusion) has no backward");
  const Tensor g = as_dtype(grad, in[0].dtype());
  Ts out(3);
  for (int64_t which = 0; which < 3; ++which) {
    if (!in[which].requires_grad()) continue;
    Attrs b{{which}, a.floats};
    b.ints.insert(b.ints.end(), a.ints.begin(), a.ints.end());
    out[which] = dispatch("layer_norm_backward", {g, in[0], in[1]}, b);
  }
  return out;
}

// A constant tensor for an omitted weight or bias.
Tensor filled(const Shape& s, float v, DType t, Device d) { return Tensor::full(s, v, d).to(t); }

}  // namespace

void register_nn_ops() {
  namespace k = kernels::nn;
  register_op({"conv2d", -1, infer_conv2d, k::prepare_conv2d, bw_conv2d, false, k::prepack_conv2d});
  register_op({"conv2d_nobias", -1, infer_conv2d, k::prepare_conv2d_nobias, bw_conv2d_nobias, false, k::prepack_conv2d_nobias});
  register_op({"conv2d_backward_input", 2, infer_conv2d_backward_input, k::prepare_conv2d_backward_input});
  register_op({"conv2d_backward_weight", 2, infer_conv2d_backward_weight, k::prepare_conv2d_backward_weight});
  register_op({"channel_sum", 1, infer_channel_sum, k::prepare_channel_sum});
  register_op({"max_pool2d", 1, infer_pool, k::prepare_max_pool2d, bw_max_pool2d});
  register_op({"max_pool2d_backward", 2, infer_max_pool2d_backward, k::prepare_max_pool2d_backward});
  register_op({"avg_pool2d", 1, infer_pool, k::prepare_avg_pool2d, bw_avg_pool2d});
  register_op({"avg_pool2d_backward", 1, infer_avg_pool2d_backward, k::prepare_avg_pool2d_backward});
  register_op({"adaptive_avg_pool2d", 1, infer_adaptive, k::prepare_adaptive_avg_pool2d, bw_adaptive});
  register_op({"adaptive_avg_pool2d_backward", 1, infer_adaptive_backward, k::prepare_adaptive_avg_pool2d_backward});
  register_op({"batch_norm_train", 3, infer_bn, k::prepare_batch_norm_train, bw_bn});
  register_op({"batch_norm_eval", 5, infer_bn, k::prepare_batch_norm_eval, bw_bn});
  register_op({"batch_norm_train_backward", 3, infer_bn_backward, k::prepare_batch_norm_backward});
  register_op({"batch_norm_eval_backward", 5, infer_bn_backward, k::prepare_batch_norm_backward});
  register_op({"batch_norm_update_stats", 2, infer_bn_update_stats, k::prepare_batch_norm_update_stats});
  register_op({"layer_norm", -1, infer_layer_norm, k::prepare_layer_norm, bw_layer_norm});
  register_op({"layer_norm_backward", 3, infer_layer_norm_backward, k::prepare_layer_norm_backward});
}

namespace ops {

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 s, Size2 p, Size2 d, int64_t groups) {
  const Attrs a = attrs::Conv{s[0], s[1], p[0], p[1], d[0], d[1], groups}.pack();
  return b.defined() ? dispatch("conv2d", {x, w, b}, a) : dispatch("conv2d_nobias", {x, w}, a);
}

Tensor conv2d(const Tensor& x, const Tensor& w, Size2 s, Size2 p, Size2 d, int64_t groups) {
  return conv2d(x, w, Tensor(), s, p, d, groups);
}

Tensor max_pool2d(const Tensor& x, Size2 k, Size2 s, Size2 p) {
  if (s == Size2{0, 0}) s = k;
  return dispatch("max_pool2d", {x}, Attrs{{k[0], k[1], s[0], s[1], p[0], p[1]}, {}});
}

Tensor avg_pool2d(const Tensor& x, Size2 k, Size2 s, Size2 p, bool count_include_pad) {
  if (s == Size2{0, 0}) s = k;
  return dispatch("avg_pool2d", {x}, Attrs{{k[0], k[1], s[0], s[1], p[0], p[1], count_include_pad}, {}});
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 out) {
  return dispatch("adaptive_avg_pool2d", {x}, Attrs{{out[0], out[1]}, {}});
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double /*momentum*/, double eps) {
  const Shape c{x.ndim() >= 2 ? x.dim(1) : 1};
  const Tensor w = weight.defined() ? weight : Tensor::full(c, 1.0f, x.device());
  const Tensor b = bias.defined() ? bias : Tensor::full(c, 0.0f, x.device());
  if (training) return dispatch("batch_norm_train", {x, w, b}, attrs::BatchNorm{eps}.pack());
  if (!running_mean.defined() || !running_var.defined())
    throw InvalidArgument("op 'batch_norm_eval': running_mean and running_var are required when not training");
  return dispatch("batch_norm_eval", {x, w, b, running_mean, running_var}, attrs::BatchNorm{eps}.pack());
}

BatchNormStats batch_norm_update_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                       double momentum) {
  return {dispatch("batch_norm_update_stats", {x, running_mean}, Attrs{{0}, {momentum}}),
          dispatch("batch_norm_update_stats", {x, running_var}, Attrs{{1}, {momentum}})};
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const Tensor w = weight.defined() ? weight : filled(normalized_shape, 1.0f, x.dtype(), x.device());
  const Tensor b = bias.defined() ? bias : filled(normalized_shape, 0.0f, x.dtype(), x.device());
  return dispatch("layer_norm", {x, w, b}, Attrs{normalized_shape, {eps}});
}

}  // namespace ops

}  // namespace hg
