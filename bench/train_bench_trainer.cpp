// hg_train_bench's Trainer modes (usage in bench/train_bench.cpp):
//   trainer DIR --model M --batch B [--steps 200] [--warmup 5]
//       the raw loop's model, batches and optimizer through hg::training::Trainer (hpu, one
//       device, lazy unless HG_LAZY_MODE=0): a LightningModule whose training_step is
//       cross_entropy(forward(x), y), the batches of data.safetensors from a DataLoader; no
//       logger, checkpoint or progress bar. Timed from the first step after --warmup (the device
//       drained there) to the end of fit (drained again); one JSON line like `run`.
//   trainer-digits DIR OUT_DIR [--epochs 30] [--batch 32]
//       the digits MLP from DIR/digits/init.safetensors through the Trainer with its default
//       CSVLogger in OUT_DIR (OUT_DIR/lightning_logs/version_N/metrics.csv): train_loss per
//       epoch, val_loss and val_acc on a 20% hold-out (training::random_split, seed 0).
//   loader [--workers 2] [--batch 32] [--image-size 32] [--seconds 3]
//       the DataLoader alone: the digits (training::load_digits at --image-size, shuffled, seed 0)
//       in batches of B made by --workers threads (0: on the calling thread), epoch after epoch
//       until --seconds have passed; one JSON line with batches_per_s, samples_per_s and cpu_s.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/train_bench.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/lazy.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "training/dataloader.h"
#include "training/sgd.h"
#include "training/trainer.h"

namespace train_bench {

namespace {

using hg::Tensor;
using Clock = std::chrono::steady_clock;
namespace tr = hg::training;

class Classifier : public tr::LightningModule {
 public:
  Classifier(std::unique_ptr<hg::models::Module> net, double lr) : net_(std::move(net)), lr_(lr) {}
  hg::models::Module& module() override { return *net_; }
  Tensor training_step(const tr::Batch& b, int64_t) override {
    Tensor loss = hg::ops::cross_entropy(net_->forward(b[0]), b[1]);
    if (log_loss_) {
      tr::LogOptions per_epoch;
      per_epoch.on_step = false;
      per_epoch.on_epoch = true;
      log("train_loss", loss, per_epoch);
    }
    return loss;
  }
  void validation_step(const tr::Batch& b, int64_t) override {
    const Tensor logits = net_->forward(b[0]);
    log("val_loss", hg::ops::cross_entropy(logits, b[1]));
    const std::vector<int64_t> pred = hg::ops::argmax(logits, 1).to_indices(), y = b[1].to_indices();
    int64_t ok = 0;
    for (size_t i = 0; i < y.size(); ++i) ok += pred[i] == y[i];
    tr::LogOptions by_batch;
    by_batch.batch_size = static_cast<int64_t>(y.size());
    log("val_acc", static_cast<double>(ok) / static_cast<double>(y.size()), by_batch);
  }
  std::vector<tr::OptimizerConfig> configure_optimizers() override {
    tr::OptimizerConfig c;
    c.optimizer = std::make_shared<tr::SGD>(net_->named_parameters(), tr::SGDOptions{.lr = lr_, .momentum = kMomentum});
    return {c};
  }
  bool log_loss_ = false;

 private:
  std::unique_ptr<hg::models::Module> net_;
  double lr_;
};

// Starts the clock at the first batch after the warm-up and stops it at the end of fit, with
// hpu:0 drained at both ends.
class StepTimer : public tr::Callback {
 public:
  explicit StepTimer(int64_t warmup) : warmup_(warmup) {}
  std::string state_key() const override { return "StepTimer"; }
  void on_train_batch_start(tr::Trainer& t, tr::LightningModule&, const tr::Batch&, int64_t) override {
    if (t.global_step() != warmup_) return;
    hg::synchronize(kHpu);
    t0_ = Clock::now();
    cpu0_ = cpu_seconds();
    unix0_ = unix_seconds();
  }
  void on_fit_end(tr::Trainer&, tr::LightningModule&) override {
    hg::synchronize(kHpu);
    seconds_ = std::chrono::duration<double>(Clock::now() - t0_).count();
    cpu_ = cpu_seconds() - cpu0_;
  }
  double seconds_ = 0, cpu_ = 0, unix0_ = 0;

 private:
  int64_t warmup_;
  Clock::time_point t0_;
  double cpu0_ = 0;
};

std::shared_ptr<tr::TensorDataset> dataset(const fs::path& dir) {
  const fs::path f = dir / "data.safetensors";
  auto t = hg::models::tensors_from(hg::safetensors::read(f), f.string());
  return std::make_shared<tr::TensorDataset>(std::vector<Tensor>{t.at("x"), t.at("y")});
}

}  // namespace

int trainer_run(const fs::path& root, const Options& o) {
  const std::string model = opt(o, "model", "mlp");
  const int64_t batch = std::stoll(opt(o, "batch", "32")), steps = std::stoll(opt(o, "steps", "200")),
                warmup = std::stoll(opt(o, "warmup", "5"));
  const fs::path dir = model_dir(root, model, batch);
  Classifier m(load_model(model, dir), learning_rate(model));
  tr::DataLoader loader(dataset(dir), {.batch_size = batch, .drop_last = true});
  auto timer = std::make_shared<StepTimer>(warmup);
  tr::TrainerOptions to;
  to.accelerator = "hpu";
  to.devices = 1;
  to.max_epochs = -1;
  to.max_steps = warmup + steps;
  to.callbacks = {timer};
  to.logger = std::vector<std::shared_ptr<tr::Logger>>{};
  to.enable_checkpointing = false;
  to.enable_progress_bar = false;
  to.replay_steps = opt(o, "replay", "0") == "1";
  tr::Trainer trainer(to);
  trainer.fit(m, loader);
  const std::string mode = to.replay_steps ? "replay" : hg::graphs::lazy_mode_enabled() ? "lazy" : "eager";
  nlohmann::json j{{"runtime", "hgraph_trainer_" + mode},
                   {"steps_replayed", trainer.step_replay_stats().replayed},
                   {"model", model},
                   {"batch", batch},
                   {"threads", env_threads()},
                   {"t_start", timer->unix0_},
                   {"steps", steps},
                   {"seconds", timer->seconds_},
                   {"samples_per_s", static_cast<double>(steps * batch) / timer->seconds_},
                   {"cpu_s", timer->cpu_}};
  std::cout << j.dump() << std::endl;
  return 0;
}

int trainer_digits(const fs::path& root, const fs::path& out_dir, const Options& o) {
  const int epochs = std::stoi(opt(o, "epochs", "30"));
  const int64_t batch = std::stoll(opt(o, "batch", "32"));
  Classifier m(load_model("digits", root / "digits"), learning_rate("digits"));
  m.log_loss_ = true;
  auto digits = tr::load_digits(fs::path(HG_SOURCE_DIR) / "models/data/digits.safetensors");
  auto [train, val] = tr::random_split(digits, 0.2, 0);
  tr::DataLoader train_loader(train, {.batch_size = batch, .shuffle = true, .seed = 0});
  tr::DataLoader val_loader(val, {.batch_size = 256});
  tr::TrainerOptions to;
  to.accelerator = "hpu";
  to.devices = 1;
  to.max_epochs = epochs;
  to.num_sanity_val_steps = 0;
  to.default_root_dir = out_dir;
  to.enable_checkpointing = false;
  to.enable_progress_bar = false;
  tr::Trainer trainer(to);
  trainer.fit(m, train_loader, &val_loader);
  std::cout << "wrote " << (trainer.log_dir() / "metrics.csv").string() << "\n";
  return 0;
}

int loader_run(const Options& o) {
  const int workers = std::stoi(opt(o, "workers", "2"));
  const int64_t batch = std::stoll(opt(o, "batch", "32")), image_size = std::stoll(opt(o, "image-size", "32"));
  const double seconds = std::stod(opt(o, "seconds", "3"));
  auto digits = tr::load_digits(fs::path(HG_SOURCE_DIR) / "models/data/digits.safetensors", image_size);
  tr::DataLoader loader(digits, {.batch_size = batch, .shuffle = true, .seed = 0, .num_workers = workers});
  const Clock::time_point t0 = Clock::now();
  const double cpu0 = cpu_seconds();
  int64_t batches = 0, samples = 0, epoch = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    auto it = loader.epoch(epoch++);
    while (auto b = it.next()) {
      ++batches;
      samples += (*b)[0].shape()[0];
    }
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  nlohmann::json j{{"runtime", "hgraph_dataloader"}, {"workers", workers}, {"batch", batch},
                   {"image_size", image_size}, {"epochs", epoch}, {"seconds", elapsed},
                   {"batches_per_s", static_cast<double>(batches) / elapsed},
                   {"samples_per_s", static_cast<double>(samples) / elapsed}, {"cpu_s", cpu_seconds() - cpu0}};
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace train_bench
