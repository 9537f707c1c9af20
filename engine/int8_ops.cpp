// matmul_int8 (engine/ops.h): a matmul with INT8 arithmetic and FP32 in and out, as ONNX
// Runtime's dynamic quantization computes it (DynamicQuantizeLinear + MatMulInteger):
//   - the weights b [K, N] (or [N, K] with trans_b) are quantized once per output column n,
//     symmetric: s8 = round(b / s_n), s_n = max |b[:, n]| / 127 (at compile when b is constant;
//     with every call otherwise);
//   - the activations a [M, K] are quantized with every call over the whole tensor, asymmetric:
//     u8 = clamp(round(a / s_a) + z, 0, 255), with s_a = (max - min) / 255 over [min(a, 0), max(a, 0)];
//   - oneDNN multiplies u8 by s8 into s32 (AVX512-VNNI: vpdpbusd), scales by s_n (fixed output
//     scales), then by s_a, adds the bias and applies the fused activation as post-ops, into FP32.
//     s_a is a one-element binary post-op, not a runtime output scale: oneDNN 2.6 runs runtime
//     output scales on its generic gemm, fixed ones on its VNNI brgemm kernels (2x faster here).
// Weights that are not constant are quantized with every call, all columns with one scale.
// inputs: a, b[, bias [N] or [1, N]]; ints {trans_a (must be 0), trans_b, act}, as matmul's.
// No backward: an inference op the precision pass (graphs/pass_precision.cpp) puts in graphs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dnnl_context.h"
#include "engine/int8_quant.h"
#include "engine/kernels.h"
#include "engine/op_attrs.h"
#include "engine/op_families.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using namespace schema;
using dt = dnnl::memory::data_type;

// Below this many multiply-adds the primitive runs on one thread (as the FP32 matmul).
constexpr int64_t kSingleThreadWork = int64_t{1} << 18;

TensorMeta infer_matmul_int8(const OpSchema& op, const Metas& in, const Attrs& a) {
  if (in.size() != 2 && in.size() != 3) fail(op, in, "takes 2 or 3 inputs (a, b[, bias])");
  for (size_t i = 0; i < in.size(); ++i) expect_dtype(op, in, i, DType::F32);
  expect_rank(op, in, 0, 2), expect_rank(op, in, 1, 2);
  const attrs::Matmul m = attrs::Matmul::of(a);
  if (m.trans_a) fail(op, in, "a transposed is not supported");
  if (!valid_fused_act(static_cast<int64_t>(m.act))) fail(op, in, "bad fused activation code");
  const int64_t k = in[0].shape[1], k2 = in[1].shape[m.trans_b], n = in[1].shape[!m.trans_b];
  if (k != k2) fail(op, in, "inner dimensions differ (" + std::to_string(k) + " vs " + std::to_string(k2) + ")");
  if (k == 0) fail(op, in, "the inner dimension is empty");
  if (in.size() == 3 && in[2].shape != Shape{n} && in[2].shape != Shape{1, n})
    fail(op, in, "bias must have shape [" + std::to_string(n) + "] or [1, " + std::to_string(n) + "]");
  return {{in[0].shape[0], n}, DType::F32};
}

struct Spec {
  int64_t m, k, n;
  bool tb, bias;
  FusedAct act;
};

// `constant_b`: the weights, quantized here once per column; null: quantized with every call,
// all columns with one scale (the primitive's output scales are then 1).
Kernel make_kernel(const Spec& s, const float* constant_b) {
  using kernels::QuantWeights;
  const dnnl::memory::desc a_md({s.m, s.k}, dt::u8, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc af_md({s.m, s.k}, dt::f32, dnnl::memory::format_tag::ab);
  // The s8 weights keep b's layout: [K, N], or [N, K] with trans_b.
  const dnnl::memory::desc b_plain({s.k, s.n}, dt::s8, s.tb ? dnnl::memory::format_tag::ba : dnnl::memory::format_tag::ab);
  const dnnl::memory::desc c_md({s.m, s.n}, dt::f32, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc one_by_one({1, 1}, dt::f32, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc zp_md({1}, dt::s32, dnnl::memory::format_tag::a);
  const dnnl::memory::desc bias_md({1, s.n}, dt::f32, dnnl::memory::format_tag::ab);
  auto w = std::make_shared<QuantWeights>(constant_b ? kernels::quantize_weights(constant_b, s.n, s.k, s.tb, false)
                                                     : QuantWeights{});
  dnnl::primitive_attr attr = kernels::user_scratchpad();
  attr.set_output_scales(1 << 1, constant_b ? w->scale : std::vector<float>(static_cast<size_t>(s.n), 1.0f));
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops po;
  po.append_binary(dnnl::algorithm::binary_mul, one_by_one);                  // s_a (and s_n, see below)
  if (s.bias) po.append_binary(dnnl::algorithm::binary_add, bias_md);  // after the scales, unlike a primitive bias
  kernels::append_activation(po, s.act);
  attr.set_post_ops(po);
  dnnl::matmul::primitive_desc pd;
  std::shared_ptr<void> packed;
  std::optional<kernels::DnnlCall> quantize;
  try {
    const auto b_want = constant_b ? dnnl::memory::desc({s.k, s.n}, dt::s8, dnnl::memory::format_tag::any) : b_plain;
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_want, c_md), attr, kernels::dnnl_engine());
    if (constant_b)
      packed = pd.weights_desc() == b_plain ? std::shared_ptr<void>(w, w->q.data())
                                            : kernels::reorder_once(b_plain, w->q.data(), pd.weights_desc());
    quantize = kernels::quantize_call(af_md, a_md, s.m * s.k < kSingleThreadWork);
  } catch (const dnnl::error& e) {
    throw InternalError(std::string("op 'matmul_int8': oneDNN could not create a primitive: ") + e.what());
  }
  kernels::DnnlCall::Args args{{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, pd.weights_desc()}, {DNNL_ARG_DST, c_md},
                               {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp_md},
                               {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, one_by_one}};
  if (s.bias) args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, bias_md);
  kernels::DnnlCall call(dnnl::matmul(pd), std::move(args), s.m * s.k * s.n < kSingleThreadWork);
  return [s, call, quantize = *quantize, w, packed](const void* const* in, void* out) {
    thread_local kernels::ActivationQuant aq;
    thread_local std::vector<uint8_t> qa;
    float sa = aq.measure(static_cast<const float*>(in[0]), s.m * s.k);
    if (qa.size() < static_cast<size_t>(s.m * s.k)) qa.resize(static_cast<size_t>(s.m * s.k));
    const void* q[] = {in[0], qa.data(), &aq.inv_scale, &aq.zero_point};
    quantize.run(q);
    const void* weights = packed.get();
    QuantWeights per_call;
    if (!weights) {  // weights that change between calls: one scale for all columns (the primitive's are 1)
      per_call = kernels::quantize_weights(static_cast<const float*>(in[1]), s.n, s.k, s.tb, true);
      sa *= per_call.scale[0];
      weights = per_call.q.data();
    }
    const void* ptrs[] = {qa.data(), weights, out, &aq.zero_point, &sa, s.bias ? in[2] : nullptr};
    call.run(ptrs);
  };
}

Spec spec_of(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const attrs::Matmul m = attrs::Matmul::of(a);
  return {out.shape[0], in[0].shape[1], out.shape[1], m.trans_b, in.size() == 3, m.act};
}

Kernel prepare_matmul_int8(const Metas& in, const TensorMeta& out, const Attrs& a) {
  if (out.numel() == 0) return [](const void* const*, void*) {};
  return make_kernel(spec_of(in, out, a), nullptr);
}

Kernel prepack_matmul_int8(const Metas& in, const TensorMeta& out, const Attrs& a, const std::vector<const void*>& constant) {
  if (out.numel() == 0) return [](const void* const*, void*) {};
  return make_kernel(spec_of(in, out, a), constant.size() > 1 ? static_cast<const float*>(constant[1]) : nullptr);
}

}  // namespace

void register_int8_ops() {
  register_op({"matmul_int8", -1, infer_matmul_int8, prepare_matmul_int8, nullptr, false, prepack_matmul_int8});
}

}  // namespace hg
