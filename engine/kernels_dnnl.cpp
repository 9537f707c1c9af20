// matmul and linear through oneDNN primitives (created once per prepared kernel).
#include <atomic>
#include <cstring>
#include <unordered_map>
#include <omp.h>

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

// Memory objects bound to one primitive on one thread; only their data handles change per call.
struct BoundArgs {
  std::unordered_map<int, dnnl::memory> args;
  dnnl::memory *a, *b, *c, *bias = nullptr;
};

struct MatmulKernel {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, bias_md, c_md;
  bool has_bias;
  uint64_t id;  // unique per prepared kernel: the key of each thread's bound memory objects

  BoundArgs& bound() const {
    thread_local std::unordered_map<uint64_t, BoundArgs> per_thread;
    if (per_thread.size() > 4096) per_thread.clear();  // kernels of freed graphs leave entries behind
    auto [it, fresh] = per_thread.try_emplace(id);
    BoundArgs& b = it->second;
    if (fresh) {
      auto& eng = dnnl_engine();
      b.args = {{DNNL_ARG_SRC, dnnl::memory(a_md, eng, nullptr)},
                {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, eng, nullptr)},
                {DNNL_ARG_DST, dnnl::memory(c_md, eng, nullptr)}};
      if (has_bias) b.args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, eng, nullptr));
      b.a = &b.args.at(DNNL_ARG_SRC);
      b.b = &b.args.at(DNNL_ARG_WEIGHTS);
      b.c = &b.args.at(DNNL_ARG_DST);
      if (has_bias) b.bias = &b.args.at(DNNL_ARG_BIAS);
    }
    return b;
  }

  bool single_thread;  // small problems: an OpenMP fork/join costs more than it gives

  void operator()(const void* const* in, void* out) const {
    BoundArgs& b = bound();
    b.a->set_data_handle(const_cast<void*>(in[0]));
    b.b->set_data_handle(const_cast<void*>(in[1]));
    b.c->set_data_handle(out);
    if (b.bias) b.bias->set_data_handle(const_cast<void*>(in[2]));
    auto& s = dnnl_stream();
    const int threads = omp_get_max_threads();
    if (single_thread && threads > 1) omp_set_num_threads(1);  // this thread's setting only
    prim.execute(s, b.args);
    s.wait();
    if (single_thread && threads > 1) omp_set_num_threads(threads);
  }
};

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
  static std::atomic<uint64_t> next_id{1};
  MatmulKernel mk;
  mk.id = next_id++;
  mk.single_thread = m * k * n < kSingleThreadWork;
  mk.a_md = matrix_md(m, k, ta, t);
  mk.b_md = matrix_md(k, n, tb, t);
  mk.c_md = matrix_md(m, n, false, t);
  mk.has_bias = bias;
  if (bias) mk.bias_md = dnnl::memory::desc({1, n}, t, dnnl::memory::dims{n, 1});
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  auto desc = bias ? dnnl::matmul::desc(mk.a_md, mk.b_md, mk.bias_md, mk.c_md)
                   : dnnl::matmul::desc(mk.a_md, mk.b_md, mk.c_md);
  mk.prim = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, dnnl_engine()));
  return mk;
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
