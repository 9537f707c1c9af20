// Loss kernels: cross-entropy (ignore_index, label smoothing, reductions) and mean squared
// error, forward and backward, F32/F64 with double accumulation.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/act_internal.h"
#include "engine/dtype_dispatch.h"

namespace hg::act {

namespace {

enum Red : int64_t { kNone = 0, kMean = 1, kSum = 2 };

// log-sum-exp of one row, in double.
template <class T>
double logsumexp(const T* x, int64_t c) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(x[j]));
  if (std::isinf(mx)) return mx;
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(x[j]) - mx);
  return mx + std::log(s);
}

template <class F>
Kernel float_kernel(DType t, F&& make) {
  return t == DType::F64 ? make(Type<double>{}) : make(Type<float>{});
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

// Per row i with target t: ignored (t == ignore_index) rows count 0 and are left out of the
// mean's denominator; otherwise loss_i = (1-eps) (lse - x_t) + eps/C * sum_c (lse - x_c).
Kernel prepare_cross_entropy(const Metas& in, const TensorMeta&, const Attrs& a) {
  const int64_t n = in[0].shape[0], c = in[0].shape[1], ignore = a.i(0), red = a.i(1);
  const double eps = a.f(0);
  return float_kernel(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    return [n, c, ignore, red, eps](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      const int64_t* t = static_cast<const int64_t*>(inp[1]);
      T* y = static_cast<T*>(o);
      double total = 0;
      int64_t count = 0;
      for (int64_t i = 0; i < n; ++i) {
        double loss = 0;
        if (t[i] != ignore) {
          ++count;
          if (t[i] < 0 || t[i] >= c) {
            loss = kNaN;
          } else {
            const T* row = x + i * c;
            const double lse = logsumexp(row, c);
            loss = (1 - eps) * (lse - static_cast<double>(row[t[i]]));
            if (eps != 0) {
              double sx = 0;
              for (int64_t j = 0; j < c; ++j) sx += static_cast<double>(row[j]);
              loss += eps / static_cast<double>(c) * (static_cast<double>(c) * lse - sx);
            }
          }
        }
        if (red == kNone) y[i] = static_cast<T>(loss);
        total += loss;
      }
      if (red == kSum) *y = static_cast<T>(total);
      if (red == kMean) *y = static_cast<T>(total / static_cast<double>(count));  // 0/0: NaN
    };
  });
}

// d loss_i / d x_ij = p_ij - (1-eps) [j == t_i] - eps/C, times the row's upstream weight.
Kernel prepare_cross_entropy_backward(const Metas& in, const TensorMeta&, const Attrs& a) {
  const int64_t n = in[0].shape[0], c = in[0].shape[1], ignore = a.i(0), red = a.i(1);
  const double eps = a.f(0);
  return float_kernel(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    return [n, c, ignore, red, eps](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      const int64_t* t = static_cast<const int64_t*>(inp[1]);
      const T* g = static_cast<const T*>(inp[2]);
      T* dx = static_cast<T*>(o);
      int64_t count = 0;
      for (int64_t i = 0; i < n; ++i) count += t[i] != ignore;
      const double scale = red == kMean ? static_cast<double>(g[0]) / static_cast<double>(count)
                                        : static_cast<double>(g[0]);
      for (int64_t i = 0; i < n; ++i) {
        const T* row = x + i * c;
        T* drow = dx + i * c;
        if (t[i] == ignore || t[i] < 0 || t[i] >= c) {
          std::fill(drow, drow + c, T(0));
          continue;
        }
        const double w = red == kNone ? static_cast<double>(g[i]) : scale;
        const double lse = logsumexp(row, c);
        for (int64_t j = 0; j < c; ++j) {
          const double p = std::exp(static_cast<double>(row[j]) - lse);
          drow[j] = static_cast<T>(w * (p - (j == t[i] ? 1 - eps : 0.0) - eps / static_cast<double>(c)));
        }
      }
    };
  });
}

Kernel prepare_mse_loss(const Metas& in, const TensorMeta&, const Attrs& a) {
  const int64_t n = in[0].numel(), red = a.i(0);
  return float_kernel(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    return [n, red](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      const T* y = static_cast<const T*>(inp[1]);
      T* z = static_cast<T*>(o);
      if (red == kNone) {
        for (int64_t i = 0; i < n; ++i) z[i] = (x[i] - y[i]) * (x[i] - y[i]);
        return;
      }
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
        s += d * d;
      }
      *z = static_cast<T>(red == kMean ? s / static_cast<double>(n) : s);  // mean of nothing: NaN
    };
  });
}

Kernel prepare_mse_loss_backward(const Metas& in, const TensorMeta&, const Attrs& a) {
  const int64_t n = in[0].numel(), red = a.i(0);
  const double sign = a.i(1) < 0 ? -1.0 : 1.0;
  return float_kernel(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    return [n, red, sign](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      const T* y = static_cast<const T*>(inp[1]);
      const T* g = static_cast<const T*>(inp[2]);
      T* dz = static_cast<T*>(o);
      if (red == kNone) {
        const T s2 = static_cast<T>(2 * sign);
        for (int64_t i = 0; i < n; ++i) dz[i] = s2 * (x[i] - y[i]) * g[i];
        return;
      }
      const T w = static_cast<T>(2 * sign * static_cast<double>(g[0]) / (red == kMean ? static_cast<double>(n) : 1.0));
      for (int64_t i = 0; i < n; ++i) dz[i] = w * (x[i] - y[i]);
    };
  });
}

}  // namespace hg::act
