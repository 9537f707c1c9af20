// Internal to the act family (activations, dropout, indexing, selection, losses): kernel
// factories (kernels_act.cpp, kernels_loss.cpp) and the loss schemas' registration
// (loss_ops.cpp), called by register_act_ops() (act_ops.cpp).
//
//   hg::Kernel k = hg::act::prepare_activation(hg::act::Act::Silu, false, in, out);
#pragma once
#include "engine/op.h"

namespace hg::act {

using Metas = std::vector<TensorMeta>;

// Element-wise activations. Forward input: x. Backward inputs: grad, x. prepare_activation
// picks oneDNN's eltwise primitive (kernels_eltwise.h) or our loops, whichever
// bench/ops_bench.cpp measured faster; activation_loop is ours: F32 (SIMD), F64 (libm),
// BF16/F16 (computed as F32).
enum class Act { GeluErf, GeluTanh, Silu, Tanh, Sigmoid };
Kernel prepare_activation(Act act, bool backward, const Metas& in, const TensorMeta& out);
Kernel activation_loop(Act act, bool backward, DType t, int64_t n);

// clamp: input x; clamp_backward: inputs grad, x (grad where lo <= x <= hi, else 0, as
// PyTorch). floats {lo, hi} (either may be infinite); NaN stays NaN.
Kernel prepare_clamp(const Metas& in, const TensorMeta& out, const Attrs& a, bool backward);

// inputs: x (any float), seed (I64 scalar); floats {p}. Keeps element i when the counter hash
// of (seed, i) is >= p and scales it by 1/(1-p). The same kernel is its own backward.
Kernel prepare_dropout(const Metas& in, const TensorMeta& out, const Attrs& a);

// inputs: indices (I64/I32), weight [num, dim]; rows of out-of-range indices are zeros.
Kernel prepare_embedding(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: indices, grad [*, dim]; output [num, dim] (ints {num}): scatter-add of grad rows.
Kernel prepare_embedding_backward(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: x, index (I64/I32, same rank); ints {dim}. Out-of-range entries give zero.
Kernel prepare_gather(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: index, grad; ints {dim, x shape...}; output: grad scattered (added) into x's shape.
Kernel prepare_gather_backward(const Metas& in, const TensorMeta& out, const Attrs& a);

// inputs: cond (BOOL), a, b; all broadcast to the output.
Kernel prepare_where(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: x, mask (BOOL); floats {value}; x and mask broadcast to the output.
Kernel prepare_masked_fill(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: cond (BOOL), grad; ints {side, target shape...}: grad where cond (side 0) or where
// !cond (side 1), summed over the dims broadcast away from the target shape.
Kernel prepare_where_backward(const Metas& in, const TensorMeta& out, const Attrs& a);

// Losses (kernels_loss.cpp). Reduction codes as ops::Reduction: 0 none, 1 mean, 2 sum.
// cross_entropy: inputs logits [N, C], target I64 [N]; ints {ignore_index, reduction},
// floats {label_smoothing}. A target outside [0, C) (and not ignored) gives NaN.
Kernel prepare_cross_entropy(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: logits, target, grad (scalar, or [N] for none); output: d loss / d logits.
Kernel prepare_cross_entropy_backward(const Metas& in, const TensorMeta& out, const Attrs& a);
// mse_loss: inputs a, b (same shape); ints {reduction}.
Kernel prepare_mse_loss(const Metas& in, const TensorMeta& out, const Attrs& a);
// inputs: a, b, grad; ints {reduction, sign}: sign * d loss / d a.
Kernel prepare_mse_loss_backward(const Metas& in, const TensorMeta& out, const Attrs& a);

void register_loss_ops();  // loss_ops.cpp

}  // namespace hg::act
