// matmul and linear through oneDNN primitives (created once per prepared kernel), with their
// post-ops (bias, activation: engine/post_ops.h) and, for constant weights, the weights
// reordered once into the layout the primitive chose (prepack); with constant weights and at
// most four rows, the small-batch GEMM of small_gemm.cpp instead.
#include <cstring>
#include <string>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dnnl_context.h"
#include "engine/dtype_dispatch.h"
#include "engine/error.h"
#include "engine/kernels.h"

namespace hg::kernels {

namespace {

using dt = dnnl::memory::data_type;

// Below this many multiply-adds a matmul runs on one thread (measured on this machine: the
// digits MLP's 32x64x64 layers take 3.5 us per forward on one thread and 88 us on two,
// while 64^3 and above gain from two threads).
constexpr int64_t kSingleThreadWork = int64_t{1} << 18;

thread_local std::string t_kernel_choice;
thread_local size_t t_prepacked_bytes = 0;

// C = act(op(A) op(B) + bias): A is input 0, B input 1, the bias [n] input 2.
struct MatmulSpec {
  DType type;
  int64_t m, k, n;
  bool ta, tb, bias;
  FusedAct act;
};

// A row-major [r, c] matrix, optionally stored transposed ([c, r] in memory).
dnnl::memory::desc matrix_md(int64_t r, int64_t c, bool transposed, dt type) {
  return dnnl::memory::desc({r, c}, type, transposed ? dnnl::memory::dims{1, r} : dnnl::memory::dims{c, 1});
}

// F64: a plain loop, used for gradient checks.
Kernel make_matmul_f64(const MatmulSpec& s) {
  return [s](const void* const* in, void* out) {
    const double* a = static_cast<const double*>(in[0]);
    const double* b = static_cast<const double*>(in[1]);
    double* c = static_cast<double*>(out);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = s.bias ? static_cast<const double*>(in[2])[j] : 0.0;
        for (int64_t p = 0; p < s.k; ++p)
          acc += a[s.ta ? p * s.m + i : i * s.k + p] * b[s.tb ? j * s.k + p : p * s.n + j];
        c[i * s.n + j] = apply_fused_act(s.act, acc);
      }
  };
}

// `packed_from`: B's data when it is constant (reordered here, once, into the layout the
// primitive prefers); null: B arrives with every call in its plain layout.
Kernel make_matmul(const MatmulSpec& s, const void* packed_from) {
  if (s.type == DType::F64) return make_matmul_f64(s);
  if (packed_from && !s.ta && small_gemm_fits(s.type, s.m, s.k, s.n, s.act)) {
    note_kernel_choice("small-batch GEMM (" + std::to_string(s.m) + " rows <= " + std::to_string(kSmallGemmRows) + ", " +
                       std::to_string(s.m * s.k * s.n) + " multiply-adds)");
    return small_gemm(s.m, s.k, s.n, static_cast<const float*>(packed_from), s.tb, s.bias, s.act);
  }
  const dt t = dnnl_dtype(s.type);
  const auto a_md = matrix_md(s.m, s.k, s.ta, t), b_md = matrix_md(s.k, s.n, s.tb, t),
             c_md = matrix_md(s.m, s.n, false, t);
  const auto b_want = packed_from ? dnnl::memory::desc({s.k, s.n}, t, dnnl::memory::format_tag::any) : b_md;
  const dnnl::memory::desc bias_md = s.bias ? dnnl::memory::desc({1, s.n}, t, dnnl::memory::dims{s.n, 1})
                                            : dnnl::memory::desc();
  dnnl::primitive_attr attr = user_scratchpad();
  append_post_ops(attr, s.act, false);
  dnnl::matmul::primitive_desc pd;
  std::shared_ptr<void> packed;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_want, bias_md, c_md), attr, dnnl_engine());
    if (packed_from && pd.weights_desc() != b_md) packed = reorder_once(b_md, packed_from, pd.weights_desc());
  } catch (const dnnl::error& e) {
    throw InternalError(std::string("op 'matmul': oneDNN could not create a primitive: ") + e.what());
  }
  const auto b_prim = pd.weights_desc();
  DnnlCall::Args args{{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, b_prim}};
  if (s.bias) args.emplace_back(DNNL_ARG_BIAS, bias_md);
  args.emplace_back(DNNL_ARG_DST, c_md);
  DnnlCall call(dnnl::matmul(pd), std::move(args), s.m * s.k * s.n < kSingleThreadWork);
  // the call's argument order is src, weights (, bias), dst
  if (packed) {
    if (s.bias)
      return [call, packed](const void* const* in, void* out) {
        const void* ptrs[] = {in[0], packed.get(), in[2], out};
        call.run(ptrs);
      };
    return [call, packed](const void* const* in, void* out) {
      const void* ptrs[] = {in[0], packed.get(), out};
      call.run(ptrs);
    };
  }
  if (s.bias)
    return [call](const void* const* in, void* out) {
      const void* ptrs[] = {in[0], in[1], in[2], out};
      call.run(ptrs);
    };
  return [call](const void* const* in, void* out) {
    const void* ptrs[] = {in[0], in[1], out};
    call.run(ptrs);
  };
}

// act(bias) in every row (or zeros): the product over an empty inner dimension.
Kernel bias_only(const MatmulSpec& s) {
  return visit_dtype(s.type, [&]<class T>(Type<T>) -> Kernel {
    return [s](const void* const* in, void* o) {
      T* y = static_cast<T*>(o);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          const double b = s.bias ? static_cast<double>(load(static_cast<const T*>(in[2])[j])) : 0.0;
          y[i * s.n + j] = store<T>(apply_fused_act(s.act, b));
        }
    };
  });
}

MatmulSpec matmul_spec(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const bool ta = a.i(0), tb = a.i(1);
  const int64_t k = ta ? in[0].shape[0] : in[0].shape[1];
  return {out.dtype, out.shape[0], k, out.shape[1], ta, tb, in.size() == 3, static_cast<FusedAct>(a.i(2))};
}

MatmulSpec linear_spec(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return {out.dtype, out.shape[0], in[0].shape[1], out.shape[1], false, true, true, static_cast<FusedAct>(a.i(0))};
}

Kernel matmul_kernel(const MatmulSpec& s, const void* packed_from) {
  if (s.m == 0 || s.n == 0) return [](const void* const*, void*) {};
  if (s.k == 0) return bias_only(s);
  return make_matmul(s, packed_from);
}

const void* constant_input(const std::vector<const void*>& constant, size_t i) {
  return i < constant.size() ? constant[i] : nullptr;
}

}  // namespace

void note_kernel_choice(std::string why) { t_kernel_choice = std::move(why); }

std::string take_kernel_choice() { return std::exchange(t_kernel_choice, std::string()); }

void note_prepacked_bytes(size_t bytes) { t_prepacked_bytes += bytes; }

size_t take_prepacked_bytes() { return std::exchange(t_prepacked_bytes, size_t{0}); }

Kernel prepare_matmul(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return matmul_kernel(matmul_spec(in, out, a), nullptr);
}

Kernel prepack_matmul(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant) {
  return matmul_kernel(matmul_spec(in, out, a), constant_input(constant, 1));
}

Kernel prepare_linear(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return matmul_kernel(linear_spec(in, out, a), nullptr);
}

Kernel prepack_linear(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant) {
  return matmul_kernel(linear_spec(in, out, a), constant_input(constant, 1));
}

}  // namespace hg::kernels
