// fused_elementwise (engine/fused_ops.h): a chain of element-wise ops run as one pass over the
// output. The output is cut into blocks of kBlock elements; each instruction of the program runs
// over a whole block (16 lanes at a time for the arithmetic, 4 for the activations, act_math.h)
// before the next, so every loop is a tight vector loop and the intermediates stay in a
// per-thread scratch of a few KB. The math is the unfused kernels': act_math.h's SIMD functions
// for the activations (as kernels_act.cpp's loops),
// SSE's correctly rounded sqrt, libm for erf, exp and pow (as math_ops.cpp), plain float
// arithmetic for the rest.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/act_math.h"
#include "engine/fused_ops.h"
#include "engine/kernels.h"
#include "engine/op_families.h"
#include "engine/schema_util.h"
#include "engine/vec16.h"

namespace hg {

namespace ew {

const char* opcode_name(int64_t op) {
  static const char* const names[] = {"add",     "sub",  "mul",  "div", "scale", "relu", "gelu", "gelu_tanh", "silu",
                                      "sigmoid", "tanh", "sqrt", "erf", "exp",   "pow",  "where", "masked_fill"};
  return op >= 0 && op < kNumOpcodes ? names[op] : "?";
}

}  // namespace ew

namespace {

using Metas = std::vector<TensorMeta>;
using namespace schema;
using act::f32x4;
using act::splat4;

// Elements per block; a multiple of 4.
constexpr int64_t kBlock = 512;
// From this many output elements the blocks are shared among OpenMP threads (as the eltwise
// kernels' threshold in kernels_eltwise.cpp: below it a second thread costs more than it saves).
constexpr int64_t kParallelElements = int64_t{1} << 14;

constexpr size_t kMaxRank = 16;

struct Instr {
  int64_t op, a, b, c;
  float k;
};

int arity(int64_t op) {
  if (op <= ew::Div) return 2;
  if (op == ew::Where) return 3;
  if (op == ew::MaskedFill) return 2;
  return 1;
}

// Operand `slot` of `op` is a condition (a BOOL input register) rather than a value.
bool condition_slot(int64_t op, int slot) { return (op == ew::Where && slot == 0) || (op == ew::MaskedFill && slot == 1); }

std::vector<Instr> decode(const Attrs& a) {
  std::vector<Instr> p;
  for (size_t k = 0; k + 3 < a.ints.size(); k += 4)
    p.push_back({a.ints[k], a.ints[k + 1], a.ints[k + 2], a.ints[k + 3], static_cast<float>(a.f(k / 4))});
  return p;
}

TensorMeta infer_fused_elementwise(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int n = static_cast<int>(in.size());
  if (n < 1 || n > ew::kMaxInputs) fail(op, in, "takes 1 to " + std::to_string(ew::kMaxInputs) + " inputs");
  Shape out;
  for (int i = 0; i < n; ++i) {
    if (in[i].shape.size() > kMaxRank) fail(op, in, "inputs have at most " + std::to_string(kMaxRank) + " dims");
    if (in[i].dtype != DType::F32 && in[i].dtype != DType::BOOL)
      throw DTypeError(op_context(op, in) + ": input " + std::to_string(i) + " must be F32 or BOOL");
    out = broadcast_shape(op, in, out, in[i].shape);
  }
  const size_t m = a.ints.size() / 4;
  if (a.ints.size() % 4 || m == 0 || m > static_cast<size_t>(ew::kMaxInstructions) || a.floats.size() != m)
    fail(op, in, "the program must be 1 to " + std::to_string(ew::kMaxInstructions) +
                     " instructions of 4 ints with one float each (got " + std::to_string(a.ints.size()) + " ints, " +
                     std::to_string(a.floats.size()) + " floats)");
  const std::vector<Instr> prog = decode(a);
  for (size_t k = 0; k < m; ++k) {
    const Instr& s = prog[k];
    const std::string at = "instruction " + std::to_string(k) + " (" + ew::opcode_name(s.op) + ")";
    if (s.op < 0 || s.op >= ew::kNumOpcodes) fail(op, in, at + ": bad opcode " + std::to_string(s.op));
    const int64_t regs = n + static_cast<int64_t>(k), operands[3] = {s.a, s.b, s.c};
    for (int j = 0; j < arity(s.op); ++j) {
      const int64_t r = operands[j];
      if (r < 0 || r >= regs) fail(op, in, at + ": operand " + std::to_string(j) + " reads register " + std::to_string(r) +
                                               ", not yet defined");
      const bool is_bool = r < n && in[r].dtype == DType::BOOL;
      if (condition_slot(s.op, j) != is_bool)
        fail(op, in, at + ": operand " + std::to_string(j) + (is_bool ? " must not be" : " must be") + " a BOOL input");
    }
  }
  return {out, DType::F32};
}

// How an input is read at output element `flat`.
struct Source {
  enum Kind : uint8_t { Full, Scalar, Periodic, Repeat, Strided } kind;
  bool is_bool;
  int64_t period = 1;  // Periodic: element flat % period; Repeat: element flat / period
  Shape strides;       // Strided: per output dim (0 along broadcast dims)
};

Source classify(const TensorMeta& m, const Shape& out) {
  Source s{Source::Strided, m.dtype == DType::BOOL, 1, {}};
  const int64_t n = m.numel(), total = numel(out);
  if (n == total) return s.kind = Source::Full, s;
  if (n == 1) return s.kind = Source::Scalar, s;
  // Right-aligned against the output: a suffix of the output's dims (leading ones broadcast)
  // is Periodic, a prefix (trailing ones broadcast) is Repeat.
  const size_t off = out.size() - m.shape.size();
  Shape padded(off, 1);
  padded.insert(padded.end(), m.shape.begin(), m.shape.end());
  size_t first = 0, last = out.size();
  while (first < out.size() && padded[first] == 1) ++first;
  while (last > 0 && padded[last - 1] == 1) --last;
  bool dense = true;  // the non-broadcast dims between first and last match the output's
  for (size_t d = first; d < last; ++d) dense &= padded[d] == out[d];
  if (dense && last == out.size()) return s.kind = Source::Periodic, s.period = n, s;
  if (dense && first == 0) return s.kind = Source::Repeat, s.period = total / n, s;
  s.strides = kernels::broadcast_strides(m.shape, out);
  return s;
}

struct Program {
  std::vector<Instr> code;
  std::vector<Source> src;
  Shape out;
  int64_t n;
};

template <class T>
float as_float(T v) {
  if constexpr (std::is_same_v<T, uint8_t>) return v ? 1.0f : 0.0f;
  else return v;
}

template <class T>
void gather(const Source& s, const T* x, const Shape& out, int64_t base, int64_t m, float* buf) {
  switch (s.kind) {
    case Source::Full:
      for (int64_t i = 0; i < m; ++i) buf[i] = as_float(x[base + i]);
      return;
    case Source::Scalar:
      std::fill(buf, buf + m, as_float(x[0]));
      return;
    case Source::Periodic:  // contiguous runs of the input, restarting every `period` elements
      for (int64_t i = 0, j = base % s.period; i < m; j = 0) {
        const int64_t len = std::min(s.period - j, m - i);
        for (int64_t r = 0; r < len; ++r) buf[i + r] = as_float(x[j + r]);
        i += len;
      }
      return;
    case Source::Repeat:  // each input element repeated `period` times
      for (int64_t i = 0, j = base / s.period, r = base % s.period; i < m; ++j, r = 0) {
        const int64_t len = std::min(s.period - r, m - i);
        std::fill(buf + i, buf + i + len, as_float(x[j]));
        i += len;
      }
      return;
    case Source::Strided: {
      const size_t nd = out.size();
      int64_t idx[kMaxRank] = {}, off = 0, rest = base;
      for (size_t d = nd; d-- > 0;) {
        idx[d] = rest % out[d], rest /= out[d];
        off += idx[d] * s.strides[d];
      }
      for (int64_t i = 0; i < m; ++i) {
        buf[i] = as_float(x[off]);
        for (size_t d = nd; d-- > 0;) {  // odometer step
          off += s.strides[d];
          if (++idx[d] < out[d]) break;
          off -= idx[d] * s.strides[d];
          idx[d] = 0;
        }
      }
      return;
    }
  }
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluC = 0.044715;

// The arithmetic opcodes (add, sub, mul, div, scale, relu) in 16-lane vectors (GCC vector
// extensions; AVX-512 when the CPU has it, picked at load by target_clones, else four SSE
// operations per vector; engine/vec16.h), the tail element by element with the same operations;
// y may be a or b (element i is read before it is written).

__attribute__((target_clones("avx512f", "default"))) void exec_arith(int64_t op, const float* a, const float* b,
                                                                     float k, float* y, int64_t m) {
  int64_t i = 0;
#define HG_LOOP(load_v, load_s, expr)                                                       \
  for (; i + kLanes16 <= m; i += kLanes16) {                                                \
    const f32x16 u = *reinterpret_cast<const f32x16*>(a + i);                              \
    load_v;                                                                                 \
    *reinterpret_cast<f32x16*>(y + i) = (expr);                                            \
  }                                                                                         \
  for (; i < m; ++i) {                                                                      \
    const float u = a[i];                                                                   \
    load_s;                                                                                 \
    y[i] = (expr);                                                                          \
  }
#define HG_BINARY(expr) HG_LOOP(const f32x16 v = *reinterpret_cast<const f32x16*>(b + i), const float v = b[i], expr)
  const f32x16 kv = f32x16{} + k;
  switch (op) {
    case ew::Add: HG_BINARY(u + v) break;
    case ew::Sub: HG_BINARY(u - v) break;
    case ew::Mul: HG_BINARY(u * v) break;
    case ew::Div: HG_BINARY(u / v) break;
    case ew::Scale: {
      for (; i + kLanes16 <= m; i += kLanes16)
        *reinterpret_cast<f32x16*>(y + i) = *reinterpret_cast<const f32x16*>(a + i) * kv;
      for (; i < m; ++i) y[i] = a[i] * k;
      break;
    }
    case ew::Relu: {  // u < 0 ? 0 : u: NaN stays NaN
      const f32x16 zero{};
      for (; i + kLanes16 <= m; i += kLanes16) {
        const f32x16 u = *reinterpret_cast<const f32x16*>(a + i);
        *reinterpret_cast<f32x16*>(y + i) = u < zero ? zero : u;
      }
      for (; i < m; ++i) y[i] = a[i] < 0.0f ? 0.0f : a[i];
      break;
    }
    default: break;
  }
#undef HG_BINARY
#undef HG_LOOP
}

void exec(const Instr& s, const float* const* reg, float* y, int64_t m) {
  const float *a = reg[s.a], *b = reg[s.b], *c = reg[s.c];
  switch (s.op) {
    case ew::Add:
    case ew::Sub:
    case ew::Mul:
    case ew::Div: return exec_arith(s.op, a, b, 0.0f, y, m);
    case ew::Scale:
    case ew::Relu: return exec_arith(s.op, a, nullptr, s.k, y, m);
    case ew::GeluErf: return act::map4(a, y, m, [](f32x4 u) { return u * act::normal_cdf4(u); });
    case ew::GeluTanh:
      return act::map4(a, y, m, [](f32x4 u) {
        return u * act::sigmoid4(splat4(float(2 * kSqrt2OverPi)) * (u + splat4(float(kGeluC)) * u * u * u));
      });
    case ew::Silu: return act::map4(a, y, m, [](f32x4 u) { return u * act::sigmoid4(u); });
    case ew::Sigmoid: return act::map4(a, y, m, [](f32x4 u) { return act::sigmoid4(u); });
    case ew::Tanh: return act::map4(a, y, m, [](f32x4 u) { return act::tanh4(u); });
    case ew::Sqrt: return act::map4(a, y, m, [](f32x4 u) { return std::bit_cast<f32x4>(_mm_sqrt_ps(u)); });
    case ew::Erf:  // libm: a SIMD erf computing both of its branches costs more on GELU's inputs
      for (int64_t i = 0; i < m; ++i) y[i] = std::erf(a[i]);
      return;
    case ew::Exp:
      for (int64_t i = 0; i < m; ++i) y[i] = std::exp(a[i]);
      return;
    case ew::Pow:
      for (int64_t i = 0; i < m; ++i) y[i] = std::pow(a[i], s.k);
      return;
    case ew::Where:
      for (int64_t i = 0; i < m; ++i) y[i] = a[i] != 0.0f ? b[i] : c[i];
      return;
    case ew::MaskedFill:
      for (int64_t i = 0; i < m; ++i) y[i] = b[i] != 0.0f ? s.k : a[i];
      return;
  }
}

// Output elements [base, base + m). Input registers read F32 inputs of the output's shape in
// place; the last instruction writes the output directly (in place of input 0 is fine: every
// instruction reads element i before it writes element i).
void run_block(const Program& p, const void* const* in, float* out, int64_t base, int64_t m, float* scratch) {
  const size_t n_in = p.src.size();
  const float* reg[ew::kMaxInputs + ew::kMaxInstructions];
  for (size_t r = 0; r < n_in; ++r) {
    const Source& s = p.src[r];
    float* buf = scratch + r * kBlock;
    if (s.kind == Source::Full && !s.is_bool) reg[r] = static_cast<const float*>(in[r]) + base;
    else if (s.is_bool) gather(s, static_cast<const uint8_t*>(in[r]), p.out, base, m, buf), reg[r] = buf;
    else gather(s, static_cast<const float*>(in[r]), p.out, base, m, buf), reg[r] = buf;
  }
  for (size_t k = 0; k < p.code.size(); ++k) {
    float* y = k + 1 == p.code.size() ? out + base : scratch + (n_in + k) * kBlock;
    exec(p.code[k], reg, y, m);
    reg[n_in + k] = y;
  }
}

Kernel prepare_fused_elementwise(const Metas& in, const TensorMeta& out, const Attrs& a) {
  auto p = std::make_shared<Program>();
  p->code = decode(a);
  for (const TensorMeta& m : in) p->src.push_back(classify(m, out.shape));
  p->out = out.shape;
  p->n = out.numel();
  return [p](const void* const* in, void* o) {
    const int64_t n = p->n, blocks = (n + kBlock - 1) / kBlock;
    const size_t scratch_floats = (p->src.size() + p->code.size()) * kBlock;
    float* out = static_cast<float*>(o);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t b = 0; b < blocks; ++b) {
      thread_local std::vector<float> scratch;  // grows once per thread, then reused
      if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
      run_block(*p, in, out, b * kBlock, std::min(kBlock, n - b * kBlock), scratch.data());
    }
  };
}

}  // namespace

void register_fused_ops() {
  OpSchema s{"fused_elementwise", -1, infer_fused_elementwise, prepare_fused_elementwise};
  s.inplace = true;
  register_op(s);
  register_sdpa_op();
  register_squeeze_excite_op();
}

}  // namespace hg
