// Trainer::save_checkpoint and the restore of ckpt_path: what goes into a checkpoint and how a
// run continues from one (training/checkpoint.h holds the file format).
#include <spdlog/spdlog.h>

#include <functional>
#include <set>

#include "engine/error.h"
#include "engine/generator.h"
#include "training/trainer_loop.h"

namespace hg::training {

namespace {

std::string normalized_precision(const std::string& p) { return p == "32" ? "32-true" : p; }

std::vector<Device> rng_devices() {
  std::vector<Device> d{Device::cpu()};
  for (int i = 0; i < hpu_device_count(); ++i) d.push_back(Device::hpu(i));
  return d;
}

}  // namespace

void Trainer::save_checkpoint(const std::filesystem::path& file, bool weights_only) {
  if (!module_) throw InvalidArgument("save_checkpoint('" + file.string() + "'): no module yet; call it during or after fit");
  if (is_global_zero()) write_checkpoint(file, loop_->dump(weights_only));
  strategy().barrier("save_checkpoint");
}

Checkpoint Trainer::Loop::dump(bool weights_only) {
  LightningModule& m = *t.module_;
  Checkpoint c;
  c.epoch = t.epoch_;
  c.global_step = t.global_step_;
  c.weights_only = weights_only;
  c.state_dict = m.module().state_dict();
  c.hyper_parameters = m.hparams();
  c.precision = t.opt_.precision;
  if (weights_only) return c;
  c.loops = {{"next_epoch", epoch_done ? t.epoch_ + 1 : t.epoch_},
             {"next_batch", epoch_done ? 0 : next_batch},
             {"total_batch_idx", total_batch_idx}};
  if (t.stage_ == "fit") c.loops["time_elapsed_ms"] = train_time().count();  // max_time's clock
  if (plateau_pending) {  // saved in on_train_epoch_end: the plateau schedulers step after it
    nlohmann::json values = nlohmann::json::object();
    for (const auto& cfg : t.optimizers_) {
      if (!cfg.scheduler || !cfg.scheduler->needs_metric() || cfg.interval != "epoch") continue;
      auto it = t.callback_metrics_.find(cfg.monitor);
      if (it != t.callback_metrics_.end()) values[cfg.monitor] = it->second;
    }
    c.loops["pending_plateau_step"] = {{"epoch", t.epoch_}, {"metrics", values}};
  }
  for (const auto& cfg : t.optimizers_) {
    c.optimizer_states.push_back(cfg.optimizer->state_dict());
    c.lr_schedulers.push_back(cfg.scheduler ? cfg.scheduler->state_dict() : nlohmann::json());
  }
  for (const auto& cb : t.callbacks_) {
    const std::string key = cb->state_key();
    if (c.callbacks.contains(key))
      throw InvalidArgument("save_checkpoint: two callbacks have the state_key '" + key + "'; give them distinct keys");
    c.callbacks[key] = cb->state_dict();
  }
  for (Device d : rng_devices()) {
    const Generator& g = default_generator(d);
    c.rng[d.str()] = {{"seed", g.seed()}, {"offset", g.offset()}};
  }
  m.on_save_checkpoint(c.module);
  return c;
}

std::filesystem::path Trainer::Loop::resolve_ckpt_path(const std::string& ckpt_path) const {
  if (ckpt_path == "last" || ckpt_path == "best") return checkpoint_callback_path(t, ckpt_path);
  return ckpt_path;
}

// The plateau step the saved run did after its on_train_epoch_end, with the metrics it monitored then.
void Trainer::Loop::replay_plateau_step(const nlohmann::json& pending, const std::function<void(const std::string&)>& fail) {
  if (!pending.is_object() || !pending.contains("epoch") || !pending["epoch"].is_number_integer() ||
      !pending.contains("metrics") || !pending["metrics"].is_object())
    fail("key 'loops.pending_plateau_step' must hold an integer 'epoch' and an object 'metrics'");
  std::map<std::string, double> saved_metrics;
  for (const auto& [k, v] : pending["metrics"].items()) {
    if (!v.is_number()) fail("key 'loops.pending_plateau_step.metrics." + k + "' is not a number");
    saved_metrics[k] = v.get<double>();
  }
  const int saved_epoch = t.epoch_;
  std::swap(t.callback_metrics_, saved_metrics);
  t.epoch_ = pending["epoch"].get<int>();
  try {
    step_schedulers("epoch", true);
  } catch (...) {
    t.epoch_ = saved_epoch;
    std::swap(t.callback_metrics_, saved_metrics);
    throw;
  }
  t.epoch_ = saved_epoch;
  std::swap(t.callback_metrics_, saved_metrics);
}

void Trainer::Loop::restore(LightningModule& m, const std::filesystem::path& file, bool full) {
  const std::string src = file.string();
  Checkpoint c = read_checkpoint(file);
  auto fail = [&](const std::string& what) { throw InvalidArgument("checkpoint '" + src + "': " + what); };
  if (full && c.weights_only)
    fail("was saved with weights_only, so it holds no optimizer, scheduler or loop state to resume training from");
  if (full) {
    if (c.optimizer_states.size() != t.optimizers_.size())
      fail("holds " + std::to_string(c.optimizer_states.size()) + " optimizer states, configure_optimizers() returned " +
           std::to_string(t.optimizers_.size()));
    if (c.lr_schedulers.size() != t.optimizers_.size()) fail("key 'lr_schedulers' does not have one entry per optimizer");
    for (size_t i = 0; i < t.optimizers_.size(); ++i)
      if (c.lr_schedulers[i].is_null() != !t.optimizers_[i].scheduler)
        fail("lr_schedulers[" + std::to_string(i) + "] " + (c.lr_schedulers[i].is_null() ? "is empty" : "is set") +
             ", but optimizer " + std::to_string(i) + (t.optimizers_[i].scheduler ? " has a scheduler" : " has none"));
  }
  std::map<std::string, Tensor> weights(c.state_dict.begin(), c.state_dict.end());
  try {
    m.module().load_state_dict(weights, true);
  } catch (const InvalidArgument& e) {
    fail(std::string("state_dict does not fit the module: ") + e.what());
  }
  if (full) {
    for (size_t i = 0; i < t.optimizers_.size(); ++i) {
      try {
        t.optimizers_[i].optimizer->load_state_dict(c.optimizer_states[i]);
        if (t.optimizers_[i].scheduler) t.optimizers_[i].scheduler->load_state_dict(c.lr_schedulers[i]);
      } catch (const InvalidArgument& e) {
        fail("optimizer_states[" + std::to_string(i) + "] / lr_schedulers[" + std::to_string(i) + "]: " + e.what());
      }
    }
    for (auto& cb : t.callbacks_) {
      auto it = c.callbacks.find(cb->state_key());
      if (it != c.callbacks.end()) cb->load_state_dict(*it);
    }
    t.epoch_ = static_cast<int>(c.loops.at("next_epoch").get<int64_t>());
    next_batch = c.loops.at("next_batch").get<int64_t>();
    total_batch_idx = c.loops.at("total_batch_idx").get<int64_t>();
    if (c.loops.contains("time_elapsed_ms")) {
      if (!c.loops["time_elapsed_ms"].is_number_integer() || c.loops["time_elapsed_ms"].get<int64_t>() < 0)
        fail("key 'loops.time_elapsed_ms' must be a non-negative integer");
      time_before = std::chrono::milliseconds(c.loops["time_elapsed_ms"].get<int64_t>());
    }
    epoch_done = false;
    t.global_step_ = c.global_step;
    if (c.loops.contains("pending_plateau_step")) replay_plateau_step(c.loops["pending_plateau_step"], fail);
    for (Device d : rng_devices()) {
      auto it = c.rng.find(d.str());
      if (it == c.rng.end()) continue;
      if (!(*it)["seed"].is_number_unsigned() || !(*it)["offset"].is_number_unsigned())
        fail("key 'rng." + d.str() + "' must hold unsigned seed and offset");
      Generator& g = default_generator(d);
      g.manual_seed((*it)["seed"].get<uint64_t>());
      g.set_offset((*it)["offset"].get<uint64_t>());
    }
  }
  if (normalized_precision(c.precision) != normalized_precision(t.opt_.precision))
    spdlog::warn("checkpoint '{}' was saved with precision '{}'; this Trainer runs '{}' (the weights are F32 either way{})", src,
                 c.precision, t.opt_.precision, full ? ", but the resumed run is not bitwise identical to an uninterrupted one" : "");
  m.on_load_checkpoint(c.module);
}

}  // namespace hg::training
