#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "training/loggers.h"
#include "training/py_format.h"

namespace hg::training {
namespace {

constexpr const char* kEol = "\r\n";  // Python's csv module ends rows this way

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_row(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_field(fields[i]);
  return line + kEol;
}

// Rows of a CSV file this logger wrote (RFC 4180 quoting, "\r\n" or "\n" line ends).
std::vector<std::vector<std::string>> parse_csv(const std::string& text, const std::filesystem::path& file) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, field_started = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c != '"') field += c;
      else if (i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
      else quoted = false;
    } else if (c == '"') {
      if (!field.empty()) throw FormatError(file.string() + ": stray quote at byte " + std::to_string(i));
      quoted = field_started = true;
    } else if (c == ',') {
      row.push_back(std::move(field)), field.clear(), field_started = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(std::move(field)), field.clear(), field_started = false;
      rows.push_back(std::move(row)), row.clear();
    } else {
      field += c, field_started = true;
    }
  }
  if (quoted) throw FormatError(file.string() + ": unterminated quoted field");
  if (field_started || !row.empty()) row.push_back(std::move(field)), rows.push_back(std::move(row));
  return rows;
}

std::string value_text(const std::string& key, double v) {
  // Lightning logs "epoch" as an int; every other metric is a float.
  if (key == "epoch" && std::isfinite(v) && v == static_cast<double>(static_cast<int64_t>(v)))
    return std::to_string(static_cast<int64_t>(v));
  return py_repr(v);
}

std::string rows_text(const std::vector<std::map<std::string, double>>& rows, const std::vector<std::string>& keys) {
  std::string text;
  for (const auto& row : rows) {
    std::vector<std::string> fields;
    for (const auto& k : keys) {
      auto it = row.find(k);
      if (it == row.end()) fields.emplace_back();
      else fields.push_back(k == "step" ? std::to_string(static_cast<int64_t>(it->second)) : value_text(k, it->second));
    }
    text += csv_row(fields);
  }
  return text;
}

}  // namespace

CSVLogger::CSVLogger(std::filesystem::path save_dir, std::string name, LoggerVersion version, std::string prefix,
                     int64_t flush_logs_every_n_steps)
    : save_dir_(std::move(save_dir)), name_(std::move(name)), prefix_(std::move(prefix)),
      version_(std::move(version)), flush_every_(flush_logs_every_n_steps) {
  if (flush_every_ < 1)
    throw InvalidArgument("CSVLogger: flush_logs_every_n_steps must be >= 1, got " + std::to_string(flush_every_));
}

void CSVLogger::resolve() const { versioned_log_dir(save_dir_, name_, version_); }

std::string CSVLogger::version() const {
  resolve();
  return version_.name.empty() ? std::to_string(version_.number) : version_.name;
}

std::filesystem::path CSVLogger::log_dir() const { return versioned_log_dir(save_dir_, name_, version_); }

void CSVLogger::log_hyperparams(const nlohmann::json& hparams) {
  if (!hparams.is_object()) throw InvalidArgument("CSVLogger::log_hyperparams: hparams must be a JSON object");
  hparams_.update(hparams);
  hparams_dirty_ = true;
}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  std::map<std::string, double> row;
  for (const auto& [k, v] : metrics) {
    if (k == "step") throw InvalidArgument("CSVLogger: 'step' is the step column, not a metric name");
    row[prefix_.empty() ? k : prefix_ + "-" + k] = v;
  }
  row["step"] = static_cast<double>(step);
  pending_.push_back(std::move(row));
  if ((step + 1) % flush_every_ == 0) save();
}

void CSVLogger::save() {
  std::filesystem::path dir = log_dir();
  std::filesystem::create_directories(dir);
  if (hparams_dirty_) {
    write_file_atomic(dir / "hparams.yaml", {as_bytes(hparams_to_yaml(hparams_))});
    hparams_dirty_ = false;
  }
  if (pending_.empty()) return;
  std::set<std::string> all(keys_.begin(), keys_.end());
  for (const auto& row : pending_)
    for (const auto& kv : row) all.insert(kv.first);
  std::vector<std::string> old_keys = std::move(keys_);
  keys_.assign(all.begin(), all.end());
  std::filesystem::path file = dir / "metrics.csv";
  if (!file_written_ || keys_ != old_keys) {
    rewrite_with_header(file_written_ ? old_keys : std::vector<std::string>{});
  } else {
    std::string text = rows_text(pending_, keys_);
    std::FILE* f = std::fopen(file.c_str(), "ab");
    bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = f && std::fclose(f) == 0 && ok;
    if (!ok) throw IoError(file.string() + ": cannot append metrics rows");
  }
  pending_.clear();
  file_written_ = true;
}

// The file again, atomically: header `keys_`, the rows already written (whose header was
// `old_keys`, empty on the first save: an older file there is replaced), then the pending ones.
void CSVLogger::rewrite_with_header(const std::vector<std::string>& old_keys) {
  std::filesystem::path file = log_dir() / "metrics.csv";
  std::string text = csv_row(keys_);
  if (!old_keys.empty()) {
    std::vector<uint8_t> bytes = read_file(file);
    auto rows = parse_csv(std::string(bytes.begin(), bytes.end()), file);
    if (rows.empty() || rows[0] != old_keys) throw FormatError(file.string() + ": header changed on disk");
    std::vector<size_t> where;
    for (const auto& k : old_keys) where.push_back(size_t(std::lower_bound(keys_.begin(), keys_.end(), k) - keys_.begin()));
    for (size_t r = 1; r < rows.size(); ++r) {
      if (rows[r].size() != old_keys.size())
        throw FormatError(file.string() + ": row " + std::to_string(r + 1) + " has " + std::to_string(rows[r].size()) +
                          " fields, the header " + std::to_string(old_keys.size()));
      std::vector<std::string> fields(keys_.size());
      for (size_t c = 0; c < old_keys.size(); ++c) fields[where[c]] = std::move(rows[r][c]);
      text += csv_row(fields);
    }
  }
  text += rows_text(pending_, keys_);
  write_file_atomic(file, {as_bytes(text)});
}

}  // namespace hg::training
