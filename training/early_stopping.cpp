// EarlyStopping as Lightning's (pytorch-lightning callbacks/early_stopping.py).
#include <cmath>
#include <limits>
#include <ostream>

#include "engine/error.h"
#include "training/callbacks.h"
#include "training/py_format.h"
#include "training/trainer.h"

namespace hg::training {
namespace {

std::string f3(double v) { return py_format(v, ".3f"); }

nlohmann::json number_json(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

double number_from(const nlohmann::json& j, const char* key) {
  if (j.is_number()) return j.get<double>();
  if (j == "inf") return std::numeric_limits<double>::infinity();
  if (j == "-inf") return -std::numeric_limits<double>::infinity();
  if (j == "nan") return std::numeric_limits<double>::quiet_NaN();
  throw InvalidArgument(std::string("EarlyStopping state: '") + key + "' is not a number: " + j.dump());
}

}  // namespace

EarlyStopping::EarlyStopping(EarlyStoppingOptions opt) : opt_(std::move(opt)) {
  if (opt_.monitor.empty()) throw InvalidArgument("EarlyStopping: monitor is required");
  if (opt_.mode != "min" && opt_.mode != "max")
    throw InvalidArgument("EarlyStopping: mode must be 'min' or 'max', got '" + opt_.mode + "'");
  if (opt_.patience < 0) throw InvalidArgument("EarlyStopping: patience must be >= 0, got " + std::to_string(opt_.patience));
  // An improvement must beat the best by |min_delta| in the mode's direction.
  opt_.min_delta = std::fabs(opt_.min_delta) * (opt_.mode == "max" ? 1 : -1);
  best_score_ = opt_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

std::string EarlyStopping::state_key() const {
  return "EarlyStopping{'monitor': '" + opt_.monitor + "', 'mode': '" + opt_.mode + "'}";
}

void EarlyStopping::setup(Trainer& t, LightningModule&, const std::string&) {
  const TrainerOptions& o = t.options();
  bool whole_epoch = o.val_check_interval.batches < 0 && o.val_check_interval.fraction == 1.0;
  on_epoch_end_ = opt_.check_on_train_epoch_end.value_or(whole_epoch && o.check_val_every_n_epoch == 1);
}

void EarlyStopping::on_train_epoch_end(Trainer& t, LightningModule&) {
  if (on_epoch_end_ && t.stage() == "fit" && !t.sanity_checking()) check(t);
}

void EarlyStopping::on_validation_end(Trainer& t, LightningModule&) {
  if (!on_epoch_end_ && t.stage() == "fit" && !t.sanity_checking()) check(t);
}

void EarlyStopping::check(Trainer& t) {
  if (t.options().fast_dev_run > 0) return;
  const auto& metrics = t.callback_metrics();
  auto it = metrics.find(opt_.monitor);
  if (it == metrics.end()) {
    std::string keys;
    for (const auto& kv : metrics) keys += (keys.empty() ? "`" : "`, `") + kv.first;
    std::string m = "Early stopping conditioned on metric `" + opt_.monitor +
                    "` which is not available. Pass in or modify your EarlyStopping callback to use any of the "
                    "following: " + keys + (keys.empty() ? "(none)" : "`");
    if (opt_.strict) throw InvalidArgument(m);
    if (opt_.verbose && t.is_global_zero()) t.out() << m << "\n";
    return;
  }
  bool stop = evaluate(it->second);
  if (t.strategy().world_size() > 1) stop = t.strategy().reduce(stop ? 1.0 : 0.0, ReduceOp::Max) > 0.5;
  t.should_stop = t.should_stop || stop;
  if (stop) stopped_epoch_ = t.current_epoch();
  if (opt_.verbose && !reason_.empty() && t.is_global_zero()) t.out() << reason_ << "\n";
}

bool EarlyStopping::evaluate(double current) {
  bool min = opt_.mode == "min";
  auto better = [&](double a, double b) { return min ? a < b : a > b; };
  reason_.clear();
  if (opt_.check_finite && !std::isfinite(current)) {
    reason_ = "Monitored metric " + opt_.monitor + " = " + py_repr(current) + " is not finite. Previous best value was " +
              f3(best_score_) + ". Signaling Trainer to stop.";
    return true;
  }
  if (opt_.stopping_threshold && better(current, *opt_.stopping_threshold)) {
    reason_ = "Stopping threshold reached: " + opt_.monitor + " = " + py_repr(current) + (min ? " < " : " > ") +
              py_repr(*opt_.stopping_threshold) + ". Signaling Trainer to stop.";
    return true;
  }
  if (opt_.divergence_threshold && better(-current, -*opt_.divergence_threshold)) {
    reason_ = "Divergence threshold reached: " + opt_.monitor + " = " + py_repr(current) + (min ? " > " : " < ") +
              py_repr(*opt_.divergence_threshold) + ". Signaling Trainer to stop.";
    return true;
  }
  if (better(current - opt_.min_delta, best_score_)) {
    if (std::isfinite(best_score_))
      reason_ = "Metric " + opt_.monitor + " improved by " + f3(std::fabs(best_score_ - current)) + " >= min_delta = " +
                py_repr(std::fabs(opt_.min_delta)) + ". New best score: " + f3(current);
    else
      reason_ = "Metric " + opt_.monitor + " improved. New best score: " + f3(current);
    best_score_ = current;
    wait_count_ = 0;
    return false;
  }
  if (++wait_count_ >= opt_.patience) {
    reason_ = "Monitored metric " + opt_.monitor + " did not improve in the last " + std::to_string(wait_count_) +
              " records. Best score: " + f3(best_score_) + ". Signaling Trainer to stop.";
    return true;
  }
  return false;
}

nlohmann::json EarlyStopping::state_dict() const {
  return {{"wait_count", wait_count_},
          {"stopped_epoch", stopped_epoch_},
          {"best_score", number_json(best_score_)},
          {"patience", opt_.patience}};
}

void EarlyStopping::load_state_dict(const nlohmann::json& s) {
  for (const char* key : {"wait_count", "stopped_epoch", "best_score", "patience"})
    if (!s.is_object() || !s.contains(key))
      throw InvalidArgument(std::string("EarlyStopping state: missing '") + key + "'");
  for (const char* key : {"wait_count", "stopped_epoch", "patience"})
    if (!s[key].is_number_integer()) throw InvalidArgument(std::string("EarlyStopping state: '") + key + "' is not an integer");
  double best = number_from(s["best_score"], "best_score");
  wait_count_ = s["wait_count"].get<int>();
  stopped_epoch_ = s["stopped_epoch"].get<int>();
  best_score_ = best;
  opt_.patience = s["patience"].get<int>();
}

}  // namespace hg::training
