// Reductions over any set of axes (sum, mean, amax), their backward kernels, and argmax.
// Float dtypes (F32, F64, BF16, F16); sums accumulate in double. Schemas: reduce_ops.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/dtype_dispatch.h"
#include "engine/kernels.h"
#include "engine/kernels_shape.h"
#include "engine/ops.h"

namespace hg::kernels {

namespace {

// Kept dims (in order: the output's layout) and reduced dims of a contiguous input, with
// size-1 dims dropped and neighbours of the same kind merged.
struct Plan {
  Shape kept, kept_st, red, red_st;
  int64_t red_n = 1;
};

Plan make_plan(const Shape& shape, const std::vector<bool>& mask) {
  const Shape st = contiguous_strides(shape);
  Plan p;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (mask[d]) p.red_n *= shape[d];
    if (shape[d] == 1) continue;
    Shape& sz = mask[d] ? p.red : p.kept;
    Shape& sd = mask[d] ? p.red_st : p.kept_st;
    if (!sz.empty() && sd.back() == shape[d] * st[d] && shape[d] != 0) {  // adjacent: merge
      sz.back() *= shape[d];
      sd.back() = st[d];
    } else {
      sz.push_back(shape[d]);
      sd.push_back(st[d]);
    }
  }
  return p;
}

// Calls f(offset) for every index of `sizes` in row-major order; `idx` is scratch space.
template <class F>
void for_each_offset(const Shape& sizes, const Shape& strides, std::vector<int64_t>& idx, F&& f) {
  const size_t nd = sizes.size();
  if (nd == 0) return f(int64_t{0});
  for (int64_t s : sizes)
    if (s == 0) return;
  idx.assign(nd, 0);
  const int64_t inner = sizes[nd - 1], is = strides[nd - 1];
  int64_t off = 0;
  while (true) {
    for (int64_t i = 0; i < inner; ++i) f(off + i * is);
    size_t d = nd - 1;
    while (d-- > 0) {
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// acc[k] += x[r * cols + k] over the rows, in double: independent columns, so the loop
// vectorizes (AVX-512 when the CPU has it, chosen at load; the same additions in the same order).
__attribute__((target_clones("avx512f", "default"))) void add_rows_f32(const float* x, int64_t rows, int64_t cols,
                                                                        double* acc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) acc[k] += static_cast<double>(x[r * cols + k]);
}

template <class F>
Kernel float_kernel(DType t, F&& make) {
  switch (t) {
    case DType::F64: return make(Type<double>{});
    case DType::BF16: return make(Type<bf16>{});
    case DType::F16: return make(Type<f16>{});
    default: return make(Type<float>{});
  }
}

}  // namespace

std::vector<bool> reduce_mask(const Shape& shape, const std::vector<int64_t>& dims) {
  const int64_t n = static_cast<int64_t>(shape.size());
  std::vector<bool> mask(shape.size(), dims.empty());
  for (int64_t d : dims)
    if (d >= -n && d < n) mask[d < 0 ? d + n : d] = true;
  return mask;
}

// ints {kind, keepdim, dims...}
Kernel prepare_reduce(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const auto kind = static_cast<ReduceKind>(a.i(0));
  const Plan plan = make_plan(in[0].shape, reduce_mask(in[0].shape, {a.ints.begin() + 2, a.ints.end()}));
  return float_kernel(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    // Sum / mean of [O, R, K] over R into [O, K] (a block of dims reduced, a contiguous tail
    // kept: bias gradients with O = 1, global average pools over NHWC maps): row by row into
    // K accumulators, the same additions in the same order as the general walk below, without
    // its strided per-output pass.
    const size_t nk = plan.kept.size();
    if (kind != ReduceKind::Max && plan.red.size() == 1 && (nk == 1 || nk == 2) && plan.kept_st[nk - 1] == 1 &&
        plan.red_st[0] == plan.kept[nk - 1] && (nk == 1 || plan.kept_st[0] == plan.red[0] * plan.kept[1]))
      return [outer = nk == 2 ? plan.kept[0] : 1, rows = plan.red[0], cols = plan.kept[nk - 1],
              mean = kind == ReduceKind::Mean](const void* const* inp, void* o) {
        thread_local std::vector<double> acc;
        acc.resize(static_cast<size_t>(cols));
        for (int64_t b = 0; b < outer; ++b) {
          const T* x = static_cast<const T*>(inp[0]) + b * rows * cols;
          T* y = static_cast<T*>(o) + b * cols;
          std::fill(acc.begin(), acc.end(), 0.0);
          if constexpr (std::is_same_v<T, float>) {
            add_rows_f32(x, rows, cols, acc.data());
          } else {
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t k = 0; k < cols; ++k) acc[static_cast<size_t>(k)] += static_cast<double>(load(x[r * cols + k]));
          }
          for (int64_t k = 0; k < cols; ++k)
            y[k] = store<T>(mean ? acc[static_cast<size_t>(k)] / static_cast<double>(rows) : acc[static_cast<size_t>(k)]);
        }
      };
    return [plan, kind](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      T* y = static_cast<T*>(o);
      std::vector<int64_t> i1, i2;
      int64_t k = 0;
      for_each_offset(plan.kept, plan.kept_st, i1, [&](int64_t base) {
        double acc = kind == ReduceKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
        bool nan = false;
        for_each_offset(plan.red, plan.red_st, i2, [&](int64_t r) {
          const double v = static_cast<double>(load(x[base + r]));
          if (kind != ReduceKind::Max) acc += v;
          else if (std::isnan(v)) nan = true;
          else acc = std::max(acc, v);
        });
        if (kind == ReduceKind::Mean) acc = plan.red_n ? acc / static_cast<double>(plan.red_n) : NAN;
        y[k++] = store<T>(nan ? NAN : acc);
      });
    };
  });
}

// input: grad in keepdim shape; out = broadcast(grad) * floats[0].
Kernel prepare_reduce_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return float_kernel(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    return [shape = out.shape, gst = broadcast_strides(in[0].shape, out.shape), s = a.f(0, 1.0)](
               const void* const* inp, void* o) {
      const T* g = static_cast<const T*>(inp[0]);
      T* y = static_cast<T*>(o);
      std::vector<int64_t> idx;
      int64_t k = 0;
      for_each_offset(shape, gst, idx, [&](int64_t off) { y[k++] = store<T>(static_cast<double>(load(g[off])) * s); });
    };
  });
}

// inputs: grad in keepdim shape, x. Each group's gradient goes to its maxima, split evenly.
Kernel prepare_amax_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  std::vector<bool> mask(out.shape.size());
  for (size_t d = 0; d < mask.size(); ++d) mask[d] = in[0].shape[d] == 1;
  return float_kernel(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    return [plan = make_plan(out.shape, mask)](const void* const* inp, void* o) {
      const T* g = static_cast<const T*>(inp[0]);
      const T* x = static_cast<const T*>(inp[1]);
      T* y = static_cast<T*>(o);
      std::vector<int64_t> i1, i2;
      int64_t k = 0;
      for_each_offset(plan.kept, plan.kept_st, i1, [&](int64_t base) {
        double mx = -std::numeric_limits<double>::infinity();
        int64_t ties = 0;
        for_each_offset(plan.red, plan.red_st, i2, [&](int64_t r) {
          const double v = static_cast<double>(load(x[base + r]));
          if (v > mx) mx = v, ties = 0;
          ties += v == mx;
        });
        const double share = ties ? static_cast<double>(load(g[k])) / static_cast<double>(ties) : 0.0;
        for_each_offset(plan.red, plan.red_st, i2, [&](int64_t r) {
          y[base + r] = store<T>(static_cast<double>(load(x[base + r])) == mx ? share : 0.0);
        });
        ++k;
      });
    };
  });
}

// ints {dim (kAllDims = flattened), keepdim}; I64 output.
Kernel prepare_argmax(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  const Shape& s = in[0].shape;
  const bool all = a.i(0) == ops::kAllDims;
  const int64_t dim = all ? 0 : a.i(0) < 0 ? a.i(0) + static_cast<int64_t>(s.size()) : a.i(0);
  Plan plan;
  int64_t n = in[0].numel(), st = 1;
  if (!all) {
    std::vector<bool> mask(s.size(), false);
    mask[dim] = true;
    plan = make_plan(s, mask);
    n = s[dim], st = contiguous_strides(s)[dim];
  }
  return visit_dtype(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    return [plan, n, st](const void* const* inp, void* o) {
      const T* x = static_cast<const T*>(inp[0]);
      int64_t* y = static_cast<int64_t*>(o);
      std::vector<int64_t> idx;
      int64_t k = 0;
      for_each_offset(plan.kept, plan.kept_st, idx, [&](int64_t base) {
        int64_t best = 0;
        auto bv = load(x[base]);
        for (int64_t j = 1; j < n && bv == bv; ++j) {  // stops at the first NaN
          const auto v = load(x[base + j * st]);
          if (v > bv || v != v) best = j, bv = v;
        }
        y[k++] = best;
      });
    };
  });
}

}  // namespace hg::kernels
