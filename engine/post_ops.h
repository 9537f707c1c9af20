// Post-ops that linear, matmul and conv2d run inside their oneDNN primitive (the graph pass
// graphs/pass_fuse_postops.cpp sets them; eager callers may too). The activation code is an
// attribute, bias and residual are extra inputs:
//
//   linear (x, w, b)                         ints {act}
//   matmul (a, b[, bias])                    ints {ta, tb, act}            bias [N] or [1, N]
//   conv2d (x, w, b[, residual])             ints {sh, sw, ph, pw, dh, dw, groups, act}
//   conv2d_nobias (x, w[, residual])         same ints; residual has the output's shape
//
// The result is act(op(x, w) + bias + residual). A fused node has no backward.
//
//   hg::Attrs a{{0, 1, static_cast<int64_t>(hg::FusedAct::GeluErf)}, {}};
//   hg::Tensor y = hg::dispatch("matmul", {x, w}, a);        // gelu(x w^T) in one primitive
#pragma once
#include <cstdint>

#include "engine/op.h"

namespace hg {

enum class FusedAct : int64_t { None = 0, Relu = 1, GeluErf = 2, GeluTanh = 3, Silu = 4, Sigmoid = 5, Tanh = 6, Relu6 = 7 };

bool valid_fused_act(int64_t code);
const char* fused_act_name(FusedAct act);  // "relu", "gelu", "gelu_tanh", ...
// act(x) in double, the definition every post-op implementation is compared with.
double apply_fused_act(FusedAct act, double x);

}  // namespace hg
