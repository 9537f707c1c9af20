// Shared readers of model.json fields: the one FormatError spelling for a bad field, the
// bounded integer reader of graph.config, and overflow-checked parameter counts.
//
//   using namespace hg::models;
//   if (!ok) bad_field("pkg/model.json", "graph.model", "is missing");   // throws FormatError
//   auto c = read_config(spec.graph, file, {{"classes", 10}});         // graph.config, defaults for absent keys
//   int64_t n = parameter_count(file, {{c["vocab"], c["d_model"]}, {c["layers"], 4, c["d_model"], c["d_model"]}});
//   check_parameter_count(file, n, weight_elements);                   // before building the module
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace hg::models {

// Config values are positive integers up to this; a model's parameters (with buffers) up to
// kMaxConfigParameters elements (16 GiB of F32).
inline constexpr int64_t kMaxConfigValue = int64_t{1} << 24;
inline constexpr int64_t kMaxConfigParameters = int64_t{1} << 32;

// Throws FormatError "<file>: field '<field>' <why>".
[[noreturn]] void bad_field(const std::filesystem::path& file, const std::string& field, const std::string& why);

// graph.config as integers: `values` gives the keys and the values of absent ones. Unknown
// keys, non-integers and values outside [1, kMaxConfigValue] raise FormatError naming the field.
std::map<std::string, int64_t> read_config(const nlohmann::json& graph, const std::string& file,
                                           std::map<std::string, int64_t> values);

// The sum of the products of `terms`, overflow-checked: FormatError naming graph.config when it
// exceeds kMaxConfigParameters.
int64_t parameter_count(const std::string& file, const std::vector<std::vector<int64_t>>& terms);

// weight_elements >= 0 (the total elements of the package's safetensors entries) must equal
// `count`, else FormatError naming weights.safetensors and graph.config; < 0: unknown, not checked.
void check_parameter_count(const std::string& file, int64_t count, int64_t weight_elements);

}  // namespace hg::models
