#include "engine/error.h"

#include <algorithm>

namespace hg {

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::Invalid: return "invalid argument";
    case ErrorCode::Shape: return "shape error";
    case ErrorCode::DType: return "dtype error";
    case ErrorCode::Device: return "device error";
    case ErrorCode::OutOfMemory: return "out of memory";
    case ErrorCode::NotFound: return "not found";
    case ErrorCode::Io: return "I/O error";
    case ErrorCode::Format: return "format error";
    case ErrorCode::TooLarge: return "too large";
    case ErrorCode::Internal: return "internal error";
  }
  return "error";
}

std::string printable(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t n = std::min(text.size(), max_bytes);
  out.reserve(n + 8);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

}  // namespace hg
