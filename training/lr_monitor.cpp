// LearningRateMonitor as Lightning's (pytorch-lightning callbacks/lr_monitor.py).
#include <set>

#include "engine/error.h"
#include "training/callbacks.h"
#include "training/trainer.h"

namespace hg::training {
namespace {

// One key per param group of an optimizer, in Lightning's naming.
struct Named {
  const OptimizerConfig* config;
  std::vector<std::string> names;
};

// Optimizers with a scheduler first, then the others; a class seen again gets "-<count-1>".
std::vector<Named> names_of(const std::vector<OptimizerConfig>& configs) {
  std::vector<Named> out;
  std::map<std::string, int> seen_types;
  std::set<const Optimizer*> seen;
  for (bool with_scheduler : {true, false}) {
    for (const auto& c : configs) {
      if (!c.optimizer || bool(c.scheduler) != with_scheduler || seen.count(c.optimizer.get())) continue;
      seen.insert(c.optimizer.get());
      std::string type = c.optimizer->name();
      std::string name = c.name.empty() ? "lr-" + type : c.name;
      if (c.name.empty()) ++seen_types[type];
      auto it = seen_types.find(type);
      if (it != seen_types.end() && it->second > 1) name += "-" + std::to_string(it->second - 1);
      size_t groups = c.optimizer->param_groups().size();
      Named n{&c, {}};
      for (size_t g = 0; g < groups; ++g) n.names.push_back(groups > 1 ? name + "/pg" + std::to_string(g + 1) : name);
      out.push_back(std::move(n));
    }
  }
  return out;
}

bool should_update_logs(Trainer& t, int64_t step) {
  int n = t.options().log_every_n_steps;
  return (n > 0 && (step + 1) % n == 0) || t.should_stop;
}

}  // namespace

LearningRateMonitor::LearningRateMonitor(LearningRateMonitorOptions opt) : opt_(std::move(opt)) {
  if (!opt_.logging_interval.empty() && opt_.logging_interval != "step" && opt_.logging_interval != "epoch")
    throw InvalidArgument("LearningRateMonitor: logging_interval must be 'step', 'epoch' or empty, got '" +
                          opt_.logging_interval + "'");
}

void LearningRateMonitor::on_fit_start(Trainer& t, LightningModule&) {
  if (t.loggers().empty() && t.options().fast_dev_run == 0)  // every rank, as Lightning
    throw InvalidArgument("LearningRateMonitor needs a logger: the Trainer has none");
  lrs_.clear();
}

// The lr (and momentum, weight decay) of every optimizer whose scheduler steps per `interval`
// ("any": all), and of every optimizer without a scheduler.
std::map<std::string, double> LearningRateMonitor::extract(Trainer& t, const std::string& interval) {
  std::map<std::string, double> stats;
  for (const Named& n : names_of(t.optimizer_configs())) {
    const OptimizerConfig& c = *n.config;
    if (c.scheduler && interval != "any" && c.interval != interval) continue;
    const auto& groups = c.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& o = groups[g].options;
      auto get = [&](const char* k) { auto it = o.find(k); return it == o.end() ? 0.0 : it->second; };
      const std::string& name = n.names[g];
      stats[name] = get("lr");
      if (opt_.log_momentum) stats[name + "-momentum"] = o.count("beta1") ? get("beta1") : get("momentum");
      if (opt_.log_weight_decay) stats[name + "-weight_decay"] = get("weight_decay");
    }
  }
  for (const auto& [k, v] : stats) lrs_[k].push_back(v);
  return stats;
}

void LearningRateMonitor::on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) {
  if (opt_.logging_interval == "epoch" || !should_update_logs(t, t.global_step())) return;
  auto stats = extract(t, opt_.logging_interval.empty() ? "step" : "any");
  if (stats.empty() || !t.is_global_zero()) return;
  for (const auto& logger : t.loggers()) logger->log_metrics(stats, t.global_step());
}

void LearningRateMonitor::on_train_epoch_start(Trainer& t, LightningModule&) {
  if (opt_.logging_interval == "step") return;
  auto stats = extract(t, opt_.logging_interval.empty() ? "epoch" : "any");
  if (stats.empty() || !t.is_global_zero()) return;
  for (const auto& logger : t.loggers()) logger->log_metrics(stats, t.global_step());
}

}  // namespace hg::training
