// Trains a small digits classifier with hgraph's Trainer, exports it into the model repository
// of a running hgraph-serve, has the server load it and checks that the served answers are the
// in-process ones.
//
//   hgraph-serve --model-repository /tmp/repo --model-control-mode explicit --port 8000 &
//   ./train_and_serve /tmp/repo http://127.0.0.1:8000
//
// Prints the held-out accuracy, in process and served; exits 1 if they disagree.
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "engine/ops.h"
#include "models/zoo.h"
#include "server/client.h"
#include "training/dataloader.h"
#include "training/export.h"
#include "training/sgd.h"
#include "training/trainer.h"

namespace ht = hg::training;

// A LightningModule: the network, the loss of a training step, the validation metrics, the optimizer.
class DigitsClassifier : public ht::LightningModule {
 public:
  hg::models::Module& module() override { return *net_; }
  hg::Tensor training_step(const ht::Batch& b, int64_t) override {
    hg::Tensor loss = hg::ops::cross_entropy(net_->forward(b[0]), b[1]);
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }
  void validation_step(const ht::Batch& b, int64_t) override {
    log("val_loss", hg::ops::cross_entropy(net_->forward(b[0]), b[1]), {.prog_bar = true});
  }
  std::vector<ht::OptimizerConfig> configure_optimizers() override {
    return {{.optimizer = std::make_shared<ht::SGD>(net_->named_parameters(), ht::SGDOptions{.lr = 0.05, .momentum = 0.9})}};
  }

 private:
  std::unique_ptr<hg::models::Sequential> net_ = hg::models::zoo::mlp({64, 32, 10}, /*seed=*/0);
};

// The index of the largest of each row's `classes` values.
std::vector<int64_t> argmax_rows(const std::vector<float>& v, size_t classes) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); i += classes) {
    size_t best = i;
    for (size_t j = i; j < i + classes; ++j) best = v[j] > v[best] ? j : best;
    out.push_back(static_cast<int64_t>(best - i));
  }
  return out;
}

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::fprintf(stderr, "usage: train_and_serve REPOSITORY_DIR SERVER_URL\n");
    return 2;
  }
  auto [train, held_out] = ht::random_split(ht::load_digits(DIGITS_FILE), 0.2, /*seed=*/0);
  ht::DataLoader train_loader(train, {.batch_size = 32, .shuffle = true});
  ht::DataLoader test_loader(held_out, {.batch_size = 64});

  DigitsClassifier model;
  ht::Trainer trainer({.accelerator = "hpu", .devices = 1, .max_epochs = 5, .logger = std::vector<std::shared_ptr<ht::Logger>>{},
                       .enable_checkpointing = false});
  trainer.fit(model, train_loader, &test_loader);

  ht::export_package(model.module(),
                     {.inputs = {{"input", "FP32", {-1, 64}}}, .outputs = {{"logits", "FP32", {-1, 10}}}},
                     {.dir = argv[1], .name = "digits_example", .serving_config = {{"max_batch_size", 64}}});
  hg::server::Client client(argv[2]);
  client.load_model("digits_example");

  // The held-out split: in process (Trainer::predict) and served, batch by batch.
  std::vector<hg::Tensor> predicted = trainer.predict(model, test_loader);
  int64_t examples = 0, correct = 0, served_correct = 0, agree = 0;
  auto epoch = test_loader.epoch(0);
  for (size_t i = 0; auto batch = epoch.next(); ++i) {
    const int64_t n = batch->at(0).shape()[0];
    auto served = client.infer("digits_example", {{"input", {n, 64}, batch->at(0).to_vector()}});
    std::vector<int64_t> local = argmax_rows(predicted[i].to_vector(), 10);
    std::vector<int64_t> remote = argmax_rows(served[0].as<float>(), 10);
    std::vector<int64_t> labels = batch->at(1).to_indices();
    for (int64_t k = 0; k < n; ++k) {
      correct += local[k] == labels[k];
      served_correct += remote[k] == labels[k];
      agree += local[k] == remote[k];
    }
    examples += n;
  }
  std::printf("held-out accuracy: %.3f in process, %.3f served (%lld of %lld predictions agree)\n",
              double(correct) / examples, double(served_correct) / examples, (long long)agree, (long long)examples);
  return agree == examples && correct * 10 >= examples * 8 ? 0 : 1;  // the same answers, and a model that learned
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_and_serve: %s\n", e.what());
  return 1;
}
