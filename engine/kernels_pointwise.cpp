// Element-wise kernels: broadcasting binary ops, scale, relu, copies, expand and casts,
// templated over the dtypes (bf16/f16 are computed in float).
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/dtype_dispatch.h"
#include "engine/kernels.h"
#include "engine/kernels_eltwise.h"

namespace hg::kernels {

Shape broadcast_strides(const Shape& s, const Shape& out) {
  Shape st(out.size(), 0);
  const Shape cs = contiguous_strides(s);
  const size_t off = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) st[off + i] = s[i] == 1 ? 0 : cs[i];
  return st;
}

namespace {

// Calls f(out_offset, a_offset, b_offset, inner, a_step, b_step) for each contiguous run of
// the innermost output dimension.
template <class F>
void for_each_run(const Shape& out, const Shape& sa, const Shape& sb, F&& f) {
  const int64_t n = numel(out);
  if (n == 0) return;
  if (out.empty()) return f(0, 0, 0, 1, 0, 0);
  const size_t nd = out.size();
  const int64_t inner = out[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  for (int64_t base = 0; base < n; base += inner) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d + 1 < nd; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    f(base, oa, ob, inner, sa[nd - 1], sb[nd - 1]);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

template <class T, class Op>
Kernel binary_kernel(const TensorMeta& a, const TensorMeta& b, const TensorMeta& out, Op op) {
  if (a.shape == b.shape) {
    return [n = out.numel(), op](const void* const* in, void* o) {
      const T* x = static_cast<const T*>(in[0]);
      const T* y = static_cast<const T*>(in[1]);
      T* z = static_cast<T*>(o);
      for (int64_t i = 0; i < n; ++i) z[i] = store<T>(op(load(x[i]), load(y[i])));
    };
  }
  return [shape = out.shape, sa = broadcast_strides(a.shape, out.shape), sb = broadcast_strides(b.shape, out.shape),
          op](const void* const* in, void* o) {
    const T* x = static_cast<const T*>(in[0]);
    const T* y = static_cast<const T*>(in[1]);
    T* z = static_cast<T*>(o);
    for_each_run(shape, sa, sb, [&](int64_t base, int64_t oa, int64_t ob, int64_t inner, int64_t da, int64_t db) {
      T* zr = z + base;
      const T *xr = x + oa, *yr = y + ob;
      // The common runs get loops the compiler vectorises: both operands contiguous (a
      // per-channel scale over NHWC maps), or one of them repeated (over NCHW maps).
      if (da == 1 && db == 1) {
        for (int64_t i = 0; i < inner; ++i) zr[i] = store<T>(op(load(xr[i]), load(yr[i])));
      } else if (da == 1 && db == 0) {
        const auto v = load(*yr);
        for (int64_t i = 0; i < inner; ++i) zr[i] = store<T>(op(load(xr[i]), v));
      } else if (da == 0 && db == 1) {
        const auto v = load(*xr);
        for (int64_t i = 0; i < inner; ++i) zr[i] = store<T>(op(v, load(yr[i])));
      } else {
        for (int64_t i = 0; i < inner; ++i) zr[i] = store<T>(op(load(xr[i * da]), load(yr[i * db])));
      }
    });
  };
}

template <class T, class Op>
Kernel unary_kernel(int64_t n, Op op) {
  return [n, op](const void* const* in, void* o) {
    const T* x = static_cast<const T*>(in[0]);
    T* z = static_cast<T*>(o);
    for (int64_t i = 0; i < n; ++i) z[i] = store<T>(op(load(x[i])));
  };
}

}  // namespace

Kernel prepare_binary(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    using C = compute_t<T>;
    switch (static_cast<BinaryOp>(a.i(0))) {
      case BinaryOp::Add: return binary_kernel<T>(in[0], in[1], out, [](C x, C y) { return C(x + y); });
      case BinaryOp::Sub: return binary_kernel<T>(in[0], in[1], out, [](C x, C y) { return C(x - y); });
      case BinaryOp::Mul: return binary_kernel<T>(in[0], in[1], out, [](C x, C y) { return C(x * y); });
      case BinaryOp::Div:
        return binary_kernel<T>(in[0], in[1], out, [](C x, C y) {
          if constexpr (std::is_integral_v<C>) {
            if (y == 0) return C(0);  // truncates, as ONNX and C++
            // MIN / -1 overflows (SIGFPE on x86): wrap as PyTorch does, negating in unsigned arithmetic.
            if constexpr (std::is_signed_v<C>)
              if (y == C(-1)) return C(std::make_unsigned_t<C>(0) - static_cast<std::make_unsigned_t<C>>(x));
            return C(x / y);
          } else {
            return C(x / y);
          }
        });
    }
    return nullptr;
  });
}

Kernel prepare_scale(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs& a) {
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    using C = compute_t<T>;
    return unary_kernel<T>(out.numel(), [s = static_cast<C>(a.f(0))](C x) { return C(x * s); });
  });
}

Kernel relu_loop(const TensorMeta& x) {
  return visit_dtype(x.dtype, [&]<class T>(Type<T>) -> Kernel {
    using C = compute_t<T>;
    return unary_kernel<T>(x.numel(), [](C v) { return std::max(v, C(0)); });
  });
}

// F32/BF16 relu runs on oneDNN's eltwise primitive from this many elements on. Measured
// (bench/ops_bench.cpp, 1 thread): our loop takes 0.007 us at 64 elements against ~0.15 us
// for a oneDNN call, 15 us against 8.5 us at 64x1000; equal at 256x4096 (memory-bound).
constexpr int64_t kDnnlReluMinElements = 2048;

Kernel prepare_relu(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs&) {
  if (dnnl_float(out.dtype) && out.numel() >= kDnnlReluMinElements)
    if (Kernel k = dnnl_eltwise(dnnl::algorithm::eltwise_relu, out.dtype, out.numel())) return k;
  return relu_loop(out);
}

// inputs: grad, x
Kernel prepare_relu_backward(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs&) {
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    return [n = out.numel()](const void* const* in, void* o) {
      const T* g = static_cast<const T*>(in[0]);
      const T* x = static_cast<const T*>(in[1]);
      T* z = static_cast<T*>(o);
      for (int64_t i = 0; i < n; ++i) {
        const T gi = g[i];  // read on both paths: a select, so the loop vectorises (no branch)
        z[i] = load(x[i]) > 0 ? gi : store<T>(0);
      }
    };
  });
}

Kernel prepare_copy(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs&) {
  return [bytes = out.bytes()](const void* const* in, void* o) {
    if (bytes && o != in[0]) std::memcpy(o, in[0], bytes);  // in place (a planned reshape): nothing to move
  };
}

Kernel prepare_expand(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  return [shape = out.shape, sa = broadcast_strides(in[0].shape, out.shape),
          elem = static_cast<int64_t>(dtype_size(out.dtype))](const void* const* in, void* o) {
    const char* x = static_cast<const char*>(in[0]);
    char* z = static_cast<char*>(o);
    for_each_run(shape, sa, sa, [&](int64_t base, int64_t oa, int64_t, int64_t inner, int64_t da, int64_t) {
      if (da == 1) std::memcpy(z + base * elem, x + oa * elem, inner * elem);
      else
        for (int64_t i = 0; i < inner; ++i) std::memcpy(z + (base + i) * elem, x + (oa + i * da) * elem, elem);
    });
  };
}

namespace {

// F32 <-> BF16, the casts around reduced-precision graphs: plain loops the compiler vectorizes
// (AVX-512 when the CPU has it, picked at load by target_clones), bf16::from_float's rounding.
__attribute__((target_clones("avx512f", "default"))) void f32_to_bf16(const float* x, bf16* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16::from_float(x[i]);
}
__attribute__((target_clones("avx512f", "default"))) void bf16_to_f32(const bf16* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i].to_float();
}

}  // namespace

// Casts between any two dtypes: integers through int64, floats through double.
Kernel prepare_cast(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  if (in[0].dtype == out.dtype) return prepare_copy(in, out, {});
  if (in[0].dtype == DType::F32 && out.dtype == DType::BF16)
    return [n = out.numel()](const void* const* inp, void* o) {
      f32_to_bf16(static_cast<const float*>(inp[0]), static_cast<bf16*>(o), n);
    };
  if (in[0].dtype == DType::BF16 && out.dtype == DType::F32)
    return [n = out.numel()](const void* const* inp, void* o) {
      bf16_to_f32(static_cast<const bf16*>(inp[0]), static_cast<float*>(o), n);
    };
  return visit_dtype(in[0].dtype, [&]<class S>(Type<S>) -> Kernel {
    return visit_dtype(out.dtype, [&]<class D>(Type<D>) -> Kernel {
      return [n = out.numel()](const void* const* inp, void* o) {
        const S* x = static_cast<const S*>(inp[0]);
        D* z = static_cast<D*>(o);
        using Via = std::conditional_t<std::is_floating_point_v<compute_t<S>> || std::is_floating_point_v<compute_t<D>>,
                                       double, int64_t>;
        for (int64_t i = 0; i < n; ++i) {
          Via v = static_cast<Via>(load(x[i]));
          if constexpr (std::is_same_v<Via, double> && !std::is_floating_point_v<compute_t<D>> &&
                        !std::is_same_v<D, boolean>) {  // saturate: NaN -> 0, out of range -> the limit
            using L = std::numeric_limits<D>;
            v = v != v ? 0.0 : std::clamp(v, static_cast<double>(L::lowest()), static_cast<double>(L::max()));
            if (v >= static_cast<double>(L::max())) {
              z[i] = L::max();
              continue;
            }
          }
          z[i] = store<D>(v);
        }
      };
    });
  });
}

}  // namespace hg::kernels
