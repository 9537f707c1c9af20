#include "models/config_fields.h"

#include "engine/error.h"

namespace hg::models {

void bad_field(const std::filesystem::path& file, const std::string& field, const std::string& why) {
  throw FormatError(file.string() + ": field '" + field + "' " + why);
}

std::map<std::string, int64_t> read_config(const nlohmann::json& graph, const std::string& file,
                                           std::map<std::string, int64_t> values) {
  if (!graph.contains("config")) return values;
  const nlohmann::json& c = graph["config"];
  if (!c.is_object()) bad_field(file, "graph.config", std::string("has type ") + c.type_name() + ", expected object");
  for (const auto& [key, v] : c.items()) {
    const std::string field = "graph.config." + key;
    if (!values.count(key)) {
      std::string known;
      for (const auto& [k, d] : values) known += (known.empty() ? "" : ", ") + k;
      bad_field(file, field, "is not a config key of this model (" + known + ")");
    }
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > kMaxConfigValue)
      bad_field(file, field, "must be a positive integer up to 2^24, got " + v.dump());
    values[key] = v.get<int64_t>();
  }
  return values;
}

int64_t parameter_count(const std::string& file, const std::vector<std::vector<int64_t>>& terms) {
  int64_t sum = 0;
  for (const auto& factors : terms) {
    int64_t p = 1;
    for (int64_t f : factors)
      if (__builtin_mul_overflow(p, f, &p) || p > kMaxConfigParameters) p = kMaxConfigParameters + 1;
    if (__builtin_add_overflow(sum, p, &sum) || sum > kMaxConfigParameters)
      bad_field(file, "graph.config", "describes a model of more than 2^32 parameters");
  }
  return sum;
}

void check_parameter_count(const std::string& file, int64_t count, int64_t weight_elements) {
  if (weight_elements >= 0 && weight_elements != count)
    bad_field(file, "graph.config", "describes a model of " + std::to_string(count) +
                                        " parameter and buffer elements, weights.safetensors holds " +
                                        std::to_string(weight_elements));
}

}  // namespace hg::models
