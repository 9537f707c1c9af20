// A Lightning-style trainer for classifiers on the HPU (host backend).
//
//   hg::training::Trainer trainer({.accelerator = "hpu", .devices = 1, .max_epochs = 30});
//   auto net = hg::models::zoo::mlp({64, 64, 10}, 0);
//   hg::training::SGD opt(net->named_parameters(), {.lr = 0.1, .momentum = 0.9});
//   auto fit = trainer.fit(*net, opt, train_loader, &val_loader);   // prints a bar + a line per epoch
//   trainer.save_checkpoint("digits.ckpt", *net, opt);
//   hg::training::export_classifier(*net, "repo/digits_mlp/1", "digits_mlp", 64, 10, fit.metadata());
//
// On `hpu`, each step (forward + backward) is traced lazily and runs as one compiled graph,
// compiled on the first step and replayed from the graph cache after that (HG_LAZY_MODE=0
// runs the ops eagerly on the device queue instead).
#pragma once
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/module.h"
#include "training/data.h"
#include "training/sgd.h"

namespace hg::training {

struct TrainerOptions {
  std::string accelerator = "auto";  // "hpu", "cpu" or "auto" (= hpu)
  int devices = 1;
  std::string strategy = "auto";     // "auto" or "hpu_single"
  int max_epochs = 10;
  bool enable_progress_bar = true;
  std::ostream* log = nullptr;       // default std::cout
};

struct EpochStats {
  int epoch;
  double train_loss, train_acc, val_loss, val_acc, seconds;
};

struct FitResult {
  std::vector<EpochStats> epochs;
  int global_step = 0;
  nlohmann::json metadata() const;  // what export_classifier records
};

struct EvalResult {
  double loss, accuracy;
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions opt);
  Device device() const { return device_; }
  FitResult fit(models::Module& model, SGD& opt, const DataLoader& train, const DataLoader* val = nullptr);
  EvalResult validate(models::Module& model, const DataLoader& data);
  // Checkpoint: one safetensors file, written atomically: "model.<param>" and
  // "optimizer.<param>.momentum_buffer" tensors, epoch/global_step/options in the metadata.
  void save_checkpoint(const std::filesystem::path& file, const models::Module& model, SGD& opt) const;
  void load_checkpoint(const std::filesystem::path& file, models::Module& model, SGD& opt);
  int epoch() const { return epoch_; }
  int global_step() const { return step_; }

 private:
  TrainerOptions opt_;
  Device device_;
  int epoch_ = 0, step_ = 0;
  std::ostream& out() const;
};

// Writes a model package that hgraph-serve loads: input "input" FP32 [-1, in_features],
// output "logits" FP32 [-1, num_classes].
void export_classifier(const models::Module& model, const std::filesystem::path& dir, const std::string& name,
                       int64_t in_features, int64_t num_classes, const nlohmann::json& metadata);

}  // namespace hg::training
