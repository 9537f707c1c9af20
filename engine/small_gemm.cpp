// The small-batch GEMM: y = act(x w^T + bias) for at most kSmallGemmRows rows of x, F32, with w
// constant (copied here once). What a served model runs at batch 1 to 4 in its linear layers
// (LeNet-5's and the digits MLP's layers, classifier heads): a oneDNN primitive call costs more
// than the arithmetic there. w is kept as [k, n] with n padded to 16 lanes; per block of 64
// outputs one pass over k, each w vector multiplied into the (up to four) rows' accumulators
// (four independent FMA chains per row). With at most 32 outputs (a classifier head) w is kept
// as [n, k] rows and each output is a dot product in 16 partial sums instead. target_clones picks
// AVX-512 at load when the CPU has it. The matmul / linear prepack chooses this kernel
// (kernels_dnnl.cpp) and says so in the graph dump.
#include <algorithm>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/kernels.h"
#include "engine/packed_weights.h"
#include "engine/vec16.h"

namespace hg::kernels {

namespace {

constexpr int64_t kLanes = kLanes16;
constexpr int64_t kBlockVectors = 4;  // 64 outputs per pass over x: four independent FMA chains per row

constexpr int64_t kDotOutputs = 32;  // up to here w is kept as rows (dot_rows), beyond as columns

[[gnu::always_inline]] inline float finish(float s, float b, int64_t act) {
  s += b;
  if (act == static_cast<int64_t>(FusedAct::Relu)) return s < 0.0f ? 0.0f : s;
  if (act == static_cast<int64_t>(FusedAct::Relu6)) return std::min(s < 0.0f ? 0.0f : s, 6.0f);
  return s;
}

// acc[i][v] += x[i, :] . w[:, j0 + 16 v ..] for M rows and NV vectors of outputs.
template <int M, int NV>
[[gnu::always_inline]] inline void block(const float* x, const float* w, int64_t k, int64_t np, int64_t j0,
                                         f32x16 (&acc)[kSmallGemmRows][kBlockVectors]) {
  for (int64_t p = 0; p < k; ++p) {
    const float* wr = w + p * np + j0;
    f32x16 wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = *reinterpret_cast<const f32x16*>(wr + v * kLanes);
    for (int i = 0; i < M; ++i) {
      const float xi = x[i * k + p];
      for (int v = 0; v < NV; ++v) acc[i][v] += xi * wv[v];
    }
  }
}

template <int M>
[[gnu::always_inline]] inline void rows(const float* x, const float* w, const float* bias, float* y, int64_t k,
                                        int64_t n, int64_t np, int64_t act) {
  for (int64_t j0 = 0; j0 < np; j0 += kBlockVectors * kLanes) {
    f32x16 acc[kSmallGemmRows][kBlockVectors] = {};
    const int64_t nv = std::min(kBlockVectors, (np - j0) / kLanes);
    if (nv == 4) block<M, 4>(x, w, k, np, j0, acc);
    else if (nv == 3) block<M, 3>(x, w, k, np, j0, acc);
    else if (nv == 2) block<M, 2>(x, w, k, np, j0, acc);
    else block<M, 1>(x, w, k, np, j0, acc);
    for (int i = 0; i < M; ++i)
      for (int64_t v = 0; v < nv; ++v)
        for (int64_t l = 0; l < kLanes; ++l) {
          const int64_t j = j0 + v * kLanes + l;
          if (j >= n) break;
          y[i * n + j] = finish(acc[i][v][l], bias ? bias[j] : 0.0f, act);
        }
  }
}

// Few outputs (n <= kDotOutputs): w as [n, k] rows, each row against the rows of x in 16 partial
// sums per row, summed at the end (one chain per output would wait on its own FMAs).
__attribute__((target_clones("avx512f", "default"))) void dot_rows(const float* x, const float* w, const float* bias,
                                                                   float* y, int64_t m, int64_t k, int64_t n,
                                                                   int64_t act) {
  for (int64_t j = 0; j < n; ++j) {
    const float* wr = w + j * k;
    f32x16 acc[kSmallGemmRows] = {};
    int64_t p = 0;
    for (; p + kLanes <= k; p += kLanes) {
      const f32x16 wv = *reinterpret_cast<const f32x16*>(wr + p);
      for (int64_t i = 0; i < m; ++i) acc[i] += *reinterpret_cast<const f32x16*>(x + i * k + p) * wv;
    }
    for (int64_t i = 0; i < m; ++i) {
      float s = 0.0f;
      for (int64_t l = 0; l < kLanes; ++l) s += acc[i][l];
      for (int64_t q = p; q < k; ++q) s += x[i * k + q] * wr[q];
      y[i * n + j] = finish(s, bias ? bias[j] : 0.0f, act);
    }
  }
}

// w: [k, np], np = n rounded up to 16 lanes (zero columns after n).
__attribute__((target_clones("avx512f", "default"))) void small_rows(const float* x, const float* w, const float* bias,
                                                                     float* y, int64_t m, int64_t k, int64_t n,
                                                                     int64_t np, int64_t act) {
  switch (m) {
    case 1: return rows<1>(x, w, bias, y, k, n, np, act);
    case 2: return rows<2>(x, w, bias, y, k, n, np, act);
    case 3: return rows<3>(x, w, bias, y, k, n, np, act);
    default: return rows<4>(x, w, bias, y, k, n, np, act);
  }
}

}  // namespace

bool small_gemm_fits(DType t, int64_t m, int64_t k, int64_t n, FusedAct act) {
  return t == DType::F32 && m >= 1 && m <= kSmallGemmRows && k > 0 && n > 0 && k * n <= kSmallGemmWeights &&
         (act == FusedAct::None || act == FusedAct::Relu || act == FusedAct::Relu6);
}

Kernel small_gemm(int64_t m, int64_t k, int64_t n, const float* w, bool w_is_nk, bool bias, FusedAct act) {
  // w as [n, k] rows (few outputs) or as [k, np] columns, shared with the other kernels that
  // pack the same weights (engine/packed_weights.h): the batch buckets of one model all do.
  static PackedWeights<std::tuple<int64_t, int64_t, bool, bool>> packs;
  const int64_t a = static_cast<int64_t>(act);
  const bool as_rows = n <= kDotOutputs;
  const int64_t np = as_rows ? n : (n + kLanes - 1) / kLanes * kLanes;
  const std::shared_ptr<void> packed =
      packs.get(w, static_cast<size_t>(k * n) * sizeof(float), {k, n, w_is_nk, as_rows},
                static_cast<size_t>(k * np) * sizeof(float), [&](void* buf) {
                  auto* p = static_cast<float*>(buf);
                  for (int64_t q = 0; q < k; ++q)
                    for (int64_t j = 0; j < np; ++j) {
                      const float v = j >= n ? 0.0f : w_is_nk ? w[j * k + q] : w[q * n + j];
                      if (as_rows) p[j * k + q] = v;
                      else p[q * np + j] = v;
                    }
                });
  const auto* pw = static_cast<const float*>(packed.get());
  if (as_rows)
    return [packed, pw, m, k, n, bias, a](const void* const* in, void* out) {
      dot_rows(static_cast<const float*>(in[0]), pw, bias ? static_cast<const float*>(in[2]) : nullptr,
               static_cast<float*>(out), m, k, n, a);
    };
  return [packed, pw, m, k, n, np, bias, a](const void* const* in, void* out) {
    small_rows(static_cast<const float*>(in[0]), pw, bias ? static_cast<const float*>(in[2]) : nullptr,
               static_cast<float*>(out), m, k, n, np, a);
  };
}

}  // namespace hg::kernels
