#include "training/trainer.h"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "engine/generator.h"
#include "graphs/lazy.h"
#include "training/callbacks.h"
#include "training/ddp_strategy.h"
#include "training/loggers.h"
#include "training/trainer_loop.h"

namespace hg::training {

namespace {

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

[[noreturn]] void bad(const std::string& option, const std::string& what) {
  throw InvalidArgument("Trainer: " + option + " " + what);
}

void check_limit(const Limit& l, const char* option, bool allow_zero) {
  if (l.batches >= 0) {
    if (!allow_zero && l.batches == 0) bad(option, "must be a positive number of batches");
    return;
  }
  if (l.batches < -1) bad(option, "must be >= 0 batches, got " + std::to_string(l.batches));
  if (!(l.fraction >= 0.0 && l.fraction <= 1.0))
    bad(option, "as a fraction must be in [0, 1], got " + num(l.fraction) + " (use an int for a batch count)");
  if (!allow_zero && l.fraction == 0.0) bad(option, "must be > 0");
}

uint64_t global_seed(uint64_t seed) {
  const char* env = std::getenv("PL_GLOBAL_SEED");
  if (!env || !*env) return seed;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(env, &end, 10);
  if (*end || env[0] == '-') throw InvalidArgument("PL_GLOBAL_SEED='" + std::string(env) + "' is not an unsigned integer");
  return v;
}

}  // namespace

int64_t Limit::resolve(int64_t available) const {
  if (batches < -1 || (batches < 0 && fraction < 0)) throw InvalidArgument("batch limit must not be negative");
  if (batches >= 0) return std::min(available, batches);
  return static_cast<int64_t>(std::floor(static_cast<double>(available) * fraction));
}

int64_t limit_batches(const Limit& limit, int64_t available, const char* option) {
  const int64_t n = limit.resolve(available);
  if (n == 0 && available > 0 && limit.batches < 0 && limit.fraction > 0)
    throw InvalidArgument("Trainer: " + std::string(option) + "=" + num(limit.fraction) + " of " +
                          std::to_string(available) + " batches is less than one batch; raise it");
  return n;
}

Devices::Devices(const char* s) {
  const std::string v = s ? s : "";
  if (v == "auto" || v == "-1") {
    count = -1;
    return;
  }
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1) throw InvalidArgument("Trainer: devices '" + v + "' is not \"auto\" or a positive count");
  count = static_cast<int>(n);
}

bool monitors(const Callback& cb) {
  return dynamic_cast<const ModelCheckpoint*>(&cb) || dynamic_cast<const EarlyStopping*>(&cb);
}

std::filesystem::path checkpoint_callback_path(const Trainer& t, const std::string& which) {
  const ModelCheckpoint* mc = nullptr;
  for (const auto& cb : t.callbacks())
    if ((mc = dynamic_cast<const ModelCheckpoint*>(cb.get()))) break;
  if (!mc) throw InvalidArgument("ckpt_path='" + which + "' needs a ModelCheckpoint callback, and the trainer has none");
  if (which == "best") {
    if (mc->best_model_path().empty())
      throw InvalidArgument("ckpt_path='best': the ModelCheckpoint has not saved a checkpoint yet (best_model_path is empty)");
    return mc->best_model_path();
  }
  if (!mc->last_model_path().empty()) return mc->last_model_path();
  // A new Trainer resuming: the newest last*.ckpt in the checkpoint directory.
  std::filesystem::path newest;
  std::filesystem::file_time_type newest_time{};
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(mc->dirpath(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("last", 0) != 0 || e.path().extension() != ".ckpt") continue;
    if (newest.empty() || e.last_write_time() > newest_time) {
      newest = e.path();
      newest_time = e.last_write_time();
    }
  }
  if (newest.empty())
    throw InvalidArgument("ckpt_path='last': no last checkpoint in '" + mc->dirpath().string() +
                          "' (ModelCheckpoint writes one with save_last)");
  return newest;
}

std::chrono::milliseconds parse_max_time(const std::string& dhms) {
  const auto fail = [&] {
    return InvalidArgument("max_time '" + dhms + "' is not \"DD:HH:MM:SS\" (days, hours, minutes, seconds)");
  };
  std::vector<int64_t> parts;
  size_t pos = 0;
  while (true) {
    const size_t colon = dhms.find(':', pos);
    const std::string part = dhms.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) throw fail();
    parts.push_back(std::stoll(part));
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  if (parts.size() != 4) throw fail();
  using namespace std::chrono;
  return duration_cast<milliseconds>(days(parts[0]) + hours(parts[1]) + minutes(parts[2]) + seconds(parts[3]));
}

void seed_everything(uint64_t seed) {
  manual_seed(Device::cpu(), seed);
  for (int i = 0; i < hpu_device_count(); ++i) manual_seed(Device::hpu(i), seed);
}

Trainer::Trainer(TrainerOptions opt) : opt_(std::move(opt)), loop_(std::make_unique<Loop>(*this)) {
  TrainerOptions& o = opt_;
  if (o.accelerator != "auto" && o.accelerator != "hpu" && o.accelerator != "cpu")
    bad("accelerator", "'" + o.accelerator + "' is not one of auto, hpu, cpu");
  if (o.devices.count == 0 || o.devices.count < -1) bad("devices", "must be \"auto\" or >= 1, got " + std::to_string(o.devices.count));
  const int devices = o.devices.count == -1 ? 1 : o.devices.count;
  if (o.num_nodes < 1) bad("num_nodes", "must be >= 1, got " + std::to_string(o.num_nodes));
  if (o.precision == "32") o.precision = "32-true";
  if (o.precision == "bf16") o.precision = "bf16-mixed";
  if (o.precision != "32-true" && o.precision != "bf16-mixed")
    bad("precision", "'" + o.precision + "' is not one of \"32\", \"32-true\", \"bf16-mixed\"");
  if (o.max_epochs && *o.max_epochs < -1) bad("max_epochs", "must be >= -1, got " + std::to_string(*o.max_epochs));
  if (o.min_epochs < 0) bad("min_epochs", "must be >= 0, got " + std::to_string(o.min_epochs));
  if (o.max_steps < -1) bad("max_steps", "must be >= -1, got " + std::to_string(o.max_steps));
  if (o.min_steps < 0) bad("min_steps", "must be >= 0, got " + std::to_string(o.min_steps));
  if (o.max_time && o.max_time->count() <= 0)
    bad("max_time", "must be positive, got " + std::to_string(o.max_time->count()) + " ms");
  check_limit(o.limit_train_batches, "limit_train_batches", true);
  check_limit(o.limit_val_batches, "limit_val_batches", true);
  check_limit(o.limit_test_batches, "limit_test_batches", true);
  check_limit(o.limit_predict_batches, "limit_predict_batches", true);
  check_limit(o.val_check_interval, "val_check_interval", false);
  if (o.check_val_every_n_epoch && *o.check_val_every_n_epoch < 1)
    bad("check_val_every_n_epoch", "must be >= 1 or unset, got " + std::to_string(*o.check_val_every_n_epoch));
  if (!o.check_val_every_n_epoch && o.val_check_interval.batches < 0)
    bad("val_check_interval", "must be a number of batches when check_val_every_n_epoch is unset");
  if (o.num_sanity_val_steps < -1) bad("num_sanity_val_steps", "must be >= -1 (-1: all), got " + std::to_string(o.num_sanity_val_steps));
  if (o.log_every_n_steps < 1) bad("log_every_n_steps", "must be >= 1, got " + std::to_string(o.log_every_n_steps));
  if (o.accumulate_grad_batches < 1)
    bad("accumulate_grad_batches", "must be >= 1, got " + std::to_string(o.accumulate_grad_batches));
  if (o.gradient_clip_val && !(*o.gradient_clip_val >= 0.0))
    bad("gradient_clip_val", "must be >= 0, got " + num(*o.gradient_clip_val));
  if (o.gradient_clip_algorithm != "norm" && o.gradient_clip_algorithm != "value")
    bad("gradient_clip_algorithm", "'" + o.gradient_clip_algorithm + "' is not one of norm, value");
  if (o.fast_dev_run < 0) bad("fast_dev_run", "must be >= 0, got " + std::to_string(o.fast_dev_run));
  if (o.dist_timeout.count() <= 0) bad("dist_timeout", "must be positive");
  for (const auto& cb : o.callbacks)
    if (!cb) bad("callbacks", "holds a null callback");
  if (o.logger)
    for (const auto& lg : *o.logger)
      if (!lg) bad("logger", "holds a null logger");

  // Lightning's derived settings.
  if (!o.max_epochs) o.max_epochs = o.max_steps == -1 && !o.max_time ? 1000 : -1;
  if (o.fast_dev_run > 0) {
    const int n = o.fast_dev_run;
    o.limit_train_batches = o.limit_val_batches = o.limit_test_batches = o.limit_predict_batches = Limit(n);
    o.max_steps = n;
    o.max_epochs = 1;
    o.num_sanity_val_steps = 0;
    o.val_check_interval = Limit(1.0);
    o.check_val_every_n_epoch = 1;
  }

  // Strategy.
  const int world = devices * o.num_nodes;
  if (o.strategy_object) {
    loop_->strategy = o.strategy_object;
  } else if (o.strategy == "auto" || o.strategy == "hpu_single") {
    if (world > 1 && o.strategy == "hpu_single")
      bad("strategy", "'hpu_single' runs one device, but devices * num_nodes = " + std::to_string(world));
    if (world > 1)
      loop_->strategy = std::make_shared<DDPStrategy>(DDPOptions{}, "hpu_ddp");
    else
      loop_->strategy = std::make_shared<SingleHPUStrategy>();
  } else if (o.strategy == "hpu_ddp" || o.strategy == "hpu_parallel") {
    loop_->strategy = std::make_shared<DDPStrategy>(DDPOptions{}, o.strategy);
  } else {
    bad("strategy", "'" + o.strategy + "' is not one of auto, hpu_single, hpu_parallel, hpu_ddp");
  }
  loop_->device = o.accelerator == "cpu" ? Device::cpu() : Device::hpu(0);

  // Callbacks (ModelCheckpoints last, as in Lightning) and loggers.
  bool has_checkpoint = false, has_bar = false;
  for (const auto& cb : o.callbacks) {
    has_checkpoint |= dynamic_cast<ModelCheckpoint*>(cb.get()) != nullptr;
    has_bar |= dynamic_cast<ProgressBar*>(cb.get()) != nullptr;
  }
  if (has_checkpoint && !o.enable_checkpointing)
    bad("enable_checkpointing", "is false, but callbacks holds a ModelCheckpoint");
  if (has_bar && !o.enable_progress_bar) bad("enable_progress_bar", "is false, but callbacks holds a ProgressBar");
  for (const auto& cb : o.callbacks)
    if (!dynamic_cast<ModelCheckpoint*>(cb.get())) callbacks_.push_back(cb);
  if (o.enable_progress_bar && !has_bar) callbacks_.push_back(std::make_shared<ProgressBar>());
  for (const auto& cb : o.callbacks)
    if (dynamic_cast<ModelCheckpoint*>(cb.get())) callbacks_.push_back(cb);
  if (o.enable_checkpointing && !has_checkpoint && o.fast_dev_run == 0)
    callbacks_.push_back(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.save_last = true}));
  if (o.logger)
    loggers_ = *o.logger;
  else
    loggers_.push_back(std::make_shared<CSVLogger>(default_root_dir()));
  if (o.fast_dev_run > 0) loggers_.clear();

  if (o.deterministic) seed_everything(global_seed(o.seed));
}

Trainer::~Trainer() {
  try {
    if (loop_->environment_ready) loop_->strategy->teardown();
  } catch (const std::exception& e) {
    spdlog::error("Trainer: strategy teardown failed: {}", e.what());
  }
}

Strategy& Trainer::strategy() { return *loop_->strategy; }
bool Trainer::is_global_zero() { return loop_->strategy->is_global_zero(); }
Device Trainer::device() { return loop_->environment_ready ? loop_->strategy->root_device() : loop_->device; }

std::filesystem::path Trainer::default_root_dir() const {
  return opt_.default_root_dir.empty() ? std::filesystem::current_path() : opt_.default_root_dir;
}

std::filesystem::path Trainer::log_dir() const { return loggers_.empty() ? default_root_dir() : loggers_[0]->log_dir(); }

std::ostream& Trainer::out() const { return opt_.out ? *opt_.out : std::cout; }

void Trainer::run_stage(LightningModule& m, const std::string& stage, const std::string& ckpt_path,
                        const std::function<void()>& body) {
  ckpt_path_.clear();
  try {
    loop_->begin(m, stage);
    if (stage == "fit") loop_->configure_optimizers(m);
    if (!ckpt_path.empty()) {
      ckpt_path_ = loop_->resolve_ckpt_path(ckpt_path);
      loop_->restore(m, ckpt_path_, stage == "fit");
    }
    body();
  } catch (const std::exception& e) {
    for (auto& cb : callbacks_) cb->on_exception(*this, m, e);
    loop_->end(m, stage, "failed");
    throw;
  }
  loop_->end(m, stage, "success");
}

void Trainer::fit(LightningModule& m, const DataLoader& train, const DataLoader* val, const std::string& ckpt_path) {
  run_stage(m, "fit", ckpt_path, [&] {
    loop_->strategy->setup_module(m.module());
    loop_->fit(m, train, val);
  });
}

std::vector<std::map<std::string, double>> Trainer::validate(LightningModule& m, const DataLoader& data,
                                                             const std::string& ckpt_path) {
  std::map<std::string, double> r;
  run_stage(m, "validate", ckpt_path, [&] {
    const DataLoader d = loop_->strategy->distribute(data, false, 0);
    r = loop_->evaluate(m, d, limit_batches(opt_.limit_val_batches, d.num_batches(), "limit_val_batches"), false);
  });
  return {r};
}

std::vector<std::map<std::string, double>> Trainer::test(LightningModule& m, const DataLoader& data,
                                                         const std::string& ckpt_path) {
  std::map<std::string, double> r;
  run_stage(m, "test", ckpt_path, [&] {
    const DataLoader d = loop_->strategy->distribute(data, false, 0);
    r = loop_->evaluate(m, d, limit_batches(opt_.limit_test_batches, d.num_batches(), "limit_test_batches"), true);
  });
  return {r};
}

std::vector<Tensor> Trainer::predict(LightningModule& m, const DataLoader& data, const std::string& ckpt_path) {
  std::vector<Tensor> r;
  run_stage(m, "predict", ckpt_path, [&] { r = loop_->predict(m, data); });
  return r;
}

// ---- Loop: shared pieces ----

Trainer::Loop::HookScope::HookScope(Loop& l, MetricStore* store, bool step, std::string name)
    : l(l), prev_active(l.active), prev_step(l.step_hook), prev_hook(std::move(l.hook)) {
  l.active = store;
  l.step_hook = step;
  l.hook = std::move(name);
}

Trainer::Loop::HookScope::~HookScope() {
  l.active = prev_active;
  l.step_hook = prev_step;
  l.hook = std::move(prev_hook);
}

void Trainer::Loop::setup_environment() {
  if (environment_ready) return;
  if (device.is_hpu()) graphs::init_lazy_mode_from_env();
  StrategyContext ctx{device, t.opt_.devices.count == -1 ? 1 : t.opt_.devices.count, t.opt_.num_nodes,
                      t.opt_.dist_timeout, t.opt_.deterministic};
  strategy->setup_environment(ctx);
  environment_ready = true;
  device = strategy->root_device();
}

void Trainer::Loop::begin(LightningModule& m, const std::string& stage) {
  setup_environment();
  lazy = device.is_hpu() && graphs::lazy_mode_enabled();
  t.module_ = &m;
  m.trainer_ = &t;
  t.stage_ = stage;
  t.should_stop = false;
  plateau_pending = false;
  time_before = std::chrono::milliseconds(0);
  t.callback_metrics_.clear();
  t.progress_bar_metrics_.clear();
  t.logged_metrics_.clear();
  auto params = m.module().named_parameters();
  if (params.empty() || params[0].second->device() != device) m.module().to(device);
  for (auto& cb : t.callbacks_) cb->setup(t, m, stage);
}

void Trainer::Loop::end(LightningModule& m, const std::string& stage, const char* status) {
  if (stage == "fit" && strategy->is_global_zero())
    for (auto& lg : t.loggers_) lg->finalize(status);
  for (auto& cb : t.callbacks_) cb->teardown(t, m, stage);
  t.stage_.clear();
  m.trainer_ = nullptr;
  active = nullptr;
}

void Trainer::Loop::step_sync() {
  if (lazy) graphs::mark_step(device);
}

Batch Trainer::Loop::to_device(const Batch& b) {
  Batch out;
  out.reserve(b.size());
  for (const Tensor& x : b) out.push_back(x.device() == device ? x : x.to(device));
  batch_size = !b.empty() && b[0].defined() && b[0].ndim() > 0 ? b[0].dim(0) : 1;
  return out;
}

void Trainer::Loop::publish(const MetricSets& s, bool to_callback) {
  if (to_callback)
    for (const auto& [k, v] : s.callback) t.callback_metrics_[k] = v;
  for (const auto& [k, v] : s.pbar) t.progress_bar_metrics_[k] = v;
}

void Trainer::Loop::log_to_loggers(const std::map<std::string, double>& metrics, int64_t step) {
  if (metrics.empty()) return;
  std::map<std::string, double> m = metrics;
  m.emplace("epoch", static_cast<double>(t.epoch_));
  for (const auto& [k, v] : m) t.logged_metrics_[k] = v;
  if (!strategy->is_global_zero()) return;
  for (auto& lg : t.loggers_) lg->log_metrics(m, step);
}

bool Trainer::Loop::precision_bf16() const { return t.opt_.precision == "bf16-mixed"; }

}  // namespace hg::training
