// DataModule: the Trainer's stages take their loaders from it, with Lightning's order of
// prepare_data, setup(stage) and teardown(stage).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/error.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/data_module.h"

namespace hg::training {
namespace {

using test::blobs;
using test::error_of;
using test::quiet_options;
using test::TinyClassifier;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Blobs : public DataModule {
 public:
  explicit Blobs(bool with_val = true) : with_val_(with_val) {}
  void prepare_data() override { events.push_back("prepare_data"); }
  void setup(const std::string& stage) override {
    events.push_back("setup:" + stage);
    train_ = blobs(32, 1);
    val_ = blobs(16, 2);
  }
  void teardown(const std::string& stage) override { events.push_back("teardown:" + stage); }
  std::optional<DataLoader> train_dataloader() override {
    events.push_back("train_dataloader");
    return DataLoader(train_, {.batch_size = 8});
  }
  std::optional<DataLoader> val_dataloader() override {
    events.push_back("val_dataloader");
    if (!with_val_) return std::nullopt;
    return DataLoader(val_, {.batch_size = 8});
  }
  std::optional<DataLoader> test_dataloader() override {
    events.push_back("test_dataloader");
    return DataLoader(val_, {.batch_size = 8});
  }
  std::vector<std::string> events;

 private:
  bool with_val_;
  std::shared_ptr<const Dataset> train_, val_;
};

// Records which DataModule the trainer reports while a stage runs.
class SeesDataModule : public Callback {
 public:
  std::string state_key() const override { return "SeesDataModule"; }
  void on_fit_start(Trainer& t, LightningModule&) override { seen = t.datamodule(); }
  DataModule* seen = nullptr;
};

class DataModuleTest : public ::testing::Test {
 protected:
  std::filesystem::path dir = test::temp_dir(std::string("dm_") +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST_F(DataModuleTest, StagesCallSetupLoadersAndTeardownInOrder) {
  TinyClassifier m;
  Blobs data;
  auto sees = std::make_shared<SeesDataModule>();
  Trainer t(quiet_options(dir, {.max_epochs = 2, .callbacks = {sees}, .enable_checkpointing = false}));
  t.fit(m, data);
  EXPECT_THAT(data.events, ElementsAre("prepare_data", "setup:fit", "train_dataloader", "val_dataloader", "teardown:fit"));
  EXPECT_EQ(sees->seen, &data);
  EXPECT_EQ(t.datamodule(), nullptr);  // only while the stage runs
  EXPECT_EQ(t.global_step(), 8);       // 2 epochs of 32 / 8
  EXPECT_EQ(t.num_val_batches(), 2);   // the val loader validated
  EXPECT_TRUE(t.callback_metrics().count("val_loss"));

  data.events.clear();
  const auto v = t.validate(m, data);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].count("val_loss"));
  const auto r = t.test(m, data);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].count("test_loss"));
  EXPECT_THAT(data.events, ElementsAre("prepare_data", "setup:validate", "val_dataloader", "teardown:validate",
                                       "prepare_data", "setup:test", "test_dataloader", "teardown:test"));
}

TEST_F(DataModuleTest, FitWithoutValLoaderSkipsValidation) {
  TinyClassifier m;
  Blobs data(/*with_val=*/false);
  Trainer t(quiet_options(dir, {.max_epochs = 1, .enable_checkpointing = false}));
  t.fit(m, data);
  EXPECT_EQ(t.num_val_batches(), 0);
  EXPECT_EQ(t.global_step(), 4);
}

TEST_F(DataModuleTest, AMissingLoaderNamesTheMethodAndTearsDown) {
  TinyClassifier m;
  Blobs data(/*with_val=*/false);
  Trainer t(quiet_options(dir, {.max_epochs = 1, .enable_checkpointing = false}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { t.validate(m, data); }),
              HasSubstr("Trainer.validate: the DataModule gives no val_dataloader()"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { t.predict(m, data); }),
              HasSubstr("Trainer.predict: the DataModule gives no predict_dataloader()"));
  EXPECT_THAT(data.events, ElementsAre("prepare_data", "setup:validate", "val_dataloader", "teardown:validate",
                                       "prepare_data", "setup:predict", "teardown:predict"));
  DataModule empty;
  EXPECT_THAT(error_of<InvalidArgument>([&] { t.fit(m, empty); }),
              HasSubstr("Trainer.fit: the DataModule gives no train_dataloader()"));
  EXPECT_EQ(t.datamodule(), nullptr);
}

}  // namespace
}  // namespace hg::training
