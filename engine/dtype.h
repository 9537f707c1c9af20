// Element types and shapes.
//
//   hg::Shape s{2, 3};
//   size_t bytes = hg::numel(s) * hg::dtype_size(hg::DType::F32);   // 24
//   std::string text = hg::shape_str(s);                              // "[2, 3]"
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hg {

enum class DType : uint8_t { F32, I64, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "F32", "I64", "U8" (the KServe/safetensors spellings)

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);
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
