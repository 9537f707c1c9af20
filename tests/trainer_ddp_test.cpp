// The Trainer over 2 real processes (devices=2, DDP on 127.0.0.1): sync_dist metrics, loggers on
// rank 0 only, the checkpoint collective, and predict gathered on rank 0 in the loader's order.
//
// The DDP launcher re-executes this binary for rank 1 (LOCAL_RANK=1); that process runs this
// test's body too, found by HG_TRAINER_DDP_TEST, and every other test it would run skips there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "engine/autograd.h"
#include "tests/ddp_test_util.h"
#include "tests/golden.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "models/layers.h"
#include "training/checkpoint.h"
#include "training/sgd.h"

namespace hg::training {
namespace {

using namespace std::chrono_literals;

constexpr const char* kDirVar = "HG_TRAINER_DDP_DIR";


// Logs its global rank every validation batch, reduced over ranks and not.
class RankLogging : public test::TinyClassifier {
 public:
  void validation_step(const Batch& b, int64_t idx) override {
    TinyClassifier::validation_step(b, idx);
    const double rank = trainer()->strategy().global_rank();
    log("rank_mean", rank, {.sync_dist = true});
    log("rank_max", rank, {.reduce_fx = "max", .sync_dist = true});
    log("rank_local", rank);
  }
};

TEST(TrainerDDP, MetricsLoggersCheckpointAndPredictOverTwoRanks) {
  if (ddp_test::launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const bool launched = std::getenv("LOCAL_RANK") != nullptr;
  const auto env = launched ? nullptr : ddp_test::rank_zero_env({{kDirVar, test::temp_dir("TrainerDDP").string()}});
  const std::filesystem::path dir = std::getenv(kDirVar);
  auto logger = std::make_shared<test::MemoryLogger>();
  RankLogging m;
  const DataLoader train(test::blobs(32, 1), {.batch_size = 4}), val(test::blobs(16, 2), {.batch_size = 4});
  const DataLoader pred(test::blobs(10, 3), {.batch_size = 4});
  {
    Trainer t({.accelerator = "hpu", .devices = 2, .max_epochs = 2, .num_sanity_val_steps = 0, .default_root_dir = dir,
               .logger = std::vector<std::shared_ptr<Logger>>{logger}, .enable_checkpointing = false,
               .enable_progress_bar = false, .dist_timeout = 120s});
    t.fit(m, train, &val);
    const int rank = t.strategy().global_rank();
    EXPECT_EQ(t.strategy().world_size(), 2);
    EXPECT_EQ(t.global_step(), 8);  // 32 examples / 2 ranks / batches of 4, 2 epochs
    EXPECT_DOUBLE_EQ(t.callback_metrics().at("rank_mean"), 0.5);
    EXPECT_DOUBLE_EQ(t.callback_metrics().at("rank_max"), 1.0);
    EXPECT_DOUBLE_EQ(t.callback_metrics().at("rank_local"), rank);
    EXPECT_EQ(logger->rows.empty(), rank != 0);
    EXPECT_EQ(logger->status.empty(), rank != 0);

    t.save_checkpoint(dir / "ddp.ckpt");  // rank 0 writes; after the barrier every rank reads it
    EXPECT_EQ(read_checkpoint(dir / "ddp.ckpt").global_step, 8);

    const std::vector<Tensor> out = t.predict(m, pred);
    if (rank == 0) {
      ASSERT_EQ(out.size(), 3u);
      EXPECT_EQ(out[2].shape(), (Shape{2, 3}));
      std::vector<float> got;
      for (const Tensor& o : out)
        for (float v : o.to_vector()) got.push_back(v);
      NoGradGuard no_grad;
      m.module().eval();
      const Tensor x = test::blobs(10, 3)->tensors()[0].to(Device::hpu(0));
      test::expect_close(got, m.net->forward(x).to_vector(), 1e-5, "predictions in loader order");
    } else {
      EXPECT_TRUE(out.empty());
    }
  }  // rank 0: the strategy's teardown waits for rank 1 and fails the run if it failed
}

// BatchNorm in training mode: each rank's statistics drift apart on its own data; the Trainer's
// strategy().before_forward before every training_step gives every rank rank 0's buffers again.
class BatchNormNet : public test::TinyClassifier {
 public:
  BatchNormNet() {
    bn_net = std::make_unique<models::Sequential>();
    bn_net->add(std::make_shared<models::BatchNorm2d>(2));
    bn_net->add(std::make_shared<models::Flatten>());
    bn_net->add(std::make_shared<models::Linear>(8, 3, 5));
  }
  models::Module& module() override { return *bn_net; }
  Tensor training_step(const Batch& b, int64_t) override {
    if (!same_on_every_rank()) ++unsynced_before_step;  // a host read and a collective: fine in a test
    return ops::cross_entropy(bn_net->forward(ops::reshape(b[0], {b[0].dim(0), 2, 2, 2})), b[1]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {{.optimizer = std::make_shared<SGD>(bn_net->named_parameters(), SGDOptions{.lr = 0.1})}};
  }
  bool same_on_every_rank() {
    const std::vector<float> mean = bn_net->named_buffers()[0].second->to_vector();
    const double v = 1000.0 * mean[0] + mean[1];
    Strategy& s = trainer()->strategy();
    return s.reduce(v, ReduceOp::Max) == s.reduce(v, ReduceOp::Min);
  }
  std::unique_ptr<models::Sequential> bn_net;
  double unsynced_before_step = 0;
};

class DivergenceProbe : public Callback {
 public:
  std::string state_key() const override { return "DivergenceProbe"; }
  void on_train_batch_end(Trainer&, LightningModule& m, const Batch&, int64_t) override {
    if (!static_cast<BatchNormNet&>(m).same_on_every_rank()) ++diverged_after_step;
  }
  double diverged_after_step = 0;
};

TEST(TrainerDDP, BatchNormBuffersFollowRankZeroBeforeEveryTrainingStep) {
  if (ddp_test::launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const bool launched = std::getenv("LOCAL_RANK") != nullptr;
  const auto env = launched ? nullptr : ddp_test::rank_zero_env({{kDirVar, test::temp_dir("TrainerDDPBatchNorm").string()}});
  const std::filesystem::path dir = std::getenv(kDirVar);
  BatchNormNet m;
  auto probe = std::make_shared<DivergenceProbe>();
  {
    Trainer t({.accelerator = "hpu", .devices = 2, .max_epochs = 1, .default_root_dir = dir, .callbacks = {probe},
               .logger = std::vector<std::shared_ptr<Logger>>{}, .enable_checkpointing = false,
               .enable_progress_bar = false, .dist_timeout = 120s});
    t.fit(m, DataLoader(test::blobs(32, 1), {.batch_size = 4}));
    EXPECT_EQ(t.global_step(), 4);
    // Counted on both ranks, summed so rank 0 sees rank 1's counts too.
    EXPECT_EQ(t.strategy().reduce(m.unsynced_before_step, ReduceOp::Sum), 0.0);
    EXPECT_EQ(t.strategy().reduce(probe->diverged_after_step, ReduceOp::Sum), 2.0 * 4);  // the data differ per rank
  }
}

}  // namespace
}  // namespace hg::training
