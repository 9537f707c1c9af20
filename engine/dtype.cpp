#include "engine/dtype.h"

#include "engine/error.h"

namespace hg {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  throw InternalError("unknown dtype");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
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
    acc *= s[i];
  }
  return st;
}

std::string meta_str(const TensorMeta& m) { return std::string(dtype_name(m.dtype)) + shape_str(m.shape); }

}  // namespace hg
