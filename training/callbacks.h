// Lightning's built-in callbacks: ModelCheckpoint, EarlyStopping, LearningRateMonitor,
// DeviceStatsMonitor and a text ProgressBar.
//
//   using namespace hg::training;
//   auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
//       .filename = "{epoch}-{val_loss:.3f}", .monitor = "val_loss", .save_top_k = 2, .save_last = true});
//   auto stop = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_loss", .patience = 5});
//   Trainer trainer({.max_epochs = 50, .callbacks = {ckpt, stop, std::make_shared<LearningRateMonitor>()}});
//   trainer.fit(module, train, &val);
//   ckpt->best_model_path();   // ".../checkpoints/epoch=7-val_loss=0.123.ckpt"
//
// Every callback runs on every rank; checkpoints are written through
// Trainer::save_checkpoint (a collective: rank 0 writes, all ranks meet), files are removed by
// rank 0 only, and metrics go to the loggers from global rank 0 only.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "training/callback.h"

namespace hg::training {

struct ModelCheckpointOptions {
  std::filesystem::path dirpath{};  // empty: <trainer.log_dir()>/checkpoints (rank 0's, broadcast)
  // Lightning's format: "{name}" or "{name:<python format spec>}" placeholders over
  // callback_metrics plus "epoch" and "step"; each becomes "name=<value>" when
  // auto_insert_metric_name. Empty: "{epoch}-{step}" -> "epoch=3-step=120.ckpt".
  std::string filename{};
  std::string monitor{};           // empty: keep the latest checkpoint(s) only
  std::string mode = "min";        // "min" or "max"
  int save_top_k = 1;              // -1: all; 0: none; without monitor only -1, 0 or 1
  bool save_last = false;          // also "last.ckpt", replaced at every save
  bool save_weights_only = false;
  // Both unset: every epoch. Setting one makes the other 0 (off), as in Lightning.
  std::optional<int64_t> every_n_train_steps{};
  std::optional<int> every_n_epochs{};
  // Unset: at train epoch end when validation runs once per epoch at its end (or not at
  // all), else after each validation.
  std::optional<bool> save_on_train_epoch_end{};
  bool auto_insert_metric_name = true;
  bool enable_version_counter = true;  // a name already on disk gets "-v1", "-v2", ...
};

class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions opt = {});  // validates (hg::InvalidArgument)
  std::string state_key() const override;
  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void on_fit_start(Trainer&, LightningModule&) override;  // after a resume: its step counts as saved
  void on_train_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_validation_epoch_start(Trainer&, LightningModule&) override;
  void on_validation_end(Trainer&, LightningModule&) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  // "name=value" substitution of `filename` (or the given one) over `metrics`, plus ".ckpt".
  std::string format_checkpoint_name(const std::map<std::string, double>& metrics,
                                     const std::string& filename = "", int version = -1) const;
  const ModelCheckpointOptions& options() const { return opt_; }
  const std::filesystem::path& dirpath() const { return dirpath_; }
  const std::string& best_model_path() const { return best_model_path_; }
  std::optional<double> best_model_score() const { return best_model_score_; }
  const std::string& last_model_path() const { return last_model_path_; }
  const std::map<std::string, double>& best_k_models() const { return best_k_models_; }
  const std::string& kth_best_model_path() const { return kth_best_model_path_; }

 private:
  std::map<std::string, double> monitor_candidates(Trainer&) const;
  bool skip_saving(Trainer&) const;
  bool save_at_train_epoch_end(Trainer&) const;
  void save_topk(Trainer&, const std::map<std::string, double>& candidates);
  void save_last(Trainer&, const std::map<std::string, double>& candidates);
  void update_best_and_save(Trainer&, double current, const std::map<std::string, double>& candidates);
  std::string unused_filepath(Trainer&, const std::map<std::string, double>& candidates,
                              const std::string& filename, const std::string& keep) const;
  void save(Trainer&, const std::string& path);
  void remove(Trainer&, const std::string& previous, const std::string& current) const;
  void apply_state(const nlohmann::json& state);

  ModelCheckpointOptions opt_;
  int64_t every_n_train_steps_ = 0;
  int every_n_epochs_ = 1;
  std::filesystem::path dirpath_;
  std::map<std::string, double> best_k_models_;
  std::string best_model_path_, kth_best_model_path_, last_model_path_;
  std::optional<double> best_model_score_, kth_value_, current_score_;
  int64_t last_global_step_saved_ = -1;
  bool validation_in_fit_ = false;
  std::optional<nlohmann::json> pending_state_;  // loaded before setup resolved dirpath
};

struct EarlyStoppingOptions {
  std::string monitor{};                     // required
  double min_delta = 0.0;                    // an improvement must beat the best by more
  int patience = 3;                          // checks without improvement before stopping
  std::string mode = "min";                  // "min" or "max"
  bool strict = true;                        // a missing monitor is an error (else skipped)
  bool check_finite = true;                  // stop on NaN / inf
  std::optional<double> stopping_threshold{};  // stop once the metric is better than this
  std::optional<double> divergence_threshold{};  // stop once the metric is worse than this
  // Unset: at train epoch end when validation runs once per epoch, else after each validation.
  std::optional<bool> check_on_train_epoch_end{};
  bool verbose = false;                      // reasons to trainer.out() (rank 0)
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions opt);  // validates (hg::InvalidArgument)
  std::string state_key() const override;
  void setup(Trainer&, LightningModule&, const std::string& stage) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_validation_end(Trainer&, LightningModule&) override;
  nlohmann::json state_dict() const override;  // wait_count, stopped_epoch, best_score, patience
  void load_state_dict(const nlohmann::json& state) override;

  int wait_count() const { return wait_count_; }
  int stopped_epoch() const { return stopped_epoch_; }
  double best_score() const { return best_score_; }
  const std::string& stopping_reason() const { return reason_; }  // the last check's message

 private:
  void check(Trainer&);
  bool evaluate(double current);  // true: stop; sets reason_

  EarlyStoppingOptions opt_;
  bool on_epoch_end_ = true;
  int wait_count_ = 0, stopped_epoch_ = 0;
  double best_score_;
  std::string reason_;
};

struct LearningRateMonitorOptions {
  std::string logging_interval{};  // "step", "epoch", or "" (each scheduler's own interval)
  bool log_momentum = false;     // "<name>-momentum": momentum, or Adam's beta1
  bool log_weight_decay = false; // "<name>-weight_decay"
};

// Logs every optimizer's lr as "lr-<Optimizer name>" (a second optimizer of the same class
// "-1", ...; several param groups "/pg1", "/pg2"; OptimizerConfig::name overrides) to the
// loggers and callback_metrics, before each batch whose step is logged (log_every_n_steps)
// and at each epoch start.
class LearningRateMonitor : public Callback {
 public:
  explicit LearningRateMonitor(LearningRateMonitorOptions opt = {});
  std::string state_key() const override { return "LearningRateMonitor"; }
  void on_fit_start(Trainer&, LightningModule&) override;  // needs a logger
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_train_epoch_start(Trainer&, LightningModule&) override;
  // Every value logged so far by name (Lightning's `lrs`, momentum included).
  const std::map<std::string, std::vector<double>>& lrs() const { return lrs_; }

 private:
  std::map<std::string, double> extract(Trainer&, const std::string& interval);
  LearningRateMonitorOptions opt_;
  std::map<std::string, std::vector<double>> lrs_;
};

// Logs device statistics to the loggers as "DeviceStatsMonitor.<hook>/<key>": on hpu Gaudi's
// memory statistics (Limit, InUse, MaxInUse, NumAllocs, NumFrees, ActiveAllocs, MaxAllocSize),
// on cpu (or with cpu_stats) cpu_percent, cpu_vm_percent, cpu_swap_percent from /proc. Hooks:
// on_train_batch_start, on_train_batch_end, on_validation_batch_end; only on logged steps.
class DeviceStatsMonitor : public Callback {
 public:
  // cpu_stats unset: CPU statistics only when the device is the CPU; false: never; true: also on hpu.
  explicit DeviceStatsMonitor(std::optional<bool> cpu_stats = std::nullopt) : cpu_stats_(cpu_stats) {}
  std::string state_key() const override { return "DeviceStatsMonitor"; }
  void setup(Trainer&, LightningModule&, const std::string& stage) override;  // needs a logger
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_train_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  // The statistics of `device` now, unprefixed (what one hook logs).
  std::map<std::string, double> device_stats(Device device);

 private:
  void log_stats(Trainer&, const std::string& hook, int64_t step);
  std::optional<bool> cpu_stats_;
  int64_t batch_start_step_ = 0;
  uint64_t last_cpu_busy_ = 0, last_cpu_total_ = 0;  // /proc/stat at the previous reading
};

struct ProgressBarOptions {
  int refresh_rate = 1;  // redraw every N batches (0: disabled)
  int bar_width = 20;
};

// A text progress bar on trainer.out() (rank 0 only): "\r"-redrawn lines such as
//   Epoch 3:  45%|#########           | 45/100 [12.3it/s, train_loss=0.512, v_num=0]
// ending with a newline after each epoch (with the epoch's validation metrics), and
// "Validation: 7" / "Testing: 7" / "Predicting: 7" counters for the other loops.
class ProgressBar : public Callback {
 public:
  explicit ProgressBar(ProgressBarOptions opt = {}) : opt_(opt) {}
  std::string state_key() const override { return "ProgressBar"; }
  void on_train_epoch_start(Trainer&, LightningModule&) override;
  void on_train_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_train_epoch_end(Trainer&, LightningModule&) override;
  void on_validation_epoch_start(Trainer&, LightningModule&) override;
  void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_validation_end(Trainer&, LightningModule&) override;
  void on_test_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void on_test_epoch_end(Trainer&, LightningModule&) override;
  void on_predict_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override;
  void teardown(Trainer&, LightningModule&, const std::string& stage) override;

 private:
  bool enabled(Trainer&) const;
  void draw_train(Trainer&, int64_t done, bool final);
  void draw_counter(Trainer&, const char* what, int64_t done);
  void end_line(Trainer&);
  std::string metrics_text(Trainer&) const;

  ProgressBarOptions opt_;
  std::chrono::steady_clock::time_point epoch_start_;
  int64_t train_done_ = 0, eval_done_ = 0;
  size_t last_width_ = 0;  // of the line being redrawn, to blank a longer previous one
  bool line_open_ = false, in_fit_validation_ = false;
};

}  // namespace hg::training
