// The byte-level GPT as a LightningModule (training/language_model_module.h).
#include "training/language_model_module.h"

#include <cmath>

#include "engine/error.h"
#include "engine/ops.h"
#include "training/optimizer_config.h"

namespace hg::training {

LanguageModelModule::LanguageModelModule(LanguageModelSpec spec) : spec_(std::move(spec)) {
  spec_.config.validate();
  gpt_ = std::make_unique<models::GPT>(spec_.config, spec_.seed);
  make_optimizer_config(spec_.optimizer, gpt_->named_parameters());  // reports a bad config now
  save_hyperparameters({{"model", "gpt"}, {"model_config", spec_.config.to_json()}, {"optimizer", spec_.optimizer},
                        {"seed", spec_.seed}});
}

Tensor LanguageModelModule::loss(const Batch& batch) {
  const Tensor& x = batch.at(0);
  const Tensor& y = batch.at(1);
  if (x.ndim() != 2 || y.shape() != x.shape())
    throw InvalidArgument("LanguageModelModule: expected {x I64 [N, S], y I64 [N, S]}, got x " + shape_str(x.shape()) +
                          ", y " + shape_str(y.shape()));
  const Tensor logits = gpt_->forward(x);
  const int64_t rows = x.dim(0) * x.dim(1);
  return ops::cross_entropy(ops::reshape(logits, {rows, spec_.config.vocab}), ops::reshape(y, {rows}));
}

Tensor LanguageModelModule::training_step(const Batch& batch, int64_t) {
  const Tensor l = loss(batch);
  log("train_loss", l, {.prog_bar = true});
  return l;
}

void LanguageModelModule::validation_step(const Batch& batch, int64_t) {
  const Tensor l = loss(batch);
  log("val_loss", l, {.prog_bar = true});
  log("val_bpb", ops::scale(l, 1.0 / std::log(2.0)));
}

void LanguageModelModule::test_step(const Batch& batch, int64_t) {
  const Tensor l = loss(batch);
  log("test_loss", l);
  log("test_bpb", ops::scale(l, 1.0 / std::log(2.0)));
}

std::vector<OptimizerConfig> LanguageModelModule::configure_optimizers() {
  return {make_optimizer_config(spec_.optimizer, gpt_->named_parameters())};
}

std::filesystem::path export_language_model(LanguageModelModule& m, const ExportOptions& opt) {
  const int64_t s = m.spec().config.max_len, v = m.spec().config.vocab;  // opt.metadata merged by export_package
  models::PackageSpec spec;
  spec.inputs = {{"ids", "INT64", {-1, s}}};
  spec.outputs = {{"logits", "FP32", {-1, s, v}}};
  spec.graph = m.gpt().spec();
  spec.metadata = {{"trained_by", "hgraph-train"}, {"model", "gpt"}, {"model_config", m.spec().config.to_json()},
                   {"optimizer", m.spec().optimizer}, {"seed", m.spec().seed}};
  if (opt.format != "onnx") return export_package(m.gpt(), spec, opt);
  // model.onnx: the forward traced with the batch and the sequence dynamic (1 to max_len).
  ExportOptions o = opt;
  o.metadata = spec.metadata;
  for (const auto& [k, val] : opt.metadata.items()) o.metadata[k] = val;
  return export_traced(m.gpt(), {Tensor::zeros({2, s}, DType::I64)}, o,
                       {.input_names = {"ids"}, .output_names = {"logits"},
                        .dynamic_axes = {{"ids", {{0, "batch"}, {1, "seq"}}}}});
}

}  // namespace hg::training
