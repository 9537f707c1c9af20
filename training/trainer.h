// The Trainer (Lightning's): runs fit / validate / test / predict of a LightningModule on the
// HPU (host backend) or the CPU, on one device or data-parallel over processes and nodes.
//
//   hg::training::Trainer trainer({.accelerator = "hpu", .devices = 2, .strategy = "hpu_ddp",
//                                  .max_epochs = 20, .gradient_clip_val = 1.0,
//                                  .default_root_dir = "runs/digits"});
//   trainer.fit(module, train_loader, &val_loader);                  // or ckpt_path = "last" to resume
//   trainer.test(module, test_loader, "best");                       // the best ModelCheckpoint file
//   std::vector<hg::Tensor> out = trainer.predict(module, loader);
//   trainer.fit(module, datamodule);                                  // a DataModule (training/data_module.h)
//   Trainer timed({.max_time = std::chrono::hours(2), .min_steps = 100});  // or parse_max_time("00:02:00:00")
//   timed.fit(module, train_loader);  timed.stop_reason();                // "max_time", "max_epochs", ...
//
// On `hpu` in lazy mode (the default; HG_LAZY_MODE=0 for eager), each optimization step —
// forward, backward, clipping and every optimizer update — is traced into one graph that is
// compiled on the first step and replayed from the graph cache after that; logged tensors are
// read after the step ran. With devices > 1 (or num_nodes > 1) the default strategy is DDP
// (training/ddp_strategy.h): rank 0 of each node re-executes the program for its other local
// ranks, so code before fit() runs in every process.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graphs/step_replay.h"
#include "training/callback.h"
#include "training/dataloader.h"
#include "training/lightning_module.h"
#include "training/strategy.h"

namespace hg::training {

class DataModule;

// A batch limit: a fraction of the loader (1.0 = all) or a count of batches.
struct Limit {
  Limit(double fraction = 1.0) : fraction(fraction) {}
  Limit(int batches) : batches(batches) {}
  double fraction = 1.0;
  int64_t batches = -1;  // >= 0: a count (wins over fraction)
  int64_t resolve(int64_t available) const;  // min(available, ...) ; throws on negative values
};

// Lightning's devices: an int, or "auto" (= 1 on this build: one host HPU per process).
struct Devices {
  Devices(int n = -1) : count(n) {}
  Devices(const char* s);
  Devices(const std::string& s) : Devices(s.c_str()) {}
  int count = -1;  // -1: auto
};

struct TrainerOptions {
  std::string accelerator = "auto";       // "hpu", "cpu", "auto" (= hpu)
  Devices devices = Devices();
  std::string strategy = "auto";          // "auto", "hpu_single", "hpu_parallel", "hpu_ddp"
  std::shared_ptr<Strategy> strategy_object{};  // overrides `strategy` when set
  int num_nodes = 1;
  std::string precision = "32";           // "32", "32-true", "bf16-mixed"
  std::optional<int> max_epochs{};        // unset with max_steps -1 and no max_time: 1000; -1: no limit
  int min_epochs = 0;
  int64_t max_steps = -1;                 // optimizer steps
  // Wall time of the training loop (from its start after the sanity check; a resumed fit
  // continues the checkpoint's clock), read after each training batch: fit stops once it has
  // passed. Like EarlyStopping it sets should_stop, so min_epochs / min_steps still hold.
  std::optional<std::chrono::milliseconds> max_time{};
  int64_t min_steps = 0;                  // optimizer steps before should_stop may end fit
  Limit limit_train_batches{}, limit_val_batches{}, limit_test_batches{}, limit_predict_batches{};
  Limit val_check_interval{};             // fraction of an epoch, or every N train batches
  std::optional<int> check_val_every_n_epoch = 1;
  int num_sanity_val_steps = 2;
  int log_every_n_steps = 50;
  int accumulate_grad_batches = 1;
  std::optional<double> gradient_clip_val{};
  std::string gradient_clip_algorithm = "norm";  // "norm" or "value"
  bool deterministic = false;             // also seeds every process the same (seed below)
  uint64_t seed = 0;                      // seed_everything's seed (PL_GLOBAL_SEED if set)
  std::filesystem::path default_root_dir{};  // empty: the current directory
  std::vector<std::shared_ptr<Callback>> callbacks{};
  // Unset: a CSVLogger in default_root_dir/lightning_logs; empty: no logging.
  std::optional<std::vector<std::shared_ptr<Logger>>> logger{};
  bool enable_checkpointing = true;       // adds a ModelCheckpoint (save_last) when none given
  bool enable_progress_bar = true;
  int fast_dev_run = 0;                   // n > 0: n batches of train/val/test, 1 epoch, no loggers or checkpoints
  std::chrono::milliseconds dist_timeout = std::chrono::minutes(30);  // rendezvous and collectives
  std::ostream* out = nullptr;            // progress bar and messages; default std::cout
  // Lazy mode on an HPU with automatic optimization: once two training steps record the same
  // graph, later steps replay it without calling training_step (graphs/step_replay.h; what a
  // replay skips: docs/training.md). Under DDP the gradient buckets are then reduced inside the
  // step's graph (Strategy::replay_steps).
  bool replay_steps = false;
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions opt);  // validates every option (hg::InvalidArgument naming it)
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // ckpt_path: a checkpoint file, "last" or "best" (the ModelCheckpoint's), or empty.
  void fit(LightningModule& m, const DataLoader& train, const DataLoader* val = nullptr,
           const std::string& ckpt_path = "");
  // One map of epoch metrics per loader (Lightning returns a list of dicts).
  std::vector<std::map<std::string, double>> validate(LightningModule& m, const DataLoader& data,
                                                      const std::string& ckpt_path = "");
  std::vector<std::map<std::string, double>> test(LightningModule& m, const DataLoader& data,
                                                  const std::string& ckpt_path = "");
  // Every predict_step output in loader order (on rank 0 under DDP: every rank's, gathered).
  std::vector<Tensor> predict(LightningModule& m, const DataLoader& data, const std::string& ckpt_path = "");
  // The same with the loaders of a DataModule: prepare_data() (local rank 0), setup(stage), the
  // stage's loaders, teardown(stage) (training/data_module.h).
  void fit(LightningModule& m, DataModule& data, const std::string& ckpt_path = "");
  std::vector<std::map<std::string, double>> validate(LightningModule& m, DataModule& data,
                                                      const std::string& ckpt_path = "");
  std::vector<std::map<std::string, double>> test(LightningModule& m, DataModule& data,
                                                  const std::string& ckpt_path = "");
  std::vector<Tensor> predict(LightningModule& m, DataModule& data, const std::string& ckpt_path = "");

  // A collective under DDP: rank 0 writes (atomically), then every rank meets at a barrier.
  void save_checkpoint(const std::filesystem::path& file, bool weights_only = false);

  // State for callbacks and loggers.
  const TrainerOptions& options() const { return opt_; }
  Strategy& strategy();
  bool is_global_zero();
  Device device();
  int current_epoch() const { return epoch_; }
  int64_t global_step() const { return global_step_; }  // optimizer steps taken
  bool sanity_checking() const { return sanity_checking_; }
  std::string stage() const { return stage_; }           // "fit", "validate", "test", "predict", ""
  // EarlyStopping and max_time set it; fit ends once min_epochs and min_steps are met.
  bool should_stop = false;
  // Why the last fit ended: "max_epochs", "max_steps", "max_time", "should_stop" (set by a
  // callback or the module, e.g. EarlyStopping), or "" (no fit yet, no training batches, or an error).
  const std::string& stop_reason() const { return stop_reason_; }
  // Latest value of every logged metric (epoch metrics under their name, and step metrics as
  // "<name>_step" / "<name>_epoch" when logged both ways); progress-bar and logger subsets.
  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  const std::map<std::string, double>& progress_bar_metrics() const { return progress_bar_metrics_; }
  const std::map<std::string, double>& logged_metrics() const { return logged_metrics_; }
  // The loss the last training_step returned (automatic optimization; undefined when it returned
  // none and for a replayed step). Set during the batch's hooks up to on_train_batch_end.
  const Tensor& last_loss() const;
  std::vector<OptimizerConfig>& optimizer_configs() { return optimizers_; }
  LightningModule* lightning_module() const { return module_; }
  DataModule* datamodule() const { return datamodule_; }  // the running stage's, if it was given one
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }
  std::filesystem::path default_root_dir() const;
  std::filesystem::path log_dir() const;  // the first logger's, else default_root_dir
  int64_t num_training_batches() const { return num_training_batches_; }
  // Batches each validation of the current fit runs (0: no val loader, or limit_val_batches 0).
  int64_t num_val_batches() const { return num_val_batches_; }
  // The checkpoint the current stage restored from ("last"/"best" resolved), empty if none.
  // ModelCheckpoint never deletes it (Lightning's trainer.ckpt_path).
  const std::filesystem::path& ckpt_path() const { return ckpt_path_; }
  std::ostream& out() const;
  // The last fit's replayed training steps (replay_steps): traced, replayed, why not (all zero
  // without replay_steps).
  const graphs::StepReplayStats& step_replay_stats() const { return replay_stats_; }

 private:
  friend class LightningModule;
  struct Loop;
  // begin, optimizers (fit), restore from ckpt_path, body, end; on an error: on_exception and
  // end(failed), then rethrow.
  void run_stage(LightningModule& m, const std::string& stage, const std::string& ckpt_path,
                 const std::function<void()>& body);
  TrainerOptions opt_;
  std::unique_ptr<Loop> loop_;
  LightningModule* module_ = nullptr;
  DataModule* datamodule_ = nullptr;
  std::vector<OptimizerConfig> optimizers_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Logger>> loggers_;
  std::map<std::string, double> callback_metrics_, progress_bar_metrics_, logged_metrics_;
  int epoch_ = 0;
  int64_t global_step_ = 0, num_training_batches_ = 0, num_val_batches_ = 0;
  bool sanity_checking_ = false;
  std::string stage_, stop_reason_;
  std::filesystem::path ckpt_path_;
  graphs::StepReplayStats replay_stats_;
};

// Lightning's max_time string "DD:HH:MM:SS" (e.g. "00:12:00:00"); hg::InvalidArgument naming
// the text otherwise.
std::chrono::milliseconds parse_max_time(const std::string& dhms);

// Seeds every device generator and the host generator the loaders' shuffles do not use.
void seed_everything(uint64_t seed);

}  // namespace hg::training
