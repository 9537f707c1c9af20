// The zoo classifiers as a LightningModule (training/classifier_module.h).
#include "training/classifier_module.h"

#include "engine/ops.h"
#include "models/layer_spec.h"
#include "models/zoo.h"
#include "training/config_reader.h"
#include "training/optimizer_config.h"

namespace hg::training {

namespace {

int64_t positive(ConfigReader& r, const std::string& key, int64_t fallback) {
  const auto v = r.get(key, fallback);
  if (v < 1) r.fail(key, "must be >= 1, got " + std::to_string(v));
  return v;
}

}  // namespace

ClassifierModule::ClassifierModule(ClassifierSpec spec) : spec_(std::move(spec)) {
  ConfigReader r(spec_.model_config, "model.config");
  if (spec_.model == "mlp") {
    const auto sizes = r.get("sizes", std::vector<int64_t>{64, 64, 10});
    if (sizes.size() < 2) r.fail("sizes", "needs at least the input and output sizes");
    for (size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i] < 1) r.fail("sizes", "entry " + std::to_string(i) + " is " + std::to_string(sizes[i]) + ", must be >= 1");
    net_ = models::zoo::mlp(sizes, spec_.seed);
    config_ = {{"sizes", sizes}};
    classes_ = sizes.back();
    input_ = {"input", "FP32", {-1, sizes.front()}};
  } else if (spec_.model == "lenet5") {
    classes_ = positive(r, "classes", 10);
    net_ = models::zoo::lenet5(classes_, spec_.seed);
    config_ = {{"classes", classes_}};
    input_ = {"input", "FP32", {-1, 1, 32, 32}};
  } else if (spec_.model == "bert_classifier") {
    models::zoo::BertConfig c;
    c.vocab = positive(r, "vocab", c.vocab);
    c.d_model = positive(r, "d_model", c.d_model);
    c.nhead = positive(r, "nhead", c.nhead);
    c.layers = positive(r, "layers", c.layers);
    c.ff = positive(r, "ff", c.ff);
    c.max_len = positive(r, "max_len", c.max_len);
    c.classes = positive(r, "classes", c.classes);
    if (c.d_model % c.nhead != 0) r.fail("nhead", "must divide d_model (" + std::to_string(c.d_model) + ")");
    net_ = models::zoo::bert_classifier(c, spec_.seed);
    config_ = {{"vocab", c.vocab}, {"d_model", c.d_model}, {"nhead", c.nhead}, {"layers", c.layers},
               {"ff", c.ff},       {"max_len", c.max_len}, {"classes", c.classes}};
    classes_ = c.classes;
    input_ = {"input", "INT64", {-1, c.max_len}};
  } else if (spec_.model == "sequential") {
    const auto input = r.required<std::vector<int64_t>>("input");
    if (input.empty()) r.fail("input", "needs one example's shape, e.g. [1, 28, 28] or [784]");
    for (int64_t d : input)
      if (d < 1) r.fail("input", "has a dimension " + std::to_string(d) + ", must be >= 1");
    const models::SequentialPlan plan = models::plan_sequential(r.raw("layers"), Shape(input.begin(), input.end()),
                                                                r.path_of("layers"));
    if (plan.output.size() != 1)
      r.fail("layers", "end in " + shape_str(plan.output) + " per example; a classifier ends in [classes] (add a flatten and a linear)");
    net_ = models::build_sequential(plan, spec_.seed);
    config_ = {{"input", input}, {"layers", plan.layers}};
    classes_ = plan.output[0];
    Shape in{-1};
    in.insert(in.end(), input.begin(), input.end());
    input_ = {"input", plan.input_datatype, in};
  } else {
    throw InvalidArgument("model.name: unknown model '" + spec_.model + "' (mlp, lenet5, bert_classifier, sequential)");
  }
  r.finish();
  make_optimizer_config(spec_.optimizer, net_->named_parameters());  // reports a bad config now
  save_hyperparameters({{"model", spec_.model}, {"model_config", config_}, {"optimizer", spec_.optimizer},
                        {"seed", spec_.seed}});
}

Tensor ClassifierModule::training_step(const Batch& batch, int64_t) {
  const Tensor loss = ops::cross_entropy(net_->forward(batch.at(0)), batch.at(1));
  log("train_loss", loss, {.prog_bar = true});
  return loss;
}

void ClassifierModule::evaluate(const Batch& batch, const std::string& stage) {
  const Tensor logits = net_->forward(batch.at(0));
  log(stage + "_loss", ops::cross_entropy(logits, batch.at(1)), {.prog_bar = stage == "val"});
  // Accuracy without a host read: a wrong prediction is a non-zero difference of class indices.
  const Tensor wrong = ops::sub(ops::argmax(logits, 1), batch.at(1)).to(DType::BOOL).to(DType::F32);
  log(stage + "_acc", ops::sub(Tensor::full({}, 1.0f, logits.device()), ops::mean(wrong)), {.prog_bar = stage == "val"});
}

void ClassifierModule::validation_step(const Batch& batch, int64_t) { evaluate(batch, "val"); }
void ClassifierModule::test_step(const Batch& batch, int64_t) { evaluate(batch, "test"); }

std::vector<OptimizerConfig> ClassifierModule::configure_optimizers() {
  return {make_optimizer_config(spec_.optimizer, net_->named_parameters())};
}

}  // namespace hg::training
