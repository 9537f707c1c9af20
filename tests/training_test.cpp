// Training: the digits MLP reaches >= 95% held-out accuracy; checkpoints and export.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "engine/error.h"
#include "graphs/lazy.h"
#include "models/predictor.h"
#include "models/zoo.h"
#include "training/trainer.h"

using namespace hg;
using namespace hg::training;
using ::testing::HasSubstr;

namespace {

const std::string kDigits = std::string(HG_SOURCE_DIR) + "/models/data/digits.safetensors";

TEST(Data, DigitsLoadAndSplit) {
  const Dataset d = load_digits(kDigits);
  EXPECT_EQ(d.size(), 1797);
  EXPECT_EQ(d.width, 64);
  auto [train, test] = split(d, 0.2, 0);
  EXPECT_EQ(test.size(), 359);
  EXPECT_EQ(train.size() + test.size(), d.size());
  DataLoader loader(train, 32, true, 0);
  const auto e0 = loader.epoch(0), e1 = loader.epoch(1);
  EXPECT_EQ(static_cast<int64_t>(e0.size()), loader.num_batches());
  EXPECT_NE(e0[0].y.to_indices(), e1[0].y.to_indices());  // reshuffled per epoch
  EXPECT_EQ(e0.back().x.dim(0), train.size() % 32);
}

struct TrainedRun {
  std::unique_ptr<models::Sequential> net;
  std::unique_ptr<SGD> opt;
  std::unique_ptr<Trainer> trainer;
  FitResult fit;
};

TrainedRun train_digits(int epochs, std::ostream& log) {
  auto [train, test] = split(load_digits(kDigits), 0.2, 0);
  TrainedRun r;
  r.net = models::zoo::mlp({64, 64, 10}, 0);
  r.opt = std::make_unique<SGD>(r.net->named_parameters(), SGDOptions{.lr = 0.05, .momentum = 0.9});
  r.trainer = std::make_unique<Trainer>(TrainerOptions{.accelerator = "hpu", .max_epochs = epochs, .log = &log});
  DataLoader tl(train, 32, true, 0), vl(test, 256, false, 0);
  r.fit = r.trainer->fit(*r.net, *r.opt, tl, &vl);
  return r;
}

TEST(Trainer, DigitsMlpReaches95PercentHeldOut) {
  std::ostringstream log;
  const auto before = graphs::lazy_stats();
  TrainedRun r = train_digits(30, log);
  const auto after = graphs::lazy_stats();
  ASSERT_EQ(r.fit.epochs.size(), 30u);
  EXPECT_GE(r.fit.epochs.back().val_acc, 0.95) << log.str();
  EXPECT_LT(r.fit.epochs.back().train_loss, r.fit.epochs.front().train_loss);
  EXPECT_THAT(log.str(), HasSubstr("epoch 29: train_loss"));
  EXPECT_THAT(log.str(), HasSubstr("val_acc"));
  EXPECT_THAT(log.str(), HasSubstr("[=============================="));  // the progress bar
  // Each step ran as a traced graph; all but a few distinct shapes were cache hits.
  EXPECT_GE(after.steps - before.steps, 30u * 45u);
  EXPECT_LE(after.cache_misses - before.cache_misses, 8u);
}

TEST(Trainer, CheckpointRoundTripAndResume) {
  std::ostringstream log;
  TrainedRun a = train_digits(2, log);
  const auto file = std::filesystem::temp_directory_path() / ("hgraph_ckpt_" + std::to_string(::getpid()));
  a.trainer->save_checkpoint(file, *a.net, *a.opt);

  auto net = models::zoo::mlp({64, 64, 10}, 99);  // different init
  SGD opt(net->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  Trainer t({.accelerator = "hpu", .max_epochs = 2, .log = &log});
  t.load_checkpoint(file, *net, opt);
  EXPECT_EQ(t.epoch(), 2);
  EXPECT_EQ(t.global_step(), a.trainer->global_step());
  const auto pa = a.net->named_parameters(), pb = net->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].second->to_vector(), pb[i].second->to_vector()) << pa[i].first;
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(a.opt->momentum_buffers()[i].second, opt.momentum_buffers()[i].second) << pa[i].first;

  // A checkpoint for another architecture is refused without touching the model.
  auto small = models::zoo::mlp({64, 16, 10}, 0);
  SGD sopt(small->named_parameters(), {.lr = 0.1});
  const auto before = small->named_parameters()[0].second->to_vector();
  try {
    t.load_checkpoint(file, *small, sopt);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.0.weight"));
  }
  EXPECT_EQ(small->named_parameters()[0].second->to_vector(), before);
  std::filesystem::remove(file);
}

TEST(Trainer, ExportedPackageServesTheSamePredictions) {
  std::ostringstream log;
  TrainedRun r = train_digits(3, log);
  const auto dir = std::filesystem::temp_directory_path() / ("hgraph_export_" + std::to_string(::getpid()));
  export_classifier(*r.net, dir, "digits_mlp", 64, 10, r.fit.metadata());
  auto pred = models::Predictor::load(dir, {.batch_buckets = {1, 8}});
  EXPECT_EQ(pred->package().spec.metadata["epochs"], 3);
  auto [train, test] = split(load_digits(kDigits), 0.2, 0);
  std::vector<float> out(5 * 10);
  pred->run({test.features.data()}, 5, {out.data()});
  r.net->to(Device::cpu());
  const auto eager = r.net->forward(Tensor::from_vector({test.features.begin(), test.features.begin() + 5 * 64}, {5, 64}));
  const auto want = eager.to_vector();
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i]));
  std::filesystem::remove_all(dir);
}

TEST(Trainer, RejectsWhatThisBuildCannotDo) {
  EXPECT_THROW(Trainer({.devices = 2}), InvalidArgument);
  EXPECT_THROW(Trainer({.accelerator = "tpu"}), InvalidArgument);
  EXPECT_THROW(Trainer({.strategy = "ddp"}), InvalidArgument);
}

}  // namespace
