// hg::Error — the one exception family of hgraph.
//
//   try { hg::ops::matmul(a, b); }
//   catch (const hg::ShapeError& e) { std::cerr << e.what(); }   // names op, shapes, dtypes
//   catch (const hg::Error& e) { if (e.code() == hg::ErrorCode::OutOfMemory) ... }
//   throw hg::InvalidArgument("unknown model '" + hg::printable(name, 64) + "'");  // untrusted text
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace hg {

enum class ErrorCode { Invalid, Shape, DType, Device, OutOfMemory, NotFound, Io, Format, TooLarge, Internal };

const char* error_code_name(ErrorCode c);

// Untrusted text made safe to quote in a message or a log line: control characters, DEL and
// backslashes become \xNN escapes (no line breaks, no terminal escapes), and text beyond
// max_bytes is cut and marked "...".
std::string printable(std::string_view text, size_t max_bytes = 200);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode c, const std::string& msg) : std::runtime_error(msg), code_(c) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

#define HG_DEFINE_ERROR(Name, Code) \
  class Name : public Error {       \
   public:                          \
    explicit Name(const std::string& m) : Error(ErrorCode::Code, m) {} \
  };
HG_DEFINE_ERROR(InvalidArgument, Invalid)
HG_DEFINE_ERROR(ShapeError, Shape)
HG_DEFINE_ERROR(DTypeError, DType)
HG_DEFINE_ERROR(DeviceError, Device)
HG_DEFINE_ERROR(OutOfMemoryError, OutOfMemory)
HG_DEFINE_ERROR(NotFoundError, NotFound)
HG_DEFINE_ERROR(IoError, Io)
HG_DEFINE_ERROR(FormatError, Format)
HG_DEFINE_ERROR(TooLargeError, TooLarge)  // input beyond a size limit (HTTP 413)
HG_DEFINE_ERROR(InternalError, Internal)
#undef HG_DEFINE_ERROR

}  // namespace hg
