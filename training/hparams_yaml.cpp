#include <cctype>
#include <cmath>

#include "training/loggers.h"
#include "training/py_format.h"

namespace hg::training {
namespace {

bool plain_safe(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') || s.back() == ' ') return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-' || c == ' '))
      return false;
  std::string l;
  for (char c : s) l += char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* k : {"yes", "no", "on", "off", "true", "false", "null"})
    if (l == k) return false;
  return true;
}

// PyYAML's choice: plain when unambiguous, else single quotes ('' escapes a quote), and
// double quotes (JSON escapes, a YAML subset) for control characters.
std::string yaml_string(const std::string& s) {
  if (plain_safe(s)) return s;
  bool printable = true;
  for (unsigned char c : s) printable = printable && c >= 0x20 && c != 0x7f;
  if (!printable) return nlohmann::json(s).dump();
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string yaml_scalar(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return j.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::number_integer: return std::to_string(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return std::to_string(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float: {
      double v = j.get<double>();
      if (std::isnan(v)) return ".nan";
      if (std::isinf(v)) return v < 0 ? "-.inf" : ".inf";
      std::string r = py_repr(v);
      size_t e = r.find('e');
      if (e != std::string::npos && r.find('.') == std::string::npos) r.insert(e, ".0");
      return r;
    }
    case nlohmann::json::value_t::string: return yaml_string(j.get<std::string>());
    case nlohmann::json::value_t::object: return "{}";  // only empty ones reach here
    case nlohmann::json::value_t::array: return "[]";
    default: return yaml_string(j.dump());
  }
}

bool block(const nlohmann::json& j) { return (j.is_object() || j.is_array()) && !j.empty(); }

void emit_seq(const nlohmann::json& j, size_t col, bool first_inline, std::string& out);

// A mapping at column `col`; first_inline: the cursor already is there (after "- ").
void emit_map(const nlohmann::json& j, size_t col, bool first_inline, std::string& out) {
  bool first = true;
  for (const auto& [k, v] : j.items()) {
    if (!(first && first_inline)) out += std::string(col, ' ');
    first = false;
    out += yaml_string(k) + ":";
    if (!block(v)) out += " " + yaml_scalar(v) + "\n";
    else if (v.is_object()) out += "\n", emit_map(v, col + 2, false, out);
    else out += "\n", emit_seq(v, col, false, out);  // PyYAML: sequences in mappings are not indented
  }
}

void emit_seq(const nlohmann::json& j, size_t col, bool first_inline, std::string& out) {
  bool first = true;
  for (const auto& v : j) {
    if (!(first && first_inline)) out += std::string(col, ' ');
    first = false;
    out += "- ";
    if (!block(v)) out += yaml_scalar(v) + "\n";
    else if (v.is_object()) emit_map(v, col + 2, true, out);
    else emit_seq(v, col + 2, true, out);
  }
}

}  // namespace

std::string hparams_to_yaml(const nlohmann::json& hparams) {
  std::string out;
  if (!block(hparams)) return yaml_scalar(hparams) + "\n";
  if (hparams.is_object()) emit_map(hparams, 0, false, out);
  else emit_seq(hparams, 0, false, out);
  return out;
}

}  // namespace hg::training
