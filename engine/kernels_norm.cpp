// batch_norm through oneDNN (training: batch statistics; eval: running statistics), the
// running-statistics update, and layer_norm in our own loops (F32 and F64).
#include <cmath>
#include <vector>

#include "engine/dtype_dispatch.h"
#include "engine/error.h"
#include "engine/kernels_nn.h"
#include "engine/vec16.h"

namespace hg::kernels::nn {

namespace {

using dnnl::memory;
using flags = dnnl::normalization_flags;

// Attrs: floats {eps}. x is [N, C, ...] in any dtype oneDNN takes; weight, bias and the
// statistics are F32 [C].
memory::desc channel_md(const Shape& x) { return plain_md({x[1]}, DType::F32); }

dnnl::batch_normalization_forward::primitive_desc bn_fwd_pd(const TensorMeta& x, float eps, flags f,
                                                            dnnl::prop_kind pk) {
  dnnl::batch_normalization_forward::desc d(pk, plain_md(x.shape, x.dtype), eps, f);
  return {d, user_scratchpad(), dnnl_engine()};
}

}  // namespace

Kernel prepare_batch_norm_train(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const memory::desc data = plain_md(out.shape, out.dtype), ch = channel_md(out.shape);
  try {
    auto pd = bn_fwd_pd(in[0], static_cast<float>(a.f(0)), flags::use_scale | flags::use_shift,
                        dnnl::prop_kind::forward_training);
    DnnlStep step(pd, dnnl::batch_normalization_forward(pd),
                  {{DNNL_ARG_SRC, ArgFrom::Input, 0, data},
                   {DNNL_ARG_SCALE, ArgFrom::Input, 1, ch},
                   {DNNL_ARG_SHIFT, ArgFrom::Input, 2, ch},
                   {DNNL_ARG_DST, ArgFrom::Output, 0, data},
                   {DNNL_ARG_MEAN, ArgFrom::Temp, 0, {}},
                   {DNNL_ARG_VARIANCE, ArgFrom::Temp, 1, {}}});
    return [step = std::move(step)](const void* const* i, void* o) { step.run(i, o); };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("batch_norm_train", e);
  }
}

Kernel prepare_batch_norm_eval(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const memory::desc data = plain_md(out.shape, out.dtype), ch = channel_md(out.shape);
  try {
    auto pd = bn_fwd_pd(in[0], static_cast<float>(a.f(0)),
                        flags::use_global_stats | flags::use_scale | flags::use_shift,
                        dnnl::prop_kind::forward_inference);
    DnnlStep step(pd, dnnl::batch_normalization_forward(pd),
                  {{DNNL_ARG_SRC, ArgFrom::Input, 0, data},
                   {DNNL_ARG_SCALE, ArgFrom::Input, 1, ch},
                   {DNNL_ARG_SHIFT, ArgFrom::Input, 2, ch},
                   {DNNL_ARG_MEAN, ArgFrom::Input, 3, ch},
                   {DNNL_ARG_VARIANCE, ArgFrom::Input, 4, ch},
                   {DNNL_ARG_DST, ArgFrom::Output, 0, data}});
    return [step = std::move(step)](const void* const* i, void* o) { step.run(i, o); };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("batch_norm_eval", e);
  }
}

// inputs: grad, x, weight (+ running mean, running var in eval mode); ints {which}: 0 -> grad of
// x, 1 -> grad of the weight. Training mode reruns the statistics forward into scratch first.
Kernel prepare_batch_norm_backward(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  const bool global = in.size() == 5;
  const int64_t which = a.i(0);
  const float eps = static_cast<float>(a.f(0));
  const TensorMeta& x = in[1];
  const memory::desc data = plain_md(x.shape, x.dtype), ch = channel_md(x.shape);
  const flags f = (global ? flags::use_global_stats : flags::none) | flags::use_scale;
  constexpr int kDst = 0, kMean = 1, kVar = 2, kDiffSrc = 3, kDiffScale = 4;
  try {
    auto hint = bn_fwd_pd(x, eps, f, dnnl::prop_kind::forward_training);
    dnnl::batch_normalization_backward::desc d(dnnl::prop_kind::backward, data, data, eps, f);
    dnnl::batch_normalization_backward::primitive_desc pd(d, user_scratchpad(), dnnl_engine(), hint);
    std::vector<DnnlArg> args{
        {DNNL_ARG_DIFF_DST, ArgFrom::Input, 0, data},
        {DNNL_ARG_SRC, ArgFrom::Input, 1, data},
        {DNNL_ARG_SCALE, ArgFrom::Input, 2, ch},
        {DNNL_ARG_MEAN, global ? ArgFrom::Input : ArgFrom::Temp, global ? 3 : kMean, ch},
        {DNNL_ARG_VARIANCE, global ? ArgFrom::Input : ArgFrom::Temp, global ? 4 : kVar, ch},
        {DNNL_ARG_DIFF_SRC, which == 0 ? ArgFrom::Output : ArgFrom::Temp, which == 0 ? 0 : kDiffSrc, data},
        {DNNL_ARG_DIFF_SCALE, which == 1 ? ArgFrom::Output : ArgFrom::Temp, which == 1 ? 0 : kDiffScale, ch}};
    DnnlStep backward(pd, dnnl::batch_normalization_backward(pd), std::move(args));
    if (global) return [backward = std::move(backward)](const void* const* i, void* o) { backward.run(i, o); };
    auto stats = bn_fwd_pd(x, eps, flags::none, dnnl::prop_kind::forward_training);
    DnnlStep forward(stats, dnnl::batch_normalization_forward(stats),
                     {{DNNL_ARG_SRC, ArgFrom::Input, 1, data},
                      {DNNL_ARG_DST, ArgFrom::Temp, kDst, {}},
                      {DNNL_ARG_MEAN, ArgFrom::Temp, kMean, {}},
                      {DNNL_ARG_VARIANCE, ArgFrom::Temp, kVar, {}}});
    return [forward = std::move(forward), backward = std::move(backward)](const void* const* i, void* o) {
      forward.run(i, o);  // writes only temps
      backward.run(i, o);
    };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("batch_norm_backward", e);
  }
}

// inputs: x [N, C, ...], running [C]; ints {which}: 0 -> mean, 1 -> variance (unbiased);
// floats {momentum}. Output: (1 - momentum) * running + momentum * batch statistic.
Kernel prepare_batch_norm_update_stats(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const Shape& s = in[0].shape;
  const int64_t n = s[0], c = s[1], inner = n * c != 0 ? numel(s) / (n * c) : 0;
  const bool var = a.i(0) == 1;
  const double m = a.f(0);
  return visit_dtype(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    return visit_dtype(out.dtype, [&]<class U>(Type<U>) -> Kernel {
      if constexpr (!std::is_floating_point_v<compute_t<T>> || !std::is_floating_point_v<compute_t<U>>) {
        throw InternalError("batch_norm_update_stats: floating-point dtypes only");
      } else {
        return [n, c, inner, var, m](const void* const* inp, void* o) {
          const T* x = static_cast<const T*>(inp[0]);
          const U* run = static_cast<const U*>(inp[1]);
          U* y = static_cast<U*>(o);
          const double count = static_cast<double>(n * inner);
          for (int64_t ch = 0; ch < c; ++ch) {
            double sum = 0, sq = 0;
            for (int64_t b = 0; b < n; ++b)
              for (int64_t k = 0; k < inner; ++k) sum += static_cast<double>(load(x[(b * c + ch) * inner + k]));
            const double mean = sum / count;
            if (var)
              for (int64_t b = 0; b < n; ++b)
                for (int64_t k = 0; k < inner; ++k) {
                  const double d = static_cast<double>(load(x[(b * c + ch) * inner + k])) - mean;
                  sq += d * d;
                }
            const double stat = var ? sq / (count - 1) : mean;
            y[ch] = store<U>((1 - m) * static_cast<double>(load(run[ch])) + m * stat);
          }
        };
      }
    });
  });
}

// ---- layer_norm: x [rows, D] (D = the trailing normalized dims), weight and bias [D] ----

namespace {

// Mean and 1/std of a row, accumulated in F64 over 8 independent partial sums: one chain of
// dependent adds ran at one add per 4 cycles (17% of BERT's time went to layer_norm).
template <class T>
void row_stats(const T* x, int64_t d, double eps, double& mean, double& rstd) {
  constexpr int kLanes = 8;
  double part[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= d; k += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += static_cast<double>(x[k + l]);
  double sum = 0;
  for (; k < d; ++k) sum += static_cast<double>(x[k]);
  for (double p : part) sum += p;
  mean = sum / static_cast<double>(d);
  double sq_part[kLanes] = {};
  for (k = 0; k + kLanes <= d; k += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double c = static_cast<double>(x[k + l]) - mean;
      sq_part[l] += c * c;
    }
  double sq = 0;
  for (; k < d; ++k) sq += (static_cast<double>(x[k]) - mean) * (static_cast<double>(x[k]) - mean);
  for (double p : sq_part) sq += p;
  rstd = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
}

// F32 rows in 16-lane vectors (GCC vector extensions: AVX-512 when the CPU has it, picked at load
// by target_clones, else four SSE operations per vector). y = (x [+ r] - mean) * rstd * w + b with
// the mean and the variance accumulated in F32 over 16 lanes, two passes over the row (which sits
// in L1), as PyTorch's CPU kernel accumulates in F32. With r, x + r is written to y first.
// Unaligned 16-float loads and stores through engine/vec16.h's f32x16.
#define HG_V16(p) (*reinterpret_cast<f32x16*>(p))
#define HG_CV16(p) (*reinterpret_cast<const f32x16*>(p))

__attribute__((target_clones("avx512f", "default"))) void layer_norm_row_f32(const float* x, const float* r,
                                                                              const float* w, const float* b,
                                                                              float* y, int64_t d, float eps) {
  const int64_t dv = d / kLanes16 * kLanes16;
  if (r) {
    for (int64_t k = 0; k < dv; k += kLanes16) HG_V16(y + k) = HG_CV16(x + k) + HG_CV16(r + k);
    for (int64_t k = dv; k < d; ++k) y[k] = x[k] + r[k];
    x = y;
  }
  f32x16 acc = {}, acc2 = {};  // two chains of dependent adds
  int64_t k = 0;
  for (; k + 2 * kLanes16 <= dv; k += 2 * kLanes16) {
    acc += HG_CV16(x + k);
    acc2 += HG_CV16(x + k + kLanes16);
  }
  if (k < dv) acc += HG_CV16(x + k);
  acc += acc2;
  float sum = 0;
  for (int l = 0; l < kLanes16; ++l) sum += acc[l];
  for (k = dv; k < d; ++k) sum += x[k];
  const float mean = sum / static_cast<float>(d);
  acc = f32x16{};
  acc2 = f32x16{};
  for (k = 0; k + 2 * kLanes16 <= dv; k += 2 * kLanes16) {
    const f32x16 c = HG_CV16(x + k) - mean, c2 = HG_CV16(x + k + kLanes16) - mean;
    acc += c * c;
    acc2 += c2 * c2;
  }
  if (k < dv) {
    const f32x16 c = HG_CV16(x + k) - mean;
    acc += c * c;
  }
  acc += acc2;
  float sq = 0;
  for (int l = 0; l < kLanes16; ++l) sq += acc[l];
  for (k = dv; k < d; ++k) sq += (x[k] - mean) * (x[k] - mean);
  const float rstd = 1.0f / std::sqrt(sq / static_cast<float>(d) + eps);
  for (k = 0; k < dv; k += kLanes16) HG_V16(y + k) = (HG_CV16(x + k) - mean) * rstd * HG_CV16(w + k) + HG_CV16(b + k);
  for (k = dv; k < d; ++k) y[k] = (x[k] - mean) * rstd * w[k] + b[k];
}
#undef HG_V16
#undef HG_CV16

template <class F>
Kernel float_kernel(DType t, const char* name, F&& make) {
  if (t == DType::F32) return make(Type<float>{});
  if (t == DType::F64) return make(Type<double>{});
  throw InternalError(std::string(name) + ": F32 and F64 only");
}

}  // namespace

// inputs: x, weight, bias[, residual]; floats {eps}. Rows in parallel when large.
Kernel prepare_layer_norm(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const int64_t d = in[1].numel(), rows = d ? out.numel() / d : 0;
  const double eps = a.f(0);
  const bool residual = in.size() == 4;
  if (out.dtype == DType::F32)
    return [d, rows, eps = static_cast<float>(eps), residual](const void* const* inp, void* o) {
      const float* w = static_cast<const float*>(inp[1]);
      const float* b = static_cast<const float*>(inp[2]);
#pragma omp parallel for schedule(static) if (rows * d >= (int64_t{1} << 15))
      for (int64_t r = 0; r < rows; ++r)
        layer_norm_row_f32(static_cast<const float*>(inp[0]) + r * d,
                           residual ? static_cast<const float*>(inp[3]) + r * d : nullptr, w, b,
                           static_cast<float*>(o) + r * d, d, eps);
    };
  if (out.dtype != DType::F64) throw InternalError("layer_norm: F32 and F64 only");
  return [d, rows, eps, residual](const void* const* inp, void* o) {
    const double* w = static_cast<const double*>(inp[1]);
    const double* b = static_cast<const double*>(inp[2]);
#pragma omp parallel for schedule(static) if (rows * d >= (int64_t{1} << 15))
    for (int64_t r = 0; r < rows; ++r) {
      const double* x = static_cast<const double*>(inp[0]) + r * d;
      double* y = static_cast<double*>(o) + r * d;
      if (residual) {
        for (int64_t k = 0; k < d; ++k) y[k] = x[k] + static_cast<const double*>(inp[3])[r * d + k];
        x = y;
      }
      double mean, rstd;
      row_stats(x, d, eps, mean, rstd);
      for (int64_t k = 0; k < d; ++k) y[k] = (x[k] - mean) * rstd * w[k] + b[k];
    }
  };
}

// inputs: grad, x, weight; ints {which, normalized shape...}: 0 -> grad of x, 1 -> grad of the
// weight, 2 -> grad of the bias; floats {eps}.
Kernel prepare_layer_norm_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const int64_t d = in[2].numel(), rows = d ? in[1].numel() / d : 0, which = a.i(0);
  const double eps = a.f(0);
  return float_kernel(out.dtype, "layer_norm_backward", [&]<class T>(Type<T>) -> Kernel {
    return [d, rows, eps, which](const void* const* inp, void* o) {
      const T* w = static_cast<const T*>(inp[2]);
      T* y = static_cast<T*>(o);
      if (which != 0) {
        thread_local std::vector<double> acc;
        acc.assign(static_cast<size_t>(d), 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          const T* g = static_cast<const T*>(inp[0]) + r * d;
          const T* x = static_cast<const T*>(inp[1]) + r * d;
          double mean = 0, rstd = 1;
          if (which == 1) row_stats(x, d, eps, mean, rstd);
          for (int64_t k = 0; k < d; ++k)
            acc[k] += static_cast<double>(g[k]) * (which == 1 ? (static_cast<double>(x[k]) - mean) * rstd : 1.0);
        }
        for (int64_t k = 0; k < d; ++k) y[k] = static_cast<T>(acc[k]);
        return;
      }
      for (int64_t r = 0; r < rows; ++r) {
        const T* g = static_cast<const T*>(inp[0]) + r * d;
        const T* x = static_cast<const T*>(inp[1]) + r * d;
        double mean, rstd, sum_gw = 0, sum_gwx = 0;
        row_stats(x, d, eps, mean, rstd);
        for (int64_t k = 0; k < d; ++k) {
          const double gw = static_cast<double>(g[k]) * static_cast<double>(w[k]);
          sum_gw += gw;
          sum_gwx += gw * (static_cast<double>(x[k]) - mean) * rstd;
        }
        const double mg = sum_gw / static_cast<double>(d), mgx = sum_gwx / static_cast<double>(d);
        for (int64_t k = 0; k < d; ++k) {
          const double xhat = (static_cast<double>(x[k]) - mean) * rstd;
          y[r * d + k] = static_cast<T>(rstd * (static_cast<double>(g[k]) * static_cast<double>(w[k]) - mg - xhat * mgx));
        }
      }
    };
  });
}

}  // namespace hg::kernels::nn
