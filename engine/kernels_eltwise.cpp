// oneDNN eltwise and softmax forward kernels (see kernels_eltwise.h).
#include "engine/kernels_eltwise.h"

#include <string_view>

namespace hg::kernels {

namespace {

// Below this many elements an eltwise or softmax runs on one OpenMP thread: waking a second
// thread costs ~1-2 us, about what it saves on 16K elements of the cheapest op (relu, ~0.13
// ns per element); an estimate, the noisy 2-core VM could not resolve it.
constexpr int64_t kSingleThreadElements = int64_t{1} << 14;

// oneDNN's reference implementations are scalar loops, slower than ours.
bool optimised(const dnnl::primitive_desc& pd) { return !std::string_view(pd.impl_info_str()).starts_with("ref"); }

}  // namespace

bool dnnl_float(DType t) { return t == DType::F32 || t == DType::BF16; }

Kernel dnnl_eltwise(dnnl::algorithm alg, DType t, int64_t n, float alpha) {
  if (n == 0) return [](const void* const*, void*) {};
  const dnnl::memory::desc md({n}, dnnl_dtype(t), dnnl::memory::format_tag::a);
  dnnl::eltwise_forward::primitive_desc pd;
  try {
    pd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, md, alpha, 0.f), user_scratchpad(),
        dnnl_engine());
  } catch (const dnnl::error&) {
    return nullptr;  // unsupported here: the caller's loop runs instead
  }
  if (!optimised(pd)) return nullptr;
  DnnlCall call(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}}, n < kSingleThreadElements);
  return [call](const void* const* in, void* out) {
    const void* ptrs[] = {in[0], out};
    call.run(ptrs);
  };
}

Kernel dnnl_softmax(const Shape& s, DType t, int64_t dim, bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < dim) outer *= s[i];
    if (i > dim) inner *= s[i];
  }
  const int64_t n = s.empty() ? 1 : s[dim];
  if (outer * n * inner == 0) return [](const void* const*, void*) {};
  // [outer, n, inner] row-major, softmax over axis 1; a trailing 1 is dropped (plain rows).
  const dnnl::memory::desc md = inner == 1
                                    ? dnnl::memory::desc({outer, n}, dnnl_dtype(t), dnnl::memory::format_tag::ab)
                                    : dnnl::memory::desc({outer, n, inner}, dnnl_dtype(t), dnnl::memory::format_tag::abc);
  dnnl::softmax_v2_forward::primitive_desc pd;
  try {
    pd = dnnl::softmax_v2_forward::primitive_desc(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference,
                                       log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md, md, 1),
        user_scratchpad(), dnnl_engine());
  } catch (const dnnl::error&) {
    return nullptr;  // unsupported here: the caller's loop runs instead
  }
  if (!optimised(pd)) return nullptr;
  DnnlCall call(dnnl::softmax_v2_forward(pd), {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}},
                outer * n * inner < kSingleThreadElements);
  return [call](const void* const* in, void* out) {
    const void* ptrs[] = {in[0], out};
    call.run(ptrs);
  };
}

}  // namespace hg::kernels
