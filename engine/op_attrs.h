// Typed attributes of the ops that graph passes read or build (internal to the engine and the
// graph passes): the one place that knows where each field sits in an op's Attrs. The ops'
// callers pack with these; passes read with them.
//
//   hg::Attrs a = hg::attrs::Binary{hg::kernels::BinaryOp::Add}.pack();
//   if (hg::attrs::Binary::of(node.attrs).op == hg::kernels::BinaryOp::Mul) ...
//   auto c = hg::attrs::Conv::of(node.attrs);             // defaults for fields not stored
//   c.act = hg::FusedAct::Relu;
//   node.attrs = c.pack();
//
// pack() writes the fields a caller of the op has always written (a fused activation only when
// there is one), so graph signatures and disk-cache keys do not change. Ops not listed keep plain
// Attrs: reshape and permute store their shape / dims as the ints.
#pragma once
#include <cstdint>

#include "engine/fused_ops.h"
#include "engine/kernels.h"
#include "engine/op.h"
#include "engine/post_ops.h"

namespace hg::attrs {

struct Binary {  // binary(a, b)
  kernels::BinaryOp op = kernels::BinaryOp::Add;
  static Binary of(const Attrs& a) { return {static_cast<kernels::BinaryOp>(a.i(0))}; }
  Attrs pack() const { return {{static_cast<int64_t>(op)}, {}}; }
};

struct Scale {  // scale(x) = x * factor
  double factor = 1;
  static Scale of(const Attrs& a) { return {a.f(0, 1)}; }
  Attrs pack() const { return {{}, {factor}}; }
};

enum class MathFn : int64_t { Sqrt = 0, Erf = 1, Exp = 2, Pow = 3 };
struct UnaryMath {  // unary_math(x): sqrt, erf, exp, or x ^ exponent
  MathFn fn = MathFn::Sqrt;
  double exponent = 0;
  static UnaryMath of(const Attrs& a) { return {static_cast<MathFn>(a.i(0)), a.f(0)}; }
  Attrs pack() const { return {{static_cast<int64_t>(fn)}, {exponent}}; }
};

struct Gelu {  // gelu(x), erf or tanh approximation
  bool tanh = false;
  static Gelu of(const Attrs& a) { return {a.i(0) != 0}; }
  Attrs pack() const { return {{tanh ? 1 : 0}, {}}; }
};

struct MaskedFill {  // masked_fill(x, mask): value where mask
  double value = 0;
  static MaskedFill of(const Attrs& a) { return {a.f(0)}; }
  Attrs pack() const { return {{}, {value}}; }
};

struct Softmax {  // softmax(x) over dim (normalized, >= 0); log: log_softmax
  int64_t dim = 0;
  bool log = false;
  static Softmax of(const Attrs& a) { return {a.i(0), a.i(1) != 0}; }
  Attrs pack() const { return {{dim, log ? 1 : 0}, {}}; }
};

struct Bmm {  // bmm(a, b) with either operand transposed
  bool trans_a = false, trans_b = false;
  static Bmm of(const Attrs& a) { return {a.i(0) != 0, a.i(1) != 0}; }
  Attrs pack() const { return {{trans_a, trans_b}, {}}; }
};

struct Matmul {  // matmul(a, b[, bias]) with a fused activation (engine/post_ops.h)
  bool trans_a = false, trans_b = false;
  FusedAct act = FusedAct::None;
  static Matmul of(const Attrs& a) { return {a.i(0) != 0, a.i(1) != 0, static_cast<FusedAct>(a.i(2))}; }
  Attrs pack() const {  // no activation: the ints an eager matmul has always had
    if (act == FusedAct::None) return {{trans_a, trans_b}, {}};
    return {{trans_a, trans_b, static_cast<int64_t>(act)}, {}};
  }
};

struct Linear {  // linear(x, w, b) with a fused activation
  FusedAct act = FusedAct::None;
  static Linear of(const Attrs& a) { return {static_cast<FusedAct>(a.i(0))}; }
  Attrs pack() const { return {{static_cast<int64_t>(act)}, {}}; }
};

struct Conv {  // conv2d(x, w, b[, residual]) and conv2d_nobias(x, w[, residual])
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1, groups = 1;
  FusedAct act = FusedAct::None;
  // Channel-blocked layouts (engine/ops_layout.h), set by the layout pass: 0 = NCHW, b = x (src)
  // or the output and residual (dst) are [N, ceil(C / b), H, W, b].
  int64_t src_block = 0, dst_block = 0;
  // INT8 arithmetic (the precision pass; engine/conv_int8.cpp): weights s8 per output channel,
  // activations u8, F32 in and out. kInt8Dynamic: the input's range is measured with every call;
  // kInt8Static: it is [lo, hi] (floats 0 and 1), from a calibration. calib_id: where a dynamic
  // conv reports its ranges to a running calibration (engine/int8_quant.h Int8Calibration), -1: not.
  static constexpr int64_t kInt8Dynamic = 1, kInt8Static = 2;
  int64_t int8 = 0;
  int64_t calib_id = -1;
  double lo = 0, hi = 0;
  static Conv of(const Attrs& a) {
    return {a.i(0, 1), a.i(1, 1), a.i(2), a.i(3), a.i(4, 1), a.i(5, 1), a.i(6, 1), static_cast<FusedAct>(a.i(7)),
            a.i(8),    a.i(9),    a.i(10), a.i(11, -1), a.f(0), a.f(1)};
  }
  Attrs pack() const {  // no activation, layout or INT8: the seven ints an eager conv has always had
    Attrs a{{stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups}, {}};
    if (act != FusedAct::None || src_block || dst_block || int8) a.ints.push_back(static_cast<int64_t>(act));
    if (src_block || dst_block || int8) a.ints.insert(a.ints.end(), {src_block, dst_block});
    if (int8) a.ints.insert(a.ints.end(), {int8, calib_id});
    if (int8 == kInt8Static) a.floats = {lo, hi};
    return a;
  }
};

struct BatchNorm {  // batch_norm_eval / batch_norm_train
  double eps = 1e-5;
  static BatchNorm of(const Attrs& a) { return {a.f(0, 1e-5)}; }
  Attrs pack() const { return {{}, {eps}}; }
};

struct CausalFill {  // causal_fill(x): value at [i, j] for j > i
  double value = 0;
  static CausalFill of(const Attrs& a) { return {a.f(0)}; }
  Attrs pack() const { return {{}, {value}}; }
};

struct Sdpa {  // sdpa(q, k, v[, mask[, fill]]): softmax(mask(q kᵀ * scale)) v (engine/fused_ops.h)
  int64_t mask = sdpa::kNoMask;      // sdpa::MaskKind
  int64_t causal = sdpa::kNotCausal;  // sdpa::Causal
  bool k_transposed = false;          // k given as [.., D, S]
  double scale = 1, causal_value = 0, fill_value = 0;
  static Sdpa of(const Attrs& a) { return {a.i(0), a.i(1), a.i(2) != 0, a.f(0, 1), a.f(1), a.f(2)}; }
  Attrs pack() const { return {{mask, causal, k_transposed}, {scale, causal_value, fill_value}}; }
};

}  // namespace hg::attrs
