// Activations, dropout, embedding/gather, where/masked_fill and the losses, matching PyTorch
// (forward and backward). Included by engine/ops.h.
//
//   using namespace hg::ops;
//   auto h = gelu(linear(x, w1, b1), "tanh");                  // or gelu(x): the erf form
//   h = dropout(h, 0.1, /*training=*/true);                    // hg::manual_seed(dev, s) first
//   auto e = embedding(tokens, table);                         // tokens I64 [B, T] -> [B, T, dim]
//   auto s = masked_fill(scores, causal_mask, -1e9);           // mask BOOL, broadcast to scores
//   auto loss = cross_entropy(logits, labels, /*ignore_index=*/-100, /*label_smoothing=*/0.1);
//   auto l2 = mse_loss(pred, target, Reduction::Sum);
//
// Index checks: embedding and gather check every index on the host when the indices tensor
// holds data (not a lazy value) and throw InvalidArgument naming the op, the position and
// the value; reading the indices waits for their device. Lazy indices cannot be read while
// tracing: there an out-of-range index gives zeros (and no gradient) instead.
#pragma once
#include <string_view>

#include "engine/tensor.h"

namespace hg::ops {

enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };

// Element-wise on F32, F64, BF16, F16 (16-bit computed in F32). approximate: "none" (x * Phi(x), the erf form) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// min(max(x, lo), hi) (torch.clamp); lo or hi may be -inf / inf. Throws unless lo <= hi.
// Differentiable: the gradient passes where lo <= x <= hi.
Tensor clamp(const Tensor& x, double lo, double hi);

// Zeroes each element with probability p and scales the rest by 1/(1-p). The mask comes from
// a 64-bit seed drawn from x's device generator at call time and passed as an input tensor,
// so a cached lazy graph draws a new mask every step; backward applies the same mask.
// training=false or p=0 returns x; p=1 gives zeros. Throws InvalidArgument unless 0 <= p <= 1.
Tensor dropout(const Tensor& x, double p, bool training = true);

// indices I64/I32 of any shape, weight [num, dim] (any float dtype) -> [*indices.shape, dim].
// Differentiable in weight (repeated indices accumulate).
Tensor embedding(const Tensor& indices, const Tensor& weight);
// torch.gather: out[i][j] = x[index[i][j]][j] for dim 0; index (I64/I32) has x's rank and
// index.size(d) <= x.size(d) for d != dim. Differentiable in x.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// cond BOOL; a, b of one dtype; all three broadcast (NumPy rules). Differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x where !mask, value where mask; mask BOOL broadcast with x. Differentiable in x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// logits [N, C] (F32/F64), target I64 [N]. Targets equal to ignore_index add nothing and are
// left out of the mean. label_smoothing eps in [0, 1]: loss = (1-eps) nll + eps * mean over
// classes of -log p. Mean/Sum give a scalar, None gives [N]. A target outside [0, C) gives
// NaN. Differentiable in logits.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::Mean);
// (a - b)^2 reduced; a and b of one shape and dtype (F32/F64). Differentiable in both.
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::Mean);

}  // namespace hg::ops
