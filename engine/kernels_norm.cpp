// batch_norm (training: batch statistics; eval: running statistics), its gradients, the
// running-statistics update, and layer_norm, all in our own loops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/dtype_dispatch.h"
#include "engine/error.h"
#include "engine/kernels_nn.h"
#include "engine/vec16.h"

namespace hg::kernels::nn {

// ---- batch_norm: x [N, C, inner] (F32 or BF16; update_stats takes any float dtype), weight,
// bias and running statistics F32 [C]. One channel at a time, channels in parallel. oneDNN's
// plain-layout batch norm (ncsp) took 4.5 ms forward and 6 ms backward on [128, 16, 28, 28]. ----

namespace {

// Reductions run in F32 (compute_t) partial sums over blocks of at most kBlock values, the
// blocks added in double: short F32 sums keep their digits, and the loops vectorize.
constexpr int64_t kLanes = kLanes16, kBlock = 1024;

// Over `rows` rows of `len` values `stride` apart: s1 += sum(u - su), s2 += sum((u - su) * (v - sv)),
// in two vectors of partial sums (two chains of dependent adds), a third step of one vector, and
// a scalar tail.
template <class T, class C = compute_t<T>>
[[gnu::always_inline]] inline void block_sums(const T* u, const T* v, int64_t rows, int64_t len, int64_t stride,
                                              C su, C sv, double& s1, double& s2) {
  C p1[2 * kLanes] = {}, p2[2 * kLanes] = {}, t1 = 0, t2 = 0;
  for (int64_t r = 0; r < rows; ++r, u += stride, v += stride) {
    int64_t i = 0;
    for (; i + 2 * kLanes <= len; i += 2 * kLanes)
      for (int64_t l = 0; l < 2 * kLanes; ++l) {
        const C d = load(u[i + l]) - su;
        p1[l] += d;
        p2[l] += d * (load(v[i + l]) - sv);
      }
    if (i + kLanes <= len) {
      for (int64_t l = 0; l < kLanes; ++l) {
        const C d = load(u[i + l]) - su;
        p1[l] += d;
        p2[l] += d * (load(v[i + l]) - sv);
      }
      i += kLanes;
    }
    for (; i < len; ++i) {
      const C d = load(u[i]) - su;
      t1 += d;
      t2 += d * (load(v[i]) - sv);
    }
  }
  for (int64_t l = 0; l < 2 * kLanes; ++l) t1 += p1[l], t2 += p2[l];
  s1 += static_cast<double>(t1);
  s2 += static_cast<double>(t2);
}

// y = (u - m) * s + t [+ w * a]: the forward normalization and the input gradient.
template <class T, class C = compute_t<T>>
[[gnu::always_inline]] inline void plane_affine(const T* u, const T* w, T* y, int64_t len, C m, C s, C t, C a) {
  if (!w)
    for (int64_t i = 0; i < len; ++i) y[i] = store<T>((load(u[i]) - m) * s + t);
  else
    for (int64_t i = 0; i < len; ++i) y[i] = store<T>((load(u[i]) - m) * s + t + load(w[i]) * a);
}

enum class BnJob { Train, Eval, TrainGradX, TrainGradW, EvalGradX, EvalGradW, Mean, Var };

struct BnArgs {
  BnJob job;
  int64_t n, c, inner;
  double eps;
  const void *x = nullptr, *g = nullptr;                            // [N, C, inner] in T; g: gradients only
  const float *w = nullptr, *b = nullptr, *rm = nullptr, *rv = nullptr;  // [C], those the job reads
  void* y = nullptr;  // [N, C, inner] in T, or F32 [C] for the weight gradients
};

// One channel of job a.job. Mean and Var return the batch statistic (Var unbiased) and write nothing.
template <class T>
[[gnu::always_inline]] inline double bn_channel(const BnArgs& a, int64_t c) {
  using C = compute_t<T>;
  const int64_t stride = a.c * a.inner;
  const T* x = static_cast<const T*>(a.x) + c * a.inner;
  const T* g = a.g ? static_cast<const T*>(a.g) + c * a.inner : nullptr;
  auto y = [&](int64_t r) { return static_cast<T*>(a.y) + c * a.inner + r * stride; };  // row r of the output
  const double count = static_cast<double>(a.n * a.inner);
  // s1, s2 = sums over the channel (block_sums), blocks of whole rows or pieces of one long row.
  // Inlined, so that it is compiled for the caller's target_clones target.
  auto sums = [&](const T* u, const T* v, C su, C sv, double& s1, double& s2) __attribute__((always_inline)) {
    s1 = s2 = 0;
    if (a.inner >= kBlock) {
      for (int64_t r = 0; r < a.n; ++r)
        for (int64_t k = 0; k < a.inner; k += kBlock)
          block_sums(u + r * stride + k, v + r * stride + k, 1, std::min(kBlock, a.inner - k), stride, su, sv, s1, s2);
      return;
    }
    const int64_t rows = kBlock / std::max<int64_t>(a.inner, 1);
    for (int64_t r = 0; r < a.n; r += rows)
      block_sums(u + r * stride, v + r * stride, std::min(rows, a.n - r), a.inner, stride, su, sv, s1, s2);
  };
  const bool eval = a.job == BnJob::Eval || a.job == BnJob::EvalGradX || a.job == BnJob::EvalGradW;
  // x is centred on m, the channel mean rounded to C; dm = mean - m stays in double.
  double mean = eval ? a.rm[c] : 0, var = eval ? a.rv[c] : 0, dm = 0, s1, s2;
  if (!eval) {
    sums(x, x, C(0), C(0), s1, s2);
    mean = s1 / count;
    if (a.job == BnJob::Mean) return mean;
    // Two passes (the second reads the channel from cache): squares centred on the mean, minus
    // the square of the mean of x - m, so no large squares cancel when |mean| >> std.
    sums(x, x, static_cast<C>(mean), static_cast<C>(mean), s1, s2);
    dm = s1 / count;
    var = std::max(0.0, s2 / count - dm * dm);
    if (a.job == BnJob::Var) return var * count / (count - 1);
  }
  const C m = static_cast<C>(mean);
  mean = static_cast<double>(m) + dm;
  const double rstd = 1.0 / std::sqrt(var + a.eps), w = a.w[c];
  if (a.job == BnJob::Train || a.job == BnJob::Eval) {
    const double s = w * rstd, t = a.b[c] - dm * s;
    for (int64_t r = 0; r < a.n; ++r)
      plane_affine<T>(x + r * stride, nullptr, y(r), a.inner, m, C(s), C(t), C(0));
    return 0;
  }
  if (a.job == BnJob::EvalGradX) {
    for (int64_t r = 0; r < a.n; ++r)
      plane_affine<T>(g + r * stride, nullptr, y(r), a.inner, C(0), C(w * rstd), C(0), C(0));
    return 0;
  }
  sums(g, x, C(0), m, s1, s2);  // sum(g), sum(g * (x - m))
  const double sum_gx = s2 - dm * s1;  // sum(g * (x - mean))
  if (a.job != BnJob::TrainGradX) {
    static_cast<float*>(a.y)[c] = static_cast<float>(sum_gx * rstd);
    return 0;
  }
  // dx = w rstd (g - mean(g) - xhat mean(g xhat)), xhat = (x - mean) rstd, as g * k + (x - m) * s + t
  const double k = w * rstd, s = -k * rstd * rstd * sum_gx / count, t = -k * s1 / count - dm * s;
  for (int64_t r = 0; r < a.n; ++r)
    plane_affine<T>(x + r * stride, g + r * stride, y(r), a.inner, m, C(s), C(t), C(k));
  return 0;
}

using ChannelFn = double (*)(const BnArgs&, int64_t);

__attribute__((target_clones("avx512f", "default"))) double bn_channel_f32(const BnArgs& a, int64_t c) {
  return bn_channel<float>(a, c);
}
__attribute__((target_clones("avx512f", "default"))) double bn_channel_bf16(const BnArgs& a, int64_t c) {
  return bn_channel<bf16>(a, c);
}

ChannelFn channel_fn(DType t, const char* name) {
  return visit_dtype(t, [&]<class T>(Type<T>) -> ChannelFn {
    if constexpr (std::is_same_v<T, float>) return bn_channel_f32;
    else if constexpr (std::is_same_v<T, bf16>) return bn_channel_bf16;
    else if constexpr (std::is_floating_point_v<compute_t<T>>) return bn_channel<T>;
    else throw InternalError(std::string(name) + ": floating-point dtypes only");
  });
}

BnArgs bn_args(BnJob job, const Shape& s, double eps) {
  const int64_t n = s[0], c = s[1];
  return {job, n, c, n * c != 0 ? numel(s) / (n * c) : 0, eps};
}

bool worth_threads(const BnArgs& a) { return a.n * a.c * a.inner >= (int64_t{1} << 15); }

// inputs x|g, then x|w, b|w, (rm, rv) per job; see the callers.
Kernel bn_kernel(BnArgs args, DType t, const char* name) {
  return [args, f = channel_fn(t, name)](const void* const* in, void* o) {
    BnArgs a = args;
    a.y = o;
    if (a.job == BnJob::Train || a.job == BnJob::Eval) {
      a.x = in[0], a.w = static_cast<const float*>(in[1]), a.b = static_cast<const float*>(in[2]);
      if (a.job == BnJob::Eval) a.rm = static_cast<const float*>(in[3]), a.rv = static_cast<const float*>(in[4]);
    } else {
      a.g = in[0], a.x = in[1], a.w = static_cast<const float*>(in[2]);
      if (a.job >= BnJob::EvalGradX) a.rm = static_cast<const float*>(in[3]), a.rv = static_cast<const float*>(in[4]);
    }
#pragma omp parallel for schedule(static) if (worth_threads(a))
    for (int64_t ch = 0; ch < a.c; ++ch) f(a, ch);
  };
}

}  // namespace

// inputs: x, weight, bias; floats {eps}.
Kernel prepare_batch_norm_train(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  return bn_kernel(bn_args(BnJob::Train, in[0].shape, a.f(0)), in[0].dtype, "batch_norm_train");
}

// inputs: x, weight, bias, running mean, running var; floats {eps}.
Kernel prepare_batch_norm_eval(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  return bn_kernel(bn_args(BnJob::Eval, in[0].shape, a.f(0)), in[0].dtype, "batch_norm_eval");
}

// inputs: grad, x, weight (+ running mean, running var in eval mode); ints {which}: 0 -> grad of
// x, 1 -> grad of the weight. Training mode recomputes the batch statistics from x (two passes
// over each channel), then needs one pass over (g, x) for the weight, two for x.
Kernel prepare_batch_norm_backward(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  const bool eval = in.size() == 5, x = a.i(0) == 0;
  const BnJob job = eval ? (x ? BnJob::EvalGradX : BnJob::EvalGradW) : (x ? BnJob::TrainGradX : BnJob::TrainGradW);
  return bn_kernel(bn_args(job, in[1].shape, a.f(0)), in[1].dtype, "batch_norm_backward");
}

// inputs: x [N, C, ...], running [C]; ints {which}: 0 -> mean, 1 -> variance (unbiased);
// floats {momentum}. Output: (1 - momentum) * running + momentum * batch statistic.
Kernel prepare_batch_norm_update_stats(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const BnArgs args = bn_args(a.i(0) == 1 ? BnJob::Var : BnJob::Mean, in[0].shape, 0);
  const ChannelFn f = channel_fn(in[0].dtype, "batch_norm_update_stats");
  const double m = a.f(0);
  return visit_dtype(out.dtype, [&]<class U>(Type<U>) -> Kernel {
    if constexpr (!std::is_floating_point_v<compute_t<U>>) {
      throw InternalError("batch_norm_update_stats: floating-point dtypes only");
    } else {
      return [args, f, m](const void* const* inp, void* o) {
        BnArgs a = args;
        a.x = inp[0];
        const U* run = static_cast<const U*>(inp[1]);
        U* y = static_cast<U*>(o);
#pragma omp parallel for schedule(static) if (worth_threads(a))
        for (int64_t ch = 0; ch < a.c; ++ch)
          y[ch] = store<U>((1 - m) * static_cast<double>(load(run[ch])) + m * f(a, ch));
      };
    }
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
