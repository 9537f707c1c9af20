// Test doubles for the Trainer tests: a small classifier LightningModule that records its hooks,
// a recording callback, an in-memory logger and a synthetic 3-class dataset.
//
//   auto data = hg::test::blobs(48, /*seed=*/1);
//   hg::training::DataLoader loader(data, {.batch_size = 8});
//   std::vector<std::string> events;
//   hg::test::TinyClassifier m(&events);
//   hg::training::Trainer t(hg::test::quiet_options(dir, {.max_epochs = 2}));
//   t.fit(m, loader, &loader);
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "models/zoo.h"
#include "training/callback.h"
#include "training/sgd.h"
#include "training/trainer.h"

namespace hg::test {

// 3 classes in 8 features: x = one-hot-ish class centre + deterministic noise, y the class.
inline std::shared_ptr<training::TensorDataset> blobs(int64_t n, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n) * 8);
  std::vector<int64_t> y(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto noise = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) % 1000) / 1000.0f - 0.5f;
  };
  for (int64_t i = 0; i < n; ++i) {
    y[i] = i % 3;
    for (int64_t j = 0; j < 8; ++j) x[i * 8 + j] = (j % 3 == y[i] ? 1.0f : 0.0f) + noise();
  }
  return std::make_shared<training::TensorDataset>(
      std::vector<Tensor>{Tensor::from_vector(x, {n, 8}), Tensor::from_indices(y, {n})});
}

class TinyClassifier : public training::LightningModule {
 public:
  explicit TinyClassifier(std::vector<std::string>* events = nullptr, uint64_t seed = 0)
      : net(models::zoo::mlp({8, 16, 3}, seed)), events_(events) {}
  models::Module& module() override { return *net; }
  Tensor training_step(const training::Batch& b, int64_t) override {
    record("training_step");
    Tensor loss = ops::cross_entropy(net->forward(b[0]), b[1]);
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }
  void validation_step(const training::Batch& b, int64_t) override {
    record("validation_step");
    log("val_loss", ops::cross_entropy(net->forward(b[0]), b[1]), {.prog_bar = true});
  }
  void test_step(const training::Batch& b, int64_t) override {
    record("test_step");
    log("test_loss", ops::cross_entropy(net->forward(b[0]), b[1]));
  }
  std::vector<training::OptimizerConfig> configure_optimizers() override {
    record("configure_optimizers");
    if (make_optimizers) return make_optimizers(*this);
    return {{.optimizer = std::make_shared<training::SGD>(net->named_parameters(), training::SGDOptions{.lr = lr, .momentum = 0.9})}};
  }
  void on_fit_start() override { record("on_fit_start"); }
  void on_fit_end() override { record("on_fit_end"); }
  void on_train_epoch_start() override { record("on_train_epoch_start"); }
  void on_train_epoch_end() override { record("on_train_epoch_end"); }
  void on_validation_epoch_start() override { record("on_validation_epoch_start"); }
  void on_validation_epoch_end() override { record("on_validation_epoch_end"); }
  void on_test_epoch_end() override { record("on_test_epoch_end"); }

  std::unique_ptr<models::Sequential> net;
  double lr = 0.1;
  std::function<std::vector<training::OptimizerConfig>(TinyClassifier&)> make_optimizers;

 private:
  void record(const std::string& e) {
    if (events_) events_->push_back(e);
  }
  std::vector<std::string>* events_;
};

class RecordingCallback : public training::Callback {
 public:
  explicit RecordingCallback(std::vector<std::string>* events) : events_(events) {}
  std::string state_key() const override { return "RecordingCallback"; }
  void setup(training::Trainer&, training::LightningModule&, const std::string& stage) override { record("setup:" + stage); }
  void teardown(training::Trainer&, training::LightningModule&, const std::string& stage) override {
    record("teardown:" + stage);
  }
  void on_fit_start(training::Trainer&, training::LightningModule&) override { record("cb.on_fit_start"); }
  void on_fit_end(training::Trainer&, training::LightningModule&) override { record("cb.on_fit_end"); }
  void on_train_epoch_start(training::Trainer&, training::LightningModule&) override { record("cb.on_train_epoch_start"); }
  void on_train_batch_start(training::Trainer&, training::LightningModule&, const training::Batch&, int64_t i) override {
    record("cb.on_train_batch_start:" + std::to_string(i));
  }
  void on_train_batch_end(training::Trainer&, training::LightningModule&, const training::Batch&, int64_t i) override {
    record("cb.on_train_batch_end:" + std::to_string(i));
  }
  void on_train_epoch_end(training::Trainer&, training::LightningModule&) override { record("cb.on_train_epoch_end"); }
  void on_validation_epoch_start(training::Trainer& t, training::LightningModule&) override {
    record(t.sanity_checking() ? "cb.on_validation_epoch_start(sanity)" : "cb.on_validation_epoch_start");
  }
  void on_validation_batch_end(training::Trainer&, training::LightningModule&, const training::Batch&, int64_t i) override {
    record("cb.on_validation_batch_end:" + std::to_string(i));
  }
  void on_validation_epoch_end(training::Trainer&, training::LightningModule&) override {
    record("cb.on_validation_epoch_end");
  }
  void on_validation_end(training::Trainer&, training::LightningModule&) override { record("cb.on_validation_end"); }
  void on_test_batch_end(training::Trainer&, training::LightningModule&, const training::Batch&, int64_t i) override {
    record("cb.on_test_batch_end:" + std::to_string(i));
  }
  void on_test_epoch_end(training::Trainer&, training::LightningModule&) override { record("cb.on_test_epoch_end"); }
  void on_predict_batch_end(training::Trainer&, training::LightningModule&, const training::Batch&, int64_t i) override {
    record("cb.on_predict_batch_end:" + std::to_string(i));
  }
  void on_before_optimizer_step(training::Trainer&, training::LightningModule&, training::Optimizer&) override {
    record("cb.on_before_optimizer_step");
  }
  void on_exception(training::Trainer&, training::LightningModule&, const std::exception&) override {
    record("cb.on_exception");
  }
  nlohmann::json state_dict() const override { return {{"seen", static_cast<int64_t>(events_ ? events_->size() : 0)}}; }
  void load_state_dict(const nlohmann::json& s) override { loaded = s; }
  nlohmann::json loaded;

 private:
  void record(const std::string& e) {
    if (events_) events_->push_back(e);
  }
  std::vector<std::string>* events_;
};

class MemoryLogger : public training::Logger {
 public:
  std::string name() const override { return "memory"; }
  std::string version() const override { return "0"; }
  std::filesystem::path log_dir() const override { return dir; }
  void log_hyperparams(const nlohmann::json& h) override { hparams = h; }
  void log_metrics(const std::map<std::string, double>& m, int64_t step) override { rows.emplace_back(step, m); }
  void finalize(const std::string& s) override { status = s; }
  std::filesystem::path dir = "/nonexistent";
  nlohmann::json hparams;
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
  std::string status;
};

// Options for tests: cpu unless set, files under `dir`, no progress bar, no logger unless set.
inline training::TrainerOptions quiet_options(const std::filesystem::path& dir, training::TrainerOptions o = {}) {
  o.accelerator = o.accelerator == "auto" ? "cpu" : o.accelerator;
  o.default_root_dir = dir;
  o.enable_progress_bar = false;
  if (!o.logger) o.logger = std::vector<std::shared_ptr<training::Logger>>{};
  return o;
}

// Every parameter's values, in order.
inline std::vector<std::vector<float>> weights_of(models::Module& m) {
  std::vector<std::vector<float>> w;
  for (auto& [name, t] : m.named_parameters()) w.push_back(t->to_vector());
  return w;
}

}  // namespace hg::test
