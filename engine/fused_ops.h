// Ops that graph fusion passes create (graphs/pass_fuse_elementwise.cpp, pass_fuse_attention.cpp
// and pass_squeeze_excite.cpp); they run in eager mode too. fused_elementwise is F32 only;
// fused_elementwise and squeeze_excite have no backward; sdpa's is engine/sdpa_backward.h.
//
// fused_elementwise: a small program over inputs x0..x(n-1) (n <= 16; F32, or BOOL as a
// condition), each broadcast to the output shape (the broadcast of all inputs). Registers
// 0..n-1 hold the inputs, register n+k the result of instruction k; the last instruction's
// register is the output. ints: 4 per instruction {opcode, a, b, c} (register numbers; unused
// ones 0); floats: one constant per instruction (scale factor, exponent, fill value).
//
//   // y = relu(x * 0.5 + bias): registers x=0, bias=1, t=2, u=3, y=4
//   hg::Attrs prog{{hg::ew::Scale, 0, 0, 0,  hg::ew::Add, 2, 1, 0,  hg::ew::Relu, 3, 0, 0}, {0.5, 0, 0}};
//   hg::Tensor y = hg::dispatch("fused_elementwise", {x, bias}, prog);
//
// sdpa: softmax(mask(q kᵀ * scale)) v in one kernel, tiled over query rows so the [.., L, S]
// scores never exist as a tensor. inputs q [..., L, D], k [..., S, D] (or [..., D, S] when
// k_transposed), v [..., S, Dv] with equal batch dims, then by mask kind: none; a BOOL mask
// and an F32 fill tensor of one element (where(mask, scores, fill)); a BOOL mask with floats[2]
// as fill where the mask is true (masked_fill); an F32 mask added to the scores. Masks broadcast
// to [..., L, S]. ints {mask kind, causal, k_transposed}: causal 1 fills [i, j > i] with floats[1]
// before the mask, 2 after it. floats {scale, causal value, masked_fill value}. Output [..., L, Dv].
//
//   hg::Tensor o = hg::dispatch("sdpa", {q, k, v}, hg::Attrs{{hg::sdpa::kNoMask, 2, 0}, {0.125, -INFINITY, 0}});
//
// squeeze_excite: x * sigmoid(w2 act(w1 mean_hw(x) + b1) + b2), the squeeze-and-excitation
// block of MobileNetV3 / EfficientNet, per image in one kernel (engine/squeeze_excite.cpp). x F32
// or BF16, [N, C, H, W], or channel-blocked [N, C/b, H, W, b] with ints[2] = b (engine/ops_layout.h);
// w1 [Cr, C] or [Cr, C, 1, 1], w2 [C, Cr] or [C, Cr, 1, 1], b1 [Cr], b2 [C], all F32. ints {act
// (a FusedAct code, engine/post_ops.h), bias mask (1: b1 is given, 2: b2), block}; inputs x, w1,
// w2, then the biases the mask names. Output: x's meta (F32 sums and layers, x's dtype out).
//
//   hg::Tensor y = hg::dispatch("squeeze_excite", {x, w1, w2, b1, b2},
//                               hg::Attrs{{static_cast<int64_t>(hg::FusedAct::Silu), 3, 0}, {}});
#pragma once
#include <cstdint>

namespace hg {

namespace ew {
enum Opcode : int64_t {
  Add = 0,   // a + b
  Sub,       // a - b
  Mul,       // a * b
  Div,       // a / b
  Scale,     // a * const
  Relu,      // max(a, 0)
  GeluErf,   // a * Phi(a)
  GeluTanh,  // tanh approximation
  Silu,      // a * sigmoid(a)
  Sigmoid,
  Tanh,
  Sqrt,
  Erf,
  Exp,
  Pow,         // a ^ const
  Where,       // a != 0 ? b : c   (a: a condition register)
  MaskedFill,  // b != 0 ? const : a
  kNumOpcodes
};
inline constexpr int kMaxInputs = 16;
inline constexpr int kMaxInstructions = 32;
const char* opcode_name(int64_t op);  // "add", "gelu", ... for dumps and errors
}  // namespace ew

namespace sdpa {
enum MaskKind : int64_t { kNoMask = 0, kWhere = 1, kMaskedFill = 2, kAdd = 3 };
enum Causal : int64_t { kNotCausal = 0, kCausalBeforeMask = 1, kCausalAfterMask = 2 };
}  // namespace sdpa

void register_sdpa_op();  // internal: sdpa_kernel.cpp, called by register_fused_ops (engine/op_families.h)
void register_squeeze_excite_op();  // internal: squeeze_excite.cpp, likewise

}  // namespace hg
