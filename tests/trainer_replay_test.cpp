// The Trainer's replayed training steps (TrainerOptions::replay_steps): the same weights and
// logged metrics as tracing every step, the steps it replays, and the fits it does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graphs/lazy.h"
#include "tests/ddp_test_util.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/adam.h"
#include "training/schedulers.h"

namespace hg::training {
namespace {

using test::blobs;
using test::MemoryLogger;
using test::quiet_options;
using test::TinyClassifier;

class TrainerReplayTest : public ::testing::Test {
 protected:
  void SetUp() override { graphs::enable_lazy_mode(true); }
  void TearDown() override { graphs::enable_lazy_mode(false); }
  std::filesystem::path dir =
      test::temp_dir(std::string("replay_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

// Trains `m` for 3 epochs over 96 samples in batches of 8 (12 steps each) on hpu:0 and returns
// the logger's rows and the replay statistics.
struct Fitted {
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
  std::map<std::string, double> callback_metrics;
  graphs::StepReplayStats stats;
};

Fitted fit(TinyClassifier& m, bool replay, const std::filesystem::path& dir) {
  auto logger = std::make_shared<MemoryLogger>();
  Trainer t(quiet_options(dir, {.accelerator = "hpu",
                                .max_epochs = 3,
                                .log_every_n_steps = 1,
                                .logger = std::vector<std::shared_ptr<Logger>>{logger},
                                .enable_checkpointing = false,
                                .replay_steps = replay}));
  DataLoader loader(blobs(96, 3), {.batch_size = 8});
  t.fit(m, loader);
  return {logger->rows, t.callback_metrics(), t.step_replay_stats()};
}

void expect_same_training(TinyClassifier& a, const Fitted& fa, TinyClassifier& b, const Fitted& fb) {
  EXPECT_EQ(test::weights_of(*a.net), test::weights_of(*b.net));
  ASSERT_EQ(fa.rows.size(), fb.rows.size());
  for (size_t i = 0; i < fa.rows.size(); ++i) {
    EXPECT_EQ(fa.rows[i].first, fb.rows[i].first) << "row " << i;
    EXPECT_EQ(fa.rows[i].second, fb.rows[i].second) << "row " << i;
  }
  EXPECT_EQ(fa.callback_metrics, fb.callback_metrics);
  for (const auto& w : test::weights_of(*a.net))
    for (float v : w) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(TrainerReplayTest, ReplayedFitEqualsTracedFitBitwise) {
  std::vector<std::string> events_replayed, events_traced;
  TinyClassifier replayed(&events_replayed), traced(&events_traced);
  const Fitted r = fit(replayed, true, dir / "r"), p = fit(traced, false, dir / "p");
  expect_same_training(replayed, r, traced, p);
  ASSERT_EQ(r.rows.size(), 36u);  // a row per step (train_loss)
  EXPECT_TRUE(r.rows[5].second.count("train_loss")) << "a replayed step logs its loss";
  // epoch 1: steps 1 (momentum buffers made), 2 and 3 traced; epochs 2 and 3 start over (two
  // traced steps each); the rest replayed
  EXPECT_EQ(r.stats.traced, 7u);
  EXPECT_EQ(r.stats.replayed, 29u);
  EXPECT_EQ(std::count(events_replayed.begin(), events_replayed.end(), "training_step"), 7);
  EXPECT_EQ(std::count(events_traced.begin(), events_traced.end(), "training_step"), 36);
  EXPECT_EQ(p.stats.traced + p.stats.replayed, 0u) << "replay_steps off: no replayer";
}

TEST_F(TrainerReplayTest, AScheduleThatChangesTheLrEveryStepIsTracedEveryStep) {
  TinyClassifier replayed, traced;
  for (TinyClassifier* m : {&replayed, &traced})
    m->make_optimizers = [](TinyClassifier& c) {
      auto sgd = std::make_shared<SGD>(c.net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
      return std::vector<OptimizerConfig>{
          {.optimizer = sgd, .scheduler = std::make_shared<StepLR>(*sgd, 1, 0.9), .interval = "step"}};
    };
  const Fitted r = fit(replayed, true, dir / "r"), p = fit(traced, false, dir / "p");
  expect_same_training(replayed, r, traced, p);
  EXPECT_EQ(r.stats.replayed, 0u);
  EXPECT_EQ(r.stats.traced, 36u);
  EXPECT_EQ(r.stats.last_fallback, "the guard changed");
}

TEST_F(TrainerReplayTest, AdamWFitReplaysBitwise) {
  TinyClassifier replayed, traced;
  for (TinyClassifier* m : {&replayed, &traced})
    m->make_optimizers = [](TinyClassifier& c) {
      return std::vector<OptimizerConfig>{{.optimizer = std::make_shared<AdamW>(
                                               c.net->named_parameters(), AdamOptions{.lr = 1e-2})}};
    };
  const Fitted r = fit(replayed, true, dir / "r"), p = fit(traced, false, dir / "p");
  expect_same_training(replayed, r, traced, p);
  EXPECT_EQ(r.stats.traced, 6u);  // two per epoch
  EXPECT_EQ(r.stats.replayed, 30u);
}

TEST_F(TrainerReplayTest, ClippedStepsReplayBitwise) {
  for (const char* algorithm : {"norm", "value"}) {
    TinyClassifier replayed, traced;
    auto run = [&](TinyClassifier& m, bool replay, const std::string& sub) {
      Trainer t(quiet_options(dir / sub, {.accelerator = "hpu", .max_epochs = 2, .gradient_clip_val = 0.05,
                                          .gradient_clip_algorithm = algorithm, .enable_checkpointing = false,
                                          .replay_steps = replay}));
      DataLoader loader(blobs(64, 3), {.batch_size = 8});
      t.fit(m, loader);
      return t.step_replay_stats();
    };
    const auto r = run(replayed, true, std::string("r_") + algorithm);
    run(traced, false, std::string("p_") + algorithm);
    EXPECT_EQ(r.replayed, 11u) << algorithm << ": " << r.last_fallback;  // 8 steps per epoch: 3 + 2 traced
    EXPECT_EQ(test::weights_of(*replayed.net), test::weights_of(*traced.net)) << algorithm;
  }
}

// Logs the batch index, a host value that changes every step: never replayed.
class LogsItsIndex : public TinyClassifier {
 public:
  Tensor training_step(const Batch& b, int64_t idx) override {
    log("idx", static_cast<double>(idx));
    return TinyClassifier::training_step(b, idx);
  }
};

TEST_F(TrainerReplayTest, AStepThatLogsAChangingHostValueIsTracedEveryStep) {
  LogsItsIndex replayed, traced;
  const Fitted r = fit(replayed, true, dir / "r"), p = fit(traced, false, dir / "p");
  expect_same_training(replayed, r, traced, p);
  EXPECT_EQ(r.stats.replayed, 0u);
  EXPECT_NE(r.stats.last_fallback.find("notes"), std::string::npos) << r.stats.last_fallback;
}

TEST_F(TrainerReplayTest, FitsThatCannotReplayTraceEveryStep) {
  {
    ddp_test::ScopedEnv eager({{"PT_HPU_LAZY_MODE", "0"}, {"HG_LAZY_MODE", std::nullopt}});  // nothing to replay
    TinyClassifier m;
    const Fitted r = fit(m, true, dir / "eager");
    EXPECT_EQ(r.stats.traced + r.stats.replayed, 0u);
  }
  {
    TinyClassifier replayed, traced;  // accumulation: steps differ within a group
    auto run = [&](TinyClassifier& m, bool replay, const std::string& sub) {
      Trainer t(quiet_options(dir / sub, {.accelerator = "hpu", .max_epochs = 1, .accumulate_grad_batches = 2,
                                          .enable_checkpointing = false, .replay_steps = replay}));
      DataLoader loader(blobs(48, 3), {.batch_size = 8});
      t.fit(m, loader);
      return t.step_replay_stats();
    };
    EXPECT_EQ(run(replayed, true, "acc_r").replayed, 0u);
    run(traced, false, "acc_p");
    EXPECT_EQ(test::weights_of(*replayed.net), test::weights_of(*traced.net));
  }
}

}  // namespace
}  // namespace hg::training
