// Kernels of the shape family: strided copies (permute, slice and its backward), concat, and
// the causal mask fill. Movement kernels only look at element sizes, so they take any dtype.
#include <cstring>

#include "engine/kernels.h"
#include "engine/kernels_shape.h"

namespace hg::kernels {

namespace {

// A strided walk: sizes with source and destination strides (in elements).
struct Walk {
  Shape sizes, src, dst;
};

// Drops size-1 dims and merges neighbours that are contiguous in both source and destination,
// so the innermost loop is as long as possible.
Walk coalesce(const Walk& w) {
  Walk r;
  for (size_t d = 0; d < w.sizes.size(); ++d) {
    if (w.sizes[d] == 1) continue;
    if (!r.sizes.empty() && r.src.back() == w.sizes[d] * w.src[d] && r.dst.back() == w.sizes[d] * w.dst[d]) {
      r.sizes.back() *= w.sizes[d];
      r.src.back() = w.src[d];
      r.dst.back() = w.dst[d];
      continue;
    }
    r.sizes.push_back(w.sizes[d]);
    r.src.push_back(w.src[d]);
    r.dst.push_back(w.dst[d]);
  }
  return r;
}

// dst[walk] = src[walk] for every index of w.sizes.
template <class E>
void strided_copy(const E* src, E* dst, const Walk& w) {
  const size_t nd = w.sizes.size();
  if (numel(w.sizes) == 0) return;
  if (nd == 0) {
    *dst = *src;
    return;
  }
  const int64_t inner = w.sizes[nd - 1], ss = w.src[nd - 1], ds = w.dst[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  int64_t so = 0, dof = 0;
  while (true) {
    if (ss == 1 && ds == 1) std::memcpy(dst + dof, src + so, static_cast<size_t>(inner) * sizeof(E));
    else
      for (int64_t i = 0; i < inner; ++i) dst[dof + i * ds] = src[so + i * ss];
    size_t d = nd - 1;
    while (d-- > 0) {  // odometer over the outer dims
      so += w.src[d], dof += w.dst[d];
      if (++idx[d] < w.sizes[d]) break;
      so -= w.src[d] * w.sizes[d], dof -= w.dst[d] * w.sizes[d];
      idx[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// A kernel copying input 0 (offset by `src_off` elements) along `walk` into the output,
// optionally zero-filling the output first.
template <class E>
Kernel copy_kernel(Walk walk, int64_t src_off, size_t zero_bytes) {
  return [w = coalesce(walk), src_off, zero_bytes](const void* const* in, void* out) {
    if (zero_bytes) std::memset(out, 0, zero_bytes);
    strided_copy(static_cast<const E*>(in[0]) + src_off, static_cast<E*>(out), w);
  };
}

Kernel copy_by_size(size_t elem, const Walk& w, int64_t src_off, size_t zero_bytes) {
  switch (elem) {
    case 1: return copy_kernel<uint8_t>(w, src_off, zero_bytes);
    case 2: return copy_kernel<uint16_t>(w, src_off, zero_bytes);
    case 4: return copy_kernel<uint32_t>(w, src_off, zero_bytes);
    default: return copy_kernel<uint64_t>(w, src_off, zero_bytes);
  }
}

int64_t wrap(int64_t d, size_t n) { return d < 0 ? d + static_cast<int64_t>(n) : d; }

}  // namespace

Kernel prepare_permute(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const Shape st = contiguous_strides(in[0].shape);
  Walk w{out.shape, Shape(out.shape.size()), contiguous_strides(out.shape)};
  for (size_t i = 0; i < a.ints.size(); ++i) w.src[i] = st[wrap(a.ints[i], st.size())];
  return copy_by_size(dtype_size(out.dtype), w, 0, 0);
}

// attrs: dim, start, end, step with start/end already clamped by infer (see shape_ops.cpp).
Kernel prepare_slice(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const int64_t dim = wrap(a.i(0), out.shape.size());
  Walk w{out.shape, contiguous_strides(in[0].shape), contiguous_strides(out.shape)};
  const int64_t off = a.i(1) * w.src[dim];
  w.src[dim] *= a.i(3);
  return copy_by_size(dtype_size(out.dtype), w, out.numel() ? off : 0, 0);
}

// input: the slice's gradient; attrs: dim, start, step, size of dim in the sliced tensor.
Kernel prepare_slice_backward(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const int64_t dim = wrap(a.i(0), out.shape.size());
  Walk w{in[0].shape, contiguous_strides(in[0].shape), contiguous_strides(out.shape)};
  const int64_t off = a.i(1) * w.dst[dim];
  w.dst[dim] *= a.i(2);
  Kernel copy = copy_by_size(dtype_size(out.dtype), w, 0, 0);
  return [copy, off = in[0].numel() ? off * static_cast<int64_t>(dtype_size(out.dtype)) : 0,
          bytes = out.bytes()](const void* const* inp, void* o) {
    if (bytes) std::memset(o, 0, bytes);
    copy(inp, static_cast<char*>(o) + off);
  };
}

Kernel prepare_concat(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const int64_t dim = wrap(a.i(0), out.shape.size());
  const size_t elem = dtype_size(out.dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(out.shape.size()); ++d) {
    if (d < dim) outer *= out.shape[d];
    if (d > dim) inner *= out.shape[d];
  }
  std::vector<size_t> chunk;  // bytes each input contributes per outer index
  for (const auto& m : in) chunk.push_back(static_cast<size_t>(m.shape[dim] * inner) * elem);
  return [outer, chunk](const void* const* inp, void* o) {
    char* dst = static_cast<char*>(o);
    for (int64_t i = 0; i < outer; ++i)
      for (size_t k = 0; k < chunk.size(); ++k) {
        if (!chunk[k]) continue;
        std::memcpy(dst, static_cast<const char*>(inp[k]) + i * chunk[k], chunk[k]);
        dst += chunk[k];
      }
  };
}

namespace {

template <class T>
Kernel causal_fill_kernel(const TensorMeta& out, const Attrs& a) {
  const size_t nd = out.shape.size();
  const int64_t l = out.shape[nd - 2], s = out.shape[nd - 1];
  return [batch = l * s != 0 ? out.numel() / (l * s) : 0, l, s, value = static_cast<T>(a.f(0))](const void* const* inp,
                                                                                          void* o) {
    const T* x = static_cast<const T*>(inp[0]);
    T* y = static_cast<T*>(o);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < l; ++i) {
        const int64_t row = (b * l + i) * s;
        for (int64_t j = 0; j < s; ++j) y[row + j] = j > i ? value : x[row + j];
      }
  };
}

}  // namespace

Kernel prepare_causal_fill(const Metas&, const TensorMeta& out, const Attrs& a) {
  return out.dtype == DType::F64 ? causal_fill_kernel<double>(out, a) : causal_fill_kernel<float>(out, a);
}

}  // namespace hg::kernels
