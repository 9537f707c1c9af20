// The learning-rate schedulers, with torch.optim.lr_scheduler's formulas (the chainable forms:
// each step derives the new lr from the group's current one) and state. Construction performs
// PyTorch's initial step (epoch 0) except for ReduceLROnPlateau.
//
//   using namespace hg::training;
//   StepLR step(opt, /*step_size=*/30, /*gamma=*/0.1);         // lr * gamma every step_size steps
//   MultiStepLR multi(opt, {30, 80}, 0.1);                     // lr * gamma at each milestone
//   CosineAnnealingLR cos(opt, /*t_max=*/100, /*eta_min=*/1e-5);
//   LinearLR warm(opt, /*start_factor=*/0.1, /*end_factor=*/1.0, /*total_iters=*/5);
//   ExponentialLR decay(opt, /*gamma=*/0.95);                  // lr * gamma every step
//   LambdaLR custom(opt, {[](int64_t t) { return t < 10 ? (t + 1) / 10.0 : 1.0; }});
//   OneCycleLR one(opt, {.max_lr = {0.1}, .total_steps = 1000});  // warm-up to 0.1, anneal to 4e-7
//   auto w = std::make_shared<LinearLR>(opt, 0.1, 1.0, 5);
//   auto c = std::make_shared<CosineAnnealingLR>(opt, 95);
//   SequentialLR seq(opt, {w, c}, /*milestones=*/{5});          // warm-up, then cosine
//   ReduceLROnPlateau plateau(opt, {.mode = "min", .factor = 0.5, .patience = 2});
//   plateau.step(val_loss);
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "training/lr_scheduler.h"

namespace hg::training {

// lr * gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr * gamma^k at a step listed k times in milestones.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * t / t_max)) / 2, continuing as a cosine wave
// past t_max (as PyTorch's recursive form).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0.0);
  std::string name() const override { return "CosineAnnealingLR"; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// The linear warm-up (or decay): base_lr * factor, the factor going linearly from start_factor
// to end_factor over total_iters steps, then kept.
class LinearLR : public LRScheduler {
 public:
  // start_factor in (0, 1], end_factor in [0, 1], total_iters > 0.
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  double start_, end_;
  int64_t total_iters_;
};

// lr * gamma every step (base_lr * gamma^t).
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);  // gamma > 0
  std::string name() const override { return "ExponentialLR"; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  double gamma_;
};

// base_lr * f(t) with a function of the step count t per param group (one for all groups, or one
// per group), as torch's LambdaLR. The functions are code: the state holds the step count and
// the lrs, and a resumed LambdaLR takes its functions from its constructor.
class LambdaLR : public LRScheduler {
 public:
  using Fn = std::function<double(int64_t)>;
  LambdaLR(Optimizer& opt, std::vector<Fn> lambdas);
  std::string name() const override { return "LambdaLR"; }

 protected:
  double lr_at(size_t group) override;

 private:
  std::vector<Fn> lambdas_;
};

struct OneCycleLROptions {
  std::vector<double> max_lr = {};  // required: one for every group, or one per group
  int64_t total_steps = 0;          // 0: epochs * steps_per_epoch
  int64_t epochs = 0, steps_per_epoch = 0;
  double pct_start = 0.3;              // share of the steps spent raising the lr, in [0, 1]
  std::string anneal_strategy = "cos"; // "cos" or "linear"
  // Anneals SGD's momentum or Adam's / AdamW's beta1 inversely to the lr, between base_momentum
  // and max_momentum (one value, or one per group). Both are inputs of the lazy step graph, so
  // the cycling does not recompile the step.
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85};
  std::vector<double> max_momentum = {0.95};
  double div_factor = 25.0;        // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;   // min_lr = initial_lr / final_div_factor
  bool three_phase = false;        // up, back down to initial_lr, then down to min_lr (fast.ai's)
};

// The 1cycle policy (torch.optim.lr_scheduler.OneCycleLR): from max_lr / div_factor up to max_lr
// over pct_start of total_steps, then down to min_lr (cosine or linear). Stepped once per batch
// (interval "step"); a step past total_steps throws, as PyTorch. It replaces each group's
// "initial_lr" (max_lr / div_factor) and, with cycle_momentum, sets its momentum / beta1 to
// max_momentum at construction. The state holds every option (PyTorch keeps max_lr and the
// momentums in the param groups; here the optimizer's groups take no unknown options).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, OneCycleLROptions options);
  std::string name() const override { return "OneCycleLR"; }
  void step() override;
  int64_t total_steps() const { return o_.total_steps; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  // The lr and the momentum of group g at step t.
  std::pair<double, double> at(size_t g, int64_t t) const;
  OneCycleLROptions o_;  // max_lr and the momentums expanded to one per group
  std::string momentum_key_;  // "momentum", "beta1", or "" without cycle_momentum
};

// Runs schedulers[i] between milestones[i-1] and milestones[i]; at a milestone the next
// scheduler restarts from its epoch 0 (its closed form there: its base lr, times start_factor
// for LinearLR). All schedulers must drive `opt`; one more scheduler than milestones.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  std::string name() const override { return "SequentialLR"; }
  void step() override;
  // Adds "milestones" and "schedulers" (each one's state_dict).
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct ReduceLROnPlateauOptions {
  std::string mode = "min";  // "min": lower metric is better; "max": higher
  double factor = 0.1;       // new lr = max(lr * factor, min_lr), factor < 1
  int64_t patience = 10;     // bad steps tolerated before reducing
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  // "rel": best * (1 -+ threshold); "abs": best -+ threshold
  int64_t cooldown = 0;                // steps after a reduction during which bad steps are not counted
  double min_lr = 0.0;
  std::vector<double> min_lrs = {};  // per group (overrides min_lr when not empty)
  double eps = 1e-8;                 // reductions smaller than eps are skipped
};

// Reduces the lr when a metric stopped improving: step(metric) only (step() throws).
class ReduceLROnPlateau : public LRScheduler {
 public:
  ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options = {});
  std::string name() const override { return "ReduceLROnPlateau"; }
  bool needs_metric() const override { return true; }
  void step() override;
  void step(double metric) override;
  // Adds "best", "num_bad_epochs", "cooldown_counter" and the options.
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 protected:
  double lr_at(size_t group) override;

 private:
  bool is_better(double a) const;
  ReduceLROnPlateauOptions o_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

}  // namespace hg::training
