// Optimizers and LR schedulers from JSON (hgraph-train's "optimizer" section), with PyTorch's
// names and defaults. Unknown keys and bad values are hg::InvalidArgument naming the key's path.
//
//   auto cfg = hg::training::make_optimizer_config(nlohmann::json::parse(R"({
//       "name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4,
//       "scheduler": {"name": "sequential", "milestones": [2], "interval": "epoch",
//                     "schedulers": [{"name": "linear", "start_factor": 0.1, "total_iters": 2},
//                                    {"name": "cosine", "t_max": 18}]}})"),
//       net->named_parameters());
//   // cfg.optimizer (SGD), cfg.scheduler (SequentialLR), cfg.interval == "epoch"
//
// optimizer: name "sgd" (lr 0.01, momentum 0, dampening 0, weight_decay 0, nesterov false),
//   "adam" / "adamw" (lr 1e-3, betas [0.9, 0.999], eps 1e-8, weight_decay 0 / 1e-2, amsgrad false).
// scheduler: name "step" (step_size, gamma 0.1), "multistep" (milestones, gamma 0.1),
//   "cosine" (t_max, eta_min 0), "exponential" (gamma), "onecycle" (max_lr: one or one per group;
//   total_steps, or epochs and steps_per_epoch; pct_start 0.3, anneal_strategy "cos",
//   cycle_momentum true, base_momentum 0.85, max_momentum 0.95, div_factor 25,
//   final_div_factor 1e4, three_phase false; step it per batch with interval "step"), "linear" (start_factor 1/3, end_factor 1, total_iters 5),
//   "sequential" (schedulers: [...], milestones), "plateau" (mode "min", factor 0.1, patience 10,
//   threshold 1e-4, threshold_mode "rel", cooldown 0, min_lr 0, eps 1e-8; needs monitor);
//   with interval "epoch" | "step", frequency 1, monitor (default "val_loss" for plateau),
//   strict true, log_name (the LearningRateMonitor key). Nested "sequential" schedulers take only
//   their own fields.
#pragma once
#include <nlohmann/json.hpp>

#include "training/lightning_module.h"

namespace hg::training {

OptimizerConfig make_optimizer_config(const nlohmann::json& config, const NamedParams& params,
                                      const std::string& path = "optimizer");
// One scheduler driving `opt` from its description above, without the Trainer's keys (interval,
// frequency, monitor, strict, log_name): {"name": "onecycle", "max_lr": 0.1, "total_steps": 100}.
std::shared_ptr<LRScheduler> make_scheduler_config(const nlohmann::json& config, Optimizer& opt,
                                                   const std::string& path = "scheduler");

}  // namespace hg::training
