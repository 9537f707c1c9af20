// Strict reading of JSON configuration objects: every key is read at most once with its type
// checked, absent keys take their defaults, and keys nobody read are errors naming their path.
//
//   hg::training::ConfigReader r(config["optimizer"], "optimizer");
//   double lr = r.get("lr", 0.01);                  // "optimizer.lr: expected a number, got \"x\""
//   auto betas = r.get("betas", std::vector<double>{0.9, 0.999});
//   if (auto s = r.child("scheduler")) { ... s->get("name", std::string()) ... s->finish(); }
//   r.finish();                                     // "optimizer.lrr: unknown key"
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/error.h"

namespace hg::training {

class ConfigReader {
 public:
  // `j` must be an object or null (read as {}); `path` prefixes every error ("" at the top).
  ConfigReader(const nlohmann::json& j, std::string path) : path_(std::move(path)) {
    if (j.is_null()) j_ = nlohmann::json::object();
    else if (j.is_object()) j_ = j;
    else throw InvalidArgument(where() + "expected an object, got " + j.dump());
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  bool contains(const std::string& key) const { return j_.contains(key); }  // null included
  const std::string& path() const { return path_; }
  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  // The raw value (marked as read), or null when absent.
  const nlohmann::json& raw(const std::string& key) {
    read_.insert(key);
    static const nlohmann::json null;
    return j_.contains(key) ? j_.at(key) : null;
  }
  template <class T>
  T get(const std::string& key, T fallback) {
    const auto& v = raw(key);
    return v.is_null() ? fallback : convert<T>(v, key);
  }
  template <class T>
  std::optional<T> optional(const std::string& key) {
    const auto& v = raw(key);
    if (v.is_null()) return std::nullopt;
    return convert<T>(v, key);
  }
  template <class T>
  T required(const std::string& key) {
    const auto& v = raw(key);
    if (v.is_null()) fail(key, "is required");
    return convert<T>(v, key);
  }
  // A nested object (null when absent).
  std::optional<ConfigReader> child(const std::string& key) {
    const auto& v = raw(key);
    if (v.is_null()) return std::nullopt;
    return ConfigReader(v, path_of(key));
  }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw InvalidArgument(path_of(key) + ": " + why);
  }
  // Throws for the first key that was never read.
  void finish() const {
    for (const auto& [k, v] : j_.items())
      if (!read_.count(k)) throw InvalidArgument(path_of(k) + ": unknown key");
  }

 private:
  std::string where() const { return path_.empty() ? "" : path_ + ": "; }
  template <class T>
  T convert(const nlohmann::json& v, const std::string& key) const {
    if constexpr (std::is_same_v<T, nlohmann::json>) {
      return v;
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) fail(key, "expected true or false, got " + v.dump());
      return v.get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
      return v.get<std::string>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
      if (std::is_unsigned_v<T> && v.get<int64_t>() < 0) fail(key, "expected a non-negative integer, got " + v.dump());
      return v.get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
      return v.get<T>();
    } else {  // std::vector<E>
      if (!v.is_array()) fail(key, "expected a list, got " + v.dump());
      T out;
      for (size_t i = 0; i < v.size(); ++i)
        out.push_back(convert<typename T::value_type>(v[i], key + "[" + std::to_string(i) + "]"));
      return out;
    }
  }

  nlohmann::json j_;
  std::string path_;
  std::set<std::string> read_;
};

}  // namespace hg::training
