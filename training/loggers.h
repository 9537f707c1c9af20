// Lightning's CSVLogger and TensorBoardLogger.
//
//   using namespace hg::training;
//   auto csv = std::make_shared<CSVLogger>("runs");                    // runs/lightning_logs/version_<next>
//   auto tb = std::make_shared<TensorBoardLogger>("runs", "digits", 3);  // runs/digits/version_3
//   Trainer trainer({.logger = std::vector<std::shared_ptr<Logger>>{csv, tb}});
//   // runs/lightning_logs/version_0/metrics.csv, hparams.yaml
//   // runs/digits/version_3/events.out.tfevents.<time>.<host>.<pid>.<n>, hparams.yaml
//
// The version directory is chosen when first needed (log_dir(), version() or the first write):
// the next free version_<n> under <save_dir>/<name>. The Trainer calls loggers on global rank 0
// only.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "training/callback.h"

namespace hg::training {

// A version: a number (directory "version_<n>"), a name (the directory itself), or unset (auto).
struct LoggerVersion {
  LoggerVersion() = default;
  LoggerVersion(int n);
  LoggerVersion(const char* s) : LoggerVersion(std::string(s)) {}
  LoggerVersion(std::string s);
  int number = -1;   // >= 0: version_<number>
  std::string name;  // non-empty: used verbatim
};

// <save_dir>/<name>/version_<n> or <save_dir>/<name>/<version name>. An unset version becomes
// the next free number (one past the largest existing version_<n> directory, else 0).
std::filesystem::path versioned_log_dir(const std::filesystem::path& save_dir, const std::string& name,
                                        LoggerVersion& version);

// The YAML Lightning writes as hparams.yaml (PyYAML's block style, sorted keys).
std::string hparams_to_yaml(const nlohmann::json& hparams);

// metrics.csv: one row per log_metrics call with a "step" column; the header is the sorted
// union of every key seen so far (a new key rewrites the file atomically with the wider
// header, old rows empty there). Rows are buffered and written every
// flush_logs_every_n_steps steps, at save() and finalize(). hparams.yaml alongside.
class CSVLogger : public Logger {
 public:
  explicit CSVLogger(std::filesystem::path save_dir, std::string name = "lightning_logs",
                     LoggerVersion version = {}, std::string prefix = "",
                     int64_t flush_logs_every_n_steps = 100);
  std::string name() const override { return name_; }
  std::string version() const override;  // "3" for version_3, else the name
  std::filesystem::path log_dir() const override;
  void log_hyperparams(const nlohmann::json& hparams) override;
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void save() override;

 private:
  void resolve() const;
  void rewrite_with_header(const std::vector<std::string>& old_keys);

  std::filesystem::path save_dir_;
  std::string name_, prefix_;
  mutable LoggerVersion version_;
  int64_t flush_every_;
  nlohmann::json hparams_ = nlohmann::json::object();
  bool hparams_dirty_ = false;
  std::vector<std::string> keys_;  // the file's header, sorted
  std::vector<std::map<std::string, double>> pending_;
  bool file_written_ = false;
};

// TensorBoard event files: TFRecords (length, masked CRC32C of the length, an Event protobuf,
// masked CRC32C of it) starting with file_version "brain.Event:2"; each metric becomes a
// scalar summary (tag, simple_value) at its step. Hyper-parameters go to hparams.yaml and,
// as the text summary "hparams" (TensorBoard's Text tab), to the event file.
class TensorBoardLogger : public Logger {
 public:
  explicit TensorBoardLogger(std::filesystem::path save_dir, std::string name = "lightning_logs",
                             LoggerVersion version = {}, std::string prefix = "");
  ~TensorBoardLogger() override;
  TensorBoardLogger(const TensorBoardLogger&) = delete;  // owns the open event file
  TensorBoardLogger& operator=(const TensorBoardLogger&) = delete;
  std::string name() const override { return name_; }
  std::string version() const override;
  std::filesystem::path log_dir() const override;
  void log_hyperparams(const nlohmann::json& hparams) override;
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void save() override;  // flushes the event file, writes hparams.yaml
  void finalize(const std::string& status) override;  // save() and close the file
  std::filesystem::path event_file() const { return event_path_; }  // empty before the first write

 private:
  void resolve() const;
  void open();
  void write_event(const std::string& event);

  std::filesystem::path save_dir_;
  std::string name_, prefix_;
  mutable LoggerVersion version_;
  nlohmann::json hparams_ = nlohmann::json::object();
  bool hparams_dirty_ = false;
  std::filesystem::path event_path_;
  std::FILE* file_ = nullptr;
};

}  // namespace hg::training
