// The fit loop: epochs, training batches, optimization steps, scheduler updates, in-epoch
// validation. Lightning's order; see trainer.h for the lazy step graph.
#include <spdlog/spdlog.h>

#include <unordered_map>
#include <utility>

#include "engine/autocast.h"
#include "engine/error.h"
#include "engine/hash.h"
#include "engine/ops.h"
#include "training/trainer_loop.h"

namespace hg::training {

namespace {

std::string config_name(size_t i) { return "configure_optimizers()[" + std::to_string(i) + "]"; }

}  // namespace

void Trainer::Loop::configure_optimizers(LightningModule& m) {
  std::vector<OptimizerConfig> configs = m.configure_optimizers();
  std::unordered_map<const TensorImpl*, std::pair<size_t, std::string>> owner;
  for (size_t i = 0; i < configs.size(); ++i) {
    const OptimizerConfig& c = configs[i];
    if (!c.optimizer) throw InvalidArgument(config_name(i) + ": optimizer is null");
    if (c.interval != "step" && c.interval != "epoch")
      throw InvalidArgument(config_name(i) + ": interval '" + c.interval + "' is not \"step\" or \"epoch\"");
    if (c.frequency < 1) throw InvalidArgument(config_name(i) + ": frequency must be >= 1, got " + std::to_string(c.frequency));
    if (c.scheduler) {
      if (&c.scheduler->optimizer() != c.optimizer.get())
        throw InvalidArgument(config_name(i) + ": the scheduler '" + c.scheduler->name() +
                              "' drives another optimizer than the config's");
      if (c.scheduler->needs_metric() && c.monitor.empty())
        throw InvalidArgument(config_name(i) + ": a " + c.scheduler->name() +
                              " scheduler needs `monitor` (the logged metric it steps with)");
    }
    if (!m.automatic_optimization) continue;
    for (const auto& [name, p] : c.optimizer->params()) {
      auto [it, fresh] = owner.try_emplace(p->impl(), i, name);
      if (!fresh && it->second.first != i)
        throw InvalidArgument("configure_optimizers: parameter '" + name + "' is in optimizer " + std::to_string(it->second.first) +
                              " and optimizer " + std::to_string(i) +
                              "; with automatic optimization every optimizer steps after each backward, so their "
                              "parameters must not overlap");
    }
  }
  if (!m.automatic_optimization) {
    if (t.opt_.gradient_clip_val)
      throw InvalidArgument("Trainer: gradient_clip_val is not supported with manual optimization; clip in training_step");
    if (t.opt_.accumulate_grad_batches != 1)
      throw InvalidArgument("Trainer: accumulate_grad_batches is not supported with manual optimization; accumulate in training_step");
  }
  if (configs.empty()) spdlog::warn("configure_optimizers() returned no optimizer: fit runs without optimizer steps");
  t.optimizers_ = std::move(configs);
}

const Tensor& Trainer::last_loss() const { return loop_->last_loss; }

bool Trainer::Loop::max_steps_reached() const { return t.opt_.max_steps != -1 && t.global_step_ >= t.opt_.max_steps; }

bool Trainer::Loop::can_stop_early() const {
  return t.epoch_ >= t.opt_.min_epochs && t.global_step_ >= t.opt_.min_steps;
}

std::chrono::milliseconds Trainer::Loop::train_time() const {
  return time_before + std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - train_start);
}

void Trainer::Loop::check_max_time() {
  if (!t.opt_.max_time || time_up) return;
  double up = train_time() >= *t.opt_.max_time ? 1.0 : 0.0;
  if (strategy->world_size() > 1) up = strategy->reduce(up, ReduceOp::Max);  // every rank stops at the same batch
  if (up < 0.5) return;
  time_up = true;
  t.should_stop = true;
  spdlog::info("Time limit reached. Elapsed time is {} s. Signaling Trainer to stop.",
               static_cast<double>(train_time().count()) / 1000.0);
}

void Trainer::Loop::fit(LightningModule& m, const DataLoader& train, const DataLoader* val) {
  const TrainerOptions& o = t.opt_;
  const DataLoader train_d = strategy->distribute(train, train.options().shuffle, train.options().seed);
  const int64_t n = limit_batches(o.limit_train_batches, train_d.num_batches(), "limit_train_batches");
  t.num_training_batches_ = n;
  std::optional<DataLoader> val_d;
  t.num_val_batches_ = 0;
  if (val) {
    val_d = strategy->distribute(*val, false, 0);
    t.num_val_batches_ = limit_batches(o.limit_val_batches, val_d->num_batches(), "limit_val_batches");
  }
  val_loader = val_d ? &*val_d : nullptr;
  if (o.val_check_interval.batches >= 0) {
    val_check_batch = o.val_check_interval.batches;
    if (o.check_val_every_n_epoch && val_check_batch > n && t.num_val_batches_ > 0)
      throw InvalidArgument("Trainer: val_check_interval (" + std::to_string(val_check_batch) +
                            ") must be <= the number of training batches (" + std::to_string(n) +
                            "); or set check_val_every_n_epoch unset to count batches across epochs");
  } else {
    val_check_batch = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * o.val_check_interval.fraction));
  }

  if (strategy->is_global_zero())
    for (auto& lg : t.loggers_) lg->log_hyperparams(m.hparams());
  for (auto& cb : t.callbacks_) cb->on_fit_start(t, m);
  m.on_fit_start();

  if (val_loader && t.num_val_batches_ > 0 && o.num_sanity_val_steps != 0) {
    const int64_t k = o.num_sanity_val_steps == -1 ? t.num_val_batches_
                                                   : std::min<int64_t>(t.num_val_batches_, o.num_sanity_val_steps);
    t.sanity_checking_ = true;
    evaluate(m, *val_loader, k, false);
    t.sanity_checking_ = false;
    eval_metrics.reset();
    t.callback_metrics_.clear();
    t.progress_bar_metrics_.clear();
  }

  replay.reset();
  if (o.replay_steps) {
    if (lazy && m.automatic_optimization && o.accumulate_grad_batches == 1 && strategy->replay_steps(true))
      replay = std::make_unique<graphs::StepReplay>(device);
    else
      spdlog::warn("Trainer: replay_steps needs lazy mode on an HPU, automatic optimization, "
                   "accumulate_grad_batches 1 and, under DDP, no find_unused_parameters and no buffers to "
                   "broadcast; this fit traces every step");
  }
  if (n == 0) spdlog::warn("Trainer: limit_train_batches gives 0 training batches: fit skips training");
  t.stop_reason_.clear();
  time_up = false;
  train_start = std::chrono::steady_clock::now();
  while (n > 0) {
    // Lightning's order of the checks (FitLoop.done).
    if (max_steps_reached()) {
      t.stop_reason_ = "max_steps";
      spdlog::debug("`Trainer.fit` stopped: `max_steps={}` reached.", o.max_steps);
      break;
    }
    if (*o.max_epochs != -1 && t.epoch_ >= *o.max_epochs) {
      t.stop_reason_ = "max_epochs";
      spdlog::debug("`Trainer.fit` stopped: `max_epochs={}` reached.", *o.max_epochs);
      break;
    }
    if (t.should_stop && can_stop_early()) {
      t.stop_reason_ = time_up ? "max_time" : "should_stop";
      spdlog::debug("`Trainer.fit` stopped: {}.", time_up ? "`max_time` reached" : "`trainer.should_stop` was set");
      break;
    }
    train_epoch(m, train_d);
  }
  for (auto& cb : t.callbacks_) cb->on_fit_end(t, m);
  m.on_fit_end();
  val_loader = nullptr;
  if (replay) {
    t.replay_stats_ = replay->stats();
    const auto& r = t.replay_stats_;
    spdlog::info("Trainer: {} training steps traced, {} replayed{}{}", r.traced, r.replayed,
                 r.last_fallback.empty() ? "" : "; the last traced step did not replay: ", r.last_fallback);
    replay.reset();
    strategy->replay_steps(false);
  }
}

void Trainer::Loop::train_epoch(LightningModule& m, const DataLoader& train) {
  const int64_t n = t.num_training_batches_;
  train_metrics.reset();
  epoch_done = false;
  m.module().train();
  {
    HookScope scope(*this, &train_metrics, false, "on_train_epoch_start");
    for (auto& cb : t.callbacks_) cb->on_train_epoch_start(t, m);
    m.on_train_epoch_start();
  }
  if (replay) replay->reset();  // host-side branches on the epoch are seen again
  DataLoader::Epoch it = train.epoch(t.epoch_);
  for (int64_t i = 0; i < next_batch; ++i)  // resuming mid-epoch: the same shuffle, skipped
    if (!it.next()) throw InvalidArgument("resume: the training loader has fewer batches than the checkpoint's position " +
                                          std::to_string(next_batch));
  for (int64_t idx = next_batch; idx < n; ++idx) {
    std::optional<Batch> b = it.next();
    if (!b) throw InternalError("training loader ended after " + std::to_string(idx) + " of " + std::to_string(n) + " batches");
    train_batch(m, *b, idx);
    check_max_time();
    if (max_steps_reached() || (t.should_stop && can_stop_early())) break;
  }
  epoch_done = next_batch >= n;
  epoch_end_hooks(m);
  if (epoch_done) {
    ++t.epoch_;
    next_batch = 0;
    epoch_done = false;
  }
}

void Trainer::Loop::epoch_end_hooks(LightningModule& m) {
  const int64_t log_step = std::max<int64_t>(t.global_step_ - 1, 0);
  publish(train_metrics.epoch_metrics(*strategy), true);
  // Lightning's order: the plateau schedulers step after every on_train_epoch_end (so they can
  // monitor what the module logs there); a checkpoint written before that records the pending
  // step (dump) and a resumed run replays it (restore).
  plateau_pending = epoch_done && m.automatic_optimization;
  {
    HookScope scope(*this, &train_metrics, false, "on_train_epoch_end");
    for (auto& cb : t.callbacks_)
      if (!monitors(*cb)) cb->on_train_epoch_end(t, m);
    m.on_train_epoch_end();
    const MetricSets e = train_metrics.epoch_metrics(*strategy);
    publish(e, true);
    log_to_loggers(e.log, log_step);
    for (auto& cb : t.callbacks_)
      if (monitors(*cb)) cb->on_train_epoch_end(t, m);
  }
  if (plateau_pending) {
    plateau_pending = false;
    step_schedulers("epoch", true);
  }
}

bool Trainer::Loop::should_validate(int64_t idx) const {
  const auto& every = t.opt_.check_val_every_n_epoch;
  if (!val_loader || t.num_val_batches_ == 0) return false;
  if (every && (t.epoch_ + 1) % *every != 0) return false;
  const int64_t i = every ? idx : total_batch_idx - 1;
  return (i + 1) % val_check_batch == 0;
}

void Trainer::Loop::train_batch(LightningModule& m, const Batch& host_batch, int64_t idx) {
  const TrainerOptions& o = t.opt_;
  const int64_t n = t.num_training_batches_;
  const Batch batch = to_device(host_batch);
  last_loss = Tensor();
  const bool last = idx + 1 == n;
  const bool boundary = (idx + 1) % o.accumulate_grad_batches == 0 || last;
  bool stepped = false;
  {
    HookScope scope(*this, &train_metrics, true, "on_train_batch_start");
    for (auto& cb : t.callbacks_) cb->on_train_batch_start(t, m, host_batch, idx);
  }
  {
    HookScope scope(*this, &train_metrics, true, "training_step");
    if (m.automatic_optimization) {
      stepped = replay ? replayed_step(m, batch, idx) : automatic_step(m, batch, idx, boundary);
    } else {
      strategy->before_forward(m.module());
      AutocastGuard autocast(precision_bf16());
      m.training_step(batch, idx);
      stepped = true;
    }
  }
  step_sync();  // the step graph runs here: forward, backward, clipping, every update
  train_metrics.read_pending();
  next_batch = idx + 1;
  ++total_batch_idx;
  if (stepped) ++t.global_step_;
  if (stepped && m.automatic_optimization) step_schedulers("step", false);
  if (last && m.automatic_optimization) step_schedulers("epoch", false);
  const MetricSets s = train_metrics.step_metrics(true, *strategy);
  publish(s, true);
  {
    HookScope scope(*this, &train_metrics, true, "on_train_batch_end");
    for (auto& cb : t.callbacks_) cb->on_train_batch_end(t, m, host_batch, idx);
  }
  last_loss = Tensor();  // not kept past the batch (with its graph)
  if (stepped && t.global_step_ % o.log_every_n_steps == 0) log_to_loggers(s.log, t.global_step_ - 1);
  train_metrics.clear_step();
  if (should_validate(idx)) evaluate(m, *val_loader, t.num_val_batches_, false);
  if (stepped && m.automatic_optimization) step_schedulers("step", true);
}

bool Trainer::Loop::automatic_step(LightningModule& m, const Batch& batch, int64_t idx, bool boundary) {
  const TrainerOptions& o = t.opt_;
  if (idx % o.accumulate_grad_batches == 0)
    for (auto& c : t.optimizers_) c.optimizer->zero_grad();
  Tensor loss;
  {
    strategy->before_forward(m.module());
    AutocastGuard autocast(precision_bf16());
    loss = m.training_step(batch, idx);
  }
  last_loss = loss;
  if (!loss.defined()) return false;  // an undefined loss skips the optimization of this batch
  if (loss.numel() != 1)
    throw InvalidArgument("training_step returned a loss of " + std::to_string(loss.numel()) + " elements, expected one");
  strategy->backward(o.accumulate_grad_batches > 1 ? ops::scale(loss, 1.0 / o.accumulate_grad_batches) : loss, boundary);
  if (!boundary) return false;
  optimizer_steps(m);
  return true;
}

bool Trainer::Loop::replayed_step(LightningModule& m, const Batch& batch, int64_t idx) {
  bool stepped = false;
  std::vector<MetricStore::Logged> logged;
  auto body = [&](const Batch& b) {
    train_metrics.record_logs(&logged);
    try {
      stepped = automatic_step(m, b, idx, true);
    } catch (...) {
      train_metrics.record_logs(nullptr);
      throw;
    }
    train_metrics.record_logs(nullptr);
    // The gradients are dropped as the step ends (not as the next one starts): a replay does not
    // recompute them, so none stays behind stale.
    for (auto& c : t.optimizers_) c.optimizer->zero_grad();
    // The step's results are the tensors it logged; what a replay repeats is in its note.
    Hasher h;
    auto add = [&h](const void* p, size_t n) { h.update({static_cast<const uint8_t*>(p), n}); };
    add(&stepped, sizeof stepped);
    std::vector<Tensor> logged_tensors;
    for (MetricStore::Logged& l : logged) {
      add(l.name.c_str(), l.name.size() + 1);
      add(&l.batch_size, sizeof l.batch_size);
      const bool is_tensor = l.tensor.defined();
      add(&is_tensor, sizeof is_tensor);
      if (is_tensor) logged_tensors.push_back(std::exchange(l.tensor, Tensor()));
      else add(&l.value, sizeof l.value);
    }
    replay->note(h.digest());
    return logged_tensors;
  };
  uint64_t guard = 0;
  for (auto& c : t.optimizers_) guard = guard * 0x100000001B3ull ^ c.optimizer->replay_guard();
  const uint64_t replays = replay->stats().replayed;
  const std::vector<Tensor> out = replay->run(batch, body, guard, [this] {
    strategy->before_replayed_step();
    for (auto& c : t.optimizers_) c.optimizer->on_replayed_step();
  });
  if (replay->stats().replayed == replays) {  // traced: what a replay of it will log again
    replay_logs = std::move(logged);
    replay_stepped = stepped;
    return stepped;
  }
  size_t k = 0;
  for (const MetricStore::Logged& l : replay_logs) train_metrics.relog(l, l.is_tensor ? out.at(k++) : Tensor());
  return replay_stepped;
}

void Trainer::Loop::optimizer_steps(LightningModule& m) {
  const TrainerOptions& o = t.opt_;
  strategy->finish_gradient_sync();
  for (auto& c : t.optimizers_) {
    for (auto& cb : t.callbacks_) cb->on_before_optimizer_step(t, m, *c.optimizer);
    if (o.gradient_clip_val) {
      if (o.gradient_clip_algorithm == "norm")
        clip_grad_norm(c.optimizer->params(), *o.gradient_clip_val);
      else
        clip_grad_value(c.optimizer->params(), *o.gradient_clip_val);
    }
    c.optimizer->step();
  }
}

void Trainer::Loop::step_schedulers(const std::string& interval, bool plateau) {
  for (size_t i = 0; i < t.optimizers_.size(); ++i) {
    OptimizerConfig& c = t.optimizers_[i];
    if (!c.scheduler || c.interval != interval || c.scheduler->needs_metric() != plateau) continue;
    const int64_t count = interval == "step" ? t.global_step_ : t.epoch_ + 1;
    if (count % c.frequency != 0) continue;
    if (!plateau) {
      c.scheduler->step();
      continue;
    }
    auto it = t.callback_metrics_.find(c.monitor);
    if (it == t.callback_metrics_.end()) {
      std::string avail;
      for (const auto& [k, v] : t.callback_metrics_) avail += (avail.empty() ? "" : ", ") + k;
      const std::string msg = config_name(i) + ": " + c.scheduler->name() + " monitors '" + c.monitor +
                              "', which was not logged (available: " + (avail.empty() ? "none" : avail) + ")";
      if (c.strict) throw InvalidArgument(msg);
      spdlog::warn("{}; the scheduler does not step", msg);
      continue;
    }
    c.scheduler->step(it->second);
  }
}

}  // namespace hg::training
