// Reading validated fields of a JSON state (optimizer and scheduler state_dicts): each throws
// hg::InvalidArgument naming `who` and the key when the field is missing or of the wrong type.
//
//   const int64_t epoch = hg::training::int_field(state, "last_epoch", "StepLR state");
//   const auto lrs = hg::training::numbers_field(state, "last_lr", "StepLR state", n_groups);
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hg::training {

double number_field(const nlohmann::json& j, const std::string& key, const std::string& who);
int64_t int_field(const nlohmann::json& j, const std::string& key, const std::string& who);
bool bool_field(const nlohmann::json& j, const std::string& key, const std::string& who);
std::string string_field(const nlohmann::json& j, const std::string& key, const std::string& who);
// An array of numbers; size < 0: any size.
std::vector<double> numbers_field(const nlohmann::json& j, const std::string& key, const std::string& who,
                                  int64_t size = -1);
std::vector<int64_t> ints_field(const nlohmann::json& j, const std::string& key, const std::string& who);
// A double that may be +-inf: written as a number, or the strings "inf" / "-inf".
nlohmann::json extended_number(double v);
double extended_number_field(const nlohmann::json& j, const std::string& key, const std::string& who);

}  // namespace hg::training
