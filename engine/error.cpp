#include "engine/error.h"

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
    case ErrorCode::Internal: return "internal error";
  }
  return "error";
}

}  // namespace hg
