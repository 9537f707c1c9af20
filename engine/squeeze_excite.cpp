// squeeze_excite (engine/fused_ops.h): a squeeze-and-excitation block as one kernel. Per image:
// the channel means of x (one pass over x), two small fully connected layers on them (the
// block's 1x1 convolutions on a 1x1 map: tens of microseconds as oneDNN convolutions, a few as
// the loops here), the sigmoid gate, then x scaled per channel (a second pass, in place when the
// compiler lets the output take x's buffer). x is F32 or BF16, plain NCHW or channel-blocked
// [N, C/b, H, W, b] (engine/ops_layout.h); sums and the layers run in F32. The loops are plain
// loops over independent lanes (16 partial sums where a row is reduced), so the compiler
// vectorizes them; target_clones picks AVX-512 at load when the CPU has it.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/act_math.h"
#include "engine/dtype.h"
#include "engine/fused_ops.h"
#include "engine/kernels.h"
#include "engine/post_ops.h"
#include "engine/schema_util.h"
#include "engine/vec16.h"

namespace hg {

namespace {

using namespace schema;

constexpr int64_t kLanes = kLanes16;

template <class T>
[[gnu::always_inline]] inline float ld(const T& v) {
  if constexpr (std::is_same_v<T, bf16>) return v.to_float();
  else return v;
}
template <class T>
[[gnu::always_inline]] inline T st(float v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16::from_float(v);
  else return v;
}

// sum of x[0, n) in 16 partial sums.
template <class T>
[[gnu::always_inline]] inline float row_sum(const T* x, int64_t n) {
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) part[l] += ld(x[i + l]);
  float s = 0;
  for (; i < n; ++i) s += ld(x[i]);
  for (int64_t l = 0; l < kLanes; ++l) s += part[l];
  return s;
}

// pool[c] = sum over the H*W positions of channel c of one image.
template <class T>
[[gnu::always_inline]] inline void pool_image(const T* x, int64_t cb, int64_t hw, int64_t b, float* pool) {
  if (b == 0) {  // NCHW: cb channels of hw
    for (int64_t c = 0; c < cb; ++c) pool[c] = row_sum(x + c * hw, hw);
    return;
  }
  std::fill(pool, pool + cb * b, 0.0f);
  for (int64_t k = 0; k < cb; ++k)
    for (int64_t p = 0; p < hw; ++p) {
      const T* row = x + (k * hw + p) * b;
      float* acc = pool + k * b;
      for (int64_t l = 0; l < b; ++l) acc[l] += ld(row[l]);
    }
}

template <class T>
[[gnu::always_inline]] inline void scale_image(const T* x, T* y, int64_t cb, int64_t hw, int64_t b, const float* s) {
  if (b == 0) {
    for (int64_t c = 0; c < cb; ++c)
      for (int64_t p = 0; p < hw; ++p) y[c * hw + p] = st<T>(ld(x[c * hw + p]) * s[c]);
    return;
  }
  for (int64_t k = 0; k < cb; ++k)
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t at = (k * hw + p) * b;
      for (int64_t l = 0; l < b; ++l) y[at + l] = st<T>(ld(x[at + l]) * s[k * b + l]);
    }
}

__attribute__((target_clones("avx512f", "default"))) void pool_f32(const float* x, int64_t cb, int64_t hw, int64_t b,
                                                                   float* pool) {
  pool_image(x, cb, hw, b, pool);
}
__attribute__((target_clones("avx512f", "default"))) void pool_bf16(const bf16* x, int64_t cb, int64_t hw, int64_t b,
                                                                    float* pool) {
  pool_image(x, cb, hw, b, pool);
}
__attribute__((target_clones("avx512f", "default"))) void scale_f32(const float* x, float* y, int64_t cb, int64_t hw,
                                                                    int64_t b, const float* s) {
  scale_image(x, y, cb, hw, b, s);
}
__attribute__((target_clones("avx512f", "default"))) void scale_bf16(const bf16* x, bf16* y, int64_t cb, int64_t hw,
                                                                     int64_t b, const float* s) {
  scale_image(x, y, cb, hw, b, s);
}

// h[j] = act(b1[j] + w1[j, :] . pool) for j < cr: rows of w1 [cr, c] against the means.
__attribute__((target_clones("avx512f", "default"))) void reduce_layer(const float* w1, const float* b1,
                                                                       const float* mean, int64_t cr, int64_t c,
                                                                       float* h) {
  for (int64_t j = 0; j < cr; ++j) {
    const float* w = w1 + j * c;
    float part[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= c; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) part[l] += w[i + l] * mean[i + l];
    float s = b1 ? b1[j] : 0.0f;
    for (; i < c; ++i) s += w[i] * mean[i];
    for (int64_t l = 0; l < kLanes; ++l) s += part[l];
    h[j] = s;
  }
}

// s[:c] = b2 + sum_j h[j] * w2t[j, :] (w2 transposed: [cr, c], rows along the channels).
__attribute__((target_clones("avx512f", "default"))) void expand_layer(const float* w2t, const float* b2, const float* h,
                                                                       int64_t cr, int64_t c, float* s) {
  if (b2) std::copy(b2, b2 + c, s);
  else std::fill(s, s + c, 0.0f);
  for (int64_t j = 0; j < cr; ++j) {
    const float* w = w2t + j * c;
    const float hj = h[j];
    for (int64_t i = 0; i < c; ++i) s[i] += hj * w[i];
  }
}

struct Dims {
  int64_t n, c, cr, hw, block, cb;  // block 0: NCHW (cb = c); else cb = ceil(c / block)
};

// ints {act, bias mask (1: b1, 2: b2), block}; inputs x, w1, w2, then b1 and b2 as the mask says.
Dims check(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t act = a.i(0), mask = a.i(1), block = a.i(2);
  if (!valid_fused_act(act)) fail(op, in, "bad activation code " + std::to_string(act));
  if (mask < 0 || mask > 3) fail(op, in, "bad bias mask " + std::to_string(mask));
  const size_t want = 3 + (mask & 1) + (mask >> 1);
  if (in.size() != want)
    fail(op, in, "expects x, w1, w2" + std::string(mask & 1 ? ", b1" : "") + (mask & 2 ? ", b2" : "") + " (" +
                     std::to_string(want) + " inputs)");
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16) fail(op, in, "x (input 0) must be F32 or BF16");
  for (size_t i = 1; i < in.size(); ++i) expect_dtype(op, in, i, DType::F32);
  const Shape& x = in[0].shape;
  if (block < 0 || (block == 0 && x.size() != 4) || (block > 0 && (x.size() != 5 || x[4] != block)))
    fail(op, in, block ? "x (input 0) must be [N, C/" + std::to_string(block) + ", H, W, " + std::to_string(block) + "]"
                       : "x (input 0) must be [N, C, H, W]");
  auto matrix = [&](size_t i, const char* name) -> std::pair<int64_t, int64_t> {
    const Shape& w = in[i].shape;
    if (!(w.size() == 2 || (w.size() == 4 && w[2] == 1 && w[3] == 1)))
      fail(op, in, std::string(name) + " (input " + std::to_string(i) + ") must be [out, in] or [out, in, 1, 1]");
    return {w[0], w[1]};
  };
  const auto [cr, c] = matrix(1, "w1");
  const auto [c2, cr2] = matrix(2, "w2");
  if (c2 != c || cr2 != cr) fail(op, in, "w2 must be [C, Cr] for w1 [Cr, C]");
  const int64_t cb = block ? (c + block - 1) / block : c;
  if (x[1] != cb) fail(op, in, "x has " + std::to_string(x[1]) + (block ? " channel blocks" : " channels") +
                                   ", the layers " + std::to_string(c) + " channels");
  size_t next = 3;
  if (mask & 1) {
    if (in[next].shape != Shape{cr}) fail(op, in, "b1 must be [" + std::to_string(cr) + "]");
    ++next;
  }
  if ((mask & 2) && in[next].shape != Shape{c}) fail(op, in, "b2 must be [" + std::to_string(c) + "]");
  return {x[0], c, cr, x[2] * x[3], block, cb};
}

TensorMeta infer_squeeze_excite(const OpSchema& op, const Metas& in, const Attrs& a) {
  check(op, in, a);
  return in[0];
}

Kernel make_kernel(const Metas& in, const TensorMeta& out, const Attrs& a, std::shared_ptr<const std::vector<float>> w2t) {
  const Dims d = check(op_schema("squeeze_excite"), in, a);
  const auto act = static_cast<FusedAct>(a.i(0));
  const int64_t mask = a.i(1);
  const bool bf = out.dtype == DType::BF16;
  const int64_t per_image = out.numel() / std::max<int64_t>(d.n, 1);
  return [d, act, mask, bf, per_image, w2t](const void* const* inp, void* o) {
    const float* w1 = static_cast<const float*>(inp[1]);
    const float* b1 = mask & 1 ? static_cast<const float*>(inp[3]) : nullptr;
    const float* b2 = mask & 2 ? static_cast<const float*>(inp[mask & 1 ? 4 : 3]) : nullptr;
    const int64_t chans = d.block ? d.cb * d.block : d.c;
    std::vector<float> plain_t;
    const float* wt = w2t ? w2t->data() : nullptr;
    if (!wt) {  // w2 not constant (eager): transpose it for this call
      const float* w2 = static_cast<const float*>(inp[2]);
      plain_t.resize(static_cast<size_t>(d.c * d.cr));
      for (int64_t i = 0; i < d.c; ++i)
        for (int64_t j = 0; j < d.cr; ++j) plain_t[j * d.c + i] = w2[i * d.cr + j];
      wt = plain_t.data();
    }
#pragma omp parallel for schedule(static) if (d.n > 1 && d.n * per_image >= (int64_t{1} << 15))
    for (int64_t n = 0; n < d.n; ++n) {
      thread_local std::vector<float> buf;  // per thread: no allocation per call once grown
      buf.resize(std::max(buf.size(), static_cast<size_t>(2 * chans + d.cr)));
      float* pool = buf.data();
      float* s = pool + chans;
      float* h = s + chans;
      if (bf) pool_bf16(static_cast<const bf16*>(inp[0]) + n * per_image, d.cb, d.hw, d.block, pool);
      else pool_f32(static_cast<const float*>(inp[0]) + n * per_image, d.cb, d.hw, d.block, pool);
      const float inv = d.hw ? 1.0f / static_cast<float>(d.hw) : 0.0f;
      for (int64_t c = 0; c < d.c; ++c) pool[c] *= inv;
      reduce_layer(w1, b1, pool, d.cr, d.c, h);
      for (int64_t j = 0; j < d.cr; ++j) h[j] = static_cast<float>(apply_fused_act(act, h[j]));
      expand_layer(wt, b2, h, d.cr, d.c, s);
      act::map4(s, s, d.c, [](act::f32x4 v) { return act::sigmoid4(v); });
      std::fill(s + d.c, s + chans, 0.0f);  // padding channels of the last block
      if (bf)
        scale_bf16(static_cast<const bf16*>(inp[0]) + n * per_image, static_cast<bf16*>(o) + n * per_image, d.cb,
                   d.hw, d.block, s);
      else
        scale_f32(static_cast<const float*>(inp[0]) + n * per_image, static_cast<float*>(o) + n * per_image, d.cb,
                  d.hw, d.block, s);
    }
  };
}

Kernel prepare_squeeze_excite(const Metas& in, const TensorMeta& out, const Attrs& a) {
  return make_kernel(in, out, a, nullptr);
}

// A constant w2 is transposed once, here.
Kernel prepack_squeeze_excite(const Metas& in, const TensorMeta& out, const Attrs& a,
                              const std::vector<const void*>& constant) {
  if (constant.size() < 3 || !constant[2]) return make_kernel(in, out, a, nullptr);
  const int64_t c = in[2].shape[0], cr = in[2].shape[1];
  auto t = std::make_shared<std::vector<float>>(static_cast<size_t>(c * cr));
  kernels::note_prepacked_bytes(t->size() * sizeof(float));
  const float* w2 = static_cast<const float*>(constant[2]);
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < cr; ++j) (*t)[j * c + i] = w2[i * cr + j];
  return make_kernel(in, out, a, std::move(t));
}

}  // namespace

void register_squeeze_excite_op() {
  OpSchema s{"squeeze_excite", -1, infer_squeeze_excite, prepare_squeeze_excite};
  s.inplace = true;
  s.prepack = prepack_squeeze_excite;
  register_op(s);
}

}  // namespace hg
