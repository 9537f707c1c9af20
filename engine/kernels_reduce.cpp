// Reductions and softmax (the losses are in kernels_loss.cpp).
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/act_math.h"
#include "engine/dtype_dispatch.h"
#include "engine/kernels.h"
#include "engine/kernels_eltwise.h"
#include "engine/ops.h"

namespace hg::kernels {

namespace {

// Splits `s` around axis `dim` into (outer, n, inner).
struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};
Split split(const Shape& s, int64_t dim) {
  Split r;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < dim) r.outer *= s[i];
    else if (i == dim) r.n = s[i];
    else r.inner *= s[i];
  }
  return r;
}

// Applies f(row_ptr_in, row_ptr_out, n, stride) to every row along `dim`.
template <class F>
void for_each_row(const Split& sp, F&& f) {
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t i = 0; i < sp.inner; ++i) f(o * sp.n * sp.inner + i, sp.n, sp.inner);
}

}  // namespace

Kernel prepare_sum_to(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    return [shape = in[0].shape, so = broadcast_strides(out.shape, in[0].shape), nout = out.numel()](
               const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      T* z = static_cast<T*>(o);
      std::vector<double> acc(static_cast<size_t>(nout), 0.0);
      const int64_t n = numel(shape);
      const size_t nd = shape.size();
      std::vector<int64_t> idx(nd, 0);
      for (int64_t k = 0; k < n; ++k) {
        int64_t off = 0;
        for (size_t d = 0; d < nd; ++d) off += idx[d] * so[d];
        acc[off] += static_cast<double>(load(x[k]));
        for (size_t d = nd; d-- > 0;) {
          if (++idx[d] < shape[d]) break;
          idx[d] = 0;
        }
      }
      for (int64_t i = 0; i < nout; ++i) z[i] = store<T>(acc[i]);
    };
  });
}

// prepare_reduce and prepare_argmax (axis reductions) are in kernels_reduce_axes.cpp.

namespace {

// Contiguous F32 rows, four lanes at a time: the max (NaN ignored, as std::max folds it) and
// sum_j exp(x[j] - mx) with exp4 (act_math.h, 2e-7 relative), summed in double.
float max_f32(const float* x, int64_t n) {
  act::f32x4 m = act::splat4(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    act::f32x4 v;
    std::memcpy(&v, x + j, sizeof v);
    m = v > m ? v : m;
  }
  float r = std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
  for (; j < n; ++j) r = std::max(r, x[j]);
  return r;
}

double sum_exp_f32(const float* x, int64_t n, float mx) {
  const act::f32x4 m = act::splat4(mx);
  double s = 0;
  int64_t j = 0;
  // Four independent vectors per step: exp4's polynomial is a chain of dependent operations,
  // one vector at a time leaves the core waiting on latency (CPU time at 64x1000: 2.1 -> 1.5 ns
  // per element).
  for (; j + 16 <= n; j += 16) {
    act::f32x4 v[4];
    std::memcpy(v, x + j, sizeof v);
    for (auto& u : v) u = act::exp4(u - m);
    const act::f32x4 w = (v[0] + v[1]) + (v[2] + v[3]);  // float sums of 4 terms: 2 ulp at most
    s += (static_cast<double>(w[0]) + w[1]) + (static_cast<double>(w[2]) + w[3]);
  }
  for (; j + 4 <= n; j += 4) {
    act::f32x4 v;
    std::memcpy(&v, x + j, sizeof v);
    v = act::exp4(v - m);
    s += (static_cast<double>(v[0]) + v[1]) + (static_cast<double>(v[2]) + v[3]);
  }
  for (; j < n; ++j) s += std::exp(static_cast<double>(x[j] - mx));
  return s;
}

// Writes softmax (or log-softmax) of one strided row into `y` (compute type C: float for
// F32/BF16/F16, double for F64); sums accumulate in double. Contiguous F32 rows take the
// four-lane path above.
template <class T, class C = compute_t<T>>
void softmax_row(const T* x, C* y, int64_t n, int64_t st, bool log) {
  constexpr bool f32 = std::is_same_v<T, float>;
  const bool fast = f32 && st == 1;
  C mx = -std::numeric_limits<C>::infinity();
  if constexpr (f32)
    if (fast) mx = max_f32(x, n);
  if (!fast)
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<C>(load(x[j * st])));
  double s = 0;
  if constexpr (f32)
    if (fast && std::isfinite(mx)) s = sum_exp_f32(x, n, mx);  // >= 1: the max contributes e^0
  if (s == 0)  // other dtypes, strided rows, rows whose max is infinite or NaN
    for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(load(x[j * st]) - mx));
  if (log) {
    const C lse = mx + static_cast<C>(std::log(s));
    if constexpr (f32)
      if (fast) {
        for (int64_t j = 0; j < n; ++j) y[j] = x[j] - lse;
        return;
      }
    for (int64_t j = 0; j < n; ++j) y[j] = load(x[j * st]) - lse;
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<C>(std::exp(static_cast<double>(load(x[j * st]) - mx)) / s);
  }
}
}  // namespace

Kernel softmax_loop(const TensorMeta& x, int64_t dim, bool log) {
  const Split sp = split(x.shape, dim);
  return visit_dtype(x.dtype, [&]<class T>(Type<T>) -> Kernel {
    return [sp, log](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      T* y = static_cast<T*>(o);
      std::vector<compute_t<T>> row(sp.inner == 1 && std::is_same_v<T, compute_t<T>> ? 0 : static_cast<size_t>(sp.n));
      for_each_row(sp, [&](int64_t off, int64_t n, int64_t st) {
        if constexpr (std::is_same_v<T, compute_t<T>>)
          if (st == 1) return softmax_row(x + off, y + off, n, st, log);  // straight into the output
        softmax_row(x + off, row.data(), n, st, log);
        for (int64_t j = 0; j < n; ++j) y[off + j * st] = store<T>(row[j]);
      });
    };
  });
}

// attrs: ints {dim, log}. Softmax: oneDNN's primitive for F32/BF16 (5-25x faster than the
// loop in bench/ops_bench.cpp) where it has an optimised implementation (oneDNN 2.6: softmax
// over the last dim). F32 log-softmax stays on the loop (4x slower than oneDNN at 64x1000):
// oneDNN 2.6's softmax_log is up to 2.9e-6 off PyTorch's F32 values on the dtype conformance
// inputs, beyond that suite's 1e-6; the loop sums exp4 (act_math.h, 2e-7 relative) in double
// over contiguous F32 rows. In BF16 that error vanishes in the rounding, so oneDNN (20x).
Kernel prepare_softmax(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  const bool log = a.i(1) == 1;
  if ((!log || in[0].dtype == DType::BF16) && dnnl_float(in[0].dtype))
    if (Kernel k = dnnl_softmax(in[0].shape, in[0].dtype, a.i(0), log)) return k;
  return softmax_loop(in[0], a.i(0), log);
}

// inputs: grad, x (the forward input); attrs as softmax.
Kernel prepare_softmax_backward(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  const Split sp = split(in[0].shape, a.i(0));
  return visit_dtype(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    using C = compute_t<T>;
    return [sp, log = a.i(1) == 1](const void* const* inp, void* o) {
      const T* g = static_cast<const T*>(inp[0]);
      const T* x = static_cast<const T*>(inp[1]);
      T* dx = static_cast<T*>(o);
      std::vector<C> y(static_cast<size_t>(sp.n));
      for_each_row(sp, [&](int64_t off, int64_t n, int64_t st) {
        softmax_row(x + off, y.data(), n, st, log);
        double dot = 0;
        for (int64_t j = 0; j < n; ++j) dot += log ? load(g[off + j * st]) : load(g[off + j * st]) * y[j];
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = off + j * st;
          const C gk = load(g[k]);
          dx[k] = store<T>(log ? gk - std::exp(y[j]) * static_cast<C>(dot) : y[j] * (gk - static_cast<C>(dot)));
        }
      });
    };
  });
}

}  // namespace hg::kernels
