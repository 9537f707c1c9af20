#include "engine/dtype.h"

#include <algorithm>

#include "engine/error.h"

namespace hg {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::U8:
    case DType::BOOL: return 1;
  }
  throw InternalError("unknown dtype");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : kAllDTypes)
    if (name == dtype_name(t)) return t;
  throw DTypeError("unknown dtype '" + name + "'");
}

bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  auto rank = [](DType t) {
    switch (t) {
      case DType::BOOL: return 0;
      case DType::U8: return 1;
      case DType::I32: return 2;
      case DType::I64: return 3;
      case DType::BF16:
      case DType::F16: return 4;
      case DType::F32: return 5;
      case DType::F64: return 6;
    }
    return 0;
  };
  if (rank(a) == 4 && rank(b) == 4) return DType::F32;  // BF16 with F16
  return rank(a) >= rank(b) ? a : b;
}

// IEEE half precision, round to nearest even; subnormals, infinities and NaN kept.
f16 f16::from_float(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u)};           // NaN
  if (abs >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};          // overflow -> inf
  if (abs < 0x38800000u) {                                                          // subnormal or zero
    if (abs < 0x33000000u) return {static_cast<uint16_t>(sign)};
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 113 - static_cast<int>(abs >> 23) + 13;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return {static_cast<uint16_t>(sign | h)};
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return {static_cast<uint16_t>(sign | h)};
}

float f16::to_float() const {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu, mant = bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    // A shape with a zero dimension holds no bytes, so the size caps never see it; its other
    // dimensions may still multiply past int64 (a shape read from a file: [0, 2^40, 2^40]).
    if (__builtin_mul_overflow(acc, s[i], &acc))
      throw ShapeError("shape " + shape_str(s) + ": its strides overflow int64");
  }
  return st;
}

std::string meta_str(const TensorMeta& m) { return std::string(dtype_name(m.dtype)) + shape_str(m.shape); }

}  // namespace hg
