// The Trainer's private state and loops (internal to training/: trainer.cpp holds the options
// and the public calls, fit_loop.cpp the training epochs and optimization steps,
// eval_loop.cpp validation / test / predict, trainer_checkpoint.cpp checkpoint dump and restore).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graphs/step_replay.h"
#include "training/checkpoint.h"
#include "training/metric_store.h"
#include "training/trainer.h"

namespace hg::training {

struct Trainer::Loop {
  explicit Loop(Trainer& t) : t(t) {}
  Trainer& t;
  std::shared_ptr<Strategy> strategy;
  bool environment_ready = false;
  Device device;
  bool lazy = false;  // hpu in lazy mode: mark_step after every step
  // TrainerOptions::replay_steps, when the fit allows it: the training step and what it logs.
  std::unique_ptr<graphs::StepReplay> replay;
  std::vector<MetricStore::Logged> replay_logs;  // without their tensors
  bool replay_stepped = false;
  Tensor last_loss;  // the last training_step's (Trainer::last_loss)

  // Where log() goes and with which defaults.
  MetricStore train_metrics, eval_metrics;
  MetricStore* active = nullptr;
  bool step_hook = false;
  std::string hook;
  int64_t batch_size = 0;

  // The fit loop's position (checkpointed as "loops").
  int64_t next_batch = 0;      // batches of the current epoch already trained
  bool epoch_done = false;     // the current epoch's batches ran; its end hooks are running
  bool plateau_pending = false; // the epoch's plateau schedulers step after its on_train_epoch_end
  int64_t total_batch_idx = 0; // training batches since the start (val_check_interval without epochs)
  int64_t val_check_batch = 1;
  const DataLoader* val_loader = nullptr;  // fit's, already distributed
  // max_time: the training loop's clock (time_before: the resumed checkpoint's elapsed time).
  std::chrono::steady_clock::time_point train_start{};
  std::chrono::milliseconds time_before{0};
  bool time_up = false;

  // Sets the hook context for log() while alive.
  struct HookScope {
    HookScope(Loop& l, MetricStore* store, bool step, std::string name);
    ~HookScope();
    Loop& l;
    MetricStore* prev_active;
    bool prev_step;
    std::string prev_hook;
  };

  // trainer.cpp
  void setup_environment();
  void begin(LightningModule& m, const std::string& stage);  // module to device, callbacks' setup
  void end(LightningModule& m, const std::string& stage, const char* status);
  void step_sync();                               // mark_step on a lazy hpu
  Batch to_device(const Batch& b);
  void publish(const MetricSets& s, bool to_callback);
  void log_to_loggers(const std::map<std::string, double>& metrics, int64_t step);
  bool precision_bf16() const;

  // fit_loop.cpp
  void configure_optimizers(LightningModule& m);
  void fit(LightningModule& m, const DataLoader& train, const DataLoader* val);
  void train_epoch(LightningModule& m, const DataLoader& train);
  void train_batch(LightningModule& m, const Batch& batch, int64_t idx);
  // zero_grad, training_step, backward and (at a boundary) the optimizer steps; true when they stepped.
  bool automatic_step(LightningModule& m, const Batch& batch, int64_t idx, bool boundary);
  // automatic_step through `replay`; a replayed step logs again what its traced step logged.
  bool replayed_step(LightningModule& m, const Batch& batch, int64_t idx);
  void optimizer_steps(LightningModule& m);
  void epoch_end_hooks(LightningModule& m);
  bool should_validate(int64_t idx) const;
  void step_schedulers(const std::string& interval, bool plateau);
  bool max_steps_reached() const;
  // min_epochs and min_steps are met: should_stop may end fit.
  bool can_stop_early() const;
  std::chrono::milliseconds train_time() const;  // elapsed, the resumed fits' included
  // After a training batch: sets should_stop once max_time has passed (rank 0's clock under DDP).
  void check_max_time();

  // eval_loop.cpp: validation (fit, sanity check, validate) and test; returns epoch metrics.
  // `data` already went through strategy->distribute; n: the batches to run.
  std::map<std::string, double> evaluate(LightningModule& m, const DataLoader& data, int64_t n, bool test);
  std::vector<Tensor> predict(LightningModule& m, const DataLoader& data);

  // trainer_checkpoint.cpp
  Checkpoint dump(bool weights_only);
  std::filesystem::path resolve_ckpt_path(const std::string& ckpt_path) const;
  // Restores the weights, and (full = fit) optimizers, schedulers, loops, callbacks and RNG.
  void restore(LightningModule& m, const std::filesystem::path& file, bool full);
  void replay_plateau_step(const nlohmann::json& pending, const std::function<void(const std::string&)>& fail);
};

// ModelCheckpoint and EarlyStopping: their on_train_epoch_end runs after the module's.
bool monitors(const Callback& cb);
// The "last" / "best" file of the trainer's ModelCheckpoint (an error when there is none).
std::filesystem::path checkpoint_callback_path(const Trainer& t, const std::string& which);

// The batches a loader yields for `limit` (an error naming `option` when it resolves to none
// but was not zero).
int64_t limit_batches(const Limit& limit, int64_t available, const char* option);

}  // namespace hg::training
