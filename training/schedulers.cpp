#include "training/schedulers.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/error.h"
#include "training/py_format.h"
#include "training/state_fields.h"

namespace hg::training {

namespace {

double python_mod(int64_t a, int64_t b) { return static_cast<double>(((a % b) + b) % b); }

}  // namespace

// ---- StepLR ----

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) throw InvalidArgument("StepLR: step_size " + std::to_string(step_size) + " must be > 0");
  last_epoch_ = -1;
  LRScheduler::step();
}

double StepLR::lr_at(size_t g) {
  const double lr = opt_.param_groups()[g].lr();
  return last_epoch_ == 0 || last_epoch_ % step_size_ != 0 ? lr : lr * gamma_;
}

nlohmann::json StepLR::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["step_size"] = step_size_;
  j["gamma"] = gamma_;
  return j;
}

void StepLR::load_state_dict(const nlohmann::json& state) {
  const int64_t step_size = int_field(state, "step_size", "StepLR state");
  const double gamma = number_field(state, "gamma", "StepLR state");
  if (step_size <= 0) throw InvalidArgument("StepLR state: field 'step_size' must be > 0");
  LRScheduler::load_state_dict(state);
  step_size_ = step_size;
  gamma_ = gamma;
}

// ---- MultiStepLR ----

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  last_epoch_ = -1;
  LRScheduler::step();
}

double MultiStepLR::lr_at(size_t g) {
  const auto k = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  return opt_.param_groups()[g].lr() * (k == 0 ? 1.0 : std::pow(gamma_, static_cast<double>(k)));
}

nlohmann::json MultiStepLR::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["milestones"] = milestones_;
  j["gamma"] = gamma_;
  return j;
}

void MultiStepLR::load_state_dict(const nlohmann::json& state) {
  auto milestones = ints_field(state, "milestones", "MultiStepLR state");
  const double gamma = number_field(state, "gamma", "MultiStepLR state");
  LRScheduler::load_state_dict(state);
  std::sort(milestones.begin(), milestones.end());
  milestones_ = std::move(milestones);
  gamma_ = gamma;
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  if (t_max <= 0) throw InvalidArgument("CosineAnnealingLR: t_max " + std::to_string(t_max) + " must be > 0");
  last_epoch_ = -1;
  LRScheduler::step();
}

double CosineAnnealingLR::lr_at(size_t g) {
  const double lr = opt_.param_groups()[g].lr(), pi = std::numbers::pi, t = static_cast<double>(last_epoch_),
               T = static_cast<double>(t_max_);
  if (last_epoch_ == 0) return lr;
  if (python_mod(last_epoch_ - 1 - t_max_, 2 * t_max_) == 0)
    return lr + (base_lrs_[g] - eta_min_) * (1 - std::cos(pi / T)) / 2;
  return (1 + std::cos(pi * t / T)) / (1 + std::cos(pi * (t - 1) / T)) * (lr - eta_min_) + eta_min_;
}

nlohmann::json CosineAnnealingLR::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["t_max"] = t_max_;
  j["eta_min"] = eta_min_;
  return j;
}

void CosineAnnealingLR::load_state_dict(const nlohmann::json& state) {
  const int64_t t_max = int_field(state, "t_max", "CosineAnnealingLR state");
  const double eta_min = number_field(state, "eta_min", "CosineAnnealingLR state");
  if (t_max <= 0) throw InvalidArgument("CosineAnnealingLR state: field 't_max' must be > 0");
  LRScheduler::load_state_dict(state);
  t_max_ = t_max;
  eta_min_ = eta_min;
}

// ---- LinearLR ----

namespace {

void check_linear(double start, double end, int64_t total, const std::string& who) {
  if (!(start > 0 && start <= 1)) throw InvalidArgument(who + ": start_factor " + std::to_string(start) + " must be in (0, 1]");
  if (!(end >= 0 && end <= 1)) throw InvalidArgument(who + ": end_factor " + std::to_string(end) + " must be in [0, 1]");
  if (total <= 0) throw InvalidArgument(who + ": total_iters " + std::to_string(total) + " must be > 0");
}

}  // namespace

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_(start_factor), end_(end_factor), total_iters_(total_iters) {
  check_linear(start_factor, end_factor, total_iters, "LinearLR");
  last_epoch_ = -1;
  LRScheduler::step();
}

double LinearLR::lr_at(size_t g) {
  const double lr = opt_.param_groups()[g].lr();
  if (last_epoch_ == 0) return lr * start_;
  if (last_epoch_ > total_iters_) return lr;
  return lr * (1. + (end_ - start_) / (static_cast<double>(total_iters_) * start_ +
                                       static_cast<double>(last_epoch_ - 1) * (end_ - start_)));
}

nlohmann::json LinearLR::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["start_factor"] = start_;
  j["end_factor"] = end_;
  j["total_iters"] = total_iters_;
  return j;
}

void LinearLR::load_state_dict(const nlohmann::json& state) {
  const double start = number_field(state, "start_factor", "LinearLR state");
  const double end = number_field(state, "end_factor", "LinearLR state");
  const int64_t total = int_field(state, "total_iters", "LinearLR state");
  check_linear(start, end, total, "LinearLR state");
  LRScheduler::load_state_dict(state);
  start_ = start;
  end_ = end;
  total_iters_ = total;
}

// ---- ExponentialLR ----

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) {
  if (!(gamma > 0)) throw InvalidArgument("ExponentialLR: gamma " + std::to_string(gamma) + " must be > 0");
  last_epoch_ = -1;
  LRScheduler::step();
}

double ExponentialLR::lr_at(size_t g) {
  const double lr = opt_.param_groups()[g].lr();
  return last_epoch_ == 0 ? lr : lr * gamma_;
}

nlohmann::json ExponentialLR::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["gamma"] = gamma_;
  return j;
}

void ExponentialLR::load_state_dict(const nlohmann::json& state) {
  const double gamma = number_field(state, "gamma", "ExponentialLR state");
  if (!(gamma > 0)) throw InvalidArgument("ExponentialLR state: field 'gamma' must be > 0");
  LRScheduler::load_state_dict(state);
  gamma_ = gamma;
}

// ---- LambdaLR ----

LambdaLR::LambdaLR(Optimizer& opt, std::vector<Fn> lambdas) : LRScheduler(opt), lambdas_(std::move(lambdas)) {
  const size_t groups = opt_.param_groups().size();
  if (lambdas_.size() == 1) lambdas_.resize(groups, lambdas_[0]);
  if (lambdas_.size() != groups)
    throw InvalidArgument("LambdaLR: " + std::to_string(lambdas_.size()) + " functions for " + std::to_string(groups) +
                          " param groups (give one, or one per group)");
  for (size_t g = 0; g < groups; ++g)
    if (!lambdas_[g]) throw InvalidArgument("LambdaLR: the function of group " + std::to_string(g) + " is empty");
  last_epoch_ = -1;
  LRScheduler::step();
}

double LambdaLR::lr_at(size_t g) {
  const double f = lambdas_[g](last_epoch_);
  if (!std::isfinite(f))
    throw InvalidArgument("LambdaLR: the function of group " + std::to_string(g) + " returned " + std::to_string(f) +
                          " at step " + std::to_string(last_epoch_));
  return base_lrs_[g] * f;
}

// ---- SequentialLR ----

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  if (schedulers_.empty()) throw InvalidArgument("SequentialLR: no schedulers");
  if (milestones_.size() + 1 != schedulers_.size())
    throw InvalidArgument("SequentialLR: " + std::to_string(schedulers_.size()) + " schedulers need " +
                          std::to_string(schedulers_.size() - 1) + " milestones, got " +
                          std::to_string(milestones_.size()));
  if (!std::is_sorted(milestones_.begin(), milestones_.end()))
    throw InvalidArgument("SequentialLR: milestones must be increasing");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const auto& s = schedulers_[i];
    const std::string which = "SequentialLR: scheduler " + std::to_string(i);
    if (!s) throw InvalidArgument(which + " is null");
    if (&s->optimizer() != &opt) throw InvalidArgument(which + " (" + s->name() + ") drives another optimizer");
    if (s->needs_metric() || s->name() == "SequentialLR")
      throw InvalidArgument(which + ": " + s->name() + " cannot be sequenced");
  }
  // As PyTorch: back to the initial lrs, undo each scheduler's initial step, redo the first's.
  for (ParamGroup& g : opt_.param_groups()) g.set_lr(g.options.at("initial_lr"));
  for (const auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = static_cast<size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) {
    // PyTorch's step(0): the closed form at epoch 0, which is each form's value at epoch 0
    // computed from the base lr.
    auto& groups = opt_.param_groups();
    for (size_t g = 0; g < groups.size() && g < s.base_lrs_.size(); ++g) groups[g].set_lr(s.base_lrs_[g]);
    s.last_epoch_ = -1;
  }
  s.step();
  last_lr_ = s.get_last_lr();
}

double SequentialLR::lr_at(size_t g) { return opt_.param_groups()[g].lr(); }

nlohmann::json SequentialLR::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["milestones"] = milestones_;
  j["schedulers"] = nlohmann::json::array();
  for (const auto& s : schedulers_) j["schedulers"].push_back(s->state_dict());
  return j;
}

void SequentialLR::load_state_dict(const nlohmann::json& state) {
  const std::string who = "SequentialLR state";
  auto milestones = ints_field(state, "milestones", who);
  if (milestones.size() != milestones_.size())
    throw InvalidArgument(who + ": field 'milestones' has " + std::to_string(milestones.size()) + " entries, expected " +
                          std::to_string(milestones_.size()));
  if (!state.contains("schedulers") || !state["schedulers"].is_array() ||
      state["schedulers"].size() != schedulers_.size())
    throw InvalidArgument(who + ": field 'schedulers' must be an array of " + std::to_string(schedulers_.size()) +
                          " states");
  LRScheduler::load_state_dict(state);  // validates before it changes anything
  std::vector<nlohmann::json> before;
  for (const auto& s : schedulers_) before.push_back(s->state_dict());
  try {
    for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(state["schedulers"][i]);
  } catch (...) {  // all or nothing
    for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(before[i]);
    throw;
  }
  milestones_ = std::move(milestones);
}

// ---- ReduceLROnPlateau ----

namespace {

void check_plateau(const ReduceLROnPlateauOptions& o, size_t groups, const std::string& who) {
  if (o.mode != "min" && o.mode != "max") throw InvalidArgument(who + ": mode '" + o.mode + "' is not min or max");
  if (o.threshold_mode != "rel" && o.threshold_mode != "abs")
    throw InvalidArgument(who + ": threshold_mode '" + o.threshold_mode + "' is not rel or abs");
  if (!(o.factor >= 0 && o.factor < 1)) throw InvalidArgument(who + ": factor " + std::to_string(o.factor) + " must be in [0, 1)");
  if (o.patience < 0 || o.cooldown < 0) throw InvalidArgument(who + ": patience and cooldown must be >= 0");
  if (!o.min_lrs.empty() && o.min_lrs.size() != groups)
    throw InvalidArgument(who + ": " + std::to_string(o.min_lrs.size()) + " min_lrs for " + std::to_string(groups) +
                          " param groups");
}

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options)
    : LRScheduler(opt), o_(std::move(options)) {
  check_plateau(o_, opt_.param_groups().size(), "ReduceLROnPlateau");
  if (o_.min_lrs.empty()) o_.min_lrs.assign(opt_.param_groups().size(), o_.min_lr);
  best_ = o_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

void ReduceLROnPlateau::step() {
  throw InvalidArgument("ReduceLROnPlateau needs the monitored metric: call step(metric)");
}

bool ReduceLROnPlateau::is_better(double a) const {
  const bool rel = o_.threshold_mode == "rel";
  if (o_.mode == "min") return rel ? a < best_ * (1. - o_.threshold) : a < best_ - o_.threshold;
  return rel ? a > best_ * (o_.threshold + 1.) : a > best_ + o_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  auto& groups = opt_.param_groups();
  if (num_bad_epochs_ > o_.patience) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const double old_lr = groups[g].lr(), new_lr = std::max(old_lr * o_.factor, o_.min_lrs.at(g));
      if (old_lr - new_lr > o_.eps) groups[g].set_lr(new_lr);
    }
    cooldown_counter_ = o_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const ParamGroup& g : groups) last_lr_.push_back(g.lr());
}

double ReduceLROnPlateau::lr_at(size_t g) { return opt_.param_groups()[g].lr(); }

nlohmann::json ReduceLROnPlateau::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["best"] = extended_number(best_);
  j["num_bad_epochs"] = num_bad_epochs_;
  j["cooldown_counter"] = cooldown_counter_;
  j["mode"] = o_.mode;
  j["factor"] = o_.factor;
  j["patience"] = o_.patience;
  j["threshold"] = o_.threshold;
  j["threshold_mode"] = o_.threshold_mode;
  j["cooldown"] = o_.cooldown;
  j["min_lrs"] = o_.min_lrs;
  j["eps"] = o_.eps;
  return j;
}

void ReduceLROnPlateau::load_state_dict(const nlohmann::json& state) {
  const std::string who = "ReduceLROnPlateau state";
  ReduceLROnPlateauOptions o;
  o.mode = string_field(state, "mode", who);
  o.factor = number_field(state, "factor", who);
  o.patience = int_field(state, "patience", who);
  o.threshold = number_field(state, "threshold", who);
  o.threshold_mode = string_field(state, "threshold_mode", who);
  o.cooldown = int_field(state, "cooldown", who);
  o.min_lrs = numbers_field(state, "min_lrs", who, static_cast<int64_t>(opt_.param_groups().size()));
  o.eps = number_field(state, "eps", who);
  check_plateau(o, opt_.param_groups().size(), who);
  const double best = extended_number_field(state, "best", who);
  const int64_t bad = int_field(state, "num_bad_epochs", who), cooldown = int_field(state, "cooldown_counter", who);
  LRScheduler::load_state_dict(state);
  o_ = std::move(o);
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
}

}  // namespace hg::training

// ---- OneCycleLR ----

namespace hg::training {

namespace {

std::string num(double v) { return py_repr(v); }

// One value for every group, or one per group.
std::vector<double> per_group(const std::vector<double>& v, size_t groups, const std::string& who,
                              const std::string& what) {
  if (v.size() == 1) return std::vector<double>(groups, v[0]);
  if (v.size() != groups)
    throw InvalidArgument(who + ": " + what + " has " + std::to_string(v.size()) + " values for " +
                          std::to_string(groups) + " param groups (give one, or one per group)");
  return v;
}

// Validates `o` and fills total_steps and the per-group lists.
void check_one_cycle(OneCycleLROptions& o, size_t groups, const std::string& who) {
  if (o.total_steps < 0) throw InvalidArgument(who + ": total_steps " + std::to_string(o.total_steps) + " must be > 0");
  if (o.total_steps == 0) {
    if (o.epochs == 0 && o.steps_per_epoch == 0)
      throw InvalidArgument(who + ": give total_steps, or epochs and steps_per_epoch");
    if (o.epochs <= 0) throw InvalidArgument(who + ": epochs " + std::to_string(o.epochs) + " must be > 0");
    if (o.steps_per_epoch <= 0)
      throw InvalidArgument(who + ": steps_per_epoch " + std::to_string(o.steps_per_epoch) + " must be > 0");
    o.total_steps = o.epochs * o.steps_per_epoch;
  }
  if (!(o.pct_start >= 0 && o.pct_start <= 1))
    throw InvalidArgument(who + ": pct_start " + num(o.pct_start) + " must be in [0, 1]");
  if (o.anneal_strategy != "cos" && o.anneal_strategy != "linear")
    throw InvalidArgument(who + ": anneal_strategy '" + o.anneal_strategy + "' is not cos or linear");
  if (!(o.div_factor > 0)) throw InvalidArgument(who + ": div_factor " + num(o.div_factor) + " must be > 0");
  if (!(o.final_div_factor > 0))
    throw InvalidArgument(who + ": final_div_factor " + num(o.final_div_factor) + " must be > 0");
  if (o.max_lr.empty()) throw InvalidArgument(who + ": max_lr is required");
  o.max_lr = per_group(o.max_lr, groups, who, "max_lr");
  for (double v : o.max_lr)
    if (!(v > 0)) throw InvalidArgument(who + ": max_lr " + num(v) + " must be > 0");
  o.base_momentum = per_group(o.base_momentum, groups, who, "base_momentum");
  o.max_momentum = per_group(o.max_momentum, groups, who, "max_momentum");
  for (size_t g = 0; g < groups; ++g)
    if (o.cycle_momentum && !(o.base_momentum[g] >= 0 && o.base_momentum[g] <= o.max_momentum[g] && o.max_momentum[g] < 1))
      throw InvalidArgument(who + ": base_momentum " + num(o.base_momentum[g]) + " and max_momentum " +
                            num(o.max_momentum[g]) + " must satisfy 0 <= base <= max < 1");
  // A phase of zero length that some step falls in divides by zero (in PyTorch too): the first
  // when it ends at step 0, the last when it ends where the one before it does.
  const double T = static_cast<double>(o.total_steps), up = o.pct_start * T - 1;
  if (up == 0 || T - 1 == (o.three_phase ? 2 * o.pct_start * T - 2 : up))
    throw InvalidArgument(who + ": pct_start " + num(o.pct_start) + " with total_steps " + std::to_string(o.total_steps) +
                          " leaves a phase without steps");
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& opt, OneCycleLROptions options) : LRScheduler(opt), o_(std::move(options)) {
  auto& groups = opt_.param_groups();
  check_one_cycle(o_, groups.size(), "OneCycleLR");
  if (o_.cycle_momentum) {
    const auto& first = groups.at(0).options;
    momentum_key_ = first.count("beta1") ? "beta1" : first.count("momentum") ? "momentum" : "";
    if (momentum_key_.empty())
      throw InvalidArgument("OneCycleLR: cycle_momentum needs an optimizer with momentum (SGD) or beta1 (Adam, "
                            "AdamW); " + opt_.name() + " has neither (set cycle_momentum false)");
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    base_lrs_[g] = o_.max_lr[g] / o_.div_factor;
    groups[g].options["initial_lr"] = base_lrs_[g];
    if (o_.cycle_momentum) groups[g].options[momentum_key_] = o_.max_momentum[g];
  }
  last_epoch_ = -1;
  step();
}

std::pair<double, double> OneCycleLR::at(size_t g, int64_t t) const {
  struct Phase {
    double end, lr0, lr1, m0, m1;
  };
  const double T = static_cast<double>(o_.total_steps), p = o_.pct_start;
  const double initial = base_lrs_[g], top = o_.max_lr[g], low = initial / o_.final_div_factor;
  const double mb = o_.base_momentum[g], mm = o_.max_momentum[g];
  std::vector<Phase> phases;
  if (o_.three_phase)
    phases = {{p * T - 1, initial, top, mm, mb}, {2 * p * T - 2, top, initial, mb, mm}, {T - 1, initial, low, mm, mm}};
  else
    phases = {{p * T - 1, initial, top, mm, mb}, {T - 1, top, low, mb, mm}};
  const bool cos = o_.anneal_strategy == "cos";
  auto anneal = [cos](double a, double b, double pct) {
    return cos ? b + (a - b) / 2.0 * (std::cos(std::numbers::pi * pct) + 1) : (b - a) * pct + a;
  };
  double start = 0;
  const double step = static_cast<double>(t);
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& ph = phases[i];
    if (step <= ph.end || i + 1 == phases.size()) {
      const double pct = (step - start) / (ph.end - start);
      return {anneal(ph.lr0, ph.lr1, pct), anneal(ph.m0, ph.m1, pct)};
    }
    start = ph.end;
  }
  return {};  // not reached: the last phase takes every step
}

double OneCycleLR::lr_at(size_t g) { return at(g, last_epoch_).first; }

void OneCycleLR::step() {
  if (last_epoch_ + 1 > o_.total_steps)
    throw InvalidArgument("OneCycleLR: tried to step " + std::to_string(last_epoch_ + 2) +
                          " times (the constructor's step included); total_steps is " + std::to_string(o_.total_steps));
  LRScheduler::step();
  if (momentum_key_.empty()) return;
  auto& groups = opt_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options[momentum_key_] = at(g, last_epoch_).second;
}

nlohmann::json OneCycleLR::state_dict() const {
  auto j = LRScheduler::state_dict();
  j["max_lr"] = o_.max_lr;
  j["total_steps"] = o_.total_steps;
  j["pct_start"] = o_.pct_start;
  j["anneal_strategy"] = o_.anneal_strategy;
  j["cycle_momentum"] = o_.cycle_momentum;
  j["base_momentum"] = o_.base_momentum;
  j["max_momentum"] = o_.max_momentum;
  j["div_factor"] = o_.div_factor;
  j["final_div_factor"] = o_.final_div_factor;
  j["three_phase"] = o_.three_phase;
  return j;
}

void OneCycleLR::load_state_dict(const nlohmann::json& state) {
  const std::string who = "OneCycleLR state";
  const auto groups = static_cast<int64_t>(opt_.param_groups().size());
  OneCycleLROptions o;
  o.max_lr = numbers_field(state, "max_lr", who, groups);
  o.total_steps = int_field(state, "total_steps", who);
  if (o.total_steps <= 0) throw InvalidArgument(who + ": field 'total_steps' must be > 0");
  o.pct_start = number_field(state, "pct_start", who);
  o.anneal_strategy = string_field(state, "anneal_strategy", who);
  o.cycle_momentum = bool_field(state, "cycle_momentum", who);
  o.base_momentum = numbers_field(state, "base_momentum", who, groups);
  o.max_momentum = numbers_field(state, "max_momentum", who, groups);
  o.div_factor = number_field(state, "div_factor", who);
  o.final_div_factor = number_field(state, "final_div_factor", who);
  o.three_phase = bool_field(state, "three_phase", who);
  check_one_cycle(o, static_cast<size_t>(groups), who);
  if (o.cycle_momentum != o_.cycle_momentum)
    throw InvalidArgument(who + ": field 'cycle_momentum' is " + (o.cycle_momentum ? "true" : "false") +
                          ", this scheduler was made with " + (o_.cycle_momentum ? "true" : "false"));
  LRScheduler::load_state_dict(state);
  o_ = std::move(o);
}

}  // namespace hg::training
