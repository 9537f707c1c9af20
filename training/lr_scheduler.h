// Learning-rate schedulers with PyTorch's formulas (torch.optim.lr_scheduler): each step()
// advances one interval (a step or an epoch, as the Trainer's scheduler config says) and writes
// the new lr into every param group of its optimizer.
//
//   auto opt = std::make_shared<hg::training::SGD>(net->named_parameters(), hg::training::SGDOptions{.lr = 0.1});
//   auto warm = std::make_shared<hg::training::LinearLR>(*opt, 0.1, 1.0, /*total_iters=*/5);
//   auto cos = std::make_shared<hg::training::CosineAnnealingLR>(*opt, /*t_max=*/95);
//   hg::training::SequentialLR sched(*opt, {warm, cos}, /*milestones=*/{5});
//   for (...) { ...; opt->step(); sched.step(); }
//   hg::training::ReduceLROnPlateau plateau(*opt, {.mode = "min", .factor = 0.5, .patience = 2});
//   plateau.step(val_loss);
//
// Concrete schedulers (StepLR, MultiStepLR, CosineAnnealingLR, LinearLR, ExponentialLR,
// OneCycleLR, LambdaLR, SequentialLR, ReduceLROnPlateau) are declared in training/schedulers.h.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "training/optimizer.h"

namespace hg::training {

class LRScheduler {
 public:
  // Records each group's "initial_lr" (set to its lr if missing), as PyTorch does.
  explicit LRScheduler(Optimizer& opt);
  virtual ~LRScheduler() = default;
  virtual std::string name() const = 0;
  // True for ReduceLROnPlateau: step(metric) is the only valid call.
  virtual bool needs_metric() const { return false; }
  virtual void step();               // advance one interval
  virtual void step(double metric);  // throws unless needs_metric()
  std::vector<double> get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  Optimizer& optimizer() { return opt_; }
  // {"name", "last_epoch", "last_lr", ...own fields}; load validates the name and fields.
  virtual nlohmann::json state_dict() const;
  virtual void load_state_dict(const nlohmann::json& state);

 protected:
  friend class SequentialLR;  // restarts the schedulers it runs (training/schedulers.h)
  // The lr of group g at interval last_epoch_ (closed form or recursive, as PyTorch).
  virtual double lr_at(size_t group) = 0;
  Optimizer& opt_;
  int64_t last_epoch_ = 0;
  std::vector<double> base_lrs_, last_lr_;
};

}  // namespace hg::training
