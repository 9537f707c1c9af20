// Callbacks and loggers: what the Trainer calls at each point of its loops (Lightning's hook
// names), and where logged metrics go.
//
//   class PrintEpoch : public hg::training::Callback {
//     void on_train_epoch_end(hg::training::Trainer& t, hg::training::LightningModule&) override {
//       std::cout << t.current_epoch() << " " << t.callback_metrics().at("val_loss") << "\n";
//     }
//   };
//   hg::training::Trainer trainer({.callbacks = {std::make_shared<PrintEpoch>()}});
//
// Built-in callbacks: training/callbacks.h (ModelCheckpoint, EarlyStopping,
// LearningRateMonitor, DeviceStatsMonitor, ProgressBar). Loggers: training/loggers.h
// (CSVLogger, TensorBoardLogger).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "training/dataloader.h"

namespace hg::training {

class Trainer;
class LightningModule;
class Optimizer;

class Callback {
 public:
  virtual ~Callback() = default;
  // The key of this callback's state in checkpoints ("callbacks": {state_key: state_dict()}).
  virtual std::string state_key() const = 0;
  virtual void setup(Trainer&, LightningModule&, const std::string& stage) { (void)stage; }
  virtual void teardown(Trainer&, LightningModule&, const std::string& stage) { (void)stage; }
  virtual void on_fit_start(Trainer&, LightningModule&) {}
  virtual void on_fit_end(Trainer&, LightningModule&) {}
  virtual void on_train_epoch_start(Trainer&, LightningModule&) {}
  // Before the batch's training_step (Lightning's on_train_batch_start).
  virtual void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) { (void)batch_idx; }
  // After the optimizer step (or the accumulation micro-batch) and its metrics were read.
  virtual void on_train_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) { (void)batch_idx; }
  // After the epoch's validation (when one ran) and the epoch metrics were computed.
  virtual void on_train_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_validation_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) { (void)batch_idx; }
  virtual void on_validation_epoch_end(Trainer&, LightningModule&) {}  // metrics of the run included
  virtual void on_validation_end(Trainer&, LightningModule&) {}
  virtual void on_test_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) { (void)batch_idx; }
  virtual void on_test_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_predict_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) { (void)batch_idx; }
  virtual void on_before_optimizer_step(Trainer&, LightningModule&, Optimizer&) {}
  virtual void on_exception(Trainer&, LightningModule&, const std::exception&) {}
  virtual nlohmann::json state_dict() const { return nlohmann::json::object(); }
  virtual void load_state_dict(const nlohmann::json& state) { (void)state; }
};

// Loggers run on global rank 0 only (the Trainer does not call them elsewhere).
class Logger {
 public:
  virtual ~Logger() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const = 0;
  virtual std::filesystem::path log_dir() const = 0;  // <save_dir>/<name>/version_<n>
  virtual void log_hyperparams(const nlohmann::json& hparams) = 0;
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  virtual void save() {}                             // flush what was logged
  virtual void finalize(const std::string& status) { (void)status; save(); }  // "success", "failed"
};

}  // namespace hg::training
