// Checkpoints: the file format (round trip, validation of damaged files) and the Trainer's
// save / resume (contents, exact resume, weights_only, "last" / "best", rank-0 write + barrier).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "graphs/lazy.h"
#include "models/safetensors.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/callbacks.h"
#include "training/checkpoint.h"
#include "training/schedulers.h"

namespace hg::training {
namespace {

using test::blobs;
using test::error_of;
using test::quiet_options;
using test::RecordingCallback;
using test::TinyClassifier;
using ::testing::HasSubstr;

class CheckpointTest : public ::testing::Test {
 protected:
  void TearDown() override { graphs::enable_lazy_mode(false); }
  std::filesystem::path dir = test::temp_dir(std::string("ckpt_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

Checkpoint sample() {
  Checkpoint c;
  c.epoch = 3;
  c.global_step = 42;
  c.loops = {{"next_epoch", 4}, {"next_batch", 0}, {"total_batch_idx", 42}};
  c.state_dict = {{"0.weight", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3})}, {"0.bias", Tensor::from_vector({7, 8}, {2})}};
  c.optimizer_states.push_back({{{"param_groups", nlohmann::json::array({{{"lr", 0.1}}})}},
                                {{"0.weight.momentum_buffer", Tensor::from_vector({0.5f, 0.25f, 0, 0, 0, 1}, {2, 3})}}});
  c.lr_schedulers = nlohmann::json::array({{{"name", "StepLR"}, {"last_epoch", 3}}});
  c.callbacks = {{"ModelCheckpoint{monitor=val_loss}", {{"best_model_score", 0.25}}}};
  c.hyper_parameters = {{"hidden", 16}};
  c.precision = "bf16-mixed";
  c.module = {{"extra", "kept"}};
  return c;
}

TEST_F(CheckpointTest, RoundTripKeepsEveryField) {
  const Checkpoint c = sample();
  write_checkpoint(dir / "sub" / "a.ckpt", c);
  const Checkpoint r = read_checkpoint(dir / "sub" / "a.ckpt");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.global_step, 42);
  EXPECT_EQ(r.loops, c.loops);
  EXPECT_FALSE(r.weights_only);
  ASSERT_EQ(r.state_dict.size(), 2u);
  EXPECT_EQ(r.state_dict[0].first, "0.weight");
  EXPECT_EQ(r.state_dict[0].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.state_dict[0].second.to_vector(), c.state_dict[0].second.to_vector());
  EXPECT_EQ(r.state_dict[1].second.to_vector(), (std::vector<float>{7, 8}));
  ASSERT_EQ(r.optimizer_states.size(), 1u);
  EXPECT_EQ(r.optimizer_states[0].json, c.optimizer_states[0].json);
  ASSERT_EQ(r.optimizer_states[0].tensors.size(), 1u);
  EXPECT_EQ(r.optimizer_states[0].tensors[0].first, "0.weight.momentum_buffer");
  EXPECT_EQ(r.optimizer_states[0].tensors[0].second.to_vector(), (std::vector<float>{0.5f, 0.25f, 0, 0, 0, 1}));
  EXPECT_EQ(r.lr_schedulers, c.lr_schedulers);
  EXPECT_EQ(r.callbacks, c.callbacks);
  EXPECT_EQ(r.hyper_parameters, c.hyper_parameters);
  EXPECT_EQ(r.precision, "bf16-mixed");
  EXPECT_EQ(r.module, c.module);
  EXPECT_EQ(r.hgraph_version, hgraph_version());
  EXPECT_EQ(hgraph_version(), "0.1.0");  // project(hgraph VERSION ...) in CMakeLists.txt
  EXPECT_FALSE(std::filesystem::exists(dir / "sub" / "a.ckpt.tmp"));
}

// The checkpoint's safetensors image with its "checkpoint" metadata JSON edited.
std::vector<uint8_t> with_meta(const std::function<void(safetensors::File&, nlohmann::json&)>& edit) {
  const std::vector<uint8_t> bytes = serialize_checkpoint(sample());
  safetensors::File f = safetensors::parse(bytes, "x");
  nlohmann::json j = nlohmann::json::parse(f.metadata.at("checkpoint"));
  edit(f, j);
  f.metadata["checkpoint"] = j.dump();
  return safetensors::serialize(f);
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  return error_of<FormatError>([&] { parse_checkpoint(bytes, "run.ckpt"); });
}

TEST_F(CheckpointTest, DamagedFilesAreClearErrors) {
  const std::vector<uint8_t> good = serialize_checkpoint(sample());
  for (size_t cut : {size_t(0), size_t(5), size_t(20), good.size() / 2, good.size() - 1}) {
    const std::string e = parse_error(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(cut)));
    EXPECT_THAT(e, HasSubstr("run.ckpt")) << "cut at " << cut;
  }
  EXPECT_THAT(parse_error(with_meta([](auto&, auto& j) { j.erase("global_step"); })),
              HasSubstr("checkpoint key 'global_step' is missing"));
  EXPECT_THAT(parse_error(with_meta([](auto&, auto& j) { j["epoch"] = "three"; })),
              HasSubstr("checkpoint key 'epoch' must be an integer"));
  EXPECT_THAT(parse_error(with_meta([](auto&, auto& j) { j["loops"].erase("next_batch"); })),
              HasSubstr("'loops.next_batch' is missing"));
  EXPECT_THAT(parse_error(with_meta([](auto&, auto& j) { j["state_dict"].push_back("1.weight"); })),
              HasSubstr("lists tensor 'state_dict/1.weight', which the file does not hold"));
  EXPECT_THAT(parse_error(with_meta([](auto&, auto& j) { j["optimizer_states"][0]["tensors"] = nlohmann::json::array(); })),
              HasSubstr("tensor 'optimizer_states/0/0.weight.momentum_buffer' is not listed"));
  EXPECT_THAT(parse_error(with_meta([](auto& f, auto&) { f.metadata["format_version"] = "9"; })),
              HasSubstr("format_version '9' is not supported"));
  EXPECT_THAT(parse_error(with_meta([](auto& f, auto&) { f.metadata.erase("format"); })),
              HasSubstr("not an hgraph checkpoint"));
  std::vector<uint8_t> bad_json = with_meta([](auto&, auto&) {});
  {
    safetensors::File f = safetensors::parse(bad_json, "x");
    f.metadata["checkpoint"] = "{\"epoch\": 1,";
    bad_json = safetensors::serialize(f);
  }
  EXPECT_THAT(parse_error(bad_json), HasSubstr("malformed JSON in run.ckpt metadata 'checkpoint'"));
  {  // a number beyond double's range (found by hgraph-fuzz)
    safetensors::File f = safetensors::parse(bad_json, "x");
    f.metadata["checkpoint"] = "{\"epoch\": 1e999}";
    EXPECT_THAT(parse_error(safetensors::serialize(f)), HasSubstr("number out of range"));
  }
  EXPECT_THAT(error_of<NotFoundError>([&] { read_checkpoint(dir / "missing.ckpt"); }), HasSubstr("missing.ckpt"));
}

struct RunState {
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> momentum;
  int epoch;
  int64_t step;
  double lr;
};

// Fits a fresh module (init seed `init`; SGD with momentum and a per-step StepLR) with a
// shuffled loader and returns its final state.
RunState fit_run(const std::filesystem::path& dir, const std::string& accelerator, TrainerOptions o, uint64_t init,
            const std::string& ckpt_in, const std::filesystem::path& ckpt_out) {
  TinyClassifier m(nullptr, init);
  m.make_optimizers = [](TinyClassifier& x) {
    auto opt = std::make_shared<SGD>(x.net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
    return std::vector<OptimizerConfig>{
        {.optimizer = opt, .scheduler = std::make_shared<StepLR>(*opt, 3, 0.7), .interval = "step"}};
  };
  const DataLoader train(blobs(40, 7), {.batch_size = 8, .shuffle = true, .seed = 3});
  o.accelerator = accelerator;
  o.deterministic = true;
  o.seed = 11;
  o.enable_checkpointing = false;
  Trainer t(quiet_options(dir, o));
  t.fit(m, train, nullptr, ckpt_in);
  if (!ckpt_out.empty()) t.save_checkpoint(ckpt_out);
  RunState r{test::weights_of(*m.net), {}, t.current_epoch(), t.global_step(),
             t.optimizer_configs()[0].optimizer->param_groups()[0].lr()};
  for (auto& [name, tensor] : t.optimizer_configs()[0].optimizer->state_dict().tensors) r.momentum.push_back(tensor.to_vector());
  return r;
}

void expect_same(const RunState& a, const RunState& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.lr, b.lr);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * 4)) << "parameter " << i;
  ASSERT_EQ(a.momentum.size(), b.momentum.size());
  ASSERT_FALSE(a.momentum.empty());
  for (size_t i = 0; i < a.momentum.size(); ++i)
    EXPECT_EQ(a.momentum[i], b.momentum[i]) << "momentum buffer " << i;
}

class CheckpointResumeTest : public CheckpointTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(CheckpointResumeTest, ResumeAtEpochEndIsBitwiseIdentical) {
  const RunState straight = fit_run(dir, GetParam(), {.max_epochs = 4}, 1, "", "");
  const RunState half = fit_run(dir, GetParam(), {.max_epochs = 2}, 1, "", dir / "half.ckpt");
  EXPECT_EQ(half.epoch, 2);
  const RunState resumed = fit_run(dir, GetParam(), {.max_epochs = 4}, 99, (dir / "half.ckpt").string(), "");
  expect_same(straight, resumed);
  EXPECT_EQ(resumed.step, 20);
}

TEST_P(CheckpointResumeTest, ResumeMidEpochIsBitwiseIdentical) {
  const RunState straight = fit_run(dir, GetParam(), {.max_steps = 13}, 1, "", "");
  const RunState part = fit_run(dir, GetParam(), {.max_steps = 7}, 1, "", dir / "part.ckpt");
  EXPECT_EQ(part.epoch, 1);  // stopped in epoch 1 after 2 of its 5 batches
  const RunState resumed = fit_run(dir, GetParam(), {.max_steps = 13}, 99, (dir / "part.ckpt").string(), "");
  expect_same(straight, resumed);
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointResumeTest, ::testing::Values("cpu", "hpu"));

class ExtraState : public TinyClassifier {
 public:
  using TinyClassifier::TinyClassifier;
  void on_save_checkpoint(nlohmann::json& c) override { c["note"] = "from module"; }
  void on_load_checkpoint(const nlohmann::json& c) override { loaded = c; }
  nlohmann::json loaded;
};

TEST_F(CheckpointTest, HoldsWhatLightningSaves) {
  std::vector<std::string> ev;
  ExtraState m;
  m.save_hyperparameters({{"hidden", 16}, {"lr", 0.1}});
  auto cb = std::make_shared<RecordingCallback>(&ev);
  Trainer t(quiet_options(dir, {.precision = "bf16-mixed", .max_epochs = 2, .callbacks = {cb}, .enable_checkpointing = false}));
  t.fit(m, DataLoader(blobs(24, 1), {.batch_size = 8}));
  t.save_checkpoint(dir / "full.ckpt");
  const Checkpoint c = read_checkpoint(dir / "full.ckpt");
  EXPECT_EQ(c.epoch, 2);
  EXPECT_EQ(c.global_step, 6);
  EXPECT_EQ(c.loops, (nlohmann::json{{"next_epoch", 2}, {"next_batch", 0}, {"total_batch_idx", 6}}));
  EXPECT_EQ(c.hyper_parameters, m.hparams());
  EXPECT_EQ(c.precision, "bf16-mixed");
  EXPECT_EQ(c.module, (nlohmann::json{{"note", "from module"}}));
  ASSERT_TRUE(c.callbacks.contains("RecordingCallback"));
  ASSERT_EQ(c.optimizer_states.size(), 1u);
  EXPECT_EQ(c.optimizer_states[0].tensors.size(), 4u);  // a momentum buffer per parameter
  ASSERT_EQ(c.lr_schedulers.size(), 1u);
  EXPECT_TRUE(c.lr_schedulers[0].is_null());
  ASSERT_EQ(c.state_dict.size(), 4u);
  EXPECT_EQ(c.state_dict[0].first, "0.weight");
  EXPECT_TRUE(c.rng.contains("cpu"));

  ExtraState fresh(nullptr, 5);
  auto cb2 = std::make_shared<RecordingCallback>(nullptr);
  Trainer t2(quiet_options(dir, {.max_epochs = 3, .callbacks = {cb2}, .enable_checkpointing = false}));
  t2.fit(fresh, DataLoader(blobs(24, 1), {.batch_size = 8}), nullptr, (dir / "full.ckpt").string());
  EXPECT_EQ(fresh.loaded, (nlohmann::json{{"note", "from module"}}));
  EXPECT_EQ(cb2->loaded, c.callbacks["RecordingCallback"]);
  EXPECT_EQ(t2.global_step(), 9);
}

TEST_F(CheckpointTest, WeightsOnlyLoadsForEvaluationButCannotResume) {
  TinyClassifier m;
  const DataLoader data(blobs(24, 1), {.batch_size = 8});
  Trainer t(quiet_options(dir, {.max_epochs = 2, .enable_checkpointing = false}));
  t.fit(m, data);
  t.save_checkpoint(dir / "w.ckpt", true);
  const Checkpoint c = read_checkpoint(dir / "w.ckpt");
  EXPECT_TRUE(c.weights_only);
  EXPECT_TRUE(c.optimizer_states.empty());
  const double want = t.validate(m, data)[0].at("val_loss");

  TinyClassifier other(nullptr, 9);
  Trainer t2(quiet_options(dir, {.max_epochs = 3, .enable_checkpointing = false}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { t2.fit(other, data, nullptr, (dir / "w.ckpt").string()); }),
              HasSubstr("weights_only"));
  EXPECT_DOUBLE_EQ(t2.validate(other, data, (dir / "w.ckpt").string())[0].at("val_loss"), want);
}

TEST_F(CheckpointTest, LastAndBestComeFromTheModelCheckpoint) {
  const DataLoader train(blobs(24, 1), {.batch_size = 8}), val(blobs(16, 2), {.batch_size = 8});
  auto options = [&](int epochs) {
    return quiet_options(dir, {.max_epochs = epochs,
                               .callbacks = {std::make_shared<ModelCheckpoint>(
                                   ModelCheckpointOptions{.monitor = "val_loss", .save_last = true})}});
  };
  TinyClassifier m;
  Trainer t(options(3));
  t.fit(m, train, &val);
  auto* mc = dynamic_cast<ModelCheckpoint*>(t.callbacks().back().get());
  ASSERT_NE(mc, nullptr);
  EXPECT_TRUE(std::filesystem::exists(mc->best_model_path()));
  EXPECT_TRUE(std::filesystem::exists(mc->last_model_path()));
  EXPECT_EQ(t.test(m, val, "best")[0].count("test_loss"), 1u);

  TinyClassifier again(nullptr, 3);
  Trainer t2(options(4));
  t2.fit(again, train, &val, "last");
  EXPECT_EQ(t2.global_step(), 12);
  EXPECT_EQ(t2.current_epoch(), 4);

  Trainer none(quiet_options(dir, {.enable_checkpointing = false}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { none.validate(m, val, "best"); }), HasSubstr("needs a ModelCheckpoint"));
  EXPECT_THAT(error_of<NotFoundError>([&] { none.validate(m, val, (dir / "nope.ckpt").string()); }), HasSubstr("nope.ckpt"));
}

TEST_F(CheckpointTest, ACheckpointOfAnotherModelIsAClearError) {
  TinyClassifier m;
  const DataLoader data(blobs(16, 1), {.batch_size = 8});
  Trainer t(quiet_options(dir, {.max_epochs = 1, .enable_checkpointing = false}));
  t.fit(m, data);
  t.save_checkpoint(dir / "one.ckpt");
  const std::string file = (dir / "one.ckpt").string();

  TinyClassifier two_optimizers;
  two_optimizers.make_optimizers = [](TinyClassifier& x) {
    NamedParams a, b;
    for (auto& p : x.net->named_parameters()) (p.first[0] == '0' ? a : b).push_back(p);
    return std::vector<OptimizerConfig>{{.optimizer = std::make_shared<SGD>(a, SGDOptions{.lr = 0.1})},
                                        {.optimizer = std::make_shared<SGD>(b, SGDOptions{.lr = 0.1})}};
  };
  Trainer t2(quiet_options(dir, {.max_epochs = 2, .enable_checkpointing = false}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { t2.fit(two_optimizers, data, nullptr, file); }),
              HasSubstr("holds 1 optimizer states, configure_optimizers() returned 2"));

  class Wider : public TinyClassifier {
   public:
    Wider() { net = models::zoo::mlp({8, 32, 3}, 0); }
  } wider;
  Trainer t3(quiet_options(dir, {.max_epochs = 2, .enable_checkpointing = false}));
  const std::string e = error_of<InvalidArgument>([&] { t3.fit(wider, data, nullptr, file); });
  EXPECT_THAT(e, HasSubstr(file));
  EXPECT_THAT(e, HasSubstr("state_dict does not fit the module"));
  EXPECT_THAT(e, HasSubstr("0.weight"));
}

// Counts barriers and pretends to be global rank `rank`.
class RankStrategy : public SingleHPUStrategy {
 public:
  explicit RankStrategy(int rank) : rank_(rank) {}
  int global_rank() const override { return rank_; }
  int world_size() const override { return 2; }
  void barrier(const std::string& name) override { barriers.push_back(name); }
  std::vector<std::string> barriers;

 private:
  int rank_;
};

TEST_F(CheckpointTest, OnlyGlobalRankZeroWritesAndEveryRankMeetsAtTheBarrier) {
  for (int rank : {0, 1}) {
    auto s = std::make_shared<RankStrategy>(rank);
    TinyClassifier m;
    Trainer t(quiet_options(dir, {.strategy_object = s, .max_epochs = 1, .enable_checkpointing = false}));
    t.fit(m, DataLoader(blobs(16, 1), {.batch_size = 8}));
    const auto file = dir / ("rank" + std::to_string(rank) + ".ckpt");
    t.save_checkpoint(file);
    EXPECT_EQ(std::filesystem::exists(file), rank == 0);
    EXPECT_EQ(s->barriers, std::vector<std::string>{"save_checkpoint"});
  }
}

}  // namespace
}  // namespace hg::training
