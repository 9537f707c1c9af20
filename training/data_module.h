// DataModule (Lightning's LightningDataModule): the data of a model in one object: how it is
// prepared, split per stage and loaded. The Trainer's fit / validate / test / predict take one
// instead of loaders.
//
//   class DigitsData : public hg::training::DataModule {
//    public:
//     void setup(const std::string& stage) override {
//       auto all = hg::training::load_digits(path, 8);
//       std::tie(train_, val_) = hg::training::random_split(all, 0.2, /*seed=*/0);
//     }
//     std::optional<hg::training::DataLoader> train_dataloader() override {
//       return hg::training::DataLoader(train_, {.batch_size = 32, .shuffle = true});
//     }
//     std::optional<hg::training::DataLoader> val_dataloader() override {
//       return hg::training::DataLoader(val_, {.batch_size = 256});
//     }
//     std::shared_ptr<const hg::training::Dataset> train_, val_;
//   };
//   DigitsData data;
//   trainer.fit(module, data);     // prepare_data(), setup("fit"), train + val loaders, teardown("fit")
//   trainer.validate(module, data); // setup("validate"), val_dataloader()
//
// Each stage calls prepare_data() once per node (on local rank 0; the other ranks wait at a
// barrier), then setup(stage) in every process, then asks for its loaders, and ends with
// teardown(stage), also when the stage fails. A loader the stage needs but the module does not
// give (train for fit, val for validate, test for test, predict for predict) is an
// hg::InvalidArgument naming the method; fit without val_dataloader() runs no validation.
#pragma once
#include <optional>
#include <string>

#include "training/dataloader.h"

namespace hg::training {

class DataModule {
 public:
  virtual ~DataModule() = default;
  // Downloads or writes files: once per node, before setup (no state: other ranks don't run it).
  virtual void prepare_data() {}
  // stage: "fit", "validate", "test" or "predict". Builds the datasets the stage's loaders use.
  virtual void setup(const std::string& stage) { (void)stage; }
  virtual void teardown(const std::string& stage) { (void)stage; }
  // The stage's loaders; none (the default) when the module has no such data.
  virtual std::optional<DataLoader> train_dataloader() { return std::nullopt; }
  virtual std::optional<DataLoader> val_dataloader() { return std::nullopt; }
  virtual std::optional<DataLoader> test_dataloader() { return std::nullopt; }
  virtual std::optional<DataLoader> predict_dataloader() { return std::nullopt; }
};

}  // namespace hg::training
