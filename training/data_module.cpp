// The Trainer's stages over a DataModule (training/data_module.h).
#include "training/data_module.h"

#include "engine/error.h"
#include "training/trainer_loop.h"

namespace hg::training {

namespace {

// Lightning's order around a stage: prepare_data on each node's local rank 0 (the others wait),
// setup(stage) everywhere, the body, then teardown(stage) even when the body throws.
template <class Body>
auto with_datamodule(Trainer& t, DataModule*& current, DataModule& dm, const std::string& stage, Body body) {
  if (t.strategy().local_rank() == 0) dm.prepare_data();
  t.strategy().barrier("prepare_data");
  dm.setup(stage);
  current = &dm;
  auto end = [&] {
    current = nullptr;
    dm.teardown(stage);
  };
  decltype(body()) r;
  try {
    r = body();
  } catch (...) {
    end();
    throw;
  }
  end();
  return r;
}

DataLoader need(std::optional<DataLoader> loader, const char* stage, const char* method) {
  if (!loader)
    throw InvalidArgument(std::string("Trainer.") + stage + ": the DataModule gives no " + method +
                          " (override it to return a loader)");
  return std::move(*loader);
}

}  // namespace

void Trainer::fit(LightningModule& m, DataModule& data, const std::string& ckpt_path) {
  loop_->setup_environment();  // ranks are known before prepare_data
  with_datamodule(*this, datamodule_, data, "fit", [&] {
    const DataLoader train = need(data.train_dataloader(), "fit", "train_dataloader()");
    const std::optional<DataLoader> val = data.val_dataloader();
    fit(m, train, val ? &*val : nullptr, ckpt_path);
    return true;
  });
}

std::vector<std::map<std::string, double>> Trainer::validate(LightningModule& m, DataModule& data,
                                                             const std::string& ckpt_path) {
  loop_->setup_environment();
  return with_datamodule(*this, datamodule_, data, "validate", [&] {
    return validate(m, need(data.val_dataloader(), "validate", "val_dataloader()"), ckpt_path);
  });
}

std::vector<std::map<std::string, double>> Trainer::test(LightningModule& m, DataModule& data,
                                                         const std::string& ckpt_path) {
  loop_->setup_environment();
  return with_datamodule(*this, datamodule_, data, "test", [&] {
    return test(m, need(data.test_dataloader(), "test", "test_dataloader()"), ckpt_path);
  });
}

std::vector<Tensor> Trainer::predict(LightningModule& m, DataModule& data, const std::string& ckpt_path) {
  loop_->setup_environment();
  return with_datamodule(*this, datamodule_, data, "predict", [&] {
    return predict(m, need(data.predict_dataloader(), "predict", "predict_dataloader()"), ckpt_path);
  });
}

}  // namespace hg::training
