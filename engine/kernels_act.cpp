// Kernels of the act family: activations (and their backward), dropout, embedding, gather,
// where and masked_fill. Contiguous inputs, one contiguous output, never throwing; shapes
// and dtypes were checked by the schemas (act_ops.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/act_internal.h"
#include "engine/act_math.h"
#include "engine/dtype_dispatch.h"
#include "engine/generator.h"
#include "engine/kernels.h"
#include "engine/kernels_eltwise.h"

namespace hg::act {

namespace {

// ---- activations: F32 four lanes at a time (act_math.h), F64 with libm ----

struct F32Math {
  using V = f32x4;
  static V k(double c) { return splat4(static_cast<float>(c)); }  // a constant in every lane
  static V exp(V x) { return exp4(x); }
  static V tanh(V x) { return tanh4(x); }
  static V cdf(V x) { return normal_cdf4(x); }
  static V sigmoid(V x) { return sigmoid4(x); }
};
struct F64Math {  // used by the finite-difference checks: accuracy over speed
  using V = double;
  static V k(double c) { return c; }
  static V exp(V x) { return std::exp(x); }
  static V tanh(V x) { return std::tanh(x); }
  static V cdf(V x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }
  static V sigmoid(V x) { return 1.0 / (1.0 + std::exp(-x)); }  // exp overflowing to inf gives 0
};

constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluC = 0.044715;

// Forward y = f(x). GELU(erf) as x * Phi(x) with Phi from erfc (no cancellation for x << 0);
// GELU(tanh) as x * sigmoid(2u), which equals 0.5 x (1 + tanh u) without the cancellation.
template <class M, Act A>
inline typename M::V forward(typename M::V x) {
  if constexpr (A == Act::GeluErf) return x * M::cdf(x);
  if constexpr (A == Act::GeluTanh) return x * M::sigmoid(M::k(2 * kSqrt2OverPi) * (x + M::k(kGeluC) * x * x * x));
  if constexpr (A == Act::Silu) return x * M::sigmoid(x);
  if constexpr (A == Act::Tanh) return M::tanh(x);
  if constexpr (A == Act::Sigmoid) return M::sigmoid(x);
}

// Backward dx = g * f'(x).
template <class M, Act A>
inline typename M::V backward(typename M::V g, typename M::V x) {
  using V = typename M::V;
  const V one = M::k(1);
  if constexpr (A == Act::GeluErf) {
    const V pdf = M::k(kInvSqrt2Pi) * M::exp(M::k(-0.5) * x * x);
    return g * (M::cdf(x) + x * pdf);
  }
  if constexpr (A == Act::GeluTanh) {
    const V s = M::sigmoid(M::k(2 * kSqrt2OverPi) * (x + M::k(kGeluC) * x * x * x));  // 0.5 (1 + tanh u)
    const V du = M::k(kSqrt2OverPi) * (one + M::k(3 * kGeluC) * x * x);
    return g * (s + M::k(2) * x * s * (one - s) * du);
  }
  if constexpr (A == Act::Silu) {
    const V s = M::sigmoid(x);
    return g * (s * (one + x * (one - s)));
  }
  if constexpr (A == Act::Tanh) {
    const V t = M::tanh(x);
    return g * (one - t * t);
  }
  if constexpr (A == Act::Sigmoid) {
    const V s = M::sigmoid(x);
    return g * (s * (one - s));
  }
}

template <class T, Act A>
Kernel activation_kernel(int64_t n, bool bw) {
  if constexpr (std::is_same_v<T, float>) {
    if (!bw)
      return [n](const void* const* in, void* o) {
        map4(static_cast<const float*>(in[0]), static_cast<float*>(o), n,
             [](f32x4 x) { return forward<F32Math, A>(x); });
      };
    return [n](const void* const* in, void* o) {
      map4(static_cast<const float*>(in[0]), static_cast<const float*>(in[1]), static_cast<float*>(o), n,
           [](f32x4 g, f32x4 x) { return backward<F32Math, A>(g, x); });
    };
  } else {
    if (!bw)
      return [n](const void* const* in, void* o) {
        const double* x = static_cast<const double*>(in[0]);
        double* y = static_cast<double*>(o);
        for (int64_t i = 0; i < n; ++i) y[i] = forward<F64Math, A>(x[i]);
      };
    return [n](const void* const* in, void* o) {
      const double* g = static_cast<const double*>(in[0]);
      const double* x = static_cast<const double*>(in[1]);
      double* dx = static_cast<double*>(o);
      for (int64_t i = 0; i < n; ++i) dx[i] = backward<F64Math, A>(g[i], x[i]);
    };
  }
}

// BF16/F16: blocks converted to float, computed as F32, rounded back.
template <class T, Act A>
Kernel activation_kernel_16(int64_t n, bool bw) {
  return [n, bw](const void* const* in, void* o) {
    constexpr int64_t kBlock = 256;
    float xb[kBlock], gb[kBlock];
    const T* x = static_cast<const T*>(in[bw ? 1 : 0]);
    const T* g = static_cast<const T*>(in[0]);
    T* y = static_cast<T*>(o);
    for (int64_t s = 0; s < n; s += kBlock) {
      const int64_t m = std::min(kBlock, n - s);
      for (int64_t i = 0; i < m; ++i) xb[i] = x[s + i].to_float();
      if (bw) {
        for (int64_t i = 0; i < m; ++i) gb[i] = g[s + i].to_float();
        map4(gb, xb, xb, m, [](f32x4 gv, f32x4 xv) { return backward<F32Math, A>(gv, xv); });
      } else {
        map4(xb, xb, m, [](f32x4 xv) { return forward<F32Math, A>(xv); });
      }
      for (int64_t i = 0; i < m; ++i) y[s + i] = T::from_float(xb[i]);
    }
  };
}

template <class T, Act A>
Kernel activation_any(int64_t n, bool bw) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return activation_kernel_16<T, A>(n, bw);
  else return activation_kernel<T, A>(n, bw);
}

template <class T>
Kernel activation_typed(Act act, int64_t n, bool bw) {
  switch (act) {
    case Act::GeluErf: return activation_any<T, Act::GeluErf>(n, bw);
    case Act::GeluTanh: return activation_any<T, Act::GeluTanh>(n, bw);
    case Act::Silu: return activation_any<T, Act::Silu>(n, bw);
    case Act::Tanh: return activation_any<T, Act::Tanh>(n, bw);
    case Act::Sigmoid: return activation_any<T, Act::Sigmoid>(n, bw);
  }
  return nullptr;
}

// ---- helpers for the indexing and selection kernels ----

// Unsigned integer of an element's size: selection and gathering only move bits.
template <size_t N>
using Bits = std::conditional_t<N == 1, uint8_t, std::conditional_t<N == 2, uint16_t,
                                std::conditional_t<N == 4, uint32_t, uint64_t>>>;

template <class F>
decltype(auto) visit_size(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: return f(Type<Bits<1>>{});
    case 2: return f(Type<Bits<2>>{});
    case 4: return f(Type<Bits<4>>{});
    default: return f(Type<Bits<8>>{});
  }
}

// F32, F64, BF16 or F16 (the schemas allow no other dtype here).
template <class F>
decltype(auto) visit_float(DType t, F&& f) {
  switch (t) {
    case DType::F64: return f(Type<double>{});
    case DType::BF16: return f(Type<bf16>{});
    case DType::F16: return f(Type<f16>{});
    default: return f(Type<float>{});
  }
}

// Zeroed accumulators for `n` outputs of type T: the output itself for F32/F64, a float
// buffer for BF16/F16 that finish() rounds into the output.
template <class T>
struct Accumulator {
  using C = compute_t<T>;
  Accumulator(T* out, int64_t n) : out_(out), n_(n) {
    if constexpr (std::is_same_v<T, C>) {
      acc_ = out;
    } else {
      buf_.assign(static_cast<size_t>(n), C(0));
      acc_ = buf_.data();
    }
    std::fill(acc_, acc_ + n, C(0));
  }
  C* data() { return acc_; }
  void finish() {
    if constexpr (!std::is_same_v<T, C>)
      for (int64_t i = 0; i < n_; ++i) out_[i] = store<T>(acc_[i]);
  }

 private:
  T* out_;
  int64_t n_;
  C* acc_;
  std::vector<C> buf_;
};

template <class F>
decltype(auto) visit_index(DType t, F&& f) {
  if (t == DType::I32) return f(Type<int32_t>{});
  return f(Type<int64_t>{});
}

// masked_fill's value in the tensor's dtype: integers saturate (NaN gives 0), BOOL is v != 0.
template <class T>
T fill_value(double v) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<T, boolean>) {
    return boolean{static_cast<uint8_t>(v != 0)};
  } else if constexpr (std::is_integral_v<C>) {
    if (std::isnan(v)) return T(0);
    const double lo = static_cast<double>(std::numeric_limits<C>::min());
    const double hi = static_cast<double>(std::numeric_limits<C>::max());
    return v <= lo ? std::numeric_limits<C>::min() : v >= hi ? std::numeric_limits<C>::max() : static_cast<C>(v);
  } else {
    return store<T>(static_cast<C>(v));
  }
}

// Calls f(out_offset, o0, o1, o2, inner, d0, d1, d2) for each run of the innermost output
// dimension, with the offsets and steps of three operands broadcast to `out`.
template <class F>
void for_each_run3(const Shape& out, const Shape& s0, const Shape& s1, const Shape& s2, F&& f) {
  const int64_t n = numel(out);
  if (n == 0) return;
  if (out.empty()) return f(0, 0, 0, 0, 1, 0, 0, 0);
  const size_t nd = out.size();
  const int64_t inner = out[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  for (int64_t base = 0; base < n; base += inner) {
    int64_t o0 = 0, o1 = 0, o2 = 0;
    for (size_t d = 0; d + 1 < nd; ++d) o0 += idx[d] * s0[d], o1 += idx[d] * s1[d], o2 += idx[d] * s2[d];
    f(base, o0, o1, o2, inner, s0[nd - 1], s1[nd - 1], s2[nd - 1]);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

// Calls f(k, x_offset_without_dim) for every element k of `shape` (row-major), where the
// offset uses `xstrides` on every dim except `dim`.
template <class F>
void for_each_gather(const Shape& shape, const Shape& xstrides, int64_t dim, F&& f) {
  const int64_t n = numel(shape);
  const size_t nd = shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    f(k, off);
    for (size_t d = nd; d-- > 0;) {
      const int64_t st = static_cast<int64_t>(d) == dim ? 0 : xstrides[d];
      if (++idx[d] < shape[d]) {
        off += st;
        break;
      }
      off -= (shape[d] - 1) * st;
      idx[d] = 0;
    }
  }
}

}  // namespace

Kernel activation_loop(Act act, bool bw, DType t, int64_t n) {
  return visit_float(t, [&]<class T>(Type<T>) { return activation_typed<T>(act, n, bw); });
}

namespace {
dnnl::algorithm dnnl_algorithm(Act act) {
  switch (act) {
    case Act::GeluErf: return dnnl::algorithm::eltwise_gelu_erf;
    case Act::GeluTanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case Act::Silu: return dnnl::algorithm::eltwise_swish;  // x * sigmoid(alpha x), alpha = 1
    case Act::Tanh: return dnnl::algorithm::eltwise_tanh;
    case Act::Sigmoid: return dnnl::algorithm::eltwise_logistic;
  }
  return dnnl::algorithm::undef;
}
}  // namespace

// Forward F32/BF16 activations run on oneDNN's eltwise primitive from this many elements
// on. Measured (bench/ops_bench.cpp, 1 thread, CPU time): a oneDNN call costs ~0.15 us at 64
// elements where our loop takes 0.08-0.13 us (gelu erf: 0.25), and oneDNN is 4-13x faster
// per element (64x1000 and up), so the crossovers lie at ~50 (gelu erf) to ~270 (silu).
constexpr int64_t kDnnlMinElements = 256, kDnnlGeluErfMinElements = 32;

Kernel prepare_activation(Act act, bool bw, const Metas&, const TensorMeta& out) {
  const int64_t min = act == Act::GeluErf ? kDnnlGeluErfMinElements : kDnnlMinElements;
  if (!bw && kernels::dnnl_float(out.dtype) && out.numel() >= min)
    if (Kernel k = kernels::dnnl_eltwise(dnnl_algorithm(act), out.dtype, out.numel(), act == Act::Silu ? 1.f : 0.f))
      return k;
  return activation_loop(act, bw, out.dtype, out.numel());
}

Kernel prepare_dropout(const Metas&, const TensorMeta& out, const Attrs& a) {
  const double p = a.f(0);
  // Keep element i when the top 53 bits of its hash, as a fraction of 2^53, are >= p.
  const uint64_t threshold = p >= 1 ? (uint64_t{1} << 53) : static_cast<uint64_t>(p * 9007199254740992.0);
  const double scale = p >= 1 ? 0.0 : 1.0 / (1.0 - p);
  return visit_float(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    using C = compute_t<T>;
    return [n = out.numel(), threshold, s = static_cast<C>(scale)](const void* const* in, void* o) {
      const T* __restrict x = static_cast<const T*>(in[0]);
      T* __restrict y = static_cast<T*>(o);
      const uint64_t key = mix64(static_cast<uint64_t>(*static_cast<const int64_t*>(in[1])));
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = mix64(key + static_cast<uint64_t>(i + 1) * kGoldenGamma) >> 11;
        y[i] = store<T>(r >= threshold ? load(x[i]) * s : C(0));
      }
    };
  });
}

Kernel prepare_embedding(const Metas& in, const TensorMeta& out, const Attrs&) {
  const int64_t rows = in[0].numel(), num = in[1].shape[0];
  const size_t row_bytes = static_cast<size_t>(in[1].shape[1]) * dtype_size(out.dtype);
  return visit_index(in[0].dtype, [&]<class I>(Type<I>) -> Kernel {
    return [rows, num, row_bytes](const void* const* inp, void* o) {
      const I* idx = static_cast<const I*>(inp[0]);
      const char* w = static_cast<const char*>(inp[1]);
      char* y = static_cast<char*>(o);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t v = idx[r];
        char* dst = y + r * static_cast<int64_t>(row_bytes);
        if (v >= 0 && v < num) std::memcpy(dst, w + v * static_cast<int64_t>(row_bytes), row_bytes);
        else std::memset(dst, 0, row_bytes);
      }
    };
  });
}

Kernel prepare_embedding_backward(const Metas& in, const TensorMeta& out, const Attrs&) {
  const int64_t rows = in[0].numel(), num = out.shape[0], dim = out.shape[1];
  return visit_index(in[0].dtype, [&]<class I>(Type<I>) -> Kernel {
    return visit_float(out.dtype, [&]<class T>(Type<T>) -> Kernel {
      return [rows, num, dim](const void* const* inp, void* o) {
        const I* idx = static_cast<const I*>(inp[0]);
        const T* g = static_cast<const T*>(inp[1]);
        Accumulator<T> dw(static_cast<T*>(o), num * dim);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t v = idx[r];
          if (v < 0 || v >= num) continue;
          auto* dst = dw.data() + v * dim;
          const T* src = g + r * dim;
          for (int64_t j = 0; j < dim; ++j) dst[j] += load(src[j]);
        }
        dw.finish();
      };
    });
  });
}

Kernel prepare_gather(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const int64_t dim = a.i(0);
  const Shape xst = contiguous_strides(in[0].shape);
  const int64_t size = in[0].shape[dim];
  return visit_size(out.dtype, [&]<class E>(Type<E>) -> Kernel {
    return visit_index(in[1].dtype, [&]<class I>(Type<I>) -> Kernel {
      return [shape = out.shape, xst, dim, size](const void* const* inp, void* o) {
        const E* x = static_cast<const E*>(inp[0]);
        const I* index = static_cast<const I*>(inp[1]);
        E* y = static_cast<E*>(o);
        const int64_t sd = xst[dim];
        for_each_gather(shape, xst, dim, [&](int64_t k, int64_t off) {
          const int64_t v = index[k];
          y[k] = v >= 0 && v < size ? x[off + v * sd] : E(0);
        });
      };
    });
  });
}

Kernel prepare_gather_backward(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const int64_t dim = a.i(0);
  const Shape xst = contiguous_strides(out.shape);
  const int64_t size = out.shape[dim];
  return visit_index(in[0].dtype, [&]<class I>(Type<I>) -> Kernel {
    return visit_float(out.dtype, [&]<class T>(Type<T>) -> Kernel {
      return [shape = in[1].shape, xst, dim, size, nx = out.numel()](const void* const* inp, void* o) {
        const I* index = static_cast<const I*>(inp[0]);
        const T* g = static_cast<const T*>(inp[1]);
        Accumulator<T> dx(static_cast<T*>(o), nx);
        const int64_t sd = xst[dim];
        for_each_gather(shape, xst, dim, [&](int64_t k, int64_t off) {
          const int64_t v = index[k];
          if (v >= 0 && v < size) dx.data()[off + v * sd] += load(g[k]);
        });
        dx.finish();
      };
    });
  });
}

Kernel prepare_where(const Metas& in, const TensorMeta& out, const Attrs&) {
  using kernels::broadcast_strides;
  return visit_size(out.dtype, [&]<class E>(Type<E>) -> Kernel {
    return [shape = out.shape, sc = broadcast_strides(in[0].shape, out.shape),
            sa = broadcast_strides(in[1].shape, out.shape),
            sb = broadcast_strides(in[2].shape, out.shape)](const void* const* inp, void* o) {
      const uint8_t* c = static_cast<const uint8_t*>(inp[0]);
      const E* x = static_cast<const E*>(inp[1]);
      const E* y = static_cast<const E*>(inp[2]);
      E* z = static_cast<E*>(o);
      for_each_run3(shape, sc, sa, sb,
                    [&](int64_t base, int64_t oc, int64_t oa, int64_t ob, int64_t inner, int64_t dc, int64_t da,
                        int64_t db) {
                      for (int64_t i = 0; i < inner; ++i)
                        z[base + i] = c[oc + i * dc] ? x[oa + i * da] : y[ob + i * db];
                    });
    };
  });
}

Kernel prepare_masked_fill(const Metas& in, const TensorMeta& out, const Attrs& a) {
  using kernels::broadcast_strides;
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    const T value = fill_value<T>(a.f(0));
    return [shape = out.shape, sx = broadcast_strides(in[0].shape, out.shape),
            sm = broadcast_strides(in[1].shape, out.shape), value](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      const uint8_t* m = static_cast<const uint8_t*>(inp[1]);
      T* z = static_cast<T*>(o);
      for_each_run3(shape, sm, sx, sx,
                    [&](int64_t base, int64_t om, int64_t ox, int64_t, int64_t inner, int64_t dm, int64_t dx,
                        int64_t) {
                      for (int64_t i = 0; i < inner; ++i) z[base + i] = m[om + i * dm] ? value : x[ox + i * dx];
                    });
    };
  });
}

Kernel prepare_where_backward(const Metas& in, const TensorMeta& out, const Attrs& a) {
  using kernels::broadcast_strides;
  const uint8_t take = a.i(0) == 0 ? 1 : 0;  // the cond value whose positions receive grad
  return visit_float(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    return [shape = in[1].shape, sc = broadcast_strides(in[0].shape, in[1].shape),
            st = broadcast_strides(out.shape, in[1].shape), take, nout = out.numel()](const void* const* inp,
                                                                                       void* o) {
      const uint8_t* c = static_cast<const uint8_t*>(inp[0]);
      const T* g = static_cast<const T*>(inp[1]);
      Accumulator<T> z(static_cast<T*>(o), nout);
      auto* acc = z.data();
      for_each_run3(shape, sc, st, st,
                    [&](int64_t base, int64_t oc, int64_t ot, int64_t, int64_t inner, int64_t dc, int64_t dt,
                        int64_t) {
                      for (int64_t i = 0; i < inner; ++i)
                        if ((c[oc + i * dc] != 0) == (take != 0)) acc[ot + i * dt] += load(g[base + i]);
                    });
      z.finish();
    };
  });
}

Kernel prepare_clamp(const Metas&, const TensorMeta& out, const Attrs& a, bool backward) {
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    using C = compute_t<T>;
    if constexpr (!std::is_floating_point_v<C>) {
      throw InternalError("clamp: floating-point dtypes only");
    } else {
      const C lo = static_cast<C>(a.f(0)), hi = static_cast<C>(a.f(1));
      if (!backward)
        return [n = out.numel(), lo, hi](const void* const* in, void* o) {
          const T* x = static_cast<const T*>(in[0]);
          T* y = static_cast<T*>(o);
          for (int64_t i = 0; i < n; ++i) {
            const C v = load(x[i]);
            y[i] = store<T>(v < lo ? lo : v > hi ? hi : v);  // NaN compares false: stays NaN
          }
        };
      return [n = out.numel(), lo, hi](const void* const* in, void* o) {
        const T* g = static_cast<const T*>(in[0]);
        const T* x = static_cast<const T*>(in[1]);
        T* y = static_cast<T*>(o);
        for (int64_t i = 0; i < n; ++i) {
          const C v = load(x[i]);
          y[i] = v >= lo && v <= hi ? g[i] : store<T>(C(0));
        }
      };
    }
  });
}

}  // namespace hg::act
