// Batched matmul through one oneDNN matmul primitive: batch dims broadcast (a size-1 batch dim
// of either operand is reused) and transposed operands are expressed with strides.
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dnnl_context.h"
#include "engine/error.h"
#include "engine/kernels_shape.h"

namespace hg::kernels {

namespace {

// The logical [batch..., r, c] view of an operand stored as `shape` (rank <= out rank), padded
// with leading size-1 dims to `rank`; `transposed`: the last two dims are stored swapped.
dnnl::memory::desc operand_md(const Shape& shape, size_t rank, bool transposed, dnnl::memory::data_type t) {
  Shape dims(rank - shape.size(), 1);
  dims.insert(dims.end(), shape.begin(), shape.end());
  Shape strides = contiguous_strides(dims);
  if (transposed) {
    std::swap(dims[rank - 2], dims[rank - 1]);
    std::swap(strides[rank - 2], strides[rank - 1]);
  }
  return dnnl::memory::desc(dims, t, strides);
}

}  // namespace

// inputs: a, b (same dtype, F32 or BF16); ints: trans_a, trans_b. Shapes were checked by infer.
Kernel prepare_bmm(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const bool ta = a.i(0), tb = a.i(1);
  const Shape& sa = in[0].shape;
  const int64_t k = ta ? sa[sa.size() - 2] : sa[sa.size() - 1];
  if (out.numel() == 0) return [](const void* const*, void*) {};
  if (k == 0) return [bytes = out.bytes()](const void* const*, void* o) { std::memset(o, 0, bytes); };
  const auto t = dnnl_dtype(out.dtype);
  const size_t rank = out.shape.size();
  const auto a_md = operand_md(in[0].shape, rank, ta, t), b_md = operand_md(in[1].shape, rank, tb, t);
  const dnnl::memory::desc c_md(out.shape, t, contiguous_strides(out.shape));
  dnnl::matmul prim;
  try {
    prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), user_scratchpad(), dnnl_engine()));
  } catch (const dnnl::error& e) {
    throw InternalError(std::string("bmm: oneDNN has no matmul for these operands: ") + e.what());
  }
  DnnlCall call(prim, {{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, b_md}, {DNNL_ARG_DST, c_md}});
  return [call](const void* const* inp, void* o) {
    const void* ptrs[] = {inp[0], inp[1], o};
    call.run(ptrs);
  };
}

}  // namespace hg::kernels
