// The learning-rate range test (Lightning's Tuner.lr_find): trains num_training steps while the
// lr of the module's optimizer grows from min_lr to max_lr, records the smoothed loss of each
// step and suggests the lr where that loss falls fastest. The module, its optimizer and the
// random generators are left exactly as they were.
//
//   hg::training::Trainer trainer({.accelerator = "cpu", .max_epochs = 10});
//   hg::training::LRFinderResult r = hg::training::lr_find(trainer, module, train_loader,
//                                                          {.min_lr = 1e-6, .max_lr = 1.0});
//   std::cout << r.table();                         // step, lr, smoothed loss
//   if (auto lr = r.suggestion()) module.lr = *lr;  // then trainer.fit(module, train_loader)
//
// How it runs: a Trainer with the given trainer's options for one process, with max_steps
// num_training, no validation, loggers, checkpoints, progress bar or other callbacks, fits the
// module. configure_optimizers() must return one optimizer. Its scheduler, if any, is replaced
// by the sweep, stepped every optimizer step: lr_k = min_lr * (max_lr / min_lr)^(k / num_training)
// ("exponential") or min_lr + k / num_training * (max_lr - min_lr) ("linear"), for every group.
// Each step's loss (the value training_step returned) is smoothed as Lightning's:
//   avg = beta * avg + (1 - beta) * loss;  smoothed = avg / (1 - beta^(step + 1)),  beta 0.98
// with `step` the optimizer steps so far, this one included. The run stops early once
// smoothed > early_stop_threshold * best smoothed loss (after step 1). Afterwards every
// parameter and buffer, the optimizer's state_dict (as configure_optimizers() returned it), the
// module's device and train/eval mode and the default generators' seeds and offsets are restored.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "training/dataloader.h"
#include "training/lightning_module.h"
#include "training/trainer.h"

namespace hg::training {

struct LRFinderOptions {
  double min_lr = 1e-8;
  double max_lr = 1.0;
  int64_t num_training = 100;         // optimizer steps to sweep over
  std::string mode = "exponential";   // "exponential" or "linear"
  std::optional<double> early_stop_threshold = 4.0;  // unset: never stop early
  double beta = 0.98;                 // the loss smoothing
};

struct LRFinderResult {
  std::vector<double> lrs;     // the lr of each step (group 0), as the step ran
  std::vector<double> losses;  // smoothed; NaN where training_step returned no loss
  bool diverged = false;       // stopped early: the loss passed early_stop_threshold x best
  // Lightning's suggestion: drop the first skip_begin and last skip_end points and non-finite
  // losses, take the gradient of the loss with respect to the lr (torch.gradient with the lrs
  // as spacing: central differences inside, one-sided at the ends) and return the lr where it is
  // most negative. None with fewer than two points left.
  std::optional<double> suggestion(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  std::optional<size_t> suggestion_index(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  std::string table() const;  // "step  lr  loss" per step, the suggestion marked
};

// hg::InvalidArgument naming the first bad option and its value ("lr_find: min_lr 0.0 must be > 0").
void check_lr_finder_options(const LRFinderOptions& options);

// Validates `options` (hg::InvalidArgument naming the option and its value), runs the sweep on
// `train` and restores everything it changed, also when it throws.
LRFinderResult lr_find(const Trainer& trainer, LightningModule& m, const DataLoader& train, LRFinderOptions options = {});
// The same with the options of a Trainer not made yet.
LRFinderResult lr_find(TrainerOptions trainer, LightningModule& m, const DataLoader& train, LRFinderOptions options = {});

}  // namespace hg::training
