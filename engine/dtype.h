// Element types and shapes.
//
//   hg::Shape s{2, 3};
//   size_t bytes = hg::numel(s) * hg::dtype_size(hg::DType::F32);   // 24
//   std::string text = hg::shape_str(s);                              // "[2, 3]"
//   hg::bf16 h = hg::bf16::from_float(1.5f);  float f = h.to_float();   // round to nearest even
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hg {

enum class DType : uint8_t { F32, I64, U8, F64, F16, BF16, I32, BOOL };
inline constexpr DType kAllDTypes[] = {DType::F32, DType::I64, DType::U8,  DType::F64,
                                       DType::F16, DType::BF16, DType::I32, DType::BOOL};

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "F32", "BF16", "I64", "BOOL", ... (the safetensors spellings)
DType dtype_from_name(const std::string& name);  // throws DTypeError
bool is_floating(DType t);
// PyTorch's promotion for two operands: floats win over integers, the wider float wins,
// BF16 with F16 gives F32; among integers BOOL < U8 < I32 < I64.
DType promote_types(DType a, DType b);

// 16-bit floats as storage types; arithmetic happens in float.
struct bf16 {
  uint16_t bits;
  static bf16 from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return {static_cast<uint16_t>(u >> 16)};
  }
  float to_float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};
struct f16 {
  uint16_t bits;
  static f16 from_float(float f);
  float to_float() const;
};

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
// The largest tensor (and host allocation) we accept, 1 TiB: bigger shapes are rejected as
// absurd with ShapeError before numel * dtype_size can overflow.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;
std::string shape_str(const Shape& s);
// NumPy broadcasting of two shapes; nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
Shape contiguous_strides(const Shape& s);

// Shape and dtype of a value without its data: what shape inference and graphs work on.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::F32;
  int64_t numel() const { return hg::numel(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool operator==(const TensorMeta&) const = default;
};
std::string meta_str(const TensorMeta& m);  // "F32[2, 3]"

}  // namespace hg
