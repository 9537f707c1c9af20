// A LightningModule that trains the byte-level GPT (models/gpt.h) for next-byte prediction on
// TextBlocks batches (training/data_files.h), and exports it as the package the server's
// generate endpoints serve.
//
//   hg::training::LanguageModelModule lm({.config = {.d_model = 128, .layers = 2, .max_len = 128},
//                                         .optimizer = {{"name", "adamw"}, {"lr", 3e-3}}});
//   trainer.fit(lm, blocks_loader, &held_loader);   // logs train_loss, val_loss, val_bpb
//   auto r = trainer.test(lm, held_loader);         // r[0]["test_loss"] (nats per byte), "test_bpb"
//   export_language_model(lm, {.dir = "/srv/models", .name = "fortunes_gpt"});
//
// Batches are {x I64 [N, S], y I64 [N, S]} with S <= max_len; the loss is the mean cross-entropy
// over every position. bpb (bits per byte) is the loss / ln 2.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "models/gpt.h"
#include "training/export.h"
#include "training/lightning_module.h"

namespace hg::training {

struct LanguageModelSpec {
  models::GPTConfig config;
  nlohmann::json optimizer = {{"name", "adamw"}, {"lr", 3e-3}};
  uint64_t seed = 0;  // weight initialization
};

class LanguageModelModule : public LightningModule {
 public:
  // Validates the config and the optimizer (hg::InvalidArgument naming the field).
  explicit LanguageModelModule(LanguageModelSpec spec);
  models::Module& module() override { return *gpt_; }
  models::GPT& gpt() { return *gpt_; }
  Tensor training_step(const Batch& batch, int64_t batch_idx) override;  // logs train_loss
  void validation_step(const Batch& batch, int64_t batch_idx) override;  // val_loss, val_bpb
  void test_step(const Batch& batch, int64_t batch_idx) override;        // test_loss, test_bpb
  std::vector<OptimizerConfig> configure_optimizers() override;
  const LanguageModelSpec& spec() const { return spec_; }

 private:
  Tensor loss(const Batch& batch);
  LanguageModelSpec spec_;
  std::unique_ptr<models::GPT> gpt_;
};

// The GPT package (graph {"type": "zoo", "model": "gpt"}, input "ids" INT64 [-1, max_len],
// output "logits" FP32 [-1, max_len, vocab]) with metadata {"trained_by": "hgraph-train",
// "model": "gpt", "model_config", "optimizer", "seed"} plus opt.metadata; hgraph-serve's
// /infer and generate endpoints serve it. opt.format "onnx": model.onnx instead, the forward
// traced with the batch and the sequence length dynamic (served by /infer).
std::filesystem::path export_language_model(LanguageModelModule& m, const ExportOptions& opt);

}  // namespace hg::training
