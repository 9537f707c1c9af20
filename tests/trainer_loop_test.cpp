// Trainer loops: logging, validation schedule, stopping, accumulation, clipping, several
// optimizers, manual optimization, precision, the lazy step graph.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "graphs/lazy.h"
#include "tests/errors.h"
#include "tests/golden.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/schedulers.h"

namespace hg::training {
namespace {

using test::blobs;
using test::error_of;
using test::MemoryLogger;
using test::quiet_options;
using test::RecordingCallback;
using test::TinyClassifier;
using ::testing::HasSubstr;

class TrainerLoopTest : public ::testing::Test {
 protected:
  void TearDown() override { graphs::enable_lazy_mode(false); }
  std::filesystem::path dir = test::temp_dir(std::string("loop_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

// Logs a few ways from training_step (batch_idx as the value) and once per epoch.
class Logging : public TinyClassifier {
 public:
  Tensor training_step(const Batch& b, int64_t idx) override {
    Tensor loss = TinyClassifier::training_step(b, idx);
    const double v = static_cast<double>(idx);
    log("both", v, {.prog_bar = true, .on_epoch = true});
    log("weighted", v, {.on_step = false, .on_epoch = true, .batch_size = idx + 1});
    log("top", v, {.on_step = false, .on_epoch = true, .reduce_fx = "max"});
    log("total", Tensor::full({}, static_cast<float>(v)), {.on_step = false, .on_epoch = true, .reduce_fx = "sum"});
    return loss;
  }
  void on_train_epoch_end() override { log("epoch_hook", 5.0); }
};

TEST_F(TrainerLoopTest, LogNamesReductionsAndLoggerSteps) {
  Logging m;
  auto logger = std::make_shared<MemoryLogger>();
  Trainer t(quiet_options(dir, {.max_epochs = 1, .log_every_n_steps = 2, .logger = std::vector<std::shared_ptr<Logger>>{logger}, .enable_checkpointing = false}));
  t.fit(m, DataLoader(blobs(24, 1), {.batch_size = 8}));
  const auto& cm = t.callback_metrics();
  EXPECT_EQ(cm.at("both_step"), 2.0);
  EXPECT_EQ(cm.at("both_epoch"), 1.0);
  EXPECT_EQ(cm.at("both"), 1.0);  // the epoch value once the epoch ended
  EXPECT_DOUBLE_EQ(cm.at("weighted"), (0 * 1 + 1 * 2 + 2 * 3) / 6.0);
  EXPECT_EQ(cm.at("top"), 2.0);
  EXPECT_EQ(cm.at("total"), 3.0);
  EXPECT_EQ(cm.at("epoch_hook"), 5.0);
  EXPECT_TRUE(cm.count("train_loss"));
  EXPECT_EQ(t.progress_bar_metrics().count("both_step"), 1u);
  EXPECT_EQ(t.progress_bar_metrics().count("both_epoch"), 1u);
  EXPECT_EQ(t.progress_bar_metrics().count("weighted"), 0u);
  // Steps 2 (logged as step 1) and the epoch end (step 2).
  ASSERT_EQ(logger->rows.size(), 2u);
  EXPECT_EQ(logger->rows[0].first, 1);
  EXPECT_EQ(logger->rows[0].second.at("both_step"), 1.0);
  EXPECT_EQ(logger->rows[0].second.at("epoch"), 0.0);
  EXPECT_FALSE(logger->rows[0].second.count("weighted"));
  EXPECT_EQ(logger->rows[1].first, 2);
  EXPECT_EQ(logger->rows[1].second.at("top"), 2.0);
  EXPECT_EQ(logger->rows[1].second.at("both_epoch"), 1.0);
  EXPECT_EQ(logger->status, "success");
  EXPECT_EQ(t.logged_metrics().at("top"), 2.0);
}

class BadLogging : public TinyClassifier {
 public:
  std::string mode;
  Tensor training_step(const Batch& b, int64_t idx) override {
    if (mode == "vector") log("v", Tensor::from_vector({1, 2}, {2}));
    if (mode == "reduce") log("r", 1.0, {.reduce_fx = "median"});
    return TinyClassifier::training_step(b, idx);
  }
  void on_train_epoch_end() override {
    if (mode == "step") log("s", 1.0, {.on_step = true});
  }
};

TEST_F(TrainerLoopTest, LogErrorsNameTheMetric) {
  const std::map<std::string, std::string> want = {
      {"vector", "log('v'): the value has 2 elements"},
      {"reduce", "reduce_fx 'median'"},
      {"step", "log('s', on_step=true) is not allowed in on_train_epoch_end"}};
  for (const auto& [mode, message] : want) {
    BadLogging m;
    m.mode = mode;
    Trainer t(quiet_options(dir, {.max_epochs = 1, .enable_checkpointing = false}));
    EXPECT_THAT(error_of<InvalidArgument>([&] { t.fit(m, DataLoader(blobs(8, 1), {.batch_size = 8})); }), HasSubstr(message));
  }
  TinyClassifier m;
  EXPECT_THAT(error_of<InvalidArgument>([&] { m.log("x", 1.0); }), HasSubstr("outside"));
}

int count(const std::vector<std::string>& ev, const std::string& what) {
  return static_cast<int>(std::count(ev.begin(), ev.end(), what));
}

int validations(const std::filesystem::path& dir, TrainerOptions o, int64_t train_n = 32) {
  std::vector<std::string> ev;
  TinyClassifier m(&ev);
  o.enable_checkpointing = false;
  Trainer t(quiet_options(dir, o));
  const DataLoader val(blobs(8, 2), {.batch_size = 8});
  t.fit(m, DataLoader(blobs(train_n, 1), {.batch_size = 8}), &val);
  return count(ev, "validation_step");
}

TEST_F(TrainerLoopTest, ValidationSchedule) {
  // 4 training batches per epoch, 1 validation batch; the default sanity check runs it once more.
  EXPECT_EQ(validations(dir, {.max_epochs = 2, .num_sanity_val_steps = 0}), 2);
  EXPECT_EQ(validations(dir, {.max_epochs = 2}), 3);
  EXPECT_EQ(validations(dir, {.max_epochs = 1, .val_check_interval = 0.5, .num_sanity_val_steps = 0}), 2);
  EXPECT_EQ(validations(dir, {.max_epochs = 1, .val_check_interval = 1, .num_sanity_val_steps = 0}), 4);
  EXPECT_EQ(validations(dir, {.max_epochs = 4, .check_val_every_n_epoch = 2, .num_sanity_val_steps = 0}), 2);
  EXPECT_EQ(validations(dir, {.max_epochs = 2, .limit_val_batches = 0}), 0);
  EXPECT_EQ(validations(dir, {.max_epochs = 2, .val_check_interval = 3, .check_val_every_n_epoch = std::nullopt,
                              .num_sanity_val_steps = 0}),
            2);
  EXPECT_THAT(error_of<InvalidArgument>([&] { validations(dir, {.max_epochs = 1, .val_check_interval = 5}); }),
              HasSubstr("val_check_interval (5)"));
}

TEST_F(TrainerLoopTest, StoppingRules) {
  TinyClassifier m;
  Trainer steps(quiet_options(dir, {.max_steps = 6, .enable_checkpointing = false}));
  steps.fit(m, DataLoader(blobs(32, 1), {.batch_size = 8}));
  EXPECT_EQ(steps.global_step(), 6);
  EXPECT_EQ(steps.current_epoch(), 1);  // epoch 1 stopped after 2 of 4 batches

  Trainer limited(quiet_options(dir, {.max_epochs = 3, .limit_train_batches = 0.5, .enable_checkpointing = false}));
  limited.fit(m, DataLoader(blobs(32, 1), {.batch_size = 8}));
  EXPECT_EQ(limited.num_training_batches(), 2);
  EXPECT_EQ(limited.global_step(), 6);

  class StopNow : public Callback {
    std::string state_key() const override { return "StopNow"; }
    void on_train_epoch_end(Trainer& t, LightningModule&) override { t.should_stop = true; }
  };
  Trainer early(quiet_options(dir, {.max_epochs = 10, .min_epochs = 3, .callbacks = {std::make_shared<StopNow>()}, .enable_checkpointing = false}));
  early.fit(m, DataLoader(blobs(16, 1), {.batch_size = 8}));
  EXPECT_EQ(early.current_epoch(), 3);

  std::vector<std::string> ev;
  TinyClassifier dev(&ev);
  const DataLoader val(blobs(32, 2), {.batch_size = 8});
  Trainer fast(quiet_options(dir, {.max_epochs = 5, .fast_dev_run = 2}));
  fast.fit(dev, DataLoader(blobs(64, 1), {.batch_size = 8}), &val);
  EXPECT_EQ(count(ev, "training_step"), 2);
  EXPECT_EQ(count(ev, "validation_step"), 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "checkpoints"));
}

std::vector<OptimizerConfig> plain_sgd(TinyClassifier& m, double lr) {
  return {{.optimizer = std::make_shared<SGD>(m.net->named_parameters(), SGDOptions{.lr = lr})}};
}

TEST_F(TrainerLoopTest, AccumulatedBatchesStepLikeOneBigBatch) {
  TinyClassifier small, big;
  small.make_optimizers = big.make_optimizers = [](TinyClassifier& m) { return plain_sgd(m, 0.5); };
  Trainer a(quiet_options(dir, {.max_epochs = 1, .accumulate_grad_batches = 2, .enable_checkpointing = false}));
  a.fit(small, DataLoader(blobs(16, 1), {.batch_size = 8}));
  Trainer b(quiet_options(dir, {.max_epochs = 1, .enable_checkpointing = false}));
  b.fit(big, DataLoader(blobs(16, 1), {.batch_size = 16}));
  EXPECT_EQ(a.global_step(), 1);
  const auto wa = test::weights_of(*small.net), wb = test::weights_of(*big.net);
  for (size_t i = 0; i < wa.size(); ++i) test::expect_close(wa[i], wb[i], 1e-6, "parameter " + std::to_string(i));

  TinyClassifier odd;
  Trainer c(quiet_options(dir, {.max_epochs = 1, .accumulate_grad_batches = 2, .enable_checkpointing = false}));
  c.fit(odd, DataLoader(blobs(24, 1), {.batch_size = 8}));
  EXPECT_EQ(c.global_step(), 2);  // the epoch's last batch steps with half a window
}

TEST_F(TrainerLoopTest, GradientClippingBoundsTheUpdate) {
  for (const char* algo : {"value", "norm"}) {
    TinyClassifier m;
    m.make_optimizers = [](TinyClassifier& x) { return plain_sgd(x, 1.0); };
    const auto before = test::weights_of(*m.net);
    Trainer t(quiet_options(dir, {.max_epochs = 1, .gradient_clip_val = 1e-3, .gradient_clip_algorithm = algo,
                                  .enable_checkpointing = false}));
    t.fit(m, DataLoader(blobs(8, 1), {.batch_size = 8}));
    const auto after = test::weights_of(*m.net);
    double max_abs = 0, sq = 0;
    for (size_t i = 0; i < before.size(); ++i)
      for (size_t k = 0; k < before[i].size(); ++k) {
        const double d = static_cast<double>(after[i][k]) - before[i][k];
        ASSERT_TRUE(std::isfinite(d)) << algo << ": parameter " << i << " element " << k << " is " << after[i][k];
        max_abs = std::max(max_abs, std::abs(d));
        sq += d * d;
      }
    if (std::string(algo) == "value") {
      EXPECT_NEAR(max_abs, 1e-3, 1e-6);
    } else {
      EXPECT_NEAR(std::sqrt(sq), 1e-3, 1e-5);
    }
  }
}

// Two optimizers: the first layer's parameters and the last layer's.
std::vector<OptimizerConfig> split_optimizers(TinyClassifier& m, bool overlap) {
  NamedParams first, last;
  for (auto& p : m.net->named_parameters()) (p.first[0] == '0' || overlap ? first : last).push_back(p);
  if (overlap) last = first;
  return {{.optimizer = std::make_shared<SGD>(first, SGDOptions{.lr = 0.1})},
          {.optimizer = std::make_shared<SGD>(last, SGDOptions{.lr = 0.1})}};
}

TEST_F(TrainerLoopTest, SeveralOptimizersAllStepAndMustNotOverlap) {
  TinyClassifier m;
  m.make_optimizers = [](TinyClassifier& x) { return split_optimizers(x, false); };
  const auto before = test::weights_of(*m.net);
  std::vector<std::string> ev;
  Trainer t(quiet_options(dir, {.max_epochs = 1, .callbacks = {std::make_shared<RecordingCallback>(&ev)}, .enable_checkpointing = false}));
  t.fit(m, DataLoader(blobs(16, 1), {.batch_size = 8}));
  EXPECT_EQ(count(ev, "cb.on_before_optimizer_step"), 4);
  const auto after = test::weights_of(*m.net);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NE(before[i], after[i]) << "parameter " << i;

  TinyClassifier bad;
  bad.make_optimizers = [](TinyClassifier& x) { return split_optimizers(x, true); };
  Trainer t2(quiet_options(dir, {.max_epochs = 1, .enable_checkpointing = false}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { t2.fit(bad, DataLoader(blobs(8, 1), {.batch_size = 8})); }),
              HasSubstr("parameter '0.weight' is in optimizer 0 and optimizer 1"));
}

class Manual : public TinyClassifier {
 public:
  Manual() {
    automatic_optimization = false;
    make_optimizers = [](TinyClassifier& x) { return split_optimizers(x, false); };
  }
  Tensor training_step(const Batch& b, int64_t) override {
    std::vector<Optimizer*> opts = optimizers();
    for (Optimizer* o : opts) {  // alternate: each optimizer after its own backward
      Tensor loss = ops::cross_entropy(net->forward(b[0]), b[1]);
      manual_backward(loss);
      o->step();
      o->zero_grad();
      ++steps;
    }
    return {};
  }
  int steps = 0;
};

TEST_F(TrainerLoopTest, ManualOptimization) {
  Manual m;
  const auto before = test::weights_of(*m.net);
  Trainer t(quiet_options(dir, {.max_epochs = 2, .enable_checkpointing = false}));
  t.fit(m, DataLoader(blobs(16, 1), {.batch_size = 8}));
  EXPECT_EQ(m.steps, 8);
  EXPECT_EQ(t.global_step(), 4);
  EXPECT_NE(test::weights_of(*m.net), before);

  Manual clipped;
  Trainer t2(quiet_options(dir, {.max_epochs = 1, .gradient_clip_val = 1.0, .enable_checkpointing = false}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { t2.fit(clipped, DataLoader(blobs(8, 1), {.batch_size = 8})); }),
              HasSubstr("gradient_clip_val"));
  TinyClassifier automatic;
  EXPECT_THAT(error_of<InvalidArgument>([&] { automatic.manual_backward(Tensor::full({}, 1.0f)); }), HasSubstr("Trainer"));
}

// SGD lr 1 with one scheduler config, made by `sched` from the optimizer.
std::function<std::vector<OptimizerConfig>(TinyClassifier&)> with_scheduler(
    std::function<std::shared_ptr<LRScheduler>(Optimizer&)> sched, OptimizerConfig cfg) {
  return [sched, cfg](TinyClassifier& m) {
    OptimizerConfig c = cfg;
    c.optimizer = std::make_shared<SGD>(m.net->named_parameters(), SGDOptions{.lr = 1.0});
    c.scheduler = sched(*c.optimizer);
    return std::vector<OptimizerConfig>{c};
  };
}

double final_lr(TinyClassifier& m, TrainerOptions o, const std::filesystem::path& dir, bool with_val = false) {
  o.enable_checkpointing = false;
  Trainer t(quiet_options(dir, o));
  const DataLoader train(blobs(32, 1), {.batch_size = 8}), val(blobs(8, 2), {.batch_size = 8});
  t.fit(m, train, with_val ? &val : nullptr);
  return t.optimizer_configs()[0].optimizer->param_groups()[0].lr();
}

TEST_F(TrainerLoopTest, SchedulersStepPerIntervalAndFrequency) {
  auto step_lr = [](Optimizer& o) { return std::make_shared<StepLR>(o, 1, 0.5); };
  TinyClassifier per_step, per_epoch, every_2_epochs;
  per_step.make_optimizers = with_scheduler(step_lr, {.interval = "step"});
  EXPECT_DOUBLE_EQ(final_lr(per_step, {.max_epochs = 2}, dir), std::pow(0.5, 8));  // 4 steps per epoch
  per_epoch.make_optimizers = with_scheduler(step_lr, {.interval = "epoch"});
  EXPECT_DOUBLE_EQ(final_lr(per_epoch, {.max_epochs = 3}, dir), std::pow(0.5, 3));
  every_2_epochs.make_optimizers = with_scheduler(step_lr, {.interval = "epoch", .frequency = 2});
  EXPECT_DOUBLE_EQ(final_lr(every_2_epochs, {.max_epochs = 5}, dir), std::pow(0.5, 2));

  class Manual : public TinyClassifier {
   public:
    Manual() { automatic_optimization = false; }
    Tensor training_step(const Batch& b, int64_t) override {
      manual_backward(ops::cross_entropy(net->forward(b[0]), b[1]));
      optimizers()[0]->step();
      optimizers()[0]->zero_grad();
      return {};
    }
  } manual;
  manual.make_optimizers = with_scheduler(step_lr, {.interval = "step"});
  EXPECT_DOUBLE_EQ(final_lr(manual, {.max_epochs = 1}, dir), 1.0);  // manual optimization steps its own schedulers
}

TEST_F(TrainerLoopTest, PlateauSchedulerStepsWithItsMonitor) {
  // An improvement must beat the best by 1e9: the first epoch sets the best, every later one reduces.
  auto plateau = [](Optimizer& o) {
    return std::make_shared<ReduceLROnPlateau>(
        o, ReduceLROnPlateauOptions{.factor = 0.5, .patience = 0, .threshold = 1e9, .threshold_mode = "abs"});
  };
  TinyClassifier m;
  m.make_optimizers = with_scheduler(plateau, {.monitor = "val_loss"});
  EXPECT_DOUBLE_EQ(final_lr(m, {.max_epochs = 3}, dir, true), 0.25);

  TinyClassifier missing;
  missing.make_optimizers = with_scheduler(plateau, {.monitor = "val_acc"});
  EXPECT_THAT(error_of<InvalidArgument>([&] { final_lr(missing, {.max_epochs = 1}, dir, true); }),
              HasSubstr("monitors 'val_acc', which was not logged (available: train_loss, val_loss)"));
  TinyClassifier lenient;
  lenient.make_optimizers = with_scheduler(plateau, {.monitor = "val_acc", .strict = false});
  EXPECT_DOUBLE_EQ(final_lr(lenient, {.max_epochs = 2}, dir, true), 1.0);
  TinyClassifier unmonitored;
  unmonitored.make_optimizers = with_scheduler(plateau, {});
  EXPECT_THAT(error_of<InvalidArgument>([&] { final_lr(unmonitored, {.max_epochs = 1}, dir); }),
              HasSubstr("needs `monitor`"));
}

TEST_F(TrainerLoopTest, TestAndPredict) {
  std::vector<std::string> ev;
  TinyClassifier m(&ev);
  const DataLoader data(blobs(12, 4), {.batch_size = 8});
  Trainer t(quiet_options(dir, {.callbacks = {std::make_shared<RecordingCallback>(&ev)}, .enable_checkpointing = false}));
  const auto r = t.test(m, data);
  ASSERT_EQ(r.size(), 1u);
  const auto all = blobs(12, 4)->tensors();
  const double want = ops::cross_entropy(m.net->forward(all[0]), all[1]).item();
  EXPECT_NEAR(r[0].at("test_loss"), want, 1e-6);  // the batch-size weighted mean is the full mean
  EXPECT_EQ(count(ev, "cb.on_test_batch_end:1"), 1);
  EXPECT_EQ(count(ev, "on_test_epoch_end"), 1);

  const std::vector<Tensor> out = t.predict(m, data);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{8, 3}));
  EXPECT_EQ(out[1].shape(), (Shape{4, 3}));
  EXPECT_EQ(count(ev, "cb.on_predict_batch_end:1"), 1);
}

class TrainerPrecisionTest : public TrainerLoopTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(TrainerPrecisionTest, Bf16MixedTrainsAndKeepsF32Weights) {
  TinyClassifier m;
  const DataLoader data(blobs(24, 1), {.batch_size = 8});
  Trainer t(quiet_options(dir, {.accelerator = GetParam(), .precision = "bf16-mixed", .max_epochs = 3,
                                .enable_checkpointing = false}));
  const double before = t.validate(m, data)[0].at("val_loss");
  t.fit(m, data);
  const double after = t.validate(m, data)[0].at("val_loss");
  EXPECT_LT(after, before);
  for (auto& [name, p] : m.net->named_parameters()) EXPECT_EQ(p->dtype(), DType::F32) << name;
}

INSTANTIATE_TEST_SUITE_P(Trainer, TrainerPrecisionTest, ::testing::Values("cpu", "hpu"));

// Per training batch: the lazy graphs run so far and the compiles so far.
class LazyCounts : public Callback {
 public:
  std::string state_key() const override { return "LazyCounts"; }
  void on_train_batch_end(Trainer&, LightningModule&, const Batch&, int64_t) override {
    const graphs::LazyStats s = graphs::lazy_stats();
    steps.push_back(s.steps);
    misses.push_back(s.cache_misses);
  }
  std::vector<uint64_t> steps, misses;
};

TEST_F(TrainerLoopTest, LazyStepGraphIsCompiledOnceAndReplayed) {
  auto counts = std::make_shared<LazyCounts>();
  TinyClassifier m;  // a per-step scheduler changes the lr every step: an input of the graph, not a recompile
  m.make_optimizers = [](TinyClassifier& x) {
    auto opt = std::make_shared<SGD>(x.net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
    return std::vector<OptimizerConfig>{
        {.optimizer = opt, .scheduler = std::make_shared<CosineAnnealingLR>(*opt, 16), .interval = "step"}};
  };
  Trainer t(quiet_options(dir, {.accelerator = "hpu", .max_epochs = 2, .gradient_clip_val = 1.0, .callbacks = {counts},
                                .enable_checkpointing = false}));
  t.fit(m, DataLoader(blobs(64, 1), {.batch_size = 8, .shuffle = true}));
  ASSERT_TRUE(graphs::lazy_mode_enabled());
  ASSERT_EQ(counts->misses.size(), 16u);
  for (size_t i = 1; i < counts->steps.size(); ++i) {
    EXPECT_EQ(counts->steps[i], counts->steps[i - 1] + 1) << "one graph for step " << i;  // forward to update
    if (i >= 2) {
      EXPECT_EQ(counts->misses[i], counts->misses[1]) << "step " << i;
    }
  }
  EXPECT_EQ(m.net->named_parameters()[0].second->device(), Device::hpu(0));

  // Accumulating micro-batches: each is a graph; the set of graphs is complete after the second step.
  auto acc = std::make_shared<LazyCounts>();
  TinyClassifier m2;
  Trainer t2(quiet_options(dir, {.accelerator = "hpu", .max_epochs = 1, .accumulate_grad_batches = 2,
                                 .callbacks = {acc}, .enable_checkpointing = false}));
  t2.fit(m2, DataLoader(blobs(64, 1), {.batch_size = 8}));
  ASSERT_EQ(acc->misses.size(), 8u);
  for (size_t i = 4; i < acc->misses.size(); ++i) EXPECT_EQ(acc->misses[i], acc->misses[3]) << "micro-batch " << i;
}

}  // namespace
}  // namespace hg::training
