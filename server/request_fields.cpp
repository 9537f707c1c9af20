#include "server/request_fields.h"

#include <cmath>
#include <limits>

#include "engine/json_reader.h"

namespace hg::server {

void RequestFields::fail(const std::string& field, const std::string& what) const {
  throw FieldError(request_, field, what);
}

std::string RequestFields::shown(const nlohmann::json& v) { return json_excerpt(v, 40); }

int64_t RequestFields::integer(const nlohmann::json& v, const std::string& field, int64_t min) const {
  if (!v.is_number_integer()) fail(field, "must be an integer, got " + shown(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(field, "is " + shown(v) + ", too large");
  const auto x = v.get<int64_t>();
  if (x < min) fail(field, "must be >= " + std::to_string(min) + ", got " + std::to_string(x));
  return x;
}

double RequestFields::number(const nlohmann::json& v, const std::string& field) const {
  if (!v.is_number()) fail(field, "must be a number, got " + shown(v));
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(field, "must be finite, got " + shown(v));
  return x;
}

std::string RequestFields::string(const nlohmann::json& v, const std::string& field) const {
  if (!v.is_string()) fail(field, "must be a string, got " + shown(v));
  return v.get<std::string>();
}

bool RequestFields::boolean(const nlohmann::json& v, const std::string& field) const {
  if (!v.is_boolean()) fail(field, "must be a boolean, got " + shown(v));
  return v.get<bool>();
}

std::vector<std::string> RequestFields::strings(const nlohmann::json& v, const std::string& field, size_t max_count,
                                                size_t max_bytes) const {
  const nlohmann::json list = v.is_string() ? nlohmann::json::array({v}) : v;
  if (!list.is_array()) fail(field, "must be a string or an array of strings, got " + shown(v));
  if (list.size() > max_count)
    fail(field, "has " + std::to_string(list.size()) + " strings, at most " + std::to_string(max_count));
  std::vector<std::string> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = field + (v.is_string() ? "" : "[" + std::to_string(i) + "]");
    out.push_back(string(list[i], item));
    if (out.back().empty()) fail(item, "is empty");
    if (out.back().size() > max_bytes)
      fail(item, "is " + std::to_string(out.back().size()) + " bytes, at most " + std::to_string(max_bytes));
  }
  return out;
}

}  // namespace hg::server
