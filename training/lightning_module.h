// The module interface the Trainer drives (Lightning's LightningModule): the network, the
// steps, the optimizers and logging.
//
//   class Digits : public hg::training::LightningModule {
//    public:
//     hg::models::Module& module() override { return *net_; }
//     hg::Tensor training_step(const hg::training::Batch& b, int64_t) override {
//       hg::Tensor loss = hg::ops::cross_entropy(net_->forward(b[0]), b[1]);
//       log("train_loss", loss, {.prog_bar = true});
//       return loss;
//     }
//     void validation_step(const hg::training::Batch& b, int64_t) override {
//       log("val_loss", hg::ops::cross_entropy(net_->forward(b[0]), b[1]));   // epoch mean by default
//     }
//     std::vector<hg::training::OptimizerConfig> configure_optimizers() override {
//       auto opt = std::make_shared<hg::training::SGD>(net_->named_parameters(), hg::training::SGDOptions{.lr = 0.1});
//       return {{.optimizer = opt, .scheduler = std::make_shared<hg::training::StepLR>(*opt, 10, 0.5)}};
//     }
//    private:
//     std::unique_ptr<hg::models::Sequential> net_ = hg::models::zoo::mlp({64, 64, 10});
//   };
//
// Several optimizers: return one config each. With automatic optimization every optimizer
// steps after each backward (their parameters must not overlap); with
// `automatic_optimization = false`, training_step drives them itself through optimizers()
// and manual_backward() and returns an undefined Tensor or its loss for logging.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/module.h"
#include "training/dataloader.h"
#include "training/lr_scheduler.h"
#include "training/optimizer.h"

namespace hg::training {

class Trainer;

struct OptimizerConfig {
  std::shared_ptr<Optimizer> optimizer{};
  std::shared_ptr<LRScheduler> scheduler{};  // optional
  std::string interval = "epoch";          // "epoch" or "step": what one scheduler step is
  int frequency = 1;                       // the scheduler steps every `frequency` intervals
  std::string monitor{};                   // the logged metric a ReduceLROnPlateau steps with
  bool strict = true;                      // a missing monitor is an error (else a warning)
  std::string name{};                      // LearningRateMonitor's key; default "lr-<Optimizer name>[-i]"
};

struct LogOptions {
  bool prog_bar = false;
  bool logger = true;
  std::optional<bool> on_step{};   // default: true in training_step, false elsewhere
  std::optional<bool> on_epoch{};  // default: false in training_step, true elsewhere
  std::string reduce_fx = "mean";  // epoch reduction: "mean" (weighted by batch_size), "sum", "max", "min"
  bool sync_dist = false;          // reduce over ranks (DDP) when the value is read
  int64_t batch_size = 0;          // 0: the first dimension of batch[0]
};

class LightningModule {
 public:
  virtual ~LightningModule() = default;
  virtual models::Module& module() = 0;  // the network that is trained, checkpointed and exported
  // The loss (automatic optimization). Called under the Trainer's precision (bf16-mixed autocast).
  virtual Tensor training_step(const Batch& batch, int64_t batch_idx) = 0;
  virtual void validation_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  virtual void test_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  // Default: module().forward(batch[0]).
  virtual Tensor predict_step(const Batch& batch, int64_t batch_idx);
  virtual std::vector<OptimizerConfig> configure_optimizers() = 0;

  // Hooks (Lightning's names); defaults do nothing.
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_end() {}
  // Extra state in checkpoints (json only).
  virtual void on_save_checkpoint(nlohmann::json& checkpoint) { (void)checkpoint; }
  virtual void on_load_checkpoint(const nlohmann::json& checkpoint) { (void)checkpoint; }

  // Logging from inside the steps and hooks. A Tensor value is kept on its device and read
  // after the step graph ran (no host sync inside the step). Names must be the same on every
  // rank when sync_dist is set. Throws hg::InvalidArgument outside a Trainer call or for a
  // value with more than one element.
  void log(const std::string& name, const Tensor& value, const LogOptions& opt = {});
  void log(const std::string& name, double value, const LogOptions& opt = {});

  // Stored in checkpoints ("hyper_parameters") and logged by the loggers at fit start.
  void save_hyperparameters(nlohmann::json hparams) { hparams_ = std::move(hparams); }
  const nlohmann::json& hparams() const { return hparams_; }

  // Manual optimization.
  bool automatic_optimization = true;
  std::vector<Optimizer*> optimizers() const;        // configure_optimizers' order
  std::vector<LRScheduler*> lr_schedulers() const;
  void manual_backward(const Tensor& loss);          // the strategy's backward (DDP sync included)

  Trainer* trainer() const { return trainer_; }      // set during fit/validate/test/predict
  int current_epoch() const;
  int64_t global_step() const;
  Device device() const;

 private:
  friend class Trainer;
  Trainer* trainer_ = nullptr;
  nlohmann::json hparams_ = nlohmann::json::object();
};

}  // namespace hg::training
