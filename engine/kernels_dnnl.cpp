// matmul and linear through oneDNN primitives (created once per prepared kernel).
#include <cstring>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dnnl_context.h"
#include "engine/kernels.h"

namespace hg::kernels {

namespace {

using dt = dnnl::memory::data_type;

// Below this many multiply-adds a matmul runs on one thread (measured on this machine: the
// digits MLP's 32x64x64 layers take 3.5 us per forward on one thread and 88 us on two,
// while 64^3 and above gain from two threads).
constexpr int64_t kSingleThreadWork = int64_t{1} << 18;

// A row-major [r, c] matrix, optionally stored transposed ([c, r] in memory).
dnnl::memory::desc matrix_md(int64_t r, int64_t c, bool transposed, dt type) {
  return dnnl::memory::desc({r, c}, type, transposed ? dnnl::memory::dims{1, r} : dnnl::memory::dims{c, 1});
}

// C = op(A) op(B) (+ bias, ReLU) for F64: a plain loop, used for gradient checks.
Kernel make_matmul_f64(int64_t m, int64_t k, int64_t n, bool ta, bool tb, bool bias, bool relu) {
  return [=](const void* const* in, void* out) {
    const double* a = static_cast<const double*>(in[0]);
    const double* b = static_cast<const double*>(in[1]);
    double* c = static_cast<double*>(out);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = bias ? static_cast<const double*>(in[2])[j] : 0.0;
        for (int64_t p = 0; p < k; ++p) acc += a[ta ? p * m + i : i * k + p] * b[tb ? j * k + p : p * n + j];
        c[i * n + j] = relu && acc < 0 ? 0.0 : acc;
      }
  };
}

Kernel make_matmul(DType type, int64_t m, int64_t k, int64_t n, bool ta, bool tb, bool bias, bool relu) {
  if (type == DType::F64) return make_matmul_f64(m, k, n, ta, tb, bias, relu);
  const dt t = dnnl_dtype(type);
  const auto a_md = matrix_md(m, k, ta, t), b_md = matrix_md(k, n, tb, t), c_md = matrix_md(m, n, false, t);
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  DnnlCall::Args args{{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, b_md}};
  dnnl::matmul::desc desc(a_md, b_md, c_md);
  if (bias) {
    const dnnl::memory::desc bias_md({1, n}, t, dnnl::memory::dims{n, 1});
    desc = dnnl::matmul::desc(a_md, b_md, bias_md, c_md);
    args.emplace_back(DNNL_ARG_BIAS, bias_md);
  }
  args.emplace_back(DNNL_ARG_DST, c_md);
  DnnlCall call(dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, dnnl_engine())), std::move(args),
                m * k * n < kSingleThreadWork);
  // inputs a, b (, bias): the call's argument order is src, weights (, bias), dst
  if (bias)
    return [call](const void* const* in, void* out) {
      const void* ptrs[] = {in[0], in[1], in[2], out};
      call.run(ptrs);
    };
  return [call](const void* const* in, void* out) {
    const void* ptrs[] = {in[0], in[1], out};
    call.run(ptrs);
  };
}

}  // namespace

Kernel prepare_matmul(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const bool ta = a.i(0), tb = a.i(1);
  const int64_t m = out.shape[0], n = out.shape[1];
  const int64_t k = ta ? in[0].shape[0] : in[0].shape[1];
  if (m == 0 || n == 0) return [](const void* const*, void*) {};
  if (k == 0)
    return [bytes = out.bytes()](const void* const*, void* o) { std::memset(o, 0, bytes); };
  return make_matmul(out.dtype, m, k, n, ta, tb, false, false);
}

Kernel prepare_linear(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const int64_t m = out.shape[0], n = out.shape[1], k = in[0].shape[1];
  if (m == 0 || n == 0) return [](const void* const*, void*) {};
  return make_matmul(out.dtype, m, k, n, false, true, true, a.i(0) == 1);
}

}  // namespace hg::kernels
