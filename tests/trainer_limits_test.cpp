// Trainer limits beyond epochs and steps: max_time (wall time of the training loop, the stop
// reason, its clock in checkpoints) and min_steps (should_stop waits for it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/error.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/callbacks.h"
#include "training/checkpoint.h"

namespace hg::training {
namespace {

using namespace std::chrono_literals;
using test::blobs;
using test::error_of;
using test::quiet_options;
using test::TinyClassifier;
using ::testing::HasSubstr;

class TrainerLimitsTest : public ::testing::Test {
 protected:
  std::filesystem::path dir = test::temp_dir(std::string("limits_") +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

// Sleeps before every training batch, so that time passes however fast the machine is.
class SlowBatches : public Callback {
 public:
  explicit SlowBatches(std::chrono::milliseconds d) : d_(d) {}
  std::string state_key() const override { return "SlowBatches"; }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override { std::this_thread::sleep_for(d_); }

 private:
  std::chrono::milliseconds d_;
};

// Sets should_stop after every training batch (an EarlyStopping that always fires).
class StopEveryBatch : public Callback {
 public:
  std::string state_key() const override { return "StopEveryBatch"; }
  void on_train_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t) override { t.should_stop = true; }
};

TEST_F(TrainerLimitsTest, OptionsAndDefaults) {
  EXPECT_THAT(error_of<InvalidArgument>([] { Trainer t({.max_time = 0ms}); }),
              HasSubstr("Trainer: max_time must be positive, got 0 ms"));
  EXPECT_THAT(error_of<InvalidArgument>([] { Trainer t({.min_steps = -2}); }),
              HasSubstr("Trainer: min_steps must be >= 0, got -2"));
  // As Lightning: with max_time and no max_epochs, epochs are unlimited.
  Trainer timed(quiet_options(dir, {.max_time = 1h, .enable_checkpointing = false}));
  EXPECT_EQ(*timed.options().max_epochs, -1);
  EXPECT_EQ(parse_max_time("00:12:00:00"), std::chrono::milliseconds(12h));
  EXPECT_EQ(parse_max_time("1:0:0:30"), std::chrono::milliseconds(24h + 30s));
  for (const char* bad : {"", "12:00:00", "00:00:00:00:01", "a:0:0:0", "0:0::0", "-1:0:0:0"})
    EXPECT_THAT(error_of<InvalidArgument>([&] { parse_max_time(bad); }),
                HasSubstr("max_time '" + std::string(bad) + "' is not \"DD:HH:MM:SS\""));
}

TEST_F(TrainerLimitsTest, MaxTimeStopsALongFitAndItsClockResumes) {
  TinyClassifier m;
  const DataLoader data(blobs(32, 1), {.batch_size = 8});
  // A million epochs of 4 batches cannot finish in 300 ms, however fast the machine is; a slow
  // machine only stops it later.
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir / "ckpt", .save_last = true});
  Trainer t(quiet_options(dir, {.max_epochs = 1000000, .max_time = 300ms, .callbacks = {ckpt}}));
  const auto start = std::chrono::steady_clock::now();
  t.fit(m, data);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(t.stop_reason(), "max_time");
  EXPECT_GE(took, 300ms);
  EXPECT_LT(t.current_epoch(), 1000000);
  EXPECT_GT(t.global_step(), 0);
  // The checkpoint written as fit stopped holds the loop's clock.
  const Checkpoint c = read_checkpoint(ckpt->last_model_path());
  ASSERT_TRUE(c.loops.contains("time_elapsed_ms"));
  EXPECT_GE(c.loops["time_elapsed_ms"].get<int64_t>(), 300);
  EXPECT_EQ(c.global_step, t.global_step());

  // Resumed with the same max_time, the clock has already passed it: one batch, then stop.
  TinyClassifier resumed;
  Trainer again(quiet_options(dir, {.max_epochs = 1000000, .max_time = 300ms, .enable_checkpointing = false}));
  again.fit(resumed, data, nullptr, ckpt->last_model_path());
  EXPECT_EQ(again.stop_reason(), "max_time");
  EXPECT_EQ(again.global_step(), t.global_step() + 1);
}

TEST_F(TrainerLimitsTest, StopReasons) {
  TinyClassifier m;
  const DataLoader data(blobs(32, 1), {.batch_size = 8});
  Trainer epochs(quiet_options(dir, {.max_epochs = 2, .enable_checkpointing = false}));
  EXPECT_EQ(epochs.stop_reason(), "");
  epochs.fit(m, data);
  EXPECT_EQ(epochs.stop_reason(), "max_epochs");
  Trainer steps(quiet_options(dir, {.max_steps = 3, .enable_checkpointing = false}));
  steps.fit(m, data);
  EXPECT_EQ(steps.stop_reason(), "max_steps");
  Trainer stopped(quiet_options(dir, {.max_epochs = 5, .callbacks = {std::make_shared<StopEveryBatch>()},
                                      .enable_checkpointing = false}));
  stopped.fit(m, data);
  EXPECT_EQ(stopped.stop_reason(), "should_stop");
  EXPECT_EQ(stopped.global_step(), 1);
}

TEST_F(TrainerLimitsTest, MinStepsHoldsOffShouldStopAndMaxTime) {
  TinyClassifier m;
  const DataLoader data(blobs(32, 1), {.batch_size = 8});  // 4 batches an epoch
  Trainer stop(quiet_options(dir, {.max_epochs = 100, .min_steps = 10,
                                   .callbacks = {std::make_shared<StopEveryBatch>()}, .enable_checkpointing = false}));
  stop.fit(m, data);
  EXPECT_EQ(stop.global_step(), 10);  // mid-epoch 2
  EXPECT_EQ(stop.current_epoch(), 2);
  EXPECT_EQ(stop.stop_reason(), "should_stop");

  // EarlyStopping's stop at the end of epoch 0 waits for min_steps too.
  auto early = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions{.monitor = "train_loss", .stopping_threshold = 1e9, .check_on_train_epoch_end = true});
  Trainer es(quiet_options(dir, {.max_epochs = 100, .min_steps = 6, .callbacks = {early}, .enable_checkpointing = false}));
  es.fit(m, data);
  EXPECT_EQ(es.global_step(), 6);
  EXPECT_EQ(es.stop_reason(), "should_stop");

  // max_time passes at the first batch (each sleeps 2 ms); min_steps keeps fit going.
  Trainer timed(quiet_options(dir, {.max_epochs = 100, .max_time = 1ms, .min_steps = 7,
                                    .callbacks = {std::make_shared<SlowBatches>(2ms)}, .enable_checkpointing = false}));
  timed.fit(m, data);
  EXPECT_EQ(timed.global_step(), 7);
  EXPECT_EQ(timed.stop_reason(), "max_time");
}

}  // namespace
}  // namespace hg::training
