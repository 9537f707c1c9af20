// Optimizers and schedulers built from their JSON description (training/optimizer_config.h).
#include "training/optimizer_config.h"

#include "training/adam.h"
#include "training/config_reader.h"
#include "training/schedulers.h"
#include "training/sgd.h"

namespace hg::training {

namespace {

std::shared_ptr<Optimizer> make_optimizer(ConfigReader& r, const NamedParams& params) {
  const auto name = r.required<std::string>("name");
  if (name == "sgd") {
    SGDOptions o;
    o.lr = r.get("lr", o.lr);
    o.momentum = r.get("momentum", o.momentum);
    o.dampening = r.get("dampening", o.dampening);
    o.weight_decay = r.get("weight_decay", o.weight_decay);
    o.nesterov = r.get("nesterov", o.nesterov);
    return std::make_shared<SGD>(params, o);
  }
  if (name == "adam" || name == "adamw") {
    AdamOptions o;
    o.lr = r.get("lr", o.lr);
    const auto betas = r.get("betas", std::vector<double>{o.beta1, o.beta2});
    if (betas.size() != 2) r.fail("betas", "expected [beta1, beta2]");
    o.beta1 = betas[0];
    o.beta2 = betas[1];
    o.eps = r.get("eps", o.eps);
    o.weight_decay = r.optional<double>("weight_decay");
    o.amsgrad = r.get("amsgrad", o.amsgrad);
    if (name == "adam") return std::make_shared<Adam>(params, o);
    return std::make_shared<AdamW>(params, o);
  }
  r.fail("name", "unknown optimizer '" + name + "' (sgd, adam, adamw)");
}

int64_t positive(ConfigReader& r, const std::string& key) {
  const auto v = r.required<int64_t>(key);
  if (v < 1) r.fail(key, "must be >= 1, got " + std::to_string(v));
  return v;
}

// A number for every group, or a list with one per group.
std::optional<std::vector<double>> per_group(ConfigReader& r, const std::string& key) {
  const auto& v = r.raw(key);
  if (v.is_null()) return std::nullopt;
  if (v.is_number()) return std::vector<double>{v.get<double>()};
  return r.get<std::vector<double>>(key, {});
}

std::shared_ptr<LRScheduler> make_one_cycle(ConfigReader& r, Optimizer& opt) {
  OneCycleLROptions o;
  const auto max_lr = per_group(r, "max_lr");
  if (!max_lr) r.fail("max_lr", "is required");
  o.max_lr = *max_lr;
  o.total_steps = r.get("total_steps", o.total_steps);
  o.epochs = r.get("epochs", o.epochs);
  o.steps_per_epoch = r.get("steps_per_epoch", o.steps_per_epoch);
  o.pct_start = r.get("pct_start", o.pct_start);
  o.anneal_strategy = r.get("anneal_strategy", o.anneal_strategy);
  o.cycle_momentum = r.get("cycle_momentum", o.cycle_momentum);
  o.base_momentum = per_group(r, "base_momentum").value_or(o.base_momentum);
  o.max_momentum = per_group(r, "max_momentum").value_or(o.max_momentum);
  o.div_factor = r.get("div_factor", o.div_factor);
  o.final_div_factor = r.get("final_div_factor", o.final_div_factor);
  o.three_phase = r.get("three_phase", o.three_phase);
  try {
    return std::make_shared<OneCycleLR>(opt, o);
  } catch (const InvalidArgument& e) {  // the message names the argument; add where it came from
    throw InvalidArgument(r.path() + ": " + e.what());
  }
}

std::shared_ptr<LRScheduler> make_scheduler(ConfigReader& r, Optimizer& opt) {
  const auto name = r.required<std::string>("name");
  if (name == "step") {
    const auto step_size = positive(r, "step_size");
    return std::make_shared<StepLR>(opt, step_size, r.get("gamma", 0.1));
  }
  if (name == "multistep") {
    const auto milestones = r.required<std::vector<int64_t>>("milestones");
    return std::make_shared<MultiStepLR>(opt, milestones, r.get("gamma", 0.1));
  }
  if (name == "cosine") {
    const auto t_max = positive(r, "t_max");
    return std::make_shared<CosineAnnealingLR>(opt, t_max, r.get("eta_min", 0.0));
  }
  if (name == "exponential") return std::make_shared<ExponentialLR>(opt, r.required<double>("gamma"));
  if (name == "onecycle") return make_one_cycle(r, opt);
  if (name == "linear") {
    const double start = r.get("start_factor", 1.0 / 3.0), end = r.get("end_factor", 1.0);
    return std::make_shared<LinearLR>(opt, start, end, r.get<int64_t>("total_iters", 5));
  }
  if (name == "sequential") {
    const auto& list = r.raw("schedulers");
    if (!list.is_array() || list.empty()) r.fail("schedulers", "expected a non-empty list of schedulers");
    std::vector<std::shared_ptr<LRScheduler>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      ConfigReader part(list[i], r.path_of("schedulers") + "[" + std::to_string(i) + "]");
      parts.push_back(make_scheduler(part, opt));
      part.finish();
    }
    const auto milestones = r.required<std::vector<int64_t>>("milestones");
    return std::make_shared<SequentialLR>(opt, parts, milestones);
  }
  if (name == "plateau") {
    ReduceLROnPlateauOptions o;
    o.mode = r.get("mode", o.mode);
    o.factor = r.get("factor", o.factor);
    o.patience = r.get("patience", o.patience);
    o.threshold = r.get("threshold", o.threshold);
    o.threshold_mode = r.get("threshold_mode", o.threshold_mode);
    o.cooldown = r.get("cooldown", o.cooldown);
    o.min_lr = r.get("min_lr", o.min_lr);
    o.eps = r.get("eps", o.eps);
    return std::make_shared<ReduceLROnPlateau>(opt, o);
  }
  r.fail("name", "unknown scheduler '" + name + "' (step, multistep, cosine, exponential, onecycle, linear, sequential, plateau)");
}

}  // namespace

std::shared_ptr<LRScheduler> make_scheduler_config(const nlohmann::json& config, Optimizer& opt, const std::string& path) {
  ConfigReader r(config, path);
  auto s = make_scheduler(r, opt);
  r.finish();
  return s;
}

OptimizerConfig make_optimizer_config(const nlohmann::json& config, const NamedParams& params, const std::string& path) {
  ConfigReader r(config, path);
  OptimizerConfig out;
  auto sched = r.child("scheduler");
  out.optimizer = make_optimizer(r, params);
  if (sched) {
    out.scheduler = make_scheduler(*sched, *out.optimizer);
    out.interval = sched->get("interval", out.interval);
    if (out.interval != "epoch" && out.interval != "step")
      sched->fail("interval", "must be \"epoch\" or \"step\", got \"" + out.interval + "\"");
    out.frequency = sched->get("frequency", out.frequency);
    if (out.frequency < 1) sched->fail("frequency", "must be >= 1, got " + std::to_string(out.frequency));
    out.monitor = sched->get("monitor", std::string(out.scheduler->needs_metric() ? "val_loss" : ""));
    out.strict = sched->get("strict", out.strict);
    out.name = sched->get("log_name", out.name);
    sched->finish();
  }
  r.finish();
  return out;
}

}  // namespace hg::training
