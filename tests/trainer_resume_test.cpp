// Resume details: the device generators (dropout) continue where the saved run was, also from a
// huge offset (O(1) Generator::set_offset) and with gradient accumulation; a ReduceLROnPlateau that steps after
// on_train_epoch_end (monitoring what the module logs there) resumes exactly from a checkpoint
// written in that hook; a precision mismatch is a warning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <sstream>

#include "engine/generator.h"
#include "engine/ops_act.h"
#include "graphs/lazy.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/callbacks.h"
#include "training/checkpoint.h"
#include "training/schedulers.h"

namespace hg::training {
namespace {

using test::blobs;
using test::quiet_options;
using test::TinyClassifier;
using ::testing::HasSubstr;

class TrainerResumeTest : public ::testing::Test {
 protected:
  void TearDown() override { graphs::enable_lazy_mode(false); }
  std::filesystem::path dir = test::temp_dir(std::string("resume_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST(TrainerGenerator, SetOffsetPositionsTheStreamInConstantTime) {
  Generator a(5);
  std::vector<uint64_t> drawn;
  for (int i = 0; i < 10; ++i) drawn.push_back(a.next());
  Generator b(5);
  b.set_offset(7);
  EXPECT_EQ(b.offset(), 7u);
  EXPECT_EQ(b.next(), drawn[7]);
  EXPECT_EQ(b.offset(), 8u);
  const uint64_t huge = uint64_t{1} << 63;  // value k is mix64(seed + (k + 1) * gamma)
  b.set_offset(huge);
  EXPECT_EQ(b.next(), mix64(5 + (huge + 1) * kGoldenGamma));
  b.manual_seed(5);
  EXPECT_EQ(b.next(), drawn[0]);
}

// Dropout on the logits: every training step draws from the device generator.
class DropoutClassifier : public TinyClassifier {
 public:
  using TinyClassifier::TinyClassifier;
  Tensor training_step(const Batch& b, int64_t) override {
    return ops::cross_entropy(ops::dropout(net->forward(b[0]), 0.5), b[1]);
  }
};

struct FitResult {
  std::vector<std::vector<float>> weights;
  double lr;
  uint64_t rng_offset;
};

FitResult dropout_run(const std::filesystem::path& dir, const std::string& accelerator, TrainerOptions o, uint64_t init,
                const std::string& ckpt_in, const std::filesystem::path& ckpt_out) {
  DropoutClassifier m(nullptr, init);
  o.accelerator = accelerator;
  o.deterministic = true;
  o.seed = 11;
  o.enable_checkpointing = false;
  Trainer t(quiet_options(dir, o));
  t.fit(m, DataLoader(blobs(40, 7), {.batch_size = 8, .shuffle = true, .seed = 3}), nullptr, ckpt_in);
  if (!ckpt_out.empty()) t.save_checkpoint(ckpt_out);
  return {test::weights_of(*m.net), t.optimizer_configs()[0].optimizer->param_groups()[0].lr(),
          default_generator(t.device()).offset()};
}

void expect_bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4)) << "parameter " << i;
  }
}

class TrainerResumeDeviceTest : public TrainerResumeTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(TrainerResumeDeviceTest, ResumeWithDropoutContinuesTheGeneratorBitwise) {
  const FitResult straight = dropout_run(dir, GetParam(), {.max_epochs = 4}, 1, "", "");
  const FitResult half = dropout_run(dir, GetParam(), {.max_epochs = 2}, 1, "", dir / "half.ckpt");
  ASSERT_GT(half.rng_offset, 0u);  // dropout drew from the generator
  const std::string dev = GetParam() == "cpu" ? "cpu" : "hpu:0";
  EXPECT_EQ(read_checkpoint(dir / "half.ckpt").rng.at(dev).at("offset").get<uint64_t>(), half.rng_offset);
  const FitResult resumed = dropout_run(dir, GetParam(), {.max_epochs = 4}, 99, (dir / "half.ckpt").string(), "");
  expect_bitwise(straight.weights, resumed.weights);
  EXPECT_EQ(straight.rng_offset, resumed.rng_offset);

  // A damaged offset near 2^64 restores in constant time (it used to draw that many values).
  Checkpoint c = read_checkpoint(dir / "half.ckpt");
  const uint64_t huge = (uint64_t{1} << 63) + 12345;
  c.rng[dev]["offset"] = huge;
  write_checkpoint(dir / "huge.ckpt", c);
  const FitResult far = dropout_run(dir, GetParam(), {.max_epochs = 3}, 99, (dir / "huge.ckpt").string(), "");
  EXPECT_EQ(far.rng_offset, huge + (straight.rng_offset - half.rng_offset) / 2);  // one more epoch of draws
}

// accumulate_grad_batches 2 over 5 batches an epoch (steps after batches 2, 4 and 5): a
// checkpoint at an epoch end lies on a window boundary, so the resumed run is exact.
TEST_P(TrainerResumeDeviceTest, ResumeWithGradientAccumulationAtAnEpochEndIsBitwise) {
  const FitResult straight = dropout_run(dir, GetParam(), {.max_epochs = 3, .accumulate_grad_batches = 2}, 1, "", "");
  dropout_run(dir, GetParam(), {.max_epochs = 1, .accumulate_grad_batches = 2}, 1, "", dir / "one.ckpt");
  EXPECT_EQ(read_checkpoint(dir / "one.ckpt").global_step, 3);
  const FitResult resumed =
      dropout_run(dir, GetParam(), {.max_epochs = 3, .accumulate_grad_batches = 2}, 99, (dir / "one.ckpt").string(), "");
  expect_bitwise(straight.weights, resumed.weights);
  EXPECT_EQ(straight.rng_offset, resumed.rng_offset);
}

INSTANTIATE_TEST_SUITE_P(Trainer, TrainerResumeDeviceTest, ::testing::Values("cpu", "hpu"));

// Logs a constant score in on_train_epoch_end; a plateau scheduler (patience 0) monitors it, so
// every epoch after the first halves the learning rate.
class EpochEndScore : public TinyClassifier {
 public:
  using TinyClassifier::TinyClassifier;
  void on_train_epoch_end() override { log("epoch_score", 1.0); }
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto opt = std::make_shared<SGD>(net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
    return {{.optimizer = opt,
             .scheduler = std::make_shared<ReduceLROnPlateau>(*opt, ReduceLROnPlateauOptions{.factor = 0.5, .patience = 0}),
             .monitor = "epoch_score"}};
  }
};

FitResult plateau_run(const std::filesystem::path& dir, uint64_t init, const std::string& ckpt_in, bool checkpoints) {
  EpochEndScore m(nullptr, init);
  TrainerOptions o{.accelerator = "cpu", .max_epochs = 4, .deterministic = true, .seed = 11};
  if (checkpoints)
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir / "ck", .save_top_k = -1})};
  else
    o.enable_checkpointing = false;
  Trainer t(quiet_options(dir, o));
  t.fit(m, DataLoader(blobs(40, 7), {.batch_size = 8, .shuffle = true, .seed = 3}), nullptr, ckpt_in);
  return {test::weights_of(*m.net), t.optimizer_configs()[0].optimizer->param_groups()[0].lr(), 0};
}

TEST_F(TrainerResumeTest, PlateauMonitorsOnTrainEpochEndAndResumesExactly) {
  const FitResult straight = plateau_run(dir, 1, "", true);
  EXPECT_DOUBLE_EQ(straight.lr, 0.1 * 0.125);  // epochs 1, 2 and 3 reduce
  // ModelCheckpoint saved in on_train_epoch_end, before the epoch's plateau step: the file
  // records that step (with the monitored value) and the resumed run replays it.
  const auto file = dir / "ck" / "epoch=1-step=10.ckpt";
  const Checkpoint c = read_checkpoint(file);
  ASSERT_TRUE(c.loops.contains("pending_plateau_step")) << c.loops.dump();
  EXPECT_EQ(c.loops["pending_plateau_step"]["epoch"], 1);
  EXPECT_EQ(c.loops["pending_plateau_step"]["metrics"]["epoch_score"], 1.0);
  EXPECT_EQ(c.optimizer_states[0].json["param_groups"][0]["lr"], 0.1);  // before the step
  const FitResult resumed = plateau_run(dir, 99, file.string(), false);
  EXPECT_EQ(resumed.lr, straight.lr);
  expect_bitwise(straight.weights, resumed.weights);
}

TEST_F(TrainerResumeTest, APrecisionMismatchIsAWarning) {
  TinyClassifier m;
  Trainer t(quiet_options(dir, {.max_epochs = 1, .enable_checkpointing = false}));
  const DataLoader data(blobs(16, 1), {.batch_size = 8});
  t.fit(m, data);
  t.save_checkpoint(dir / "f32.ckpt");

  std::ostringstream log;
  auto prev = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  TinyClassifier same, other;
  Trainer t32(quiet_options(dir, {.precision = "32-true", .max_epochs = 1, .enable_checkpointing = false}));
  t32.test(same, data, (dir / "f32.ckpt").string());
  const std::string quiet = log.str();
  Trainer bf16(quiet_options(dir, {.precision = "bf16-mixed", .max_epochs = 2, .enable_checkpointing = false}));
  bf16.fit(other, data, nullptr, (dir / "f32.ckpt").string());
  spdlog::set_default_logger(prev);
  EXPECT_THAT(quiet, ::testing::Not(HasSubstr("precision")));  // "32" and "32-true" are the same
  EXPECT_THAT(log.str(), HasSubstr("was saved with precision '32-true'; this Trainer runs 'bf16-mixed'"));
  EXPECT_EQ(bf16.current_epoch(), 2);
}

}  // namespace
}  // namespace hg::training
