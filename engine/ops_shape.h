// Shape ops, axis reductions, batched matmul and attention (the `shape` op family).
//
//   using namespace hg::ops;
//   auto y = permute(x, {0, 2, 1, 3});                   // [B,H,L,D] -> [B,L,H,D], a copy with history
//   auto parts = split(y, {2, 1}, 1);                    // slices of sizes 2 and 1 along dim 1
//   auto z = concat({parts[1], parts[0]}, 1);            // any number of inputs
//   auto s = sum(x, {0, -1}, /*keepdim=*/true);          // several axes at once; mean and max too
//   auto c = bmm(q, k, false, true);                     // [B,H,L,D] @ [B,H,S,D]^T, batch dims broadcast
//   auto o = scaled_dot_product_attention(q, k, v, {}, /*causal=*/true);
//
// Every op here is differentiable in its float inputs (argmax and the masks' boolean input are
// not). Movement ops (permute, contiguous, slice, concat) take any dtype; reductions F32, F64,
// BF16 and F16; causal_fill F32 and F64; bmm F32 and BF16 (oneDNN, F32 accumulation); attention F32
// or BF16 (masked scores and softmax in F32).
#pragma once
#include <initializer_list>
#include <limits>

#include "engine/ops.h"  // kAllDims; ops.h includes this header at its end

namespace hg::ops {

// ---- views and copies ----
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);  // negative dims wrap
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);           // permute swapping two dims
Tensor contiguous(const Tensor& x);       // x itself when contiguous, else a differentiable copy
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 entry is inferred (Tensor::reshape)
Tensor view(const Tensor& x, const Shape& shape);     // same as reshape
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor squeeze(const Tensor& x);               // drops every size-1 dim
Tensor squeeze(const Tensor& x, int64_t dim);  // drops `dim` if it has size 1 (else x, as PyTorch)
Tensor unsqueeze(const Tensor& x, int64_t dim);  // dim in [-(ndim+1), ndim]

// x[..., start:end:step, ...] along `dim` with Python index rules (negative wrap, clamping);
// step must be positive.
inline constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end = kEnd, int64_t step = 1);
// Joins tensors that agree on every dim but `dim`. One op with any number of inputs (the
// registry's variadic schema, num_inputs = -1); more than 16 inputs are joined in groups.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
// Pieces of the given sizes along `dim` (they must add up to its size), or of `size` each
// (the last one smaller), as torch.split. Each piece is a slice.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);

// ---- reductions over a set of axes (negative axes wrap; {} = every axis) ----
// The single-axis forms sum(x, dim, keepdim) / mean(...) with kAllDims are in engine/ops.h.
// Sum of nothing is 0, mean of nothing NaN; max over an empty axis throws ShapeError.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor sum(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false);
// Max values with torch.amax semantics: the gradient is split evenly among tied maxima (not
// sent to one index as torch.max(x, dim) does). NaN propagates.
Tensor max(const Tensor& x, int64_t dim = kAllDims, bool keepdim = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor max(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// I64 index of the first maximum along `dim` (kAllDims: into the flattened tensor).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim);

// ---- batched matmul ----
// op(a) @ op(b) over the last two dims (op = transpose when trans_*); a and b have rank >= 2 and
// their batch dims broadcast as in torch.matmul ([B,M,K] @ [K,N], [A,1,M,K] @ [1,B,K,N]).
// Gradients sum over broadcast batch dims. ops::matmul sends rank > 2 operands here.
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// ---- attention ----
// Fills x[..., i, j] for j > i with `value` (the causal mask; rank >= 2).
Tensor causal_fill(const Tensor& x, double value);  // (masked_fill and where: engine/ops_act.h)
// softmax(q kᵀ * scale + mask) v over q [..., L, D], k [..., S, D], v [..., S, Dv] (batch dims
// broadcast). attn_mask (optional, broadcasts to [..., L, S]): BOOL, true = may attend (as
// PyTorch), or F32 added to the scores. causal: position i attends to j <= i. scale defaults to
// 1/sqrt(D). Matches torch.nn.functional.scaled_dot_product_attention (no dropout); a fully
// masked row gives NaN, as there.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, bool causal = false,
                                    double scale = std::numeric_limits<double>::quiet_NaN());

}  // namespace hg::ops
