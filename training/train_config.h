// hgraph-train's configuration: a JSON file with the sections data, model, optimizer, trainer,
// tuner and export (every key and default: train_config_help()), overridden by
// "--set key.path=value", and the run it describes (fit on the training split, test on the
// held-out split, export).
//
//   nlohmann::json j = hg::training::read_config_file("training/configs/digits_mlp.json");
//   hg::training::apply_override(j, "trainer.max_epochs=5");
//   hg::training::TrainConfig c = hg::training::parse_train_config(j);   // errors name the key
//   hg::training::TrainResult r = hg::training::run_training(c, std::cout);
//   r.test.at("test_acc"); r.export_dir;
//   hg::training::run_lr_find(c, std::cout);   // --lr-find: the "tuner" section's lr finder, no training
#pragma once
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "training/classifier_module.h"
#include "training/export.h"
#include "training/lr_finder.h"
#include "training/trainer.h"

namespace hg::training {

struct DataConfig {
  std::string dataset = "digits";  // digits, idx, fashion_mnist, table, text (train_config_help)
  std::filesystem::path path;      // digits: the safetensors file (bundled); idx: the directory;
                                   // table: the training file; text: a file or directory
  std::filesystem::path test_path; // table: a test file in the same format (else the held-out split)
  int64_t image_size = 0;          // digits: 8 or 32; idx: 0 (as stored) or larger (zero-padded)
  std::string label = "-1", features_key = "x", labels_key = "y";  // table (TableOptions)
  bool normalize = true;           // table: standardise with the training split's statistics
  int64_t stride = 0;              // text: between blocks (0: the model's max_len, no overlap)
  int64_t crop_padding = 0;        // images: random crops after zero padding (0: none)
  bool hflip = false;              // images: random horizontal flips
  int64_t batch_size = 32;
  int64_t val_batch_size = 256;
  double holdout_fraction = 0.2;
  uint64_t seed = 0;
  int num_workers = 0;
  int prefetch_factor = 2;
};

// The "tuner" section: the learning-rate finder (training/lr_finder.h).
struct TunerConfig {
  bool lr_find = false;  // run it before fit and train with its suggestion as optimizer.lr
  LRFinderOptions lr_finder;
};

struct TrainConfig {
  DataConfig data;
  TunerConfig tuner;
  ClassifierSpec model;  // "gpt": model_config holds the GPTConfig (LanguageModelModule)
  TrainerOptions trainer;
  std::optional<ExportOptions> export_options;  // set when export.dir is given
  std::string ckpt_path;  // fit's: a checkpoint file, "last" or "best" (resume), or empty
};

// The JSON of a config file; hg::IoError / hg::InvalidArgument naming the file and position.
nlohmann::json read_config_file(const std::filesystem::path& file);
// "a.b.c=value": value is JSON when it parses as JSON, else a string. Creates objects on the way.
void apply_override(nlohmann::json& config, const std::string& assignment);
// Validates every key (hg::InvalidArgument "trainer.max_epochs: expected an integer, got \"x\"").
TrainConfig parse_train_config(const nlohmann::json& config);
// The documentation of every section and key with its default, for --help.
std::string train_config_help();

struct TrainResult {
  std::map<std::string, double> test;  // test_loss, test_acc on the held-out split (empty without one)
  std::map<std::string, double> metrics;  // the Trainer's callback_metrics after fit
  int epochs = 0;
  int64_t global_step = 0;
  double fit_seconds = 0;                 // wall time of Trainer::fit (validation included)
  std::filesystem::path export_dir;       // empty unless exported
  std::shared_ptr<LightningModule> module;  // the trained module (ClassifierModule or LanguageModelModule)
};

// The module the config describes: a ClassifierModule, or a LanguageModelModule for "gpt".
std::shared_ptr<LightningModule> make_module(const TrainConfig& c);

// Loads the data, fits, tests on the held-out split and exports (on global rank 0). Under DDP
// every process runs this (the Trainer re-executes the program for local ranks 1..n-1). With
// tuner.lr_find, the learning-rate finder runs first and fit uses its suggestion as optimizer.lr.
TrainResult run_training(const TrainConfig& c, std::ostream& out);

// hgraph-train --lr-find: the finder on the training split with the config's model, optimizer
// and trainer (one process); prints the table and the suggestion.
LRFinderResult run_lr_find(const TrainConfig& c, std::ostream& out);

}  // namespace hg::training
