// max_pool2d / avg_pool2d (forward and backward) through oneDNN; adaptive_avg_pool2d in our
// own loops (its windows overlap and vary in size, which oneDNN pooling cannot express).
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/dtype_dispatch.h"
#include "engine/error.h"
#include "engine/kernels_nn.h"

namespace hg::kernels::nn {

namespace {

using dnnl::memory;

// Attrs ints: {kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, count_include_pad[, block]}.
// block > 0 (forward only; the layout pass sets it): x and y are [N, C/b, H, W, b] (engine/ops_layout.h).
struct PoolGeom {
  memory::dims kernel, strides, pads;
  dnnl::algorithm alg;
  memory::desc src, dst;
};

PoolGeom pool_geom(const Shape& x, const Shape& y, DType t, const Attrs& a, bool max, bool layout = false) {
  const int64_t block = layout ? a.i(7) : 0;
  auto md = [&](const Shape& s) {
    return block ? blocked_md({s[0], s[1] * s[4], s[2], s[3]}, t, block) : plain_md(s, t);
  };
  PoolGeom g;
  g.kernel = {a.i(0), a.i(1)};
  g.strides = {a.i(2), a.i(3)};
  g.pads = {a.i(4), a.i(5)};
  g.alg = max ? dnnl::algorithm::pooling_max
              : a.i(6, 1) ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
  g.src = md(x);
  g.dst = md(y);
  return g;
}

dnnl::pooling_forward::primitive_desc pool_fwd_pd(const PoolGeom& g, dnnl::prop_kind pk) {
  dnnl::pooling_forward::desc d(pk, g.alg, g.src, g.dst, g.strides, g.kernel, g.pads, g.pads);
  return {d, user_scratchpad(), dnnl_engine()};
}

dnnl::pooling_backward::primitive_desc pool_bwd_pd(const PoolGeom& g,
                                                   const dnnl::pooling_forward::primitive_desc& hint) {
  dnnl::pooling_backward::desc d(g.alg, g.src, g.dst, g.strides, g.kernel, g.pads, g.pads);
  return {d, user_scratchpad(), dnnl_engine(), hint};
}

Kernel empty_or_zero(const TensorMeta& out) {
  return [bytes = out.bytes()](const void* const*, void* o) {
    if (bytes) std::memset(o, 0, bytes);
  };
}

Kernel pool_forward(const char* name, const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                    bool max) {
  if (out.numel() == 0) return empty_or_zero(out);
  const PoolGeom g = pool_geom(in[0].shape, out.shape, out.dtype, a, max, true);
  try {
    auto pd = pool_fwd_pd(g, dnnl::prop_kind::forward_inference);
    DnnlStep step(pd, dnnl::pooling_forward(pd),
                  {{DNNL_ARG_SRC, ArgFrom::Input, 0, g.src}, {DNNL_ARG_DST, ArgFrom::Output, 0, g.dst}});
    step.set_single_thread(out.numel() < (int64_t{1} << 16));  // small maps: no fork/join
    return [step = std::move(step)](const void* const* i, void* o) { step.run(i, o); };
  } catch (const dnnl::error& e) {
    rethrow_dnnl(name, e);
  }
}

}  // namespace

Kernel prepare_max_pool2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return pool_forward("max_pool2d", in, out, a, true);
}

Kernel prepare_avg_pool2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return pool_forward("avg_pool2d", in, out, a, false);
}

namespace {

// F32 max-pool backward when windows do not overlap (kernel <= stride, e.g. LeNet's 2x2 / 2):
// each window's gradient goes to its maximum, found as oneDNN's workspace finds it (start below
// every value at the window's first position, take a position whose value is greater, in row
// order, skipping padding), so the result is oneDNN's bit for bit — without rerunning the
// forward for a workspace and without its layout reorders.
Kernel max_pool_backward_disjoint(const Shape& x, const Shape& y, const Attrs& a) {
  return [nc = x[0] * x[1], h = x[2], w = x[3], oh = y[2], ow = y[3], kh = a.i(0), kw = a.i(1), sh = a.i(2),
          sw = a.i(3), ph = a.i(4), pw = a.i(5)](const void* const* in, void* o) {
    const float* g = static_cast<const float*>(in[0]);
    const float* xs = static_cast<const float*>(in[1]);
    float* dx = static_cast<float*>(o);
    std::memset(dx, 0, static_cast<size_t>(nc * h * w) * sizeof(float));
    for (int64_t p = 0; p < nc; ++p, xs += h * w, dx += h * w, g += oh * ow)
      for (int64_t i = 0; i < oh; ++i) {
        const int64_t h0 = i * sh - ph, r0 = std::max<int64_t>(h0, 0), r1 = std::min(h0 + kh, h);
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t w0 = j * sw - pw, c0 = std::max<int64_t>(w0, 0), c1 = std::min(w0 + kw, w);
          float best = std::numeric_limits<float>::lowest();
          int64_t at = h0 >= 0 && w0 >= 0 && h0 < h && w0 < w ? h0 * w + w0 : -1;  // first position (-1: padding)
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) {  // selects, not branches: random data mispredicts
              const float v = xs[r * w + c];
              const bool greater = v > best;
              best = greater ? v : best;
              at = greater ? r * w + c : at;
            }
          if (at >= 0) dx[at] = g[i * ow + j];
        }
      }
  };
}

}  // namespace

// inputs: grad [N, C, OH, OW], x [N, C, H, W]. The backward needs the forward's workspace (where
// each maximum was), so the oneDNN kernel reruns the forward into scratch first.
Kernel prepare_max_pool2d_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  if (out.numel() == 0 || in[0].numel() == 0) return empty_or_zero(out);
  if (out.dtype == DType::F32 && a.i(0) <= a.i(2) && a.i(1) <= a.i(3))
    return max_pool_backward_disjoint(out.shape, in[0].shape, a);
  const PoolGeom g = pool_geom(out.shape, in[0].shape, out.dtype, a, true);
  try {
    auto fwd = pool_fwd_pd(g, dnnl::prop_kind::forward_training);
    auto bwd = pool_bwd_pd(g, fwd);
    constexpr int kDst = 0, kWorkspace = 1;
    DnnlStep forward(fwd, dnnl::pooling_forward(fwd),
                     {{DNNL_ARG_SRC, ArgFrom::Input, 1, g.src},
                      {DNNL_ARG_DST, ArgFrom::Temp, kDst, {}},
                      {DNNL_ARG_WORKSPACE, ArgFrom::Temp, kWorkspace, {}}});
    DnnlStep backward(bwd, dnnl::pooling_backward(bwd),
                      {{DNNL_ARG_DIFF_DST, ArgFrom::Input, 0, g.dst},
                       {DNNL_ARG_WORKSPACE, ArgFrom::Temp, kWorkspace, {}},
                       {DNNL_ARG_DIFF_SRC, ArgFrom::Output, 0, g.src}});
    return [forward = std::move(forward), backward = std::move(backward)](const void* const* i, void* o) {
      forward.run(i, o);  // writes only temps
      backward.run(i, o);
    };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("max_pool2d_backward", e);
  }
}

// input: grad [N, C, OH, OW]; output [N, C, H, W] (H, W from the attrs).
Kernel prepare_avg_pool2d_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  if (out.numel() == 0 || in[0].numel() == 0) return empty_or_zero(out);
  const PoolGeom g = pool_geom(out.shape, in[0].shape, out.dtype, a, false);
  try {
    auto fwd = pool_fwd_pd(g, dnnl::prop_kind::forward_training);
    auto bwd = pool_bwd_pd(g, fwd);
    DnnlStep step(bwd, dnnl::pooling_backward(bwd),
                  {{DNNL_ARG_DIFF_DST, ArgFrom::Input, 0, g.dst}, {DNNL_ARG_DIFF_SRC, ArgFrom::Output, 0, g.src}});
    return [step = std::move(step)](const void* const* i, void* o) { step.run(i, o); };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("avg_pool2d_backward", e);
  }
}

// ---- adaptive_avg_pool2d: x [..., H, W] -> [..., OH, OW] ----

namespace {

struct Windows {  // per output index: [start, end); per input index: the output indices covering it
  std::vector<int64_t> start, end, first, last;
};

Windows windows(int64_t in, int64_t out) {
  Windows w;
  w.first.assign(static_cast<size_t>(in), out);
  w.last.assign(static_cast<size_t>(in), -1);
  for (int64_t i = 0; i < out; ++i) {
    w.start.push_back(adaptive_start(i, in, out));
    w.end.push_back(adaptive_end(i, in, out));
    for (int64_t k = w.start.back(); k < w.end.back(); ++k) {
      w.first[k] = std::min(w.first[k], i);
      w.last[k] = std::max(w.last[k], i);
    }
  }
  return w;
}

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace

Kernel prepare_adaptive_avg_pool2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  const Shape& s = in[0].shape;
  const size_t r = s.size();
  const int64_t h = s[r - 2], w = s[r - 1], oh = out.shape[r - 2], ow = out.shape[r - 1];
  const int64_t planes = h * w != 0 ? in[0].numel() / (h * w) : 0;
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      throw InternalError("adaptive_avg_pool2d: floating-point dtypes only");
    } else {
      return [wh = windows(h, oh), ww = windows(w, ow), planes, h, w, oh, ow](const void* const* inp, void* o) {
        using A = acc_t<T>;
        for (int64_t p = 0; p < planes; ++p) {
          const T* x = static_cast<const T*>(inp[0]) + p * h * w;
          T* y = static_cast<T*>(o) + p * oh * ow;
          for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
              A acc = 0;
              for (int64_t a = wh.start[i]; a < wh.end[i]; ++a)
                for (int64_t b = ww.start[j]; b < ww.end[j]; ++b) acc += static_cast<A>(load(x[a * w + b]));
              const A count = static_cast<A>((wh.end[i] - wh.start[i]) * (ww.end[j] - ww.start[j]));
              y[i * ow + j] = store<T>(acc / count);
            }
        }
      };
    }
  });
}

// input: grad [..., OH, OW]; output [..., H, W]. Each input element sums g / count of the output
// cells whose windows cover it, in row order of the cells. F32 and F64 scatter: each cell's
// g / count (one division per cell, not one per element and cell) is added over its window, the
// same additions in the same order. BF16 and F16 gather into a float, so they round once.
Kernel prepare_adaptive_avg_pool2d_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  const Shape& s = out.shape;
  const size_t r = s.size();
  const int64_t h = s[r - 2], w = s[r - 1], oh = in[0].shape[r - 2], ow = in[0].shape[r - 1];
  const int64_t planes = h * w != 0 ? out.numel() / (h * w) : 0;
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      throw InternalError("adaptive_avg_pool2d_backward: floating-point dtypes only");
    } else {
      return [wh = windows(h, oh), ww = windows(w, ow), planes, h, w, oh, ow](const void* const* inp, void* o) {
        using A = acc_t<T>;
        for (int64_t p = 0; p < planes; ++p) {
          const T* g = static_cast<const T*>(inp[0]) + p * oh * ow;
          T* dx = static_cast<T*>(o) + p * h * w;
          if constexpr (std::is_same_v<T, A>) {
            std::fill(dx, dx + h * w, T(0));
            for (int64_t i = 0; i < oh; ++i)
              for (int64_t j = 0; j < ow; ++j) {
                const A d = g[i * ow + j] / static_cast<A>((wh.end[i] - wh.start[i]) * (ww.end[j] - ww.start[j]));
                for (int64_t a = wh.start[i]; a < wh.end[i]; ++a)
                  for (int64_t b = ww.start[j]; b < ww.end[j]; ++b) dx[a * w + b] += d;
              }
            continue;
          }
          for (int64_t a = 0; a < h; ++a)
            for (int64_t b = 0; b < w; ++b) {
              A acc = 0;
              for (int64_t i = wh.first[a]; i <= wh.last[a]; ++i)
                for (int64_t j = ww.first[b]; j <= ww.last[b]; ++j) {
                  const A count = static_cast<A>((wh.end[i] - wh.start[i]) * (ww.end[j] - ww.start[j]));
                  acc += static_cast<A>(load(g[i * ow + j])) / count;
                }
              dx[a * w + b] = store<T>(acc);
            }
        }
      };
    }
  });
}

}  // namespace hg::kernels::nn
