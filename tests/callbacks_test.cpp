// The built-in callbacks against the real Trainer: a tiny classifier whose validation logs a
// scripted val_loss per epoch, so which checkpoints are kept and when training stops is known.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>

#include "engine/ops.h"
#include "models/zoo.h"
#include "tests/ddp_test_util.h"
#include "tests/errors.h"
#include "tests/golden.h"
#include "tests/tb_event_check.h"
#include "tests/test_env.h"
#include "training/callbacks.h"
#include "training/ddp_strategy.h"
#include "training/loggers.h"
#include "training/schedulers.h"
#include "training/sgd.h"
#include "training/trainer.h"

namespace hg::training {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// 12 examples of 4 features in 3 classes: 3 batches of 4 per epoch.
std::shared_ptr<TensorDataset> tiny_data() {
  std::vector<float> x(48);
  std::vector<int64_t> y(12);
  for (int i = 0; i < 12; ++i) {
    y[size_t(i)] = i % 3;
    for (int j = 0; j < 4; ++j) x[size_t(i * 4 + j)] = (j == i % 3 ? 1.0f : 0.0f) + 0.01f * float((i * 7 + j) % 5);
  }
  return std::make_shared<TensorDataset>(std::vector<Tensor>{Tensor::from_vector(x, {12, 4}), Tensor::from_indices(y, {12})});
}

class Scripted : public LightningModule {
 public:
  explicit Scripted(std::vector<double> val_losses) : script(std::move(val_losses)) {}
  models::Module& module() override { return *net; }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = ops::cross_entropy(net->forward(b[0]), b[1]);
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }
  void validation_step(const Batch&, int64_t) override {
    if (trainer()->sanity_checking()) return;
    ++validation_steps;
    log(metric, value ? value(*this) : script.at(size_t(current_epoch())), {.prog_bar = true});
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    if (optimizers) return optimizers(*this);
    auto opt = std::make_shared<SGD>(net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
    return {{.optimizer = opt}};
  }
  void on_train_epoch_start() override { ++epochs; }

  std::unique_ptr<models::Sequential> net = models::zoo::mlp({4, 3}, 0);
  std::vector<double> script;
  std::string metric = "val_loss";
  std::function<double(Scripted&)> value;  // replaces the script when set
  std::function<std::vector<OptimizerConfig>(Scripted&)> optimizers;
  int epochs = 0, validation_steps = 0;
};

class MemoryLogger : public Logger {
 public:
  std::string name() const override { return "memory"; }
  std::string version() const override { return "7"; }
  fs::path log_dir() const override { return dir; }
  void log_hyperparams(const nlohmann::json&) override {}
  void log_metrics(const std::map<std::string, double>& m, int64_t step) override { rows.emplace_back(step, m); }
  fs::path dir;
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
};

struct FitRun {
  fs::path dir;
  std::shared_ptr<DataLoader> loader = std::make_shared<DataLoader>(tiny_data(), DataLoaderOptions{.batch_size = 4});
  TrainerOptions options(std::vector<std::shared_ptr<Callback>> callbacks, int epochs) const {
    TrainerOptions o;
    o.accelerator = "cpu";
    o.max_epochs = epochs;
    o.default_root_dir = dir;
    o.enable_progress_bar = false;
    o.logger = std::vector<std::shared_ptr<Logger>>{};
    o.callbacks = std::move(callbacks);
    return o;
  }
};

std::vector<std::string> files_in(const fs::path& d) {
  std::vector<std::string> out;
  if (fs::exists(d))
    for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  return out;
}

TEST(CallbacksTest, CheckpointNamesMatchLightning) {
  const nlohmann::json golden = test::load_json("loggers.json");  // outlives the loop (a temporary's member would not)
  for (const auto& c : golden["checkpoint_names"]) {
    ModelCheckpoint mc({.filename = c[0].get<std::string>(), .auto_insert_metric_name = c[2].get<bool>()});
    EXPECT_EQ(mc.format_checkpoint_name(c[1].get<std::map<std::string, double>>()), c[3].get<std::string>()) << c.dump();
  }
  ModelCheckpoint in_dir({.dirpath = "/ckpts"});
  EXPECT_EQ(in_dir.format_checkpoint_name({{"epoch", 2}, {"step", 9}}, "", 3), "/ckpts/epoch=2-step=9-v3.ckpt");
  EXPECT_EQ(in_dir.state_key(),
            "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
            "'train_time_interval': None}");
  EXPECT_THAT(test::error_of<InvalidArgument>([] { ModelCheckpoint({.mode = "best"}); }), HasSubstr("'best'"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { ModelCheckpoint({.save_top_k = 3}); }), HasSubstr("monitor"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { ModelCheckpoint({.every_n_train_steps = 5, .every_n_epochs = 2}); }),
              HasSubstr("mutually exclusive"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { EarlyStopping({.monitor = ""}); }), HasSubstr("monitor"));
}

TEST(CallbacksTest, TopKKeepsTheBestFilesAndLast) {
  FitRun run{test::temp_dir("CallbacksTopK")};
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .filename = "{epoch}-{val_loss:.2f}", .monitor = "val_loss", .save_top_k = 2, .save_last = true});
  Scripted m({0.5, 0.3, 0.4, 0.2, 0.6});
  Trainer t(run.options({ckpt}, 5));
  t.fit(m, *run.loader, run.loader.get());
  fs::path d = run.dir / "checkpoints";
  EXPECT_EQ(ckpt->dirpath(), d);
  EXPECT_THAT(files_in(d), UnorderedElementsAre("epoch=1-val_loss=0.30.ckpt", "epoch=3-val_loss=0.20.ckpt", "last.ckpt"));
  EXPECT_EQ(ckpt->best_model_path(), (d / "epoch=3-val_loss=0.20.ckpt").string());
  EXPECT_DOUBLE_EQ(ckpt->best_model_score().value(), 0.2);
  EXPECT_EQ(ckpt->kth_best_model_path(), (d / "epoch=1-val_loss=0.30.ckpt").string());
  EXPECT_EQ(ckpt->last_model_path(), (d / "last.ckpt").string());
  EXPECT_EQ(ckpt->best_k_models().size(), 2u);

  // mode max keeps the two largest.
  FitRun run2{test::temp_dir("CallbacksTopKMax")};
  auto best = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .filename = "{epoch}-{val_loss:.1f}", .monitor = "val_loss", .mode = "max", .save_top_k = 2});
  Scripted m2({0.5, 0.3, 0.4, 0.2, 0.6});
  Trainer t2(run2.options({best}, 5));
  t2.fit(m2, *run2.loader, run2.loader.get());
  EXPECT_THAT(files_in(run2.dir / "checkpoints"), UnorderedElementsAre("epoch=0-val_loss=0.5.ckpt", "epoch=4-val_loss=0.6.ckpt"));
  EXPECT_DOUBLE_EQ(best->best_model_score().value(), 0.6);
}

TEST(CallbacksTest, WithoutMonitorKeepsTheLatest) {
  FitRun run{test::temp_dir("CallbacksLatest")};
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.save_last = true});
  Scripted m({1, 1});
  Trainer t(run.options({ckpt}, 2));
  t.fit(m, *run.loader);
  EXPECT_THAT(files_in(run.dir / "checkpoints"), UnorderedElementsAre("epoch=1-step=6.ckpt", "last.ckpt"));
  EXPECT_FALSE(ckpt->best_model_score().has_value());

  // Every 2 optimizer steps, all kept; a name already on disk gets a version suffix.
  FitRun run2{test::temp_dir("CallbacksEveryN")};
  fs::create_directories(run2.dir / "ck");
  std::ofstream(run2.dir / "ck" / "epoch=0-step=2.ckpt") << "older run";
  auto every = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.dirpath = run2.dir / "ck", .save_top_k = -1, .every_n_train_steps = 2});
  Scripted m2({1, 1});
  Trainer t2(run2.options({every}, 2));
  t2.fit(m2, *run2.loader);
  EXPECT_THAT(files_in(run2.dir / "ck"), UnorderedElementsAre("epoch=0-step=2.ckpt", "epoch=0-step=2-v1.ckpt",
                                                              "epoch=1-step=4.ckpt", "epoch=1-step=6.ckpt"));
}

TEST(CallbacksTest, ResumedRunKeepsTopKState) {
  FitRun run{test::temp_dir("CallbacksResume")};
  ModelCheckpointOptions o{.dirpath = run.dir / "ck", .filename = "{epoch}", .monitor = "val_loss", .save_top_k = 2,
                           .save_last = true};
  auto first = std::make_shared<ModelCheckpoint>(o);
  Scripted m({0.5, 0.3, 0.4, 0.2, 0.6});
  Trainer t(run.options({first}, 3));
  t.fit(m, *run.loader, run.loader.get());
  EXPECT_THAT(files_in(o.dirpath), UnorderedElementsAre("epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"));

  auto second = std::make_shared<ModelCheckpoint>(o);
  Scripted m2({0.5, 0.3, 0.4, 0.2, 0.6});
  Trainer t2(run.options({second}, 5));
  t2.fit(m2, *run.loader, run.loader.get(), "last");
  EXPECT_EQ(m2.epochs, 2) << "epochs 3 and 4 only";
  // Epoch 3 (0.2) pushed out epoch 2 (0.4), which only the restored ranking knows about.
  EXPECT_THAT(files_in(o.dirpath), UnorderedElementsAre("epoch=1.ckpt", "epoch=3.ckpt", "last.ckpt"));
  EXPECT_EQ(second->best_model_path(), (o.dirpath / "epoch=3.ckpt").string());

  // The state survives JSON, infinite scores included; another dirpath keeps only best_model_path.
  nlohmann::json s = second->state_dict();
  s["best_k_models"][(o.dirpath / "epoch=9.ckpt").string()] = "inf";
  ModelCheckpoint elsewhere({.dirpath = run.dir / "other", .monitor = "val_loss", .save_top_k = 2});
  elsewhere.load_state_dict(s);
  EXPECT_EQ(elsewhere.best_model_path(), second->best_model_path());
  EXPECT_TRUE(elsewhere.best_k_models().empty());
  ModelCheckpoint same(o);
  same.load_state_dict(s);
  EXPECT_EQ(same.best_k_models().size(), 3u);
  EXPECT_TRUE(std::isinf(same.best_k_models().at((o.dirpath / "epoch=9.ckpt").string())));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { same.load_state_dict({{"best_model_path", 3}}); }),
              HasSubstr("best_model_path"));
}

// accumulate_grad_batches 2, 4 batches an epoch: optimizer steps after batches 1 and 3. A run
// resumed from the step=1 checkpoint (written after batch 1) starts at batch 2, which does not
// step: global_step is still 1 there, and that step must not be saved a second time.
TEST(CallbacksTest, ResumeMidAccumulationDoesNotSaveTheStepAgain) {
  FitRun run{test::temp_dir("CallbacksResumeAccumulate")};
  run.loader = std::make_shared<DataLoader>(tiny_data(), DataLoaderOptions{.batch_size = 3});
  ModelCheckpointOptions o{.dirpath = run.dir / "ck", .save_top_k = -1, .every_n_train_steps = 1};
  auto first = std::make_shared<ModelCheckpoint>(o);
  Scripted m({1});
  TrainerOptions opt = run.options({first}, 1);
  opt.accumulate_grad_batches = 2;
  Trainer t(opt);
  t.fit(m, *run.loader);
  EXPECT_THAT(files_in(o.dirpath), UnorderedElementsAre("epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt"));

  auto bytes = [](const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  fs::path step1 = o.dirpath / "epoch=0-step=1.ckpt";
  const std::string saved = bytes(step1);
  auto second = std::make_shared<ModelCheckpoint>(o);
  Scripted m2({1});
  opt.callbacks = {second};
  Trainer t2(opt);
  t2.fit(m2, *run.loader, nullptr, step1.string());
  EXPECT_EQ(t2.global_step(), 2);
  EXPECT_THAT(files_in(o.dirpath), UnorderedElementsAre("epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt",
                                                        "epoch=0-step=2-v1.ckpt"));
  EXPECT_TRUE(bytes(step1) == saved) << "step 1 saved again, at the micro-batch after the resume";
}

struct StopCase {
  EarlyStoppingOptions opt;
  std::vector<double> script;
  int epochs_run;
  std::string reason;
};

TEST(CallbacksTest, EarlyStoppingStopsAtTheRightEpoch) {
  std::vector<StopCase> cases = {
      {{.monitor = "val_loss", .patience = 3}, {1.0, 0.9, 0.95, 0.96, 0.97, 0.5, 0.4}, 5, "did not improve in the last 3"},
      {{.monitor = "val_loss", .min_delta = 0.1, .patience = 1}, {1.0, 0.95, 0.5}, 2, "Best score: 1.000"},
      {{.monitor = "val_loss", .patience = 9, .stopping_threshold = 0.35}, {1.0, 0.5, 0.3, 0.2}, 3, "Stopping threshold"},
      {{.monitor = "val_loss", .patience = 9, .divergence_threshold = 2.0}, {1.0, 3.0, 0.1}, 2, "Divergence threshold"},
      {{.monitor = "val_loss", .patience = 9}, {1.0, kNaN, 0.1}, 2, "is not finite"},
      {{.monitor = "val_loss", .patience = 2, .mode = "max"}, {0.1, 0.2, 0.1, 0.15, 0.9}, 4, "did not improve"},
      {{.monitor = "val_loss", .patience = 2}, {3, 2, 1, 0.5}, 4, "improved by 0.500"},
  };
  for (const auto& c : cases) {
    FitRun run{test::temp_dir("CallbacksEarlyStop")};
    auto stop = std::make_shared<EarlyStopping>(c.opt);
    Scripted m(c.script);
    Trainer t(run.options({stop}, int(c.script.size())));
    t.fit(m, *run.loader, run.loader.get());
    EXPECT_EQ(m.epochs, c.epochs_run) << c.reason;
    EXPECT_THAT(stop->stopping_reason(), HasSubstr(c.reason));
    if (c.epochs_run < int(c.script.size())) {
      EXPECT_EQ(stop->stopped_epoch(), c.epochs_run - 1) << c.reason;
    }
  }
}

TEST(CallbacksTest, EarlyStoppingStateAndMissingMonitor) {
  FitRun run{test::temp_dir("CallbacksEarlyStopState")};
  auto stop = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_loss", .patience = 5});
  Scripted m({1.0, 0.8, 0.9, 0.95});
  Trainer t(run.options({stop}, 4));
  t.fit(m, *run.loader, run.loader.get());
  nlohmann::json s = stop->state_dict();
  EXPECT_EQ(s["wait_count"], 2);
  EXPECT_EQ(s["stopped_epoch"], 0);
  EXPECT_EQ(s["patience"], 5);
  EXPECT_NEAR(s["best_score"].get<double>(), 0.8, 1e-12);  // the epoch mean of 0.8 over 3 batches
  EXPECT_EQ(stop->state_key(), "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}");
  EarlyStopping resumed({.monitor = "val_loss"});
  resumed.load_state_dict(s);
  EXPECT_EQ(resumed.wait_count(), 2);
  EXPECT_EQ(resumed.best_score(), s["best_score"].get<double>());
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { resumed.load_state_dict({{"wait_count", 1}}); }),
              HasSubstr("stopped_epoch"));

  auto strict = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_acc"});
  Scripted m2({1.0, 1.0});
  Trainer t2(run.options({strict}, 2));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { t2.fit(m2, *run.loader, run.loader.get()); }),
              HasSubstr("`val_acc` which is not available"));
  auto lenient = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_acc", .strict = false});
  Scripted m3({1.0, 1.0});
  Trainer t3(run.options({lenient}, 2));
  t3.fit(m3, *run.loader, run.loader.get());
  EXPECT_EQ(m3.epochs, 2);
}

TEST(CallbacksTest, LearningRateMonitorLogsEveryLoggedStep) {
  FitRun run{test::temp_dir("CallbacksLrMonitor")};
  auto logger = std::make_shared<MemoryLogger>();
  logger->dir = run.dir;
  auto lr = std::make_shared<LearningRateMonitor>(
      LearningRateMonitorOptions{.logging_interval = "step", .log_momentum = true, .log_weight_decay = true});
  Scripted m({1, 1});
  TrainerOptions o = run.options({lr}, 2);
  o.logger = std::vector<std::shared_ptr<Logger>>{logger};
  o.log_every_n_steps = 2;
  Trainer t(o);
  t.fit(m, *run.loader);
  std::vector<int64_t> steps;
  for (const auto& [step, row] : logger->rows) {
    if (!row.count("lr-SGD")) continue;
    steps.push_back(step);
    EXPECT_DOUBLE_EQ(row.at("lr-SGD"), 0.1);
    EXPECT_DOUBLE_EQ(row.at("lr-SGD-momentum"), 0.9);
    EXPECT_DOUBLE_EQ(row.at("lr-SGD-weight_decay"), 1e-4);
  }
  EXPECT_THAT(steps, ElementsAre(1, 3, 5)) << "before the batches whose step is logged";
  EXPECT_EQ(lr->lrs().at("lr-SGD").size(), 3u);

  Scripted m2({1});
  TrainerOptions none = run.options({std::make_shared<LearningRateMonitor>()}, 1);
  Trainer t2(none);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { t2.fit(m2, *run.loader); }), HasSubstr("needs a logger"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { LearningRateMonitor({.logging_interval = "batch"}); }),
              HasSubstr("'batch'"));
}

TEST(CallbacksTest, LearningRateMonitorFollowsSchedulers) {
  FitRun run{test::temp_dir("CallbacksLrSchedulers")};
  auto logger = std::make_shared<MemoryLogger>();
  logger->dir = run.dir;
  auto lr = std::make_shared<LearningRateMonitor>();
  Scripted m({1, 1});
  m.optimizers = [](Scripted& self) {  // two optimizers (weight, bias): one steps per batch, one per epoch
    auto params = self.net->named_parameters();
    auto a = std::make_shared<SGD>(NamedParams{params[0]}, SGDOptions{.lr = 0.1});
    auto b = std::make_shared<SGD>(NamedParams{params[1]}, SGDOptions{.lr = 0.1});
    return std::vector<OptimizerConfig>{
        {.optimizer = a, .scheduler = std::make_shared<StepLR>(*a, 2, 0.5), .interval = "step"},
        {.optimizer = b, .scheduler = std::make_shared<StepLR>(*b, 1, 0.5), .interval = "epoch"}};
  };
  TrainerOptions o = run.options({lr}, 2);
  o.logger = std::vector<std::shared_ptr<Logger>>{logger};
  o.log_every_n_steps = 1;
  Trainer t(o);
  t.fit(m, *run.loader);
  std::map<std::string, std::vector<std::pair<int64_t, double>>> logged;
  for (const auto& [step, row] : logger->rows)
    for (const auto& [k, v] : row)
      if (k.rfind("lr-", 0) == 0) logged[k].emplace_back(step, v);
  using P = std::pair<int64_t, double>;
  // The lr each optimizer step used: StepLR(2, 0.5) advanced after every batch.
  EXPECT_THAT(logged["lr-SGD"], ElementsAre(P{0, 0.1}, P{1, 0.1}, P{2, 0.05}, P{3, 0.05}, P{4, 0.025}, P{5, 0.025}));
  // StepLR(1, 0.5) per epoch, logged at each epoch start.
  EXPECT_THAT(logged["lr-SGD-1"], ElementsAre(P{0, 0.1}, P{3, 0.05}));
  EXPECT_EQ(logged.size(), 2u);
}

TEST(CallbacksTest, CheckpointAfterValidationWhenItSkipsEpochs) {
  FitRun run{test::temp_dir("CallbacksValEvery2")};
  auto ckpt = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.filename = "{epoch}", .monitor = "val_loss", .save_top_k = -1});
  Scripted m({9, 0.5, 9, 0.25});
  TrainerOptions o = run.options({ckpt}, 4);
  o.check_val_every_n_epoch = 2;
  Trainer t(o);
  t.fit(m, *run.loader, run.loader.get());
  EXPECT_THAT(files_in(run.dir / "checkpoints"), UnorderedElementsAre("epoch=1.ckpt", "epoch=3.ckpt"));

  // Without validation, at every epoch end whatever check_val_every_n_epoch says.
  FitRun run2{test::temp_dir("CallbacksNoVal")};
  auto latest = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.filename = "{epoch}", .save_top_k = -1});
  Scripted m2({1, 1});
  TrainerOptions o2 = run2.options({latest}, 2);
  o2.check_val_every_n_epoch = 2;
  Trainer t2(o2);
  t2.fit(m2, *run2.loader);
  EXPECT_THAT(files_in(run2.dir / "checkpoints"), UnorderedElementsAre("epoch=0.ckpt", "epoch=1.ckpt"));
}

TEST(CallbacksTest, DeviceStatsMonitorKeys) {
  for (const char* accelerator : {"hpu", "cpu"}) {
    FitRun run{test::temp_dir("CallbacksDeviceStats")};
    auto logger = std::make_shared<MemoryLogger>();
    logger->dir = run.dir;
    Scripted m({1});
    TrainerOptions o = run.options({std::make_shared<DeviceStatsMonitor>()}, 1);
    o.accelerator = accelerator;
    o.logger = std::vector<std::shared_ptr<Logger>>{logger};
    o.log_every_n_steps = 2;  // logged: train batch of step 1, validation after step 3
    Trainer t(o);
    t.fit(m, *run.loader, run.loader.get());
    std::set<std::string> keys;
    for (const auto& [step, row] : logger->rows)
      for (const auto& [k, v] : row)
        if (k.rfind("DeviceStatsMonitor.", 0) == 0) {
          keys.insert(k);
          EXPECT_EQ(step, k.find("validation") != std::string::npos ? 3 : 1) << k;
          EXPECT_GE(v, 0) << k;
        }
    std::set<std::string> want;
    std::vector<std::string> stats = std::string(accelerator) == "hpu"
        ? std::vector<std::string>{"ActiveAllocs", "InUse", "Limit", "MaxAllocSize", "MaxInUse", "NumAllocs", "NumFrees"}
        : std::vector<std::string>{"cpu_percent", "cpu_swap_percent", "cpu_vm_percent"};
    for (const char* hook : {"on_train_batch_start", "on_train_batch_end", "on_validation_batch_end"})
      for (const auto& s : stats) want.insert(std::string("DeviceStatsMonitor.") + hook + "/" + s);
    EXPECT_EQ(keys, want) << accelerator;
  }
  DeviceStatsMonitor mon;
  auto s = mon.device_stats(Device::hpu(0));
  EXPECT_GT(s.at("Limit"), 0);
  EXPECT_GE(s.at("MaxInUse"), s.at("InUse"));
  auto c = DeviceStatsMonitor(true).device_stats(Device::hpu(0));
  EXPECT_LE(c.at("cpu_vm_percent"), 100.0);
  EXPECT_TRUE(c.count("Limit"));
}

TEST(CallbacksTest, ProgressBarOutput) {
  FitRun run{test::temp_dir("CallbacksProgressBar")};
  std::ostringstream out;
  Scripted m({0.25, 0.125});
  TrainerOptions o = run.options({std::make_shared<ProgressBar>()}, 2);
  o.enable_progress_bar = true;
  o.out = &out;
  Trainer t(o);
  t.fit(m, *run.loader, run.loader.get());
  std::string s = out.str();
  EXPECT_THAT(s, HasSubstr("\rEpoch 0:   0%|                    | 0/3 [?it/s"));
  EXPECT_THAT(s, HasSubstr("\rEpoch 0:  33%|######              | 1/3 ["));
  EXPECT_THAT(s, HasSubstr("\rEpoch 1: 100%|####################| 3/3 ["));
  EXPECT_THAT(s, HasSubstr("train_loss="));
  EXPECT_THAT(s, HasSubstr(", val_loss=0.125]"));
  EXPECT_THAT(s, ::testing::Not(HasSubstr("v_num")));
  size_t epoch_lines = 0;
  for (size_t i = s.find('\n'); i != std::string::npos; i = s.find('\n', i + 1)) ++epoch_lines;
  EXPECT_EQ(epoch_lines, 2u) << s;

  std::ostringstream vout;
  o.out = &vout;
  Trainer t2(o);
  t2.validate(m, *run.loader);
  EXPECT_THAT(vout.str(), HasSubstr("\rValidation: 3"));
  EXPECT_EQ(vout.str().back(), '\n');
}

TEST(CallbacksTest, DefaultLoggerAndCheckpointDirectories) {
  FitRun run{test::temp_dir("CallbacksDefaults")};
  fs::create_directories(run.dir / "lightning_logs" / "version_4");
  Scripted m({0.5, 0.25});
  TrainerOptions o = run.options({}, 2);
  o.logger.reset();  // the default CSVLogger
  Trainer t(o);
  t.fit(m, *run.loader, run.loader.get());
  fs::path v = run.dir / "lightning_logs" / "version_5";
  EXPECT_EQ(t.log_dir(), v);
  EXPECT_THAT(files_in(v / "checkpoints"), ::testing::Contains("epoch=1-step=6.ckpt"));
  std::string csv;
  {
    std::ifstream in(v / "metrics.csv");
    std::getline(in, csv);
  }
  EXPECT_THAT(csv, HasSubstr("val_loss"));
  EXPECT_THAT(csv, HasSubstr("step"));
}

// Lightning never deletes the checkpoint a run resumed from, even when it leaves the top k.
TEST(CallbacksTest, ResumedFromCheckpointIsNotDeleted) {
  FitRun run{test::temp_dir("CallbacksResumeKeepsSource")};
  ModelCheckpointOptions o{.dirpath = run.dir / "ck", .filename = "{epoch}", .monitor = "val_loss"};
  Scripted m({0.5, 0.3, 0.4, 0.2});
  Trainer t(run.options({std::make_shared<ModelCheckpoint>(o)}, 2));
  t.fit(m, *run.loader, run.loader.get());
  EXPECT_THAT(files_in(o.dirpath), UnorderedElementsAre("epoch=1.ckpt"));

  auto second = std::make_shared<ModelCheckpoint>(o);
  Scripted m2({0.5, 0.3, 0.4, 0.2});
  Trainer t2(run.options({second}, 4));
  t2.fit(m2, *run.loader, run.loader.get(), (o.dirpath / "epoch=1.ckpt").string());
  EXPECT_EQ(t2.ckpt_path(), o.dirpath / "epoch=1.ckpt");
  EXPECT_THAT(files_in(o.dirpath), UnorderedElementsAre("epoch=1.ckpt", "epoch=3.ckpt")) << "epoch 3 (0.2) replaced it";
  EXPECT_EQ(second->best_model_path(), (o.dirpath / "epoch=3.ckpt").string());
  EXPECT_EQ(second->best_k_models().size(), 1u);
}

TEST(CallbacksTest, TensorBoardLoggerThroughTheTrainer) {
  FitRun run{test::temp_dir("CallbacksTensorBoard")};
  auto tb = std::make_shared<TensorBoardLogger>(run.dir, "tb");
  Scripted m({0.5, 0.25});
  m.save_hyperparameters({{"lr", 0.1}});
  TrainerOptions o = run.options({}, 2);
  o.logger = std::vector<std::shared_ptr<Logger>>{tb};
  o.log_every_n_steps = 1;
  Trainer t(o);
  t.fit(m, *run.loader, run.loader.get());
  EXPECT_EQ(t.log_dir(), run.dir / "tb" / "version_0");
  auto [rc, out] = test::tb_event_check(tb->event_file());
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json got = nlohmann::json::parse(out);
  std::map<std::string, std::vector<int64_t>> steps;
  std::map<std::string, std::vector<double>> values;
  for (const auto& s : got["scalars"]) {
    steps[s[0].get<std::string>()].push_back(s[1].get<int64_t>());
    values[s[0].get<std::string>()].push_back(s[2].get<double>());
  }
  EXPECT_EQ(steps["train_loss"].size(), 6u) << out;  // every optimizer step
  EXPECT_THAT(values["val_loss"], ElementsAre(0.5, 0.25)) << out;
  EXPECT_THAT(got["texts"][0][2].get<std::string>(), HasSubstr("lr: 0.1"));
  EXPECT_TRUE(fs::exists(t.log_dir() / "hparams.yaml"));
  EXPECT_THAT(files_in(t.log_dir() / "checkpoints"), ::testing::Contains("epoch=1-step=6.ckpt"));
}

// A strategy that says this process is rank 1 of a job whose other ranks are elsewhere.
class NotRankZero : public Strategy {
 public:
  std::string name() const override { return "not_rank_zero"; }
  void setup_environment(const StrategyContext&) override {}
  Device root_device() const override { return Device::cpu(); }
  int global_rank() const override { return 1; }
};

TEST(CallbacksTest, OffRankZeroNoBarAndNoFiles) {
  FitRun run{test::temp_dir("CallbacksRankOne")};
  std::ostringstream out;
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.monitor = "val_loss", .save_last = true});
  Scripted m({0.5, 0.25});
  TrainerOptions o = run.options({ckpt, std::make_shared<ProgressBar>()}, 2);
  o.enable_progress_bar = true;
  o.out = &out;
  o.strategy_object = std::make_shared<NotRankZero>();
  Trainer t(o);
  t.fit(m, *run.loader, run.loader.get());
  EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("Epoch")));
  EXPECT_TRUE(files_in(run.dir / "checkpoints").empty()) << "rank 0 writes";
  EXPECT_EQ(ckpt->best_model_path(), (run.dir / "checkpoints" / "epoch=1-step=6.ckpt").string()) << "same bookkeeping";
}

// Lightning raises on every rank: raising on rank 0 alone leaves the other ranks waiting.
TEST(CallbacksTest, MissingLoggerIsAnErrorOffRankZeroToo) {
  FitRun run{test::temp_dir("CallbacksNoLoggerRankOne")};
  for (std::shared_ptr<Callback> cb : {std::shared_ptr<Callback>(std::make_shared<LearningRateMonitor>()),
                                       std::shared_ptr<Callback>(std::make_shared<DeviceStatsMonitor>())}) {
    Scripted m({1});
    TrainerOptions o = run.options({cb}, 1);
    o.strategy_object = std::make_shared<NotRankZero>();
    Trainer t(o);
    EXPECT_THAT(test::error_of<InvalidArgument>([&] { t.fit(m, *run.loader); }), HasSubstr("needs a logger"))
        << cb->state_key();
  }
}

// Two real ranks (the launcher re-executes this binary for rank 1 with LOCAL_RANK=1 and this
// test as its filter): ModelCheckpoint's decisions and EarlyStopping's stop are collectives, so
// both ranks must agree or the run hangs (bounded by dist_timeout).
TEST(CallbacksDDP, TwoRanksCheckpointAndStopTogether) {
  if (ddp_test::launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const bool launched = std::getenv("LOCAL_RANK") != nullptr;
  const auto env = ddp_test::rank_zero_env();
  FitRun run{test::temp_dir("CallbacksDDP")};
  // Rank 0's directory: rank 1 is its child, and learns the checkpoint directory by broadcast.
  fs::path rank0 = launched ? fs::temp_directory_path() / ("hgraph_test_CallbacksDDP_" + std::to_string(::getppid())) : run.dir;
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .filename = "{epoch}-{val_loss:.2f}", .monitor = "val_loss", .save_top_k = 2, .save_last = true});
  auto stop = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_loss", .patience = 2});
  Scripted m({0.5, 0.3, 0.4, 0.35, 0.45, 0.1});
  TrainerOptions o = run.options({ckpt, stop}, 6);
  o.accelerator = "hpu";
  o.devices = 2;
  o.strategy = "hpu_ddp";
  o.dist_timeout = std::chrono::seconds(120);
  o.logger.reset();  // the default CSVLogger, on rank 0
  {
    Trainer t(o);
    t.fit(m, *run.loader, run.loader.get());
    EXPECT_EQ(m.epochs, 4) << "stopped after epoch 3 on both ranks";
    EXPECT_EQ(stop->stopped_epoch(), 3);
  }
  DDPStrategy::shutdown_process_group();  // rank 0 waits for rank 1 (and exits 1 if it failed)
  fs::path d = rank0 / "lightning_logs" / "version_0" / "checkpoints";
  EXPECT_EQ(ckpt->dirpath(), d);
  EXPECT_EQ(ckpt->best_model_path(), (d / "epoch=1-val_loss=0.30.ckpt").string());
  if (!launched) {
    EXPECT_THAT(files_in(d), UnorderedElementsAre("epoch=1-val_loss=0.30.ckpt", "epoch=3-val_loss=0.35.ckpt", "last.ckpt"));
    EXPECT_TRUE(fs::exists(d.parent_path() / "metrics.csv"));
    fs::remove_all(run.dir);
  } else {
    EXPECT_FALSE(fs::exists(run.dir / "lightning_logs" / "version_0" / "checkpoints")) << "rank 1 writes nothing";
  }
}

}  // namespace
}  // namespace hg::training

namespace hg::training {
namespace {

// An unsynced monitor (each rank logs its own val_acc): rank 0's "0.501" then "0.502" give the
// same file name, so its second save replaces its first, while rank 1's names differ. Every rank
// must still make the same collectives (before: rank 1 broadcast a version check rank 0 skipped)
// and keep rank 0's paths and scores.
TEST(CallbacksDDP, UnsyncedMonitorKeepsRankZerosRanking) {
  if (ddp_test::launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const bool launched = std::getenv("LOCAL_RANK") != nullptr;
  const auto env = ddp_test::rank_zero_env();
  FitRun run{test::temp_dir("CallbacksDDPUnsynced")};
  fs::path rank0 = launched ? fs::temp_directory_path() / ("hgraph_test_CallbacksDDPUnsynced_" + std::to_string(::getppid()))
                            : run.dir;
  fs::path d = rank0 / "ck";
  auto ckpt = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .dirpath = d, .filename = "{epoch}-{val_acc:.2f}", .monitor = "val_acc", .mode = "max", .save_top_k = 1,
      .save_last = true});
  Scripted m({});
  m.metric = "val_acc";
  m.value = [](Scripted& s) {  // rank 0: 0.501, 0.502, ...; rank 1: 0.6, 0.7, ...
    int64_t step = s.global_step();
    return s.trainer()->strategy().global_rank() == 0 ? 0.5 + 0.001 * double(step) : 0.5 + 0.1 * double(step);
  };
  run.loader = std::make_shared<DataLoader>(tiny_data(), DataLoaderOptions{.batch_size = 3});  // 2 batches per rank
  TrainerOptions o = run.options({ckpt}, 2);
  o.accelerator = "hpu";
  o.devices = 2;
  o.strategy = "hpu_ddp";
  o.val_check_interval = 0.5;  // validation after every batch: two per epoch
  o.dist_timeout = std::chrono::seconds(60);
  {
    Trainer t(o);
    t.fit(m, *run.loader, run.loader.get());
    EXPECT_EQ(t.global_step(), 4);
  }
  DDPStrategy::shutdown_process_group();  // rank 0 waits for rank 1 (and exits 1 if it failed)
  std::string best = (d / "epoch=1-val_acc=0.50.ckpt").string();
  EXPECT_EQ(ckpt->best_model_path(), best);
  EXPECT_DOUBLE_EQ(ckpt->best_model_score().value(), 0.504);
  EXPECT_EQ(ckpt->kth_best_model_path(), best);
  ASSERT_EQ(ckpt->best_k_models().size(), 1u);
  EXPECT_DOUBLE_EQ(ckpt->best_k_models().at(best), 0.504);
  EXPECT_EQ(ckpt->last_model_path(), (d / "last.ckpt").string());
  if (!launched) {
    EXPECT_THAT(files_in(d), UnorderedElementsAre("epoch=1-val_acc=0.50.ckpt", "last.ckpt"));
    fs::remove_all(run.dir);
  }
}

}  // namespace
}  // namespace hg::training
