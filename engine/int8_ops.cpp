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
#include <vector>

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dnnl_context.h"
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

// Per output column: the s8 weights [K, N] (row-major) and their scales.
struct QuantWeights {
  std::vector<int8_t> q;
  std::vector<float> scale;
};

// Per output column (`uniform`: one scale for all columns, for weights that change between
// calls, since the primitive's output scales are fixed). A NaN weight quantizes to 0.
QuantWeights quantize_weights(const Spec& s, const float* b, bool uniform) {
  QuantWeights w{std::vector<int8_t>(static_cast<size_t>(s.k * s.n)), std::vector<float>(static_cast<size_t>(s.n), 0.0f)};
  auto at = [&](int64_t k, int64_t n) { return s.tb ? b[n * s.k + k] : b[k * s.n + n]; };
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k) w.scale[n] = std::max(w.scale[n], std::abs(at(k, n)));
  if (uniform) std::fill(w.scale.begin(), w.scale.end(), *std::max_element(w.scale.begin(), w.scale.end()));
  for (float& x : w.scale) x = x > 0 && std::isfinite(x) ? x / 127.0f : 1.0f;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k) {
      const float q = std::nearbyint(at(k, n) / w.scale[n]);
      w.q[k * s.n + n] = static_cast<int8_t>(q == q ? std::clamp(q, -127.0f, 127.0f) : 0.0f);
    }
  return w;
}

// The per-call buffers of the running thread: a's u8 values, 1 / s_a, the zero point.
struct Scratch {
  std::vector<uint8_t> qa;
  float inv_scale = 1;
  int32_t zero_point = 0;
};

// min(a, 0) and max(a, 0) over `count` floats (NaN ignored), 4 lanes at a time.
std::pair<float, float> range_with_zero(const float* a, int64_t count) {
  __m128 lo = _mm_setzero_ps(), hi = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const __m128 x = _mm_loadu_ps(a + i);
    lo = _mm_min_ps(x, lo);  // a NaN lane keeps lo (minps returns its second operand)
    hi = _mm_max_ps(x, hi);
  }
  float l[4], h[4];
  _mm_storeu_ps(l, lo), _mm_storeu_ps(h, hi);
  float mn = std::min({l[0], l[1], l[2], l[3]}), mx = std::max({h[0], h[1], h[2], h[3]});
  for (; i < count; ++i) mn = a[i] < mn ? a[i] : mn, mx = a[i] > mx ? a[i] : mx;
  return {mn, mx};
}

// s_a and the zero point of a (m x k, FP32) into buf; returns s_a. The u8 values are oneDNN's
// reorder's work (u8 = saturate(round(a / s_a) + z)).
float activation_scale(const float* a, int64_t count, Scratch& buf) {
  const auto [lo, hi] = range_with_zero(a, count);
  const float scale = hi > lo && std::isfinite(hi - lo) ? (hi - lo) / 255.0f : 1.0f;
  buf.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / scale), 0.0f, 255.0f));
  buf.inv_scale = 1.0f / scale;
  return scale;
}

// `constant_b`: the weights, quantized here once per column; null: quantized with every call,
// all columns with one scale (the primitive's output scales are then 1).
Kernel make_kernel(const Spec& s, const float* constant_b) {
  const dnnl::memory::desc a_md({s.m, s.k}, dt::u8, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc af_md({s.m, s.k}, dt::f32, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc b_plain({s.k, s.n}, dt::s8, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc c_md({s.m, s.n}, dt::f32, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc one_f32({1}, dt::f32, dnnl::memory::format_tag::a);
  const dnnl::memory::desc one_by_one({1, 1}, dt::f32, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc zp_md({1}, dt::s32, dnnl::memory::format_tag::a);
  const dnnl::memory::desc bias_md({1, s.n}, dt::f32, dnnl::memory::format_tag::ab);
  auto w = std::make_shared<QuantWeights>(constant_b ? quantize_weights(s, constant_b, false) : QuantWeights{});
  dnnl::primitive_attr attr = kernels::user_scratchpad();
  attr.set_output_scales(1 << 1, constant_b ? w->scale : std::vector<float>(static_cast<size_t>(s.n), 1.0f));
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops po;
  po.append_binary(dnnl::algorithm::binary_mul, one_by_one);                  // s_a (and s_n, see below)
  if (s.bias) po.append_binary(dnnl::algorithm::binary_add, bias_md);  // after the scales, unlike a primitive bias
  kernels::append_activation(po, s.act);
  attr.set_post_ops(po);
  dnnl::primitive_attr qattr = kernels::user_scratchpad();  // a -> u8: scaled by 1 / s_a, zero point z
  qattr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  qattr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::matmul::primitive_desc pd;
  dnnl::reorder::primitive_desc qpd;
  std::shared_ptr<void> packed;
  try {
    const auto b_want = constant_b ? dnnl::memory::desc({s.k, s.n}, dt::s8, dnnl::memory::format_tag::any) : b_plain;
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_want, c_md), attr, kernels::dnnl_engine());
    if (constant_b)
      packed = pd.weights_desc() == b_plain ? std::shared_ptr<void>(w, w->q.data())
                                            : kernels::reorder_once(b_plain, w->q.data(), pd.weights_desc());
    qpd = dnnl::reorder::primitive_desc(kernels::dnnl_engine(), af_md, kernels::dnnl_engine(), a_md, qattr);
  } catch (const dnnl::error& e) {
    throw InternalError(std::string("op 'matmul_int8': oneDNN could not create a primitive: ") + e.what());
  }
  kernels::DnnlCall::Args args{{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, pd.weights_desc()}, {DNNL_ARG_DST, c_md},
                               {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp_md},
                               {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, one_by_one}};
  if (s.bias) args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, bias_md);
  kernels::DnnlCall call(dnnl::matmul(pd), std::move(args), s.m * s.k * s.n < kSingleThreadWork);
  kernels::DnnlCall quantize(dnnl::reorder(qpd),
                             {{DNNL_ARG_SRC, af_md}, {DNNL_ARG_DST, a_md}, {DNNL_ARG_ATTR_OUTPUT_SCALES, one_f32},
                              {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, zp_md}},
                             s.m * s.k < kSingleThreadWork);
  return [s, call, quantize, w, packed](const void* const* in, void* out) {
    thread_local Scratch buf;
    float sa = activation_scale(static_cast<const float*>(in[0]), s.m * s.k, buf);
    if (buf.qa.size() < static_cast<size_t>(s.m * s.k)) buf.qa.resize(static_cast<size_t>(s.m * s.k));
    const void* q[] = {in[0], buf.qa.data(), &buf.inv_scale, &buf.zero_point};
    quantize.run(q);
    const void* weights = packed.get();
    QuantWeights per_call;
    if (!weights) {  // weights that change between calls: one scale for all columns (the primitive's are 1)
      per_call = quantize_weights(s, static_cast<const float*>(in[1]), true);
      sa *= per_call.scale[0];
      weights = per_call.q.data();
    }
    const void* ptrs[] = {buf.qa.data(), weights, out, &buf.zero_point, &sa, s.bias ? in[2] : nullptr};
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
