// Exports a trained classifier as a model package inside a model repository, so hgraph-serve
// serves it unchanged: <dir>/<name>/<version>/{model.json, weights.safetensors} and, when a
// serving config is given, <dir>/<name>/config.json (the server's fields, README "Model
// repository").
//
//   hg::training::ClassifierModule m({.model = "mlp"});
//   trainer.fit(m, train, &val);
//   auto dir = hg::training::export_classifier(m, {.dir = "/srv/models", .name = "digits_mlp",
//       .serving_config = {{"max_batch_size", 32}}, .metadata = {{"test_acc", 0.97}}});
//   // dir == "/srv/models/digits_mlp/1"; hgraph-serve --model-repository /srv/models
//
// Any module, by tracing its forward on example inputs (models/module_trace.h): an "ops" graph
// package, or with .format = "onnx" a model.onnx (opset 17) in the version folder; both load in
// hgraph-serve unchanged, with a dynamic batch (and the dynamic axes declared).
//
//   MyModule m;                                            // a LightningModule, or a models::Module
//   trainer.fit(m, train);
//   hg::training::export_traced(m, {hg::Tensor::zeros({2, 16})}, {.dir = "/srv/models", .name = "mine"});
//   hg::training::export_traced(m.module(), {ids}, {.dir = "/srv/models", .name = "mine_onnx", .format = "onnx"},
//       {.input_names = {"ids"}, .output_names = {"logits"}, .dynamic_axes = {{"ids", {{0, "batch"}, {1, "seq"}}}}});
//
// The version folder appears complete or not at all: it is written under a hidden name in the
// model's folder (which the server ignores) and renamed into place, replacing an older export
// of the same version.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/module_trace.h"
#include "models/package.h"
#include "training/classifier_module.h"

namespace hg::training {

struct ExportOptions {
  std::filesystem::path dir;  // the model repository
  std::string name;           // the model's folder: letters, digits, '_', '-', '.' (not first)
  int64_t version = 1;        // >= 1
  nlohmann::json serving_config = nullptr;  // written as <dir>/<name>/config.json unless null
  nlohmann::json metadata = nlohmann::json::object();  // model.json "metadata" (merged)
  // "package": model.json + weights.safetensors; "onnx": model.onnx (opset 17), from the traced graph.
  std::string format = "package";
};

// Writes `spec` (its name is set to opt.name) and m's weights; returns the version folder.
std::filesystem::path export_package(const models::Module& m, models::PackageSpec spec, const ExportOptions& opt);

// The classifier's package: input_spec() / output_spec(), metadata {"trained_by":
// "hgraph-train", "model", "model_config", "optimizer", "seed"} plus opt.metadata. With
// opt.format "onnx" the module is traced on a batch of 2 zeros and written as model.onnx.
std::filesystem::path export_classifier(ClassifierModule& m, const ExportOptions& opt);

// Traces m's forward on `example_inputs` (host tensors; any batch size, 2 or more is safest)
// and writes the graph in opt.format; returns the version folder. Errors name the op or the
// dimension that cannot be exported (models/module_trace.h).
std::filesystem::path export_traced(models::Module& m, const std::vector<Tensor>& example_inputs, const ExportOptions& opt,
                                    const models::TraceOptions& trace = {});
std::filesystem::path export_traced(LightningModule& m, const std::vector<Tensor>& example_inputs, const ExportOptions& opt,
                                    const models::TraceOptions& trace = {});

}  // namespace hg::training
