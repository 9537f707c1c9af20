// Internal: kernel factories of the shape family (movement ops, batched matmul, the causal
// mask) and of the axis reductions. Schemas live in shape_ops.cpp, attention_ops.cpp and
// reduce_ops.cpp.
//
//   hg::Kernel k = hg::kernels::prepare_permute({x.meta()}, out_meta, hg::Attrs{{0, 2, 1}, {}});
//   k(inputs, output);   // contiguous in, contiguous out, never throws
#pragma once
#include "engine/op.h"

namespace hg::kernels {

using Metas = std::vector<TensorMeta>;

// Data movement (kernels_shape.cpp): any dtype, moved by element size.
Kernel prepare_permute(const Metas& in, const TensorMeta& out, const Attrs& a);         // ints: dims
Kernel prepare_slice(const Metas& in, const TensorMeta& out, const Attrs& a);           // ints: dim, start, end, step
Kernel prepare_slice_backward(const Metas& in, const TensorMeta& out, const Attrs& a);  // ints: dim, start, step, size
Kernel prepare_concat(const Metas& in, const TensorMeta& out, const Attrs& a);          // ints: dim

// The causal mask (kernels_shape.cpp): F32 and F64.
Kernel prepare_causal_fill(const Metas& in, const TensorMeta& out, const Attrs& a);  // floats: value

// Batched matmul through oneDNN (kernels_bmm.cpp): F32 and BF16. ints: trans_a, trans_b.
Kernel prepare_bmm(const Metas& in, const TensorMeta& out, const Attrs& a);

// Axis reductions (kernels_reduce.cpp): F32 and F64. prepare_reduce and prepare_argmax are
// declared in kernels.h:
//   reduce: ints {kind (ReduceKind), keepdim, dims...}; no dims = every dim (infer checked them).
//   argmax: ints {dim (ops::kAllDims = the flattened tensor), keepdim}; first maximum wins,
//           NaN counts as the maximum (PyTorch).
enum class ReduceKind : int64_t { Sum = 0, Mean = 1, Max = 2 };
// The reduced dims of `shape` as a mask; negative dims wrap, no dims = all. No validation.
std::vector<bool> reduce_mask(const Shape& shape, const std::vector<int64_t>& dims);
// inputs: grad in keepdim shape; ints: x shape; floats: scale. out = broadcast(grad) * scale.
Kernel prepare_reduce_backward(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: grad in keepdim shape, x. The gradient of amax, split evenly among tied maxima.
Kernel prepare_amax_backward(const Metas& in, const TensorMeta& out, const Attrs& a);

}  // namespace hg::kernels

namespace hg {
// Parts of register_shape_ops(): reduce_ops.cpp and attention_ops.cpp.
void register_reduce_ops();
void register_attention_ops();
}  // namespace hg
