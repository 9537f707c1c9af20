// Element-wise kernels: broadcasting binary ops, scale, relu, copies and expand.
#include <algorithm>
#include <cstring>

#include "engine/kernels.h"

namespace hg::kernels {

Shape broadcast_strides(const Shape& s, const Shape& out) {
  Shape st(out.size(), 0);
  const Shape cs = contiguous_strides(s);
  const size_t off = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) st[off + i] = s[i] == 1 ? 0 : cs[i];
  return st;
}

namespace {

// Calls f(out_index, a_offset, b_offset, inner, a_step, b_step) for each contiguous run of the
// innermost output dimension.
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

template <class Op>
Kernel binary_kernel(const TensorMeta& a, const TensorMeta& b, const TensorMeta& out, Op op) {
  if (a.shape == b.shape) {
    return [n = out.numel(), op](const void* const* in, void* o) {
      const float* x = static_cast<const float*>(in[0]);
      const float* y = static_cast<const float*>(in[1]);
      float* z = static_cast<float*>(o);
      for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], y[i]);
    };
  }
  return [shape = out.shape, sa = broadcast_strides(a.shape, out.shape), sb = broadcast_strides(b.shape, out.shape),
          op](const void* const* in, void* o) {
    const float* x = static_cast<const float*>(in[0]);
    const float* y = static_cast<const float*>(in[1]);
    float* z = static_cast<float*>(o);
    for_each_run(shape, sa, sb, [&](int64_t base, int64_t oa, int64_t ob, int64_t inner, int64_t da, int64_t db) {
      for (int64_t i = 0; i < inner; ++i) z[base + i] = op(x[oa + i * da], y[ob + i * db]);
    });
  };
}

}  // namespace

Kernel prepare_binary(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  switch (static_cast<BinaryOp>(a.i(0))) {
    case BinaryOp::Add: return binary_kernel(in[0], in[1], out, [](float x, float y) { return x + y; });
    case BinaryOp::Sub: return binary_kernel(in[0], in[1], out, [](float x, float y) { return x - y; });
    case BinaryOp::Mul: return binary_kernel(in[0], in[1], out, [](float x, float y) { return x * y; });
  }
  return nullptr;
}

Kernel prepare_scale(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs& a) {
  return [n = out.numel(), s = static_cast<float>(a.f(0))](const void* const* in, void* o) {
    const float* x = static_cast<const float*>(in[0]);
    float* z = static_cast<float*>(o);
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] * s;
  };
}

Kernel prepare_relu(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs&) {
  return [n = out.numel()](const void* const* in, void* o) {
    const float* x = static_cast<const float*>(in[0]);
    float* z = static_cast<float*>(o);
    for (int64_t i = 0; i < n; ++i) z[i] = std::max(x[i], 0.0f);
  };
}

// inputs: grad, x
Kernel prepare_relu_backward(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs&) {
  return [n = out.numel()](const void* const* in, void* o) {
    const float* g = static_cast<const float*>(in[0]);
    const float* x = static_cast<const float*>(in[1]);
    float* z = static_cast<float*>(o);
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] > 0.0f ? g[i] : 0.0f;
  };
}

Kernel prepare_copy(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs&) {
  return [bytes = out.bytes()](const void* const* in, void* o) {
    if (bytes) std::memcpy(o, in[0], bytes);
  };
}

Kernel prepare_expand(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  return [shape = out.shape, sa = broadcast_strides(in[0].shape, out.shape)](const void* const* in, void* o) {
    const float* x = static_cast<const float*>(in[0]);
    float* z = static_cast<float*>(o);
    for_each_run(shape, sa, sa, [&](int64_t base, int64_t oa, int64_t, int64_t inner, int64_t da, int64_t) {
      for (int64_t i = 0; i < inner; ++i) z[base + i] = x[oa + i * da];
    });
  };
}

}  // namespace hg::kernels
