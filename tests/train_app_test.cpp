// hgraph-train end to end: the digits classifiers reach their accuracy through Trainer.fit +
// test, an exported package served by hgraph-serve answers with the module's logits, the
// hgraph-train binary runs a config and rejects bad ones; the config and optimizer parsing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

#include "engine/ops.h"
#include "models/package.h"
#include "tests/errors.h"
#include "tests/http_conn.h"
#include "tests/server_process.h"
#include "tests/test_env.h"
#include "tests/wait.h"
#include "training/optimizer_config.h"
#include "training/schedulers.h"
#include "training/train_config.h"

#ifndef HG_TRAIN_BIN
#error "HG_TRAIN_BIN must be defined as the path of hgraph-train"
#endif

namespace hg::training {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A quiet run in `dir`: no logger, checkpoints or progress bar.
json quiet_config(const std::filesystem::path& dir, const std::string& model, int epochs) {
  return {{"data", {{"batch_size", 32}, {"num_workers", 1}}},
          {"model", {{"name", model}}},
          {"trainer",
           {{"max_epochs", epochs}, {"logger", false}, {"enable_checkpointing", false},
            {"enable_progress_bar", false}, {"num_sanity_val_steps", 0}, {"default_root_dir", dir.string()}}}};
}

TrainResult train(const json& config) {
  std::ostringstream out;
  return run_training(parse_train_config(config), out);
}

TEST(TrainAppTest, DigitsMlpReachesNinetyFivePercent) {
  const auto dir = test::temp_dir("TrainAppMlp");
  json c = quiet_config(dir, "mlp", 12);
  c["optimizer"] = {{"name", "sgd"}, {"lr", 0.05}, {"momentum", 0.9}};
  const auto r = train(c);
  std::cout << "digits MLP held-out accuracy " << r.test.at("test_acc") << "\n";
  EXPECT_GE(r.test.at("test_acc"), 0.95);
  EXPECT_LT(r.test.at("test_loss"), 0.25);
  EXPECT_EQ(r.epochs, 12);
  std::filesystem::remove_all(dir);
}

TEST(TrainAppTest, DigitsLeNetReachesNinetySevenPercent) {
  const auto dir = test::temp_dir("TrainAppLeNet");
  json c = quiet_config(dir, "lenet5", 4);
  c["optimizer"] = {{"name", "adamw"}, {"lr", 3e-3}, {"scheduler", {{"name", "cosine"}, {"t_max", 4}}}};
  const auto r = train(c);
  std::cout << "digits LeNet-5 (32x32) held-out accuracy " << r.test.at("test_acc") << "\n";
  EXPECT_GE(r.test.at("test_acc"), 0.97);
  std::filesystem::remove_all(dir);
}

// POST /v2/models/<model>/infer with a KServe v2 JSON body; the "logits" output's data.
std::vector<float> infer_json(test::ServerProcess& server, const std::string& model, const Tensor& x) {
  json body = {{"inputs", {{{"name", "input"}, {"datatype", "FP32"}, {"shape", x.shape()}, {"data", x.to_vector()}}}}};
  test::HttpConn conn(server.port());
  const auto reply = conn.request("POST", "/v2/models/" + model + "/infer", body.dump(), {{"Content-Type", "application/json"}});
  EXPECT_EQ(reply.status, 200) << reply.body;
  const json out = json::parse(reply.body);
  EXPECT_EQ(out["outputs"][0]["name"], "logits");
  return out["outputs"][0]["data"].get<std::vector<float>>();
}

std::vector<int64_t> argmax_rows(const std::vector<float>& logits, int64_t classes) {
  std::vector<int64_t> out;
  for (size_t r = 0; r < logits.size() / static_cast<size_t>(classes); ++r) {
    auto row = logits.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(classes));
    out.push_back(std::max_element(row, row + classes) - row);
  }
  return out;
}

TEST(TrainAppTest, ExportedPackagesServeTheModulesPredictions) {
  const auto dir = test::temp_dir("TrainAppExport");
  const auto repo = dir / "repo";
  struct Case {
    std::string model;
    int64_t image_size;
  };
  std::map<std::string, std::shared_ptr<LightningModule>> trained;
  for (const Case& k : {Case{"mlp", 8}, Case{"lenet5", 32}}) {
    json c = quiet_config(dir, k.model, 1);
    c["trainer"]["limit_train_batches"] = 10;
    c["export"] = {{"dir", repo.string()}, {"config", {{"max_batch_size", 8}, {"batch_buckets", {1, 8}}}}};
    const auto r = train(c);
    EXPECT_EQ(r.export_dir, repo / ("digits_" + k.model) / "1");
    const auto pkg = models::load_package(r.export_dir);
    EXPECT_EQ(pkg.spec.metadata["trained_by"], "hgraph-train");
    EXPECT_DOUBLE_EQ(pkg.spec.metadata["test_acc"].get<double>(), r.test.at("test_acc"));
    EXPECT_EQ(pkg.spec.inputs[0].shape, k.model == "mlp" ? Shape({-1, 64}) : Shape({-1, 1, 32, 32}));
    trained[k.model] = r.module;
  }
  test::ServerProcess server({"--model-repository", repo.string()});
  for (const auto& [model, module] : trained) {
    auto digits = load_digits(HG_SOURCE_DIR "/models/data/digits.safetensors", model == "mlp" ? 8 : 32);
    const Batch b = digits->get_batch({0, 1, 2, 3, 4, 5, 6, 1000});
    module->module().eval();
    const Tensor logits = module->module().forward(b[0].to(module->module().named_parameters()[0].second->device()));
    const auto want = logits.to_vector();
    const auto got = infer_json(server, "digits_" + model, b[0]);
    ASSERT_EQ(got.size(), want.size()) << model;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << model << " logit " << i;
    EXPECT_EQ(argmax_rows(got, 10), argmax_rows(want, 10)) << model;
    const auto one = infer_json(server, "digits_" + model, ops::slice(b[0], 0, 7, 8));  // the batch-1 bucket
    ASSERT_EQ(one.size(), 10u);
    for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(one[i], want[70 + i], 1e-4) << model << " alone, logit " << i;
  }
  EXPECT_EQ(server.terminate(std::chrono::seconds(30)), 0);
  std::filesystem::remove_all(dir);
}

// export.format "onnx": model.onnx traced from the trained module, served with a dynamic batch.
TEST(TrainAppTest, OnnxExportsServeTheModulesPredictions) {
  const auto dir = test::temp_dir("TrainAppOnnx");
  const auto repo = dir / "repo";
  std::map<std::string, std::shared_ptr<LightningModule>> trained;
  for (const std::string model : {"mlp", "lenet5"}) {
    json c = quiet_config(dir, model, 1);
    c["trainer"]["limit_train_batches"] = 5;
    c["export"] = {{"dir", repo.string()}, {"format", "onnx"}, {"config", {{"max_batch_size", 8}, {"batch_buckets", {1, 8}}}}};
    const auto r = train(c);
    EXPECT_TRUE(std::filesystem::exists(r.export_dir / "model.onnx")) << model;
    EXPECT_FALSE(std::filesystem::exists(r.export_dir / "model.json")) << model;
    trained[model] = r.module;
  }
  test::ServerProcess server({"--model-repository", repo.string()});
  for (const auto& [model, module] : trained) {
    auto digits = load_digits(HG_SOURCE_DIR "/models/data/digits.safetensors", model == "mlp" ? 8 : 32);
    const Batch b = digits->get_batch({0, 1, 2, 3, 4, 1000});
    module->module().eval();
    const auto want = module->module().forward(b[0].to(module->module().named_parameters()[0].second->device())).to_vector();
    const auto got = infer_json(server, "digits_" + model, b[0]);
    ASSERT_EQ(got.size(), want.size()) << model;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << model << " logit " << i;
  }
  EXPECT_EQ(server.terminate(std::chrono::seconds(30)), 0);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                json c = quiet_config(dir, "mlp", 1);
                c["export"] = {{"dir", repo.string()}, {"format", "torchscript"}};
                parse_train_config(c);
              }),
              HasSubstr("export.format: must be \"package\" or \"onnx\""));
  std::filesystem::remove_all(dir);
}

struct ProcessRun {
  int status;
  std::string out, err;
};

// Runs hgraph-train with `args` (at most 5 minutes), capturing stdout and stderr. The DDP launch
// variables are removed from its environment: inside a rank-1 hg_tests child (launched by a
// multi-process test in the same run) they would make hgraph-train wait for a rank 0 that never comes.
ProcessRun run_binary(const std::filesystem::path& dir, const std::string& args) {
  const auto out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = "env -u LOCAL_RANK -u NODE_RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT " +
                          std::string(HG_TRAIN_BIN) + " " + args + " >" + out.string() + " 2>" + err.string();
  const test::CommandRun r = test::run_command(cmd, std::chrono::seconds(300), "hgraph-train " + args);
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  return {r.exit_code, slurp(out), slurp(err)};
}

TEST(TrainAppTest, BinaryTrainsAndExportsASmallConfig) {
  const auto dir = test::temp_dir("TrainAppBinary");
  json c = quiet_config(dir, "mlp", 2);
  c["export"] = {{"dir", (dir / "repo").string()}, {"name", "tiny"}};
  std::ofstream(dir / "tiny.json") << c.dump(2);
  const ProcessRun r = run_binary(dir, "--config " + (dir / "tiny.json").string() + " --set trainer.max_epochs=3 --set export.version=2");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("held-out test_acc"));
  EXPECT_THAT(r.out, HasSubstr("exported to " + (dir / "repo" / "tiny" / "2").string()));
  const auto pkg = models::load_package(dir / "repo" / "tiny" / "2");
  EXPECT_EQ(pkg.spec.metadata["epochs"], 3);
  EXPECT_GT(pkg.spec.metadata["test_acc"].get<double>(), 0.5);
  std::filesystem::remove_all(dir);
}

TEST(TrainAppTest, BinaryLrFindPrintsTheTableAndASuggestion) {
  const auto dir = test::temp_dir("TrainAppLrFind");
  json c = quiet_config(dir, "mlp", 2);
  c["tuner"] = {{"num_training", 30}, {"min_lr", 1e-4}};
  std::ofstream(dir / "find.json") << c.dump(2);
  const ProcessRun r = run_binary(dir, "--config " + (dir / "find.json").string() + " --lr-find");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("step            lr          loss"));
  EXPECT_THAT(r.out, HasSubstr("<- suggestion"));
  EXPECT_THAT(r.out, HasSubstr("lr_find: suggested lr "));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("held-out")));  // no training
  std::filesystem::remove_all(dir);
}

// tuner.lr_find: the finder runs, then fit trains with its suggestion (Lightning's update_attr).
TEST(TrainAppTest, TunerLrFindTrainsWithTheSuggestion) {
  const auto dir = test::temp_dir("TrainAppTuner");
  json c = quiet_config(dir, "mlp", 1);
  c["tuner"] = {{"lr_find", true}, {"num_training", 20}, {"min_lr", 1e-3}, {"max_lr", 0.5}};
  std::ostringstream out;
  const TrainResult r = run_training(parse_train_config(c), out);
  EXPECT_THAT(out.str(), HasSubstr("lr_find: suggested lr "));
  const double lr = r.module->hparams()["optimizer"]["lr"].get<double>();
  EXPECT_GE(lr, 1e-3);
  EXPECT_LE(lr, 0.5);
  EXPECT_NE(lr, 0.05);  // not the config's
  auto error = [](const json& j) { return test::error_of<InvalidArgument>([&] { parse_train_config(j); }); };
  EXPECT_THAT(error({{"tuner", {{"min_lr", 0}}}}), HasSubstr("tuner: lr_find: min_lr 0.0 must be > 0"));
  EXPECT_THAT(error({{"tuner", {{"mode", "step"}}}}), HasSubstr("lr_find: mode 'step' is not exponential or linear"));
  EXPECT_THAT(error({{"tuner", {{"numtraining", 5}}}}), HasSubstr("tuner.numtraining: unknown key"));
  EXPECT_THAT(error({{"tuner", {{"lr_find", true}}}, {"trainer", {{"devices", 2}}}}),
              HasSubstr("tuner.lr_find: runs in one process, but trainer.devices x trainer.num_nodes = 2"));
  std::filesystem::remove_all(dir);
}

// ckpt_path "last" resumes the run in default_root_dir: 2 more epochs on top of the first 2.
TEST(TrainAppTest, BinaryResumesFromTheLastCheckpoint) {
  const auto dir = test::temp_dir("TrainAppResume");
  json c = quiet_config(dir, "mlp", 2);
  c["trainer"]["enable_checkpointing"] = true;
  std::ofstream(dir / "resume.json") << c.dump(2);
  ProcessRun r = run_binary(dir, "--config " + (dir / "resume.json").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 epochs, 90 steps"));
  r = run_binary(dir, "--config " + (dir / "resume.json").string() + " --set trainer.max_epochs=4 --set ckpt_path=last");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 epochs, 180 steps"));
  std::filesystem::remove_all(dir);
}

// devices 2: the Trainer re-executes hgraph-train for rank 1; only rank 0 reports and exports.
TEST(TrainAppTest, BinaryTrainsWithDdpOnTwoProcesses) {
  const char* local_rank = std::getenv("LOCAL_RANK");  // rank 0 of a launch exports "0" in its own process
  if (local_rank && std::string(local_rank) != "0")
    GTEST_SKIP() << "inside DDP local rank " << local_rank << ", launched by another test of this run; its rank 0 runs this test";
  const auto dir = test::temp_dir("TrainAppDdp");
  json c = quiet_config(dir, "mlp", 3);
  c["trainer"]["devices"] = 2;
  c["export"] = {{"dir", (dir / "repo").string()}};
  std::ofstream(dir / "ddp.json") << c.dump(2);
  const ProcessRun r = run_binary(dir, "--config " + (dir / "ddp.json").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = r.out.find(what); p != std::string::npos; p = r.out.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("exported to"), 1u) << r.out;
  EXPECT_EQ(count("held-out test_acc"), 1u) << r.out;
  EXPECT_THAT(r.out, HasSubstr("3 epochs, 69 steps"));  // 1438 examples / 2 ranks / 32 per batch = 23 a epoch
  EXPECT_GT(models::load_package(dir / "repo" / "digits_mlp" / "1").spec.metadata["test_acc"].get<double>(), 0.8);
  std::filesystem::remove_all(dir);
}

TEST(TrainAppTest, BinaryRejectsBadConfigsNamingTheKey) {
  const auto dir = test::temp_dir("TrainAppBad");
  std::ofstream(dir / "bad.json") << R"({"trainer": {"max_epoch": 3}})";
  ProcessRun r = run_binary(dir, "--config " + (dir / "bad.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("trainer.max_epoch: unknown key"));
  std::ofstream(dir / "empty.json") << "{}";
  r = run_binary(dir, "--config " + (dir / "empty.json").string() + " --set trainer.max_epochs=abc");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("trainer.max_epochs: expected an integer, got \"abc\""));
  std::ofstream(dir / "bad2.json") << R"({"optimizer": {"name": "sgd", "scheduler": {"name": "cosine"}}})";
  r = run_binary(dir, "--config " + (dir / "bad2.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("optimizer.scheduler.t_max: is required"));
  std::ofstream(dir / "broken.json") << R"({"data": )";
  r = run_binary(dir, "--config " + (dir / "broken.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("broken.json: unexpected end of input"));
  r = run_binary(dir, "--nonsense");
  EXPECT_EQ(r.status, 2);
  r = run_binary(dir, "--help");
  EXPECT_EQ(r.status, 0);
  for (const char* key : {"--config", "--set", "holdout_fraction", "num_workers", "image_size", "accelerator", "devices",
                          "strategy", "num_nodes", "precision", "max_epochs", "min_epochs", "max_steps",
                          "limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                          "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps", "log_every_n_steps",
                          "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm", "deterministic",
                          "default_root_dir", "callbacks", "logger", "enable_checkpointing", "enable_progress_bar",
                          "fast_dev_run", "dist_timeout", "ckpt_path", "\"export\"", "t_max", "milestones", "plateau",
                          "onecycle", "min_steps", "max_time", "DD:HH:MM:SS", "--lr-find", "\"tuner\"",
                          "num_training", "early_stop_threshold"})
    EXPECT_THAT(r.out, HasSubstr(key));
  std::filesystem::remove_all(dir);
}

TrainerOptions quiet_trainer(const std::filesystem::path& dir) {
  TrainerOptions o;
  o.logger = std::vector<std::shared_ptr<Logger>>{};
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.default_root_dir = dir;
  return o;
}

// val_acc is the share of argmax hits over every example (batch-size weighted across batches).
TEST(ClassifierModuleTest, ValidationAccuracyIsTheShareOfArgmaxHits) {
  const auto dir = test::temp_dir("ClassifierAcc");
  ClassifierModule m({.model = "mlp", .model_config = {{"sizes", {64, 16, 10}}}, .seed = 3});
  auto [train, held] = random_split(load_digits(HG_SOURCE_DIR "/models/data/digits.safetensors"), 0.2, 0);
  DataLoader loader(held, {.batch_size = 50});  // 359 examples: the last batch has 9
  Trainer trainer(quiet_trainer(dir));
  const auto r = trainer.validate(m, loader);
  const Batch all = held->get_batch([&] {
    std::vector<int64_t> i(static_cast<size_t>(held->size()));
    std::iota(i.begin(), i.end(), 0);
    return i;
  }());
  const auto logits = m.module().forward(all[0].to(m.module().named_parameters()[0].second->device())).to_vector();
  const auto labels = all[1].to_indices();
  const auto pred = argmax_rows(logits, 10);
  double hits = 0;
  for (size_t i = 0; i < labels.size(); ++i) hits += pred[i] == labels[i];
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NEAR(r[0].at("val_acc"), hits / static_cast<double>(labels.size()), 1e-6);
  EXPECT_GT(r[0].at("val_loss"), 1.0);  // untrained
  std::filesystem::remove_all(dir);
}

// bert_classifier trains on token ids and exports with an INT64 [-1, max_len] input; the package
// rebuilds a module with the same logits.
TEST(ClassifierModuleTest, BertClassifierTrainsAndExports) {
  const auto dir = test::temp_dir("ClassifierBert");
  ClassifierModule m({.model = "bert_classifier",
                      .model_config = {{"vocab", 50}, {"d_model", 16}, {"nhead", 2}, {"layers", 1}, {"ff", 32},
                                       {"max_len", 8}, {"classes", 3}},
                      .optimizer = {{"name", "adamw"}, {"lr", 1e-3}}});
  std::vector<int64_t> ids, labels;
  for (int64_t i = 0; i < 16 * 8; ++i) ids.push_back((i * 7 + 3) % 50);
  for (int64_t i = 0; i < 16; ++i) labels.push_back(i % 3);
  auto data = std::make_shared<TensorDataset>(
      std::vector<Tensor>{Tensor::from_indices(ids, {16, 8}), Tensor::from_indices(labels, {16})});
  TrainerOptions o = quiet_trainer(dir);
  o.max_epochs = 2;
  Trainer trainer(o);
  DataLoader loader(data, {.batch_size = 4});
  trainer.fit(m, loader, &loader);
  EXPECT_EQ(trainer.global_step(), 8);
  const auto out = export_classifier(m, {.dir = dir / "repo", .name = "bert"});
  std::unique_ptr<models::Module> loaded;
  const auto pkg = models::load_package(out, &loaded);
  EXPECT_EQ(pkg.spec.inputs[0].datatype, "INT64");
  EXPECT_EQ(pkg.spec.inputs[0].shape, Shape({-1, 8}));
  EXPECT_EQ(pkg.spec.outputs[0].shape, Shape({-1, 3}));
  m.module().eval();
  m.module().to(Device::cpu());
  loaded->eval();
  const Tensor x = Tensor::from_indices(std::vector<int64_t>(ids.begin(), ids.begin() + 16), {2, 8});
  EXPECT_EQ(loaded->forward(x).to_vector(), m.module().forward(x).to_vector());
  std::filesystem::remove_all(dir);
}

TEST(TrainConfigTest, ErrorsNameTheKey) {
  auto error = [](const json& j) { return test::error_of<InvalidArgument>([&] { parse_train_config(j); }); };
  EXPECT_THAT(error({{"dataa", {}}}), HasSubstr("dataa: unknown key"));
  EXPECT_THAT(error({{"data", {{"batch_size", "big"}}}}), HasSubstr("data.batch_size: expected an integer, got \"big\""));
  EXPECT_THAT(error({{"data", {{"holdout_fraction", 1.0}}}}), HasSubstr("data.holdout_fraction"));
  EXPECT_THAT(error({{"data", {{"dataset", "mnist"}}}}), HasSubstr("data.dataset: unknown dataset 'mnist'"));
  EXPECT_THAT(error({{"model", {{"name", "vgg"}}}}), HasSubstr("model.name: unknown model 'vgg'"));
  EXPECT_THAT(error({{"model", {{"config", {{"sizes", {64}}}}}}}), HasSubstr("model.config.sizes"));
  EXPECT_THAT(error({{"model", {{"name", "lenet5"}, {"config", {{"clases", 3}}}}}}), HasSubstr("model.config.clases: unknown key"));
  EXPECT_THAT(error({{"optimizer", {{"name", "rmsprop"}}}}), HasSubstr("optimizer.name: unknown optimizer 'rmsprop'"));
  EXPECT_THAT(error({{"optimizer", {{"name", "adam"}, {"betas", {0.9}}}}}), HasSubstr("optimizer.betas"));
  EXPECT_THAT(error({{"optimizer", {{"name", "sgd"}, {"scheduler", {{"name", "step"}, {"step_size", 2}, {"interval", "batch"}}}}}}),
              HasSubstr("optimizer.scheduler.interval: must be \"epoch\" or \"step\""));
  EXPECT_THAT(error({{"optimizer", {{"name", "sgd"}, {"scheduler", {{"name", "sequential"}, {"milestones", {2}},
                                                                   {"schedulers", {{{"name", "linear"}, {"gamma", 2}}}}}}}}}),
              HasSubstr("optimizer.scheduler.schedulers[0].gamma: unknown key"));
  EXPECT_THAT(error({{"trainer", {{"limit_train_batches", 1.5}}}}), HasSubstr("trainer.limit_train_batches"));
  EXPECT_THAT(error({{"trainer", {{"callbacks", {{{"name", "EarlyStopping"}}}}}}}), HasSubstr("trainer.callbacks[0].monitor: is required"));
  EXPECT_THAT(error({{"trainer", {{"logger", "wandb"}}}}), HasSubstr("trainer.logger"));
  EXPECT_THAT(error({{"export", {{"dir", "/tmp/x"}, {"versoin", 2}}}}), HasSubstr("export.versoin: unknown key"));
  EXPECT_THAT(error({{"model", {{"name", "lenet5"}}}, {"data", {{"image_size", 8}}}}),
              HasSubstr("model: lenet5 takes FP32 [-1, 1, 32, 32], the digits with data.image_size 8 are FP32 [-1, 64]"));
  EXPECT_THAT(error({{"model", {{"name", "bert_classifier"}}}}), HasSubstr("model: bert_classifier takes INT64"));
  EXPECT_THAT(error({{"model", {{"config", {{"sizes", {64, 5}}}}}}}), HasSubstr("5 classes, the digits have 10"));
}

TEST(TrainConfigTest, ReadsEverySectionWithDefaults) {
  json j = {{"model", {{"name", "lenet5"}}},
            {"trainer", {{"limit_train_batches", 5}, {"limit_val_batches", 0.5}, {"check_val_every_n_epoch", nullptr},
                         {"gradient_clip_val", 1.0}, {"devices", "auto"}, {"precision", "bf16-mixed"},
                         {"callbacks", {{{"name", "EarlyStopping"}, {"monitor", "val_loss"}}, {{"name", "LearningRateMonitor"}}}}}},
            {"export", {{"dir", "/tmp/repo"}}}};
  apply_override(j, "trainer.max_epochs=4");
  apply_override(j, "data.path=/tmp/digits.safetensors");
  apply_override(j, "optimizer.name=adamw");
  const auto c = parse_train_config(j);
  EXPECT_EQ(c.data.image_size, 32);  // lenet5's input
  EXPECT_EQ(c.data.path, "/tmp/digits.safetensors");
  EXPECT_EQ(c.trainer.max_epochs, 4);
  EXPECT_EQ(c.trainer.limit_train_batches.batches, 5);
  EXPECT_EQ(c.trainer.limit_val_batches.fraction, 0.5);
  EXPECT_EQ(c.trainer.limit_val_batches.batches, -1);
  EXPECT_FALSE(c.trainer.check_val_every_n_epoch.has_value());
  EXPECT_EQ(c.trainer.gradient_clip_val, 1.0);
  EXPECT_EQ(c.trainer.precision, "bf16-mixed");
  EXPECT_EQ(c.trainer.callbacks.size(), 2u);
  EXPECT_EQ(c.model.optimizer, json({{"name", "adamw"}}));
  ASSERT_TRUE(c.export_options.has_value());
  EXPECT_EQ(c.export_options->name, "digits_lenet5");
  EXPECT_EQ(c.export_options->version, 1);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { apply_override(j, "trainer.max_epochs.x=1"); }),
              HasSubstr("non-object"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { apply_override(j, "novalue"); }), HasSubstr("key.path=value"));
}

TEST(TrainConfigTest, ReadsMaxTimeAndMinSteps) {
  auto trainer = [](const json& t) { return parse_train_config({{"trainer", t}}).trainer; };
  EXPECT_EQ(trainer({{"max_time", "01:02:03:04"}}).max_time,
            std::chrono::milliseconds(((24 + 2) * 3600 + 3 * 60 + 4) * 1000));
  EXPECT_EQ(trainer({{"max_time", 1.5}}).max_time, std::chrono::milliseconds(1500));
  EXPECT_FALSE(trainer(json::object()).max_time.has_value());
  EXPECT_EQ(trainer({{"min_steps", 7}}).min_steps, 7);
  auto error = [](const json& t) { return test::error_of<InvalidArgument>([&] { parse_train_config({{"trainer", t}}); }); };
  EXPECT_THAT(error({{"max_time", "12:00"}}), HasSubstr("trainer.max_time: max_time '12:00' is not \"DD:HH:MM:SS\""));
  EXPECT_THAT(error({{"max_time", "00:0x:00:00"}}), HasSubstr("max_time '00:0x:00:00' is not"));
  EXPECT_THAT(error({{"max_time", -3}}), HasSubstr("trainer.max_time: must be > 0 seconds, got -3"));
  EXPECT_THAT(error({{"max_time", true}}), HasSubstr("trainer.max_time: expected \"DD:HH:MM:SS\" or seconds"));
  EXPECT_THAT(error({{"min_steps", -1}}), HasSubstr("trainer.min_steps: must be >= 0, got -1"));
}

TEST(TrainConfigTest, ExampleConfigsParse) {
  for (const char* name : {"digits_mlp.json", "digits_lenet.json"}) {
    const auto c = parse_train_config(read_config_file(std::string(HG_SOURCE_DIR "/training/configs/") + name));
    EXPECT_TRUE(c.export_options.has_value()) << name;
    EXPECT_NE(c.model.optimizer.find("scheduler"), c.model.optimizer.end()) << name;
  }
}

TEST(TrainConfigTest, OptimizerConfigBuildsOptimizersAndSchedulers) {
  Tensor w = Tensor::zeros({3});
  NamedParams params = {{"w", &w}};
  auto sgd = make_optimizer_config({{"name", "sgd"}, {"lr", 0.2}, {"momentum", 0.5}, {"nesterov", true}}, params);
  EXPECT_EQ(sgd.optimizer->name(), "SGD");
  EXPECT_EQ(sgd.optimizer->param_groups()[0].options.at("momentum"), 0.5);
  EXPECT_EQ(sgd.scheduler, nullptr);
  auto adamw = make_optimizer_config({{"name", "adamw"}, {"betas", {0.8, 0.9}},
                                      {"scheduler", {{"name", "plateau"}, {"patience", 1}, {"interval", "epoch"}}}},
                                     params);
  EXPECT_EQ(adamw.optimizer->name(), "AdamW");
  EXPECT_EQ(adamw.optimizer->param_groups()[0].options.at("beta1"), 0.8);
  EXPECT_EQ(adamw.optimizer->param_groups()[0].options.at("weight_decay"), 0.01);
  ASSERT_NE(adamw.scheduler, nullptr);
  EXPECT_TRUE(adamw.scheduler->needs_metric());
  EXPECT_EQ(adamw.monitor, "val_loss");
  // Linear warm-up then cosine, stepped per optimizer step every 2 steps.
  auto seq = make_optimizer_config({{"name", "sgd"}, {"lr", 1.0},
                                    {"scheduler", {{"name", "sequential"}, {"milestones", {2}}, {"interval", "step"},
                                                   {"frequency", 2}, {"log_name", "lr"},
                                                   {"schedulers", {{{"name", "linear"}, {"start_factor", 0.5}, {"total_iters", 2}},
                                                                   {{"name", "cosine"}, {"t_max", 4}}}}}}},
                                   params);
  EXPECT_EQ(seq.interval, "step");
  EXPECT_EQ(seq.frequency, 2);
  EXPECT_EQ(seq.name, "lr");
  EXPECT_DOUBLE_EQ(seq.optimizer->param_groups()[0].lr(), 0.5);
  seq.scheduler->step();
  EXPECT_DOUBLE_EQ(seq.optimizer->param_groups()[0].lr(), 0.75);
  seq.scheduler->step();
  EXPECT_DOUBLE_EQ(seq.optimizer->param_groups()[0].lr(), 1.0);  // cosine from its start
  auto step = make_optimizer_config({{"name", "sgd"}, {"lr", 1.0}, {"scheduler", {{"name", "multistep"}, {"milestones", {1, 3}}, {"gamma", 0.5}}}}, params);
  step.scheduler->step();
  EXPECT_DOUBLE_EQ(step.optimizer->param_groups()[0].lr(), 0.5);
  auto expo = make_optimizer_config({{"name", "sgd"}, {"lr", 1.0}, {"scheduler", {{"name", "exponential"}, {"gamma", 0.5}}}}, params);
  EXPECT_EQ(expo.scheduler->name(), "ExponentialLR");
  expo.scheduler->step();
  expo.scheduler->step();
  EXPECT_DOUBLE_EQ(expo.optimizer->param_groups()[0].lr(), 0.25);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                make_optimizer_config({{"name", "sgd"}, {"scheduler", {{"name", "exponential"}}}}, params, "optimizer");
              }),
              HasSubstr("optimizer.scheduler.gamma: is required"));
  auto one = make_optimizer_config({{"name", "adam"}, {"lr", 1.0},
                                    {"scheduler", {{"name", "onecycle"}, {"max_lr", 0.1}, {"total_steps", 10},
                                                   {"anneal_strategy", "linear"}, {"interval", "step"}}}},
                                   params);
  EXPECT_EQ(one.scheduler->name(), "OneCycleLR");
  EXPECT_EQ(one.interval, "step");
  EXPECT_DOUBLE_EQ(one.optimizer->param_groups()[0].lr(), 0.1 / 25);
  EXPECT_DOUBLE_EQ(one.optimizer->param_groups()[0].options.at("beta1"), 0.95);
  for (int i = 0; i < 2; ++i) one.scheduler->step();  // the peak: pct_start * total_steps - 1 = 2
  EXPECT_DOUBLE_EQ(one.optimizer->param_groups()[0].lr(), 0.1);
  EXPECT_DOUBLE_EQ(one.optimizer->param_groups()[0].options.at("beta1"), 0.85);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                make_optimizer_config({{"name", "sgd"}, {"scheduler", {{"name", "onecycle"}, {"max_lr", 0.1}}}},
                                      params, "optimizer");
              }),
              HasSubstr("optimizer.scheduler: OneCycleLR: give total_steps, or epochs and steps_per_epoch"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                make_optimizer_config({{"name", "sgd"}, {"scheduler", {{"name", "onecycle"}, {"total_steps", 5}}}},
                                      params, "optimizer");
              }),
              HasSubstr("optimizer.scheduler.max_lr: is required"));
}

}  // namespace
}  // namespace hg::training
