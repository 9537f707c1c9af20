// Trainer: options, hook order, fit / validate / test / predict, logging.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/generator.h"
#include "graphs/lazy.h"
#include "tests/errors.h"
#include "tests/golden.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/callbacks.h"
#include "training/loggers.h"

namespace hg::training {
namespace {

using test::blobs;
using test::error_of;
using test::MemoryLogger;
using test::quiet_options;
using test::RecordingCallback;
using test::TinyClassifier;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TrainerTest : public ::testing::Test {
 protected:
  void TearDown() override { graphs::enable_lazy_mode(false); }
  std::filesystem::path dir = test::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
};

std::string option_error(TrainerOptions o) {
  return error_of<InvalidArgument>([&] { Trainer t(std::move(o)); });
}

TEST_F(TrainerTest, OptionErrorsNameTheOption) {
  EXPECT_THAT(option_error({.accelerator = "gpu"}), HasSubstr("accelerator 'gpu'"));
  EXPECT_THAT(option_error({.devices = 0}), HasSubstr("devices"));
  EXPECT_THAT(error_of<InvalidArgument>([] { Devices d("many"); }), HasSubstr("devices 'many'"));
  EXPECT_THAT(option_error({.strategy = "ddp_spawn"}), HasSubstr("strategy 'ddp_spawn'"));
  EXPECT_THAT(option_error({.devices = 2, .strategy = "hpu_single"}), HasSubstr("strategy 'hpu_single'"));
  EXPECT_THAT(option_error({.num_nodes = 0}), HasSubstr("num_nodes"));
  EXPECT_THAT(option_error({.precision = "16-mixed"}), HasSubstr("precision '16-mixed'"));
  EXPECT_THAT(option_error({.max_epochs = -2}), HasSubstr("max_epochs"));
  EXPECT_THAT(option_error({.min_epochs = -1}), HasSubstr("min_epochs"));
  EXPECT_THAT(option_error({.max_steps = -5}), HasSubstr("max_steps"));
  EXPECT_THAT(option_error({.limit_train_batches = 1.5}), HasSubstr("limit_train_batches"));
  EXPECT_THAT(option_error({.limit_val_batches = -0.5}), HasSubstr("limit_val_batches"));
  EXPECT_THAT(option_error({.limit_test_batches = Limit(-3)}), HasSubstr("limit_test_batches"));
  EXPECT_THAT(option_error({.limit_predict_batches = 2.0}), HasSubstr("limit_predict_batches"));
  EXPECT_THAT(option_error({.val_check_interval = 0.0}), HasSubstr("val_check_interval"));
  EXPECT_THAT(option_error({.val_check_interval = 0.5, .check_val_every_n_epoch = std::nullopt}),
              HasSubstr("val_check_interval"));
  EXPECT_THAT(option_error({.check_val_every_n_epoch = 0}), HasSubstr("check_val_every_n_epoch"));
  EXPECT_THAT(option_error({.num_sanity_val_steps = -2}), HasSubstr("num_sanity_val_steps"));
  EXPECT_THAT(option_error({.log_every_n_steps = 0}), HasSubstr("log_every_n_steps"));
  EXPECT_THAT(option_error({.accumulate_grad_batches = 0}), HasSubstr("accumulate_grad_batches"));
  EXPECT_THAT(option_error({.gradient_clip_val = -1.0}), HasSubstr("gradient_clip_val"));
  EXPECT_THAT(option_error({.gradient_clip_algorithm = "l1"}), HasSubstr("gradient_clip_algorithm 'l1'"));
  EXPECT_THAT(option_error({.callbacks = {nullptr}}), HasSubstr("callbacks"));
  EXPECT_THAT(option_error({.logger = std::vector<std::shared_ptr<Logger>>{nullptr}}), HasSubstr("logger"));
  EXPECT_THAT(option_error({.callbacks = {std::make_shared<ModelCheckpoint>()}, .enable_checkpointing = false}),
              HasSubstr("enable_checkpointing"));
  EXPECT_THAT(option_error({.callbacks = {std::make_shared<ProgressBar>()}, .enable_progress_bar = false}),
              HasSubstr("enable_progress_bar"));
  EXPECT_THAT(option_error({.fast_dev_run = -1}), HasSubstr("fast_dev_run"));
  EXPECT_THAT(option_error({.dist_timeout = std::chrono::milliseconds(0)}), HasSubstr("dist_timeout"));
}

TEST_F(TrainerTest, DefaultsFollowLightning) {
  Trainer t({.default_root_dir = dir});
  EXPECT_EQ(*t.options().max_epochs, 1000);
  EXPECT_EQ(t.options().precision, "32-true");
  EXPECT_EQ(t.strategy().name(), "hpu_single");
  ASSERT_EQ(t.loggers().size(), 1u);
  EXPECT_NE(dynamic_cast<CSVLogger*>(t.loggers()[0].get()), nullptr);
  EXPECT_EQ(t.log_dir(), dir / "lightning_logs" / "version_0");
  ASSERT_EQ(t.callbacks().size(), 2u);
  EXPECT_NE(dynamic_cast<ProgressBar*>(t.callbacks()[0].get()), nullptr);
  auto* ckpt = dynamic_cast<ModelCheckpoint*>(t.callbacks()[1].get());
  ASSERT_NE(ckpt, nullptr);
  EXPECT_TRUE(ckpt->options().save_last);

  Trainer steps({.max_steps = 10, .default_root_dir = dir, .enable_checkpointing = false, .enable_progress_bar = false});
  EXPECT_EQ(*steps.options().max_epochs, -1);
  EXPECT_TRUE(steps.callbacks().empty());

  Trainer ddp({.devices = 2, .default_root_dir = dir});
  EXPECT_EQ(ddp.strategy().name(), "hpu_ddp");
  Trainer parallel({.devices = 1, .strategy = "hpu_parallel", .default_root_dir = dir});
  EXPECT_EQ(parallel.strategy().name(), "hpu_parallel");
  auto mine = std::make_shared<SingleHPUStrategy>();
  Trainer given({.devices = 4, .strategy_object = mine, .default_root_dir = dir});
  EXPECT_EQ(&given.strategy(), mine.get());

  Trainer dev({.default_root_dir = dir, .fast_dev_run = 3});
  EXPECT_EQ(dev.options().max_steps, 3);
  EXPECT_EQ(*dev.options().max_epochs, 1);
  EXPECT_EQ(dev.options().num_sanity_val_steps, 0);
  EXPECT_EQ(dev.options().limit_val_batches.batches, 3);
  EXPECT_TRUE(dev.loggers().empty());
  for (const auto& cb : dev.callbacks()) EXPECT_EQ(dynamic_cast<ModelCheckpoint*>(cb.get()), nullptr);
}

// Records what the Trainer resolved for it.
class ContextStrategy : public SingleHPUStrategy {
 public:
  void setup_environment(const StrategyContext& ctx) override {
    SingleHPUStrategy::setup_environment(ctx);
    seen = ctx;
    ++setups;
  }
  StrategyContext seen;
  int setups = 0;
};

TEST_F(TrainerTest, SeedDeviceAndStrategyContext) {
  Trainer seeded({.deterministic = true, .seed = 1234, .default_root_dir = dir});
  EXPECT_EQ(default_generator(Device::cpu()).seed(), 1234u);
  EXPECT_EQ(default_generator(Device::hpu(0)).seed(), 1234u);
  EXPECT_EQ(default_generator(Device::hpu(0)).offset(), 0u);
  EXPECT_EQ(seeded.device(), Device::hpu(0));  // accelerator "auto"

  auto s = std::make_shared<ContextStrategy>();
  TinyClassifier m;
  Trainer t(quiet_options(dir, {.accelerator = "cpu", .strategy_object = s, .max_epochs = 1, .deterministic = true,
                                .enable_checkpointing = false, .dist_timeout = std::chrono::seconds(42)}));
  const DataLoader data(blobs(8, 1), {.batch_size = 8});
  t.fit(m, data);
  t.validate(m, data);
  EXPECT_EQ(s->setups, 1);  // once per Trainer
  EXPECT_EQ(s->seen.device, Device::cpu());
  EXPECT_EQ(s->seen.devices, 1);
  EXPECT_EQ(s->seen.num_nodes, 1);
  EXPECT_EQ(s->seen.timeout, std::chrono::seconds(42));
  EXPECT_TRUE(s->seen.deterministic);
  EXPECT_EQ(m.net->named_parameters()[0].second->device(), Device::cpu());
}

TEST_F(TrainerTest, LimitResolvesFractionsAndCounts) {
  EXPECT_EQ(Limit(1.0).resolve(10), 10);
  EXPECT_EQ(Limit(0.25).resolve(10), 2);
  EXPECT_EQ(Limit(3).resolve(10), 3);
  EXPECT_EQ(Limit(30).resolve(10), 10);
  EXPECT_EQ(Limit(0).resolve(10), 0);

  std::vector<std::string> ev;
  TinyClassifier m(&ev);
  const DataLoader data(blobs(40, 1), {.batch_size = 8});
  Trainer t(quiet_options(dir, {.limit_test_batches = 2, .limit_predict_batches = 0.4, .enable_checkpointing = false}));
  t.test(m, data);
  EXPECT_EQ(std::count(ev.begin(), ev.end(), "test_step"), 2);
  EXPECT_EQ(t.predict(m, data).size(), 2u);
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                Trainer tiny(quiet_options(dir, {.limit_val_batches = 0.1, .enable_checkpointing = false}));
                tiny.validate(m, data);
              }),
              HasSubstr("limit_val_batches=0.1 of 5 batches is less than one batch"));
}

TEST_F(TrainerTest, FitHookOrderIsLightnings) {
  std::vector<std::string> ev;
  TinyClassifier m(&ev);
  auto train = blobs(16, 1), val = blobs(8, 2);
  Trainer t(quiet_options(dir, {.max_epochs = 1, .num_sanity_val_steps = 1, .callbacks = {std::make_shared<RecordingCallback>(&ev)}, .enable_checkpointing = false}));
  const DataLoader val_loader(val, {.batch_size = 8});
  t.fit(m, DataLoader(train, {.batch_size = 8}), &val_loader);
  const std::vector<std::string> val_run = {"on_validation_epoch_start", "validation_step", "cb.on_validation_batch_end:0",
                                            "cb.on_validation_epoch_end", "on_validation_epoch_end", "cb.on_validation_end"};
  std::vector<std::string> want = {"setup:fit", "configure_optimizers", "cb.on_fit_start", "on_fit_start",
                                   "cb.on_validation_epoch_start(sanity)"};
  want.insert(want.end(), val_run.begin(), val_run.end());
  want.insert(want.end(), {"cb.on_train_epoch_start", "on_train_epoch_start"});
  for (int i = 0; i < 2; ++i) {
    const std::string s = std::to_string(i);
    want.insert(want.end(), {"cb.on_train_batch_start:" + s, "training_step", "cb.on_before_optimizer_step",
                             "cb.on_train_batch_end:" + s});
  }
  want.push_back("cb.on_validation_epoch_start");
  want.insert(want.end(), val_run.begin(), val_run.end());
  want.insert(want.end(), {"cb.on_train_epoch_end", "on_train_epoch_end", "cb.on_fit_end", "on_fit_end", "teardown:fit"});
  EXPECT_EQ(ev, want);
  EXPECT_EQ(t.current_epoch(), 1);
  EXPECT_EQ(t.global_step(), 2);
  EXPECT_EQ(t.num_training_batches(), 2);
  EXPECT_EQ(t.num_val_batches(), 1);
  EXPECT_EQ(m.trainer(), nullptr);
}

TEST_F(TrainerTest, EvaluationHookOrder) {
  std::vector<std::string> ev;
  TinyClassifier m(&ev);
  const DataLoader data(blobs(8, 2), {.batch_size = 8});
  Trainer t(quiet_options(dir, {.callbacks = {std::make_shared<RecordingCallback>(&ev)}, .enable_checkpointing = false}));
  t.validate(m, data);
  EXPECT_EQ(ev, (std::vector<std::string>{"setup:validate", "cb.on_validation_epoch_start", "on_validation_epoch_start",
                                          "validation_step", "cb.on_validation_batch_end:0", "cb.on_validation_epoch_end",
                                          "on_validation_epoch_end", "cb.on_validation_end", "teardown:validate"}));
  ev.clear();
  t.test(m, data);
  EXPECT_EQ(ev, (std::vector<std::string>{"setup:test", "test_step", "cb.on_test_batch_end:0", "cb.on_test_epoch_end",
                                          "on_test_epoch_end", "teardown:test"}));
  ev.clear();
  t.predict(m, data);
  EXPECT_EQ(ev, (std::vector<std::string>{"setup:predict", "cb.on_predict_batch_end:0", "teardown:predict"}));
  EXPECT_TRUE(m.net->training());  // evaluation restores the module's mode
  m.net->eval();
  t.validate(m, data);
  EXPECT_FALSE(m.net->training());
}

class Failing : public TinyClassifier {
 public:
  using TinyClassifier::TinyClassifier;
  Tensor training_step(const Batch& b, int64_t idx) override {
    if (idx == 1) throw InvalidArgument("boom at batch 1");
    return TinyClassifier::training_step(b, idx);
  }
};

TEST_F(TrainerTest, AnExceptionReachesCallbacksAndLoggersAndPropagates) {
  std::vector<std::string> ev;
  Failing m(&ev);
  auto logger = std::make_shared<MemoryLogger>();
  Trainer t(quiet_options(dir, {.max_epochs = 1, .callbacks = {std::make_shared<RecordingCallback>(&ev)},
                                .logger = std::vector<std::shared_ptr<Logger>>{logger}, .enable_checkpointing = false}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { t.fit(m, DataLoader(blobs(24, 1), {.batch_size = 8})); }),
              HasSubstr("boom at batch 1"));
  EXPECT_EQ(std::count(ev.begin(), ev.end(), "cb.on_exception"), 1);
  EXPECT_EQ(ev.back(), "teardown:fit");
  EXPECT_EQ(logger->status, "failed");
  EXPECT_EQ(m.trainer(), nullptr);
  EXPECT_EQ(t.stage(), "");
}

// Counts Strategy::before_forward (DDP broadcasts rank 0's buffers there) among the module's hooks.
class CountingStrategy : public SingleHPUStrategy {
 public:
  explicit CountingStrategy(std::vector<std::string>* ev) : ev_(ev) {}
  void before_forward(models::Module& mod) override {
    ev_->push_back("before_forward");
    module = &mod;
  }
  models::Module* module = nullptr;

 private:
  std::vector<std::string>* ev_;
};

class ManualSteps : public TinyClassifier {
 public:
  explicit ManualSteps(std::vector<std::string>* ev) : TinyClassifier(ev) { automatic_optimization = false; }
  Tensor training_step(const Batch& b, int64_t idx) override {
    Tensor loss = TinyClassifier::training_step(b, idx);
    optimizers()[0]->zero_grad();
    manual_backward(loss);
    optimizers()[0]->step();
    return loss;
  }
};

// Every training_step (each accumulated micro-batch, manual optimization too) comes right after
// before_forward on the module; validation steps do not.
void expect_before_every_training_step(const std::vector<std::string>& ev, int64_t steps) {
  EXPECT_EQ(std::count(ev.begin(), ev.end(), "training_step"), steps);
  EXPECT_EQ(std::count(ev.begin(), ev.end(), "before_forward"), steps);
  for (size_t i = 0; i < ev.size(); ++i) {
    if (ev[i] == "training_step") {
      EXPECT_TRUE(i > 0 && ev[i - 1] == "before_forward") << "event " << i;
    }
  }
  EXPECT_GT(std::count(ev.begin(), ev.end(), "validation_step"), 0);
}

TEST_F(TrainerTest, StrategyBeforeForwardRunsBeforeEveryTrainingStep) {
  const DataLoader train(blobs(40, 1), {.batch_size = 8}), val(blobs(16, 2), {.batch_size = 8});
  std::vector<std::string> ev;
  TinyClassifier m(&ev);
  auto s = std::make_shared<CountingStrategy>(&ev);
  Trainer t(quiet_options(dir, {.strategy_object = s, .max_epochs = 2, .accumulate_grad_batches = 2,
                                .enable_checkpointing = false}));
  t.fit(m, train, &val);
  EXPECT_EQ(t.global_step(), 6);  // 3 steps an epoch from 5 micro-batches
  expect_before_every_training_step(ev, 10);
  EXPECT_EQ(s->module, m.net.get());

  std::vector<std::string> mev;
  ManualSteps manual(&mev);
  auto ms = std::make_shared<CountingStrategy>(&mev);
  Trainer tm(quiet_options(dir, {.strategy_object = ms, .max_epochs = 1, .enable_checkpointing = false}));
  tm.fit(manual, train, &val);
  expect_before_every_training_step(mev, 5);
  EXPECT_EQ(ms->module, manual.net.get());
}

// A callback whose setup throws: the error still reaches on_exception, teardown and the loggers.
class ThrowingSetup : public Callback {
 public:
  explicit ThrowingSetup(std::vector<std::string>* ev) : ev_(ev) {}
  std::string state_key() const override { return "ThrowingSetup"; }
  void setup(Trainer&, LightningModule&, const std::string& stage) override {
    throw InvalidArgument("setup refused stage " + stage);
  }
  void on_exception(Trainer&, LightningModule&, const std::exception&) override { ev_->push_back("on_exception"); }
  void teardown(Trainer&, LightningModule&, const std::string& stage) override { ev_->push_back("teardown:" + stage); }

 private:
  std::vector<std::string>* ev_;
};

TEST_F(TrainerTest, AnErrorInCallbackSetupReachesOnExceptionAndLoggers) {
  const DataLoader data(blobs(16, 1), {.batch_size = 8});
  const std::vector<std::pair<std::string, std::function<void(Trainer&, TinyClassifier&)>>> stages = {
      {"fit", [&](Trainer& t, TinyClassifier& m) { t.fit(m, data); }},
      {"validate", [&](Trainer& t, TinyClassifier& m) { t.validate(m, data); }},
      {"test", [&](Trainer& t, TinyClassifier& m) { t.test(m, data); }},
      {"predict", [&](Trainer& t, TinyClassifier& m) { t.predict(m, data); }}};
  for (const auto& [stage, run] : stages) {
    std::vector<std::string> ev;
    TinyClassifier m;
    auto logger = std::make_shared<MemoryLogger>();
    Trainer t(quiet_options(dir, {.max_epochs = 1, .callbacks = {std::make_shared<ThrowingSetup>(&ev)},
                                  .logger = std::vector<std::shared_ptr<Logger>>{logger}, .enable_checkpointing = false}));
    EXPECT_THAT(error_of<InvalidArgument>([&] { run(t, m); }), HasSubstr("setup refused stage " + stage));
    EXPECT_THAT(ev, ElementsAre("on_exception", "teardown:" + stage)) << stage;
    EXPECT_EQ(logger->status, stage == "fit" ? "failed" : "") << stage;  // loggers finalize after fit only
    EXPECT_EQ(m.trainer(), nullptr) << stage;
    EXPECT_EQ(t.stage(), "") << stage;
  }
}

// Logs the loss per step (the default in training_step) and as an epoch mean.
class MeanLoss : public TinyClassifier {
 public:
  Tensor training_step(const Batch& b, int64_t idx) override {
    Tensor loss = TinyClassifier::training_step(b, idx);
    log("loss_mean", loss, {.on_step = false, .on_epoch = true});
    return loss;
  }
};

class TrainerGoldenTest : public TrainerTest, public ::testing::WithParamInterface<std::string> {};

// scripts/golden_trainer.py: Lightning's automatic optimization written out in PyTorch
// (accumulate_grad_batches 2 with an odd last batch, clip_grad_norm 0.5, SGD with momentum).
TEST_P(TrainerGoldenTest, MatchesPyTorchWithAccumulationAndClipping) {
  const nlohmann::json g = test::load_json("trainer.json");
  const Device cpu = Device::cpu();
  const Tensor x = test::tensor_from(g["x"], cpu);
  const Tensor y = Tensor::from_indices(g["y"].get<std::vector<int64_t>>(), {x.dim(0)});
  MeanLoss m;
  std::map<std::string, Tensor> init;
  for (const auto& [k, v] : g["init"].items()) init[k] = test::tensor_from(v, cpu);
  m.net->load_state_dict(init);
  m.make_optimizers = [&](TinyClassifier& mod) -> std::vector<OptimizerConfig> {
    return {{.optimizer = std::make_shared<SGD>(mod.net->named_parameters(),
                                                SGDOptions{.lr = g["lr"].get<double>(), .momentum = g["momentum"].get<double>()})}};
  };
  auto logger = std::make_shared<MemoryLogger>();
  Trainer t(quiet_options(dir, {.accelerator = GetParam(), .max_epochs = g["max_epochs"].get<int>(),
                                .log_every_n_steps = 1, .accumulate_grad_batches = g["accumulate_grad_batches"].get<int>(),
                                .gradient_clip_val = g["gradient_clip_val"].get<double>(),
                                .logger = std::vector<std::shared_ptr<Logger>>{logger}, .enable_checkpointing = false}));
  t.fit(m, DataLoader(std::make_shared<TensorDataset>(std::vector<Tensor>{x, y}), {.batch_size = g["batch_size"].get<int64_t>()}));
  EXPECT_EQ(t.global_step(), g["global_step"].get<int64_t>());
  for (auto& [name, p] : m.net->named_parameters())
    test::expect_close(p->to_vector(), g["final"][name]["data"].get<std::vector<float>>(), 1e-4, name, 1e-5);
  // Step rows carry the loss of each step's last micro-batch (batches 1, 3, 4 of each epoch).
  const std::vector<double> losses = g["losses"].get<std::vector<double>>();
  const std::vector<size_t> boundary = {1, 3, 4, 6, 8, 9};
  std::vector<double> step_losses, epoch_means;
  for (const auto& [step, row] : logger->rows) {
    if (row.count("train_loss")) step_losses.push_back(row.at("train_loss"));
    if (row.count("loss_mean")) epoch_means.push_back(row.at("loss_mean"));
  }
  ASSERT_EQ(step_losses.size(), boundary.size());
  for (size_t i = 0; i < boundary.size(); ++i) EXPECT_NEAR(step_losses[i], losses[boundary[i]], 1e-5) << "step " << i;
  const std::vector<double> want_means = g["epoch_mean_loss"].get<std::vector<double>>();
  ASSERT_EQ(epoch_means.size(), want_means.size());
  for (size_t i = 0; i < want_means.size(); ++i) EXPECT_NEAR(epoch_means[i], want_means[i], 1e-5) << "epoch " << i;
  EXPECT_NEAR(t.callback_metrics().at("loss_mean"), want_means.back(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Trainer, TrainerGoldenTest, ::testing::Values("cpu", "hpu"));

}  // namespace
}  // namespace hg::training
