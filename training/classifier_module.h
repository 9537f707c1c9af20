// A LightningModule for the zoo's classifiers (models/zoo.h) trained with cross-entropy: the
// model and its optimizer come from JSON, as in hgraph-train's config.
//
//   hg::training::ClassifierModule m({.model = "lenet5", .model_config = {{"classes", 10}},
//                                     .optimizer = {{"name", "adamw"}, {"lr", 1e-3}}, .seed = 0});
//   trainer.fit(m, train_loader, &val_loader);   // logs train_loss (prog bar), val_loss, val_acc
//   auto r = trainer.test(m, test_loader);       // r[0]["test_acc"], r[0]["test_loss"]
//   m.input_spec();                               // {"input", "FP32", {-1, 1, 32, 32}}
//
// Models and their config keys (absent keys take the defaults):
//   mlp              {"sizes": [64, 64, 10]}         Linear-ReLU-...-Linear, input FP32 [-1, sizes[0]]
//   lenet5           {"classes": 10}                 input FP32 [-1, 1, 32, 32]
//   bert_classifier  {"vocab", "d_model", "nhead", "layers", "ff", "max_len", "classes"}
//                    (models::zoo::BertConfig's defaults), input INT64 [-1, max_len]
//   sequential       {"input": [1, 28, 28], "layers": [{"op": "conv2d", ...}, ...]}   any built-in
//                    layers (models/layer_spec.h), ending in [classes]; input FP32 (INT64 ids
//                    when the first layer is an embedding)
// Batches are {inputs, I64 class targets}. The optimizer config: training/optimizer_config.h.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/package.h"
#include "training/lightning_module.h"

namespace hg::training {

struct ClassifierSpec {
  std::string model = "mlp";
  nlohmann::json model_config = nlohmann::json::object();
  nlohmann::json optimizer = {{"name", "sgd"}, {"lr", 0.05}, {"momentum", 0.9}};
  uint64_t seed = 0;  // weight initialization
};

class ClassifierModule : public LightningModule {
 public:
  // Builds the model and checks the optimizer config once (hg::InvalidArgument naming the key:
  // "model.config.sizes", "optimizer.scheduler.t_max", ...).
  explicit ClassifierModule(ClassifierSpec spec);
  models::Module& module() override { return *net_; }
  Tensor training_step(const Batch& batch, int64_t batch_idx) override;  // logs train_loss
  void validation_step(const Batch& batch, int64_t batch_idx) override;  // val_loss, val_acc
  void test_step(const Batch& batch, int64_t batch_idx) override;        // test_loss, test_acc
  std::vector<OptimizerConfig> configure_optimizers() override;

  const ClassifierSpec& spec() const { return spec_; }
  const nlohmann::json& model_config() const { return config_; }  // with the defaults filled in
  int64_t num_classes() const { return classes_; }
  models::IOSpec input_spec() const { return input_; }
  models::IOSpec output_spec() const { return {"logits", "FP32", {-1, classes_}}; }

 private:
  void evaluate(const Batch& batch, const std::string& stage);
  ClassifierSpec spec_;
  nlohmann::json config_;
  std::unique_ptr<models::Module> net_;
  int64_t classes_ = 0;
  models::IOSpec input_;
};

}  // namespace hg::training
