#include "training/state_fields.h"

#include <cmath>
#include <limits>

#include "engine/error.h"

namespace hg::training {

namespace {

const nlohmann::json& field(const nlohmann::json& j, const std::string& key, const std::string& who) {
  if (!j.is_object() || !j.contains(key)) throw InvalidArgument(who + ": field '" + key + "' is missing");
  return j[key];
}

}  // namespace

double number_field(const nlohmann::json& j, const std::string& key, const std::string& who) {
  const auto& v = field(j, key, who);
  if (!v.is_number()) throw InvalidArgument(who + ": field '" + key + "' is not a number");
  return v.get<double>();
}

int64_t int_field(const nlohmann::json& j, const std::string& key, const std::string& who) {
  const auto& v = field(j, key, who);
  if (!v.is_number_integer()) throw InvalidArgument(who + ": field '" + key + "' is not an integer");
  return v.get<int64_t>();
}

bool bool_field(const nlohmann::json& j, const std::string& key, const std::string& who) {
  const auto& v = field(j, key, who);
  if (!v.is_boolean()) throw InvalidArgument(who + ": field '" + key + "' is not a boolean");
  return v.get<bool>();
}

std::string string_field(const nlohmann::json& j, const std::string& key, const std::string& who) {
  const auto& v = field(j, key, who);
  if (!v.is_string()) throw InvalidArgument(who + ": field '" + key + "' is not a string");
  return v.get<std::string>();
}

std::vector<double> numbers_field(const nlohmann::json& j, const std::string& key, const std::string& who,
                                  int64_t size) {
  const auto& v = field(j, key, who);
  if (!v.is_array()) throw InvalidArgument(who + ": field '" + key + "' is not an array");
  if (size >= 0 && static_cast<int64_t>(v.size()) != size)
    throw InvalidArgument(who + ": field '" + key + "' has " + std::to_string(v.size()) + " entries, expected " +
                          std::to_string(size));
  std::vector<double> out;
  for (const auto& e : v) {
    if (!e.is_number()) throw InvalidArgument(who + ": field '" + key + "' holds a non-number");
    out.push_back(e.get<double>());
  }
  return out;
}

std::vector<int64_t> ints_field(const nlohmann::json& j, const std::string& key, const std::string& who) {
  const auto& v = field(j, key, who);
  if (!v.is_array()) throw InvalidArgument(who + ": field '" + key + "' is not an array");
  std::vector<int64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer()) throw InvalidArgument(who + ": field '" + key + "' holds a non-integer");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

nlohmann::json extended_number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double extended_number_field(const nlohmann::json& j, const std::string& key, const std::string& who) {
  const auto& v = field(j, key, who);
  if (v.is_number()) return v.get<double>();
  if (v == "inf") return std::numeric_limits<double>::infinity();
  if (v == "-inf") return -std::numeric_limits<double>::infinity();
  throw InvalidArgument(who + ": field '" + key + "' is not a number, \"inf\" or \"-inf\"");
}

}  // namespace hg::training
