// The data of an hgraph-train run (training/train_config.h): the splits its "data" section
// names, shaped for the model's input, with the normalisation of a table folded into the model
// before export.
//
//   TrainData d = hg::training::load_train_data(config.data, module_input_spec, /*classes=*/10);
//   DataLoader train(d.train, {.batch_size = 64, .shuffle = true, .transform = d.train_transform});
//   d.val;  d.test;  d.metadata;    // {"dataset": ..., "train_examples": ..., "normalization": ...}
//   if (d.normalizer) fold_normalizer(module, *d.normalizer);   // the model takes raw features
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "models/module.h"
#include "models/package.h"
#include "training/data_files.h"

namespace hg::training {

struct DataConfig;

struct TrainData {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> val;   // null: no held-out split
  std::shared_ptr<const Dataset> test;  // idx: t10k; table: test_path; else the held-out split (or null)
  std::string description;              // one line for the log
  nlohmann::json metadata;              // for the exported package
  std::optional<Normalizer> normalizer; // table with normalize: fitted on the training split
  BatchTransform train_transform;       // augmentation (images), empty when none
};

// `input`: the model's input (batch first). classes: the model's class count (0: a language
// model). Throws hg::InvalidArgument when data and model do not fit each other, naming both.
TrainData load_train_data(const DataConfig& c, const models::IOSpec& input, int64_t classes);

// x' = (x - mean) / std folded into the first Linear ("0.weight" [O, F], "0.bias" [O]) of `m`:
// W' = W / std, b' = b - W' mean, so the model takes the raw features.
void fold_normalizer(models::Module& m, const Normalizer& z);

}  // namespace hg::training
