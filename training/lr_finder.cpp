// The learning-rate range test (training/lr_finder.h).
#include "training/lr_finder.h"

#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "engine/generator.h"
#include "training/callback.h"
#include "training/lr_scheduler.h"
#include "training/py_format.h"

namespace hg::training {

namespace {

[[noreturn]] void bad(const std::string& option, const std::string& what) {
  throw InvalidArgument("lr_find: " + option + " " + what);
}

}  // namespace

void check_lr_finder_options(const LRFinderOptions& o) {
  if (!(o.min_lr > 0)) bad("min_lr", py_repr(o.min_lr) + " must be > 0");
  if (!(o.max_lr > o.min_lr)) bad("max_lr", py_repr(o.max_lr) + " must be > min_lr " + py_repr(o.min_lr));
  if (o.num_training < 1) bad("num_training", std::to_string(o.num_training) + " must be >= 1");
  if (o.mode != "exponential" && o.mode != "linear") bad("mode", "'" + o.mode + "' is not exponential or linear");
  if (o.early_stop_threshold && !(*o.early_stop_threshold > 0))
    bad("early_stop_threshold", py_repr(*o.early_stop_threshold) + " must be > 0 (or unset)");
  if (!(o.beta >= 0 && o.beta < 1)) bad("beta", py_repr(o.beta) + " must be in [0, 1)");
}

namespace {

// Lightning's _ExponentialLR / _LinearLR: from min_lr towards max_lr over num_training steps.
class SweepLR : public LRScheduler {
 public:
  SweepLR(Optimizer& opt, const LRFinderOptions& o) : LRScheduler(opt), o_(o) {
    for (double& b : base_lrs_) b = o_.min_lr;
    last_epoch_ = -1;
    LRScheduler::step();
  }
  std::string name() const override { return "LRFinderSweep"; }

 protected:
  double lr_at(size_t g) override {
    const double r = static_cast<double>(last_epoch_) / static_cast<double>(o_.num_training), base = base_lrs_[g];
    return o_.mode == "exponential" ? base * std::pow(o_.max_lr / base, r) : base + r * (o_.max_lr - base);
  }

 private:
  LRFinderOptions o_;
};

// Swaps in the sweep when fit starts, records lr and smoothed loss per step, stops on divergence.
class SweepCallback : public Callback {
 public:
  SweepCallback(const LRFinderOptions& o, LRFinderResult& r) : o_(o), r_(r) {}
  std::string state_key() const override { return "LRFinder"; }
  void on_fit_start(Trainer& t, LightningModule&) override {
    auto& configs = t.optimizer_configs();
    if (configs.size() != 1)
      throw InvalidArgument("lr_find: configure_optimizers() returned " + std::to_string(configs.size()) +
                            " optimizers; the finder sweeps exactly one");
    OptimizerConfig& c = configs[0];
    optimizer = c.optimizer;
    saved = c.optimizer->state_dict();
    for (auto& [name, tensor] : saved.tensors) tensor = tensor.clone();
    c.scheduler = std::make_shared<SweepLR>(*c.optimizer, o_);
    c.interval = "step";
    c.frequency = 1;
    c.monitor.clear();
  }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    r_.lrs.push_back(optimizer->param_groups()[0].lr());
  }
  void on_train_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t idx) override {
    if ((idx + 1) % t.options().accumulate_grad_batches != 0 && idx + 1 != t.num_training_batches()) {
      r_.lrs.pop_back();  // not an optimizer step: no point
      return;
    }
    const Tensor& loss = t.last_loss();
    if (!loss.defined()) {
      r_.losses.push_back(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    const double step = static_cast<double>(t.global_step());
    avg_ = o_.beta * avg_ + (1 - o_.beta) * static_cast<double>(loss.item());
    const double smoothed = avg_ / (1 - std::pow(o_.beta, step + 1));
    if (o_.early_stop_threshold && step > 1 && smoothed > *o_.early_stop_threshold * best_) {
      t.should_stop = true;
      r_.diverged = true;
    }
    if (smoothed < best_ || step == 1) best_ = smoothed;
    r_.losses.push_back(smoothed);
  }
  std::shared_ptr<Optimizer> optimizer;  // the swept one, restored from `saved`
  StateBlob saved;

 private:
  LRFinderOptions o_;
  LRFinderResult& r_;
  double avg_ = 0, best_ = std::numeric_limits<double>::infinity();
};

// What the sweep changes outside the optimizer: the module's tensors, device and mode, and the
// default generators.
struct ModuleSnapshot {
  explicit ModuleSnapshot(models::Module& m) : m(m), training(m.training()) {
    for (auto& [name, t] : m.state_dict()) {
      if (!device) device = t.device();
      tensors.emplace(name, t.clone());
    }
    std::vector<Device> devices{Device::cpu()};
    for (int i = 0; i < hpu_device_count(); ++i) devices.push_back(Device::hpu(i));
    for (Device d : devices) rng.push_back({d, default_generator(d).seed(), default_generator(d).offset()});
  }
  void restore() {
    if (device) m.to(*device);
    m.load_state_dict(tensors, true);
    m.train(training);
    for (const Rng& r : rng) {
      Generator& g = default_generator(r.device);
      g.manual_seed(r.seed);
      g.set_offset(r.offset);
    }
  }
  models::Module& m;
  bool training;
  std::optional<Device> device;
  std::map<std::string, Tensor> tensors;
  struct Rng {
    Device device;
    uint64_t seed, offset;
  };
  std::vector<Rng> rng;
};

// torch.gradient(y, spacing=[x]) (edge_order 1): second-order central differences on uneven
// spacing inside, one-sided differences at the ends.
std::vector<double> gradient(const std::vector<double>& y, const std::vector<double>& x) {
  const size_t n = y.size();
  std::vector<double> g(n);
  g[0] = (y[1] - y[0]) / (x[1] - x[0]);
  g[n - 1] = (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]);
  for (size_t i = 1; i + 1 < n; ++i) {
    const double hl = x[i] - x[i - 1], hr = x[i + 1] - x[i];
    g[i] = (hl * hl * y[i + 1] - hr * hr * y[i - 1] + (hr * hr - hl * hl) * y[i]) / (hl * hr * (hl + hr));
  }
  return g;
}

}  // namespace

std::optional<size_t> LRFinderResult::suggestion_index(int64_t skip_begin, int64_t skip_end) const {
  if (skip_begin < 0 || skip_end < 0)
    throw InvalidArgument("LRFinderResult::suggestion: skip_begin " + std::to_string(skip_begin) + " and skip_end " +
                          std::to_string(skip_end) + " must be >= 0");
  const auto n = static_cast<int64_t>(std::min(lrs.size(), losses.size()));
  std::vector<double> x, y;
  std::vector<size_t> at;
  for (int64_t i = skip_begin; i < n - skip_end; ++i) {
    if (!std::isfinite(losses[i])) continue;
    x.push_back(lrs[i]);
    y.push_back(losses[i]);
    at.push_back(static_cast<size_t>(i));
  }
  if (y.size() < 2) return std::nullopt;
  const std::vector<double> g = gradient(y, x);
  size_t best = 0;
  for (size_t i = 1; i < g.size(); ++i)
    if (g[i] < g[best]) best = i;  // the first of equal minima, as argmin
  return at[best];
}

std::optional<double> LRFinderResult::suggestion(int64_t skip_begin, int64_t skip_end) const {
  const auto i = suggestion_index(skip_begin, skip_end);
  if (!i) return std::nullopt;
  return lrs[*i];
}

std::string LRFinderResult::table() const {
  const auto best = suggestion_index();
  std::ostringstream o;
  o << std::setw(5) << "step" << std::setw(14) << "lr" << std::setw(14) << "loss" << "\n";
  for (size_t i = 0; i < lrs.size() && i < losses.size(); ++i)
    o << std::setw(5) << i << std::setw(14) << py_format(lrs[i], ".4e") << std::setw(14)
      << py_format(losses[i], ".6f") << (best && *best == i ? "  <- suggestion" : "") << "\n";
  return o.str();
}

LRFinderResult lr_find(const Trainer& trainer, LightningModule& m, const DataLoader& train, LRFinderOptions options) {
  return lr_find(trainer.options(), m, train, std::move(options));
}

LRFinderResult lr_find(TrainerOptions o, LightningModule& m, const DataLoader& train, LRFinderOptions options) {
  check_lr_finder_options(options);
  const int world = (o.devices.count == -1 ? 1 : o.devices.count) * o.num_nodes;
  if (world > 1)
    throw InvalidArgument("lr_find: runs in one process; the trainer has devices x num_nodes = " + std::to_string(world));
  o.strategy = "auto";
  o.strategy_object = nullptr;
  o.max_epochs = -1;
  o.min_epochs = 0;
  o.max_steps = options.num_training;
  o.max_time.reset();
  o.min_steps = 0;
  o.num_sanity_val_steps = 0;
  o.limit_val_batches = Limit(0);
  o.deterministic = false;  // seeding would move the generators this run restores
  o.callbacks.clear();
  o.logger = std::vector<std::shared_ptr<Logger>>{};
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.fast_dev_run = 0;
  o.replay_steps = false;
  LRFinderResult r;
  auto sweep = std::make_shared<SweepCallback>(options, r);
  o.callbacks.push_back(sweep);
  ModuleSnapshot before(m.module());
  auto restore = [&] {
    if (sweep->optimizer) sweep->optimizer->load_state_dict(sweep->saved);
    before.restore();
  };
  try {
    Trainer finder(o);
    finder.fit(m, train);
    if (r.diverged)
      spdlog::info("LR finder stopped early after {} steps due to diverging loss.", finder.global_step());
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return r;
}

}  // namespace hg::training
