// conv2d in INT8 (attrs::Conv::int8, set by the precision pass for "precision": "int8"): ONNX
// Runtime's dynamic quantization (DynamicQuantizeLinear + ConvInteger) fused into one step:
//   - the weights [O, C/groups, kh, kw] are quantized once per output channel, s8 symmetric
//     (engine/int8_quant.h), and pre-packed into the layout oneDNN's VNNI kernel chose;
//   - x is quantized with every call over the whole tensor, u8 asymmetric, by one oneDNN reorder
//     from its F32 layout into NHWC u8 (the range is one read of x);
//   - oneDNN convolves u8 by s8 into s32 (AVX512-VNNI), scales by s_w per channel (fixed output
//     scales), then by s_x (a one-element binary post-op: runtime output scales would leave the
//     VNNI kernels), adds the bias (a per-channel binary post-op, after the scales), the residual
//     (sum) and the activation, into F32 NHWC (conv_layout gives INT8 convs NHWC on both sides).
// Static quantization (attrs::Conv::kInt8Static, ranges from a calibration): x's range is the
// calibrated one (values outside it saturate), nothing is measured per call, and s_x joins the
// fixed output scales. In dynamic mode a running Int8Calibration gets each call's range.
// An output the graph keeps in NCHW is written NHWC to a scratch and reordered, its residual and
// activation applied after (residual_step). Weights that change between calls (eager) are
// quantized with every call, one scale for all channels.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "engine/error.h"
#include "engine/int8_quant.h"
#include "engine/kernels_nn.h"
#include "engine/op_attrs.h"

namespace hg::kernels::nn {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

// Below this many multiply-adds the steps run on one OpenMP thread (as the F32 conv).
constexpr int64_t kSingleThreadWork = int64_t{1} << 20;

memory::desc s8_weights(const ConvGeom& g) {  // PyTorch's layout, contiguous
  const memory::dims d = g.groups == 1 ? memory::dims{g.o, g.c, g.kh, g.kw}
                                       : memory::dims{g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw};
  return memory::desc(d, dt::s8, g.groups == 1 ? tag::oihw : tag::goihw);
}

}  // namespace

Kernel conv2d_int8(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a, bool bias,
                   const std::vector<const void*>& constant) {
  const bool residual = in.size() > (bias ? 3u : 2u);
  const int res_index = bias ? 3 : 2;
  const attrs::Conv ca = attrs::Conv::of(a);
  const auto act = ca.act;
  const bool fixed_range = ca.int8 == attrs::Conv::kInt8Static;
  ActivationQuant fixed;  // static: the calibrated range's scale and zero point
  const float fixed_scale = fixed_range ? fixed.set_range(static_cast<float>(ca.lo), static_cast<float>(ca.hi)) : 1.0f;
  if (out.numel() == 0)
    return [bytes = out.bytes()](const void* const*, void* o) { std::memset(o, 0, bytes); };
  const ConvGeom g = conv_geom(in[0].shape, in[1].shape, out.shape, DType::F32, a);
  const int64_t per_channel = (g.c / g.groups) * g.kh * g.kw;
  const bool nchw_out = g.dst_block == 0;  // then: NHWC scratch, reorder, residual and activation after
  const memory::desc x_user = src_md(g), x_q({g.n, g.c, g.h, g.w}, dt::u8, tag::nhwc);
  const memory::desc y_user = dst_md(g), y_prim = nchw_out ? memory::desc({g.n, g.o, g.oh, g.ow}, dt::f32, tag::nhwc) : y_user;
  const memory::desc one({1, 1, 1, 1}, dt::f32, tag::nchw), per_oc({1, g.o, 1, 1}, dt::f32, tag::nchw);
  const memory::desc zp_md({1}, dt::s32, tag::a), w_plain = s8_weights(g);
  const float* w_const = constant.size() > 1 ? static_cast<const float*>(constant[1]) : nullptr;
  auto w = std::make_shared<QuantWeights>(w_const ? quantize_weights(w_const, g.o, per_channel, true, false)
                                                  : QuantWeights{});
  // Static scales with constant weights: s_w * s_x are the fixed output scales; otherwise s_x
  // (times the per-call weight scale) is a one-element binary post-op.
  const bool scale_post_op = !(fixed_range && w_const);
  std::vector<float> out_scales = w_const ? w->scale : std::vector<float>(static_cast<size_t>(g.o), 1.0f);
  if (!scale_post_op)
    for (float& x : out_scales) x *= fixed_scale;
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_output_scales(1 << 1, out_scales);
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops po;
  if (scale_post_op) po.append_binary(dnnl::algorithm::binary_mul, one);
  if (bias) po.append_binary(dnnl::algorithm::binary_add, per_oc);
  const bool sum = residual && !nchw_out;
  if (sum) po.append_sum(1.f);
  if (!residual || sum) append_activation(po, act);
  attr.set_post_ops(po);
  const bool small = g.n * g.o * g.oh * g.ow * per_channel < kSingleThreadWork;
  std::shared_ptr<void> packed;
  std::optional<DnnlCall> conv, quantize, to_user, add;
  try {
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                            x_q, w_const ? any_md(w_plain) : w_plain, y_prim, g.strides, g.dilates,
                                            g.pads, g.pads);
    const dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_engine());
    if (w_const)
      packed = pd.weights_desc() == w_plain ? std::shared_ptr<void>(w, w->q.data())
                                            : reorder_once(w_plain, w->q.data(), pd.weights_desc());
    DnnlCall::Args args{{DNNL_ARG_SRC, x_q}, {DNNL_ARG_WEIGHTS, pd.weights_desc()}, {DNNL_ARG_DST, y_prim},
                        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp_md}};
    if (scale_post_op) args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, one);
    if (bias) args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(scale_post_op ? 1 : 0) | DNNL_ARG_SRC_1, per_oc);
    conv.emplace(dnnl::convolution_forward(pd), std::move(args), small);
    quantize.emplace(quantize_call(x_user, x_q, small));
    if (nchw_out) {
      const dnnl::reorder::primitive_desc rpd(dnnl_engine(), y_prim, dnnl_engine(), y_user, user_scratchpad());
      to_user.emplace(dnnl::reorder(rpd), DnnlCall::Args{{DNNL_ARG_FROM, y_prim}, {DNNL_ARG_TO, y_user}}, small);
      if (residual) add.emplace(residual_step(g, act));
    }
  } catch (const dnnl::error& e) {
    rethrow_dnnl("conv2d (int8)", e);
  }
  const size_t x_bytes = x_q.get_size(), y_bytes = nchw_out ? y_prim.get_size() : 0;
  const int64_t x_count = static_cast<int64_t>(x_user.get_size() / sizeof(float));
  const int64_t calib_id = ca.calib_id;
  return [=, conv = *conv, quantize = *quantize](const void* const* i, void* o) {
    thread_local ActivationQuant measured;
    const ActivationQuant* aq = &fixed;
    float sx = fixed_scale;
    if (!fixed_range) {
      sx = measured.measure(static_cast<const float*>(i[0]), x_count);
      aq = &measured;
      if (Int8Calibration::on()) Int8Calibration::record(calib_id, measured.lo, measured.hi);
    }
    void* xq = scratch(0, x_bytes);
    const void* q[] = {i[0], xq, &aq->inv_scale, &aq->zero_point};
    quantize.run(q);
    if (fixed_range) cap_activation_codes(static_cast<uint8_t*>(xq), x_bytes);  // values past the calibrated range
    const void* weights = packed.get();
    QuantWeights per_call;
    if (!weights) {  // weights that change between calls: one scale for all channels (the primitive's are 1)
      per_call = quantize_weights(static_cast<const float*>(i[1]), g.o, per_channel, true, true);
      sx *= per_call.scale[0];
      weights = per_call.q.data();
    }
    void* y = nchw_out ? scratch(1, y_bytes) : o;
    if (sum && i[res_index] != o) std::memcpy(o, i[res_index], y_user.get_size());
    const void* with_scale[] = {xq, weights, y, &aq->zero_point, &sx, bias ? i[2] : nullptr};
    const void* without[] = {xq, weights, y, &aq->zero_point, bias ? i[2] : nullptr};
    conv.run(scale_post_op ? with_scale : without);
    if (!nchw_out) return;
    const void* r[] = {y, o};
    to_user->run(r);
    if (add) {
      const void* p[] = {o, i[res_index], o};
      add->run(p);
    }
  };
}

}  // namespace hg::kernels::nn
