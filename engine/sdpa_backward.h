// The backward of the fused `sdpa` op (engine/fused_ops.h), composed from registered ops so it
// runs eagerly, traces in lazy mode and runs in compiled graphs like any other op chain. It
// recomputes the masked scores S (one [..., L, S] tensor, as the unfused attention keeps):
//
//   P = softmax(S),  dV = Pᵀ dO,  dS = softmax_backward(dO Vᵀ, S) with filled entries zeroed,
//   dQ = scale dS K,  dK = scale dSᵀ Q   (K as stored: [..., S, D], or [..., D, S] transposed)
//
// Gradients for q, k, v and an additive (F32) mask: dMask = dS summed to the mask's shape.
// Boolean masks and the fill value get none.
//
//   hg::register_op({"sdpa", -1, infer_sdpa, prepare_sdpa, hg::sdpa_backward});
#pragma once
#include <vector>

#include "engine/op.h"

namespace hg {

std::vector<Tensor> sdpa_backward(const std::vector<Tensor>& in, const Tensor& grad, const Attrs& a);

}  // namespace hg
