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
// The version folder appears complete or not at all: it is written under a hidden name in the
// model's folder (which the server ignores) and renamed into place, replacing an older export
// of the same version.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "models/package.h"
#include "training/classifier_module.h"

namespace hg::training {

struct ExportOptions {
  std::filesystem::path dir;  // the model repository
  std::string name;           // the model's folder: letters, digits, '_', '-', '.' (not first)
  int64_t version = 1;        // >= 1
  nlohmann::json serving_config = nullptr;  // written as <dir>/<name>/config.json unless null
  nlohmann::json metadata = nlohmann::json::object();  // model.json "metadata" (merged)
};

// Writes `spec` (its name is set to opt.name) and m's weights; returns the version folder.
std::filesystem::path export_package(const models::Module& m, models::PackageSpec spec, const ExportOptions& opt);

// The classifier's package: input_spec() / output_spec(), metadata {"trained_by":
// "hgraph-train", "model", "model_config", "optimizer", "seed"} plus opt.metadata.
std::filesystem::path export_classifier(ClassifierModule& m, const ExportOptions& opt);

}  // namespace hg::training
