// An hg::Error that carries the HTTP status it answers as, and the mapping of every error to
// a status (Triton's: INVALID_ARG 400, NOT_FOUND 404, UNAVAILABLE 503, ...).
//
//   throw hg::server::HttpError(503, "model 'bert' is LOADING");
//   catch (const std::exception& e) { reply(json_error(http_status(e), e.what())); }
#pragma once
#include <exception>
#include <string>

#include "engine/error.h"

namespace hg::server {

class HttpError : public Error {
 public:
  HttpError(int status, const std::string& msg)
      : Error(status >= 500 ? ErrorCode::Internal : ErrorCode::Invalid, msg), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// HttpError: its status; Invalid/Shape/DType/Format: 400; NotFound: 404; TooLarge: 413; OutOfMemory: 503;
// anything else: 500.
inline int http_status(const std::exception& e) {
  if (auto* h = dynamic_cast<const HttpError*>(&e)) return h->status();
  if (auto* g = dynamic_cast<const Error*>(&e)) {
    switch (g->code()) {
      case ErrorCode::Invalid:
      case ErrorCode::Shape:
      case ErrorCode::DType:
      case ErrorCode::Format: return 400;
      case ErrorCode::NotFound: return 404;
      case ErrorCode::TooLarge: return 413;
      case ErrorCode::OutOfMemory: return 503;
      default: return 500;
    }
  }
  return 500;
}

}  // namespace hg::server
