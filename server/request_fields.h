// Typed reads of a JSON request's fields whose errors name the field, for the generate and
// OpenAI request parsers: FieldError is an hg::InvalidArgument (400) that also carries the
// field's name (an OpenAI error's "param").
//
//   const RequestFields fields("completions request");
//   int64_t n = fields.integer(j["n"], "n", 1);   // FieldError "completions request: field 'n' must be >= 1, got 0"
//   fields.fail("echo", "true is not supported");
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"

namespace hg::server {

class FieldError : public InvalidArgument {
 public:
  FieldError(const std::string& request, std::string field, const std::string& what)
      : InvalidArgument(request + ": field '" + field + "' " + what), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

class RequestFields {
 public:
  explicit RequestFields(std::string request) : request_(std::move(request)) {}
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;
  int64_t integer(const nlohmann::json& v, const std::string& field, int64_t min) const;
  double number(const nlohmann::json& v, const std::string& field) const;  // finite
  std::string string(const nlohmann::json& v, const std::string& field) const;
  bool boolean(const nlohmann::json& v, const std::string& field) const;
  // A string or an array of strings (stop strings): at most max_count, none empty or longer
  // than max_bytes.
  std::vector<std::string> strings(const nlohmann::json& v, const std::string& field, size_t max_count,
                                   size_t max_bytes) const;
  // A value quoted in an error message (bounded).
  static std::string shown(const nlohmann::json& v);

 private:
  std::string request_;
};

}  // namespace hg::server
