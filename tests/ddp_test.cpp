// DDP (training/ddp_strategy.h, training/ddp_reducer.h): bucket layout; the reducer in one
// process with a stand-in all-reduce (lazy segments, no_sync, unused parameters); and over
// real processes: 2 ranks on 127.0.0.1 train to the weights of 1 process with the same global
// batch, two "nodes" in two network namespaces joined by a veth pair, and a killed rank making
// the other exit with a clear message.
//
// Multi-process tests re-execute this binary. The launcher's child (LOCAL_RANK=1) runs the same
// test and takes rank 1's part, told apart by HG_DDP_TEST (the test's name, set by the parent)
// so that other tests a broad filter selects skip in it; processes the tests start themselves
// (namespaces, kill) get HG_DDP_TEST and HG_DDP_ROLE.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "engine/ops.h"
#include "graphs/lazy.h"
#include "models/zoo.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "training/adam.h"
#include "training/ddp_reducer.h"
#include "training/ddp_strategy.h"
#include "training/sgd.h"
#include "training/trainer.h"

namespace hg::training {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using hg::test::error_of;
using namespace std::chrono_literals;
constexpr int64_t kMB = 1 << 20;

TEST(DDPBuckets, ReverseOrderFirstBucketOneMegabyteThenCap) {
  // Walked from the last parameter: 1 MB fills the first bucket; 0.25 + 30 MB pass 25 MB;
  // the rest is the last bucket.
  const std::vector<int64_t> bytes{4 * kMB, kMB / 2, kMB / 2, 30 * kMB, kMB / 4, kMB};
  EXPECT_EQ(assign_buckets(bytes, 1, 25), (std::vector<std::vector<size_t>>{{5}, {4, 3}, {2, 1, 0}}));
  // Small parameters share the first bucket until it holds 1 MB.
  const std::vector<int64_t> small(10, kMB / 4);
  EXPECT_EQ(assign_buckets(small, 1, 25), (std::vector<std::vector<size_t>>{{9, 8, 7, 6}, {5, 4, 3, 2, 1, 0}}));
  EXPECT_EQ(assign_buckets(small, 0.5, 1),
            (std::vector<std::vector<size_t>>{{9, 8}, {7, 6, 5, 4}, {3, 2, 1, 0}}));
  EXPECT_TRUE(assign_buckets({}, 1, 25).empty());
  EXPECT_THAT(error_of<InvalidArgument>([] { assign_buckets({4}, 0, 25); }), HasSubstr("must be positive"));
}

TEST(DDPBuckets, ReducerBucketsANetworkInReverseParameterOrder) {
  auto net = models::zoo::mlp({256, 1024, 512, 10}, 1);  // weights 1 MB, 2 MB; biases small
  DDPReducer r(net->named_parameters(), [](float*, size_t, uint32_t) {}, 1, {});
  std::vector<std::vector<std::string>> names;
  for (const auto& b : r.bucket_indices()) {
    names.emplace_back();
    for (size_t i : b) names.back().push_back(r.param_name(i));
  }
  EXPECT_EQ(names, (std::vector<std::vector<std::string>>{{"4.bias", "4.weight", "2.bias", "2.weight"},
                                                          {"0.bias", "0.weight"}}));
}

// ---------------------------------------------------------------------------------------------
// The reducer in one process: a stand-in all-reduce plays the other ranks.

struct Tiny {  // loss = sum(relu(x @ w1^T + b1) @ w2^T): three leaves, optionally one unused
  std::vector<std::pair<std::string, Tensor*>> params;
  Tensor w1, b1, w2, unused;
  Tensor x;
  explicit Tiny(Device d) {
    auto leaf = [&](std::vector<float> v, Shape s) {
      Tensor t = Tensor::from_vector(v, s, d);
      t.set_requires_grad(true);
      return t;
    };
    w1 = leaf({0.5f, -1, 2, 0.25f, 1, 1}, {3, 2});
    b1 = leaf({0.1f, 0.2f, -0.3f}, {3});
    w2 = leaf({1, -2, 0.5f}, {1, 3});
    unused = leaf({7, 7}, {2});
    x = Tensor::from_vector({1, 2, -1, 0.5f}, {2, 2}, d);
    params = {{"w1", &w1}, {"b1", &b1}, {"w2", &w2}, {"unused", &unused}};
  }
  Tensor loss() const { return ops::sum(ops::matmul(ops::relu(ops::linear(x, w1, b1)), w2, false, true)); }
};

std::vector<std::vector<float>> grads_of(const Tiny& t) {
  std::vector<std::vector<float>> out;
  for (const Tensor* p : {&t.w1, &t.b1, &t.w2}) out.push_back(p->grad().to_vector());
  return out;
}

std::vector<std::vector<float>> plain_grads(Device d, int backwards) {
  Tiny t(d);
  for (int k = 0; k < backwards; ++k) t.loss().backward();
  if (d.is_hpu()) graphs::mark_step(d);
  return grads_of(t);
}

class DDPReducerTest : public ::testing::TestWithParam<bool> {  // lazy on hpu:0, or eager on cpu
 protected:
  void SetUp() override { graphs::enable_lazy_mode(GetParam()); }
  void TearDown() override { graphs::enable_lazy_mode(false); }
  Device dev() const { return GetParam() ? Device::hpu(0) : Device::cpu(); }
};

TEST_P(DDPReducerTest, MeanOverRanksWrittenToEachGradInBucketOrder) {
  Tiny t(dev());
  std::vector<uint32_t> tags;
  // The other rank's gradients equal ours plus one everywhere: mean = ours + 0.5.
  auto allreduce = [&](float* d, size_t n, uint32_t tag) {
    tags.push_back(tag);
    for (size_t k = 0; k < n; ++k) d[k] = 2 * d[k] + 1;
  };
  std::vector<std::pair<std::string, Tensor*>> used(t.params.begin(), t.params.begin() + 3);
  // The first bucket (12 bytes) is w2's alone; b1 and w1 share the second.
  DDPReducer r(used, allreduce, 2, {.bucket_cap_mb = 1, .first_bucket_mb = 12.0 / kMB});
  ASSERT_EQ(r.bucket_indices(), (std::vector<std::vector<size_t>>{{2}, {1, 0}}));
  const uint64_t steps = graphs::lazy_stats().steps;
  Tensor loss = t.loss();
  r.prepare_for_backward(loss, true);
  loss.backward();
  r.finish();
  if (GetParam()) {
    // Forward + backward up to w2's gradient, then the rest of backward: one segment per bucket.
    EXPECT_EQ(graphs::lazy_stats().steps - steps, 2u);
  }
  EXPECT_THAT(tags, ElementsAre(1000u, 1001u));
  auto want = plain_grads(dev(), 1);
  for (auto& g : want)
    for (float& v : g) v += 0.5f;
  EXPECT_EQ(grads_of(t), want);
  r.finish();  // nothing pending: a no-op
  EXPECT_EQ(tags.size(), 2u);
}

TEST_P(DDPReducerTest, NoSyncAccumulatesAndTheNextSyncReducesTheSum) {
  Tiny t(dev());
  int calls = 0;
  DDPReducer r({t.params.begin(), t.params.begin() + 3}, [&](float* d, size_t n, uint32_t) {
    ++calls;
    for (size_t k = 0; k < n; ++k) d[k] *= 2;  // the other rank has the same gradients
  }, 2, {});
  for (bool sync : {false, false, true}) {
    Tensor loss = t.loss();
    r.prepare_for_backward(loss, sync);
    loss.backward();
  }
  r.finish();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(grads_of(t), plain_grads(dev(), 3));
}

TEST_P(DDPReducerTest, UnusedParameterIsAnErrorNamingItAfterTheOthersAreReduced) {
  Tiny t(dev());
  int calls = 0;
  DDPReducer r(t.params, [&](float*, size_t, uint32_t) { ++calls; }, 2, {});
  Tensor loss = t.loss();
  r.prepare_for_backward(loss, true);
  loss.backward();
  EXPECT_THAT(error_of<InvalidArgument>([&] { r.finish(); }),
              HasSubstr("parameters that got no gradient in this backward: 'unused' (pass find_unused_parameters"));
  EXPECT_EQ(calls, 1);  // the bucket was still reduced: the other ranks are not left waiting
}

TEST_P(DDPReducerTest, FindUnusedReducesZerosAndKeepsNoGradWhereNoRankUsedIt) {
  for (float other : {0.0f, 1.0f}) {  // other rank: did not use it either / used it with gradient 1
    Tiny t(dev());
    DDPReducer r(t.params, [&](float* d, size_t n, uint32_t) {
      // Layout: gradients in bucket order (unused, w2, b1, w1), then one used-flag each.
      for (size_t k = 0; k < 2; ++k) d[k] += other;
      for (size_t k = 2; k < n - 4; ++k) d[k] *= 2;
      d[n - 4] += other;
      for (size_t k = n - 3; k < n; ++k) d[k] += 1;
    }, 2, {.find_unused_parameters = true});
    Tensor loss = t.loss();
    r.prepare_for_backward(loss, true);
    loss.backward();
    r.finish();
    EXPECT_EQ(grads_of(t), plain_grads(dev(), 1));
    if (other == 0) {
      EXPECT_FALSE(t.unused.grad().defined());
    } else {
      EXPECT_EQ(t.unused.grad().to_vector(), (std::vector<float>{0.5f, 0.5f}));
    }
  }
}

TEST_P(DDPReducerTest, CommunicationErrorIsRethrownByFinish) {
  Tiny t(dev());
  DDPReducer r({t.params.begin(), t.params.begin() + 3},
               [](float*, size_t, uint32_t) { throw DistError("allreduce: peer rank 1 closed the connection"); }, 2,
               {});
  Tensor loss = t.loss();
  r.prepare_for_backward(loss, true);
  loss.backward();
  EXPECT_THAT(error_of<DistError>([&] { r.finish(); }), HasSubstr("peer rank 1"));
}

INSTANTIATE_TEST_SUITE_P(LazyAndEager, DDPReducerTest, ::testing::Values(true, false),
                         [](const auto& i) { return i.param ? "LazyHpu" : "EagerCpu"; });

// ---------------------------------------------------------------------------------------------
// Over processes.

constexpr const char* kTestVar = "HG_DDP_TEST";  // the test a re-executed process works for
constexpr const char* kRoleVar = "HG_DDP_ROLE";  // its part, for processes the tests start

std::string this_test() {
  const auto* i = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(i->test_suite_name()) + "." + i->name();
}
bool working_for_this_test() {
  const char* t = std::getenv(kTestVar);
  return t && this_test() == t;
}
std::string role() {
  const char* r = std::getenv(kRoleVar);
  return r ? r : "";
}

// Sets (a value) or unsets (nullopt) environment variables for a scope.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      v ? ::setenv(k.c_str(), v->c_str(), 1) : ::unsetenv(k.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) v ? ::setenv(k.c_str(), v->c_str(), 1) : ::unsetenv(k.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::map<std::string, std::optional<std::string>> clean_dist_env() {
  return {{"MASTER_ADDR", std::nullopt}, {"MASTER_PORT", std::nullopt}, {"NODE_RANK", std::nullopt},
          {"GROUP_RANK", std::nullopt},  {"LOCAL_RANK", std::nullopt},  {"WORLD_SIZE", std::nullopt}};
}

class LazyMode {
 public:
  LazyMode() { graphs::enable_lazy_mode(true); }
  ~LazyMode() { graphs::enable_lazy_mode(false); }
};

constexpr int64_t kGlobalBatch = 16, kSteps = 4;

// Step `step`'s rows [first, first + n) of a fixed data set: 8 features, 4 classes.
std::pair<Tensor, Tensor> rows(int64_t step, int64_t first, int64_t n, Device d) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t r = step * kGlobalBatch + first; r < step * kGlobalBatch + first + n; ++r) {
    for (int64_t j = 0; j < 8; ++j) x.push_back(std::sin(0.37f * static_cast<float>(r) + 0.11f * static_cast<float>(j * j)));
    y.push_back((r * 7 + 3) % 4);
  }
  return {Tensor::from_vector(x, {n, 8}, d), Tensor::from_indices(y, {n}, d)};
}

// Trains an MLP for kSteps on hpu:0 (lazy) and returns every parameter, flattened. Without a
// strategy: one process, the global batch. With one: this rank's shard, in `accum` micro-batches
// (no_sync on all but the last).
std::vector<float> train(const std::string& optimizer, Strategy* s, int accum = 1, int shard_of_two = -1) {
  const Device d = Device::hpu(0);
  auto net = models::zoo::mlp({8, 16, 4}, 5);
  net->to(d);
  std::shared_ptr<Optimizer> opt;
  if (optimizer == "sgd") opt = std::make_shared<SGD>(net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
  else opt = std::make_shared<AdamW>(net->named_parameters(), AdamOptions{.lr = 0.01, .weight_decay = 0.01});
  // shard_of_two >= 0 without a strategy: that half of the batch only (what a rank sees).
  const int64_t world = s ? s->world_size() : shard_of_two >= 0 ? 2 : 1,
                rank = s ? s->global_rank() : std::max(shard_of_two, 0);
  const int64_t per_rank = kGlobalBatch / world, micro = per_rank / accum;
  if (s) s->setup_module(*net);
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int m = 0; m < accum; ++m) {
      auto [x, y] = rows(step, rank * per_rank + m * micro, micro, d);
      Tensor loss = ops::cross_entropy(net->forward(x), y);
      if (accum > 1) loss = ops::scale(loss, 1.0 / accum);
      if (s) s->backward(loss, m == accum - 1);
      else loss.backward();
    }
    if (s) s->finish_gradient_sync();
    opt->step();
    opt->zero_grad();
    graphs::mark_step(d);
  }
  std::vector<float> out;
  for (auto& [name, p] : net->named_parameters())
    for (float v : p->to_vector()) out.push_back(v);
  return out;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
  return worst;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_LE(max_diff(got, want), 1e-5f) << what;
}

void train_and_compare(Strategy& s, const std::vector<std::pair<std::string, int>>& configs) {
  for (const auto& [optimizer, accum] : configs) {
    const std::vector<float> want = train(optimizer, nullptr);
    // The comparison can tell: this rank's half alone trains to other weights.
    EXPECT_GT(max_diff(train(optimizer, nullptr, 1, s.global_rank()), want), 1e-3f) << optimizer;
    expect_close(train(optimizer, &s, accum), want,
                 optimizer + ", accumulate " + std::to_string(accum) + ", rank " + std::to_string(s.global_rank()));
  }
}

TEST(DDPStrategyTest, BadEnvironmentIsAClearError) {
  const StrategyContext two{.device = Device::hpu(0), .devices = 2, .timeout = 5s};
  auto error_with = [&](std::map<std::string, std::optional<std::string>> vars, StrategyContext ctx) {
    auto all = clean_dist_env();
    for (auto& [k, v] : vars) all[k] = v;
    ScopedEnv env(all);
    DDPStrategy s;
    return error_of<InvalidArgument>([&] { s.setup_environment(ctx); });
  };
  EXPECT_THAT(error_with({{"LOCAL_RANK", "3"}}, two), HasSubstr("LOCAL_RANK=3 is not below devices (2)"));
  EXPECT_THAT(error_with({{"LOCAL_RANK", "1"}, {"WORLD_SIZE", "3"}}, two),
              HasSubstr("WORLD_SIZE=3 but devices * num_nodes = 2"));
  EXPECT_THAT(error_with({{"MASTER_PORT", "http"}}, two), HasSubstr("MASTER_PORT"));
  StrategyContext nodes{.device = Device::hpu(0), .devices = 1, .num_nodes = 2, .timeout = 5s};
  EXPECT_THAT(error_with({}, nodes), HasSubstr("MASTER_PORT is not set"));
  EXPECT_THAT(error_with({{"NODE_RANK", "2"}, {"MASTER_PORT", "29500"}}, nodes),
              HasSubstr("NODE_RANK=2 is not below num_nodes (2)"));
}

TEST(DDPStrategyTest, MasterPortInUseIsAClearError) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  auto vars = clean_dist_env();
  vars["MASTER_ADDR"] = "127.0.0.1";
  vars["MASTER_PORT"] = port;
  vars["NODE_RANK"] = "0";
  ScopedEnv env(vars);
  DDPStrategy s;
  const std::string e = error_of<DistError>(
      [&] { s.setup_environment({.device = Device::hpu(0), .devices = 1, .num_nodes = 2, .timeout = 5s}); });
  ::close(fd);
  EXPECT_THAT(e, HasSubstr("hgraph DDP rank 0: joining the process group of 2 at 127.0.0.1:" + port));
  EXPECT_THAT(e, HasSubstr("in use"));
}

// One process (world 1): the reducer still splits the lazy step at each completed bucket; from
// the second step on every segment and the update come from the graph cache.
TEST(DDPStrategyTest, LazyStepIsOneGraphPerBucketPlusTheUpdateAllCached) {
  ScopedEnv env(clean_dist_env());
  LazyMode lazy;
  // 2.bias + 2.weight (272 bytes) fill the first bucket, 0.bias + 0.weight the second.
  DDPStrategy s(DDPOptions{.bucket_cap_mb = 200.0 / kMB, .first_bucket_mb = 200.0 / kMB});
  s.setup_environment({.device = Device::hpu(0)});
  EXPECT_EQ(s.world_size(), 1);
  const Device d = Device::hpu(0);
  auto net = models::zoo::mlp({8, 16, 4}, 5);
  net->to(d);
  SGD opt(net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
  s.setup_module(*net);
  graphs::LazyStats before{};
  for (int64_t step = 0; step < 4; ++step) {
    if (step == 2) before = graphs::lazy_stats();
    auto [x, y] = rows(step, 0, 8, d);
    s.backward(ops::cross_entropy(net->forward(x), y), true);
    s.finish_gradient_sync();
    opt.step();
    opt.zero_grad();
    graphs::mark_step(d);
  }
  const graphs::LazyStats after = graphs::lazy_stats();
  EXPECT_EQ(after.steps - before.steps, 2u * 3u);  // 2 backward segments + the update, per step
  EXPECT_EQ(after.cache_misses - before.cache_misses, 0u);
  s.teardown();
}

// Rank 0 is this process; the launcher re-executes the binary for rank 1, which runs this
// test's body with LOCAL_RANK=1. Rank 1's failures make its gtest run exit 1, which rank 0's
// teardown turns into a failed run ("hgraph DDP rank 0: local rank 1 ... exited with code 1").
TEST(DDPMultiProcess, TwoRanksMatchOneProcessWithTheGlobalBatch) {
  const bool launched = std::getenv("LOCAL_RANK") != nullptr;
  if (launched && !working_for_this_test()) GTEST_SKIP() << "a launched child of another test";
  std::optional<ScopedEnv> env;
  if (!launched) {
    auto vars = clean_dist_env();
    vars[kTestVar] = this_test();
    vars["GTEST_FILTER"] = this_test();
    env.emplace(vars);
  }
  LazyMode lazy;
  DDPStrategy s;
  s.setup_environment({.device = Device::hpu(0), .devices = 2, .timeout = 120s});
  ASSERT_EQ(s.world_size(), 2);
  EXPECT_EQ(s.global_rank(), launched ? 1 : 0);
  EXPECT_EQ(s.reduce(s.global_rank() + 1.0, ReduceOp::Sum), 3.0);
  train_and_compare(s, {{"sgd", 1}, {"sgd", 2}, {"adamw", 1}, {"adamw", 2}});
  s.teardown();  // rank 0: waits for rank 1
}

// Through the Trainer: devices=2, strategy "hpu_ddp", 2 examples per rank and 2 accumulated
// micro-batches, clipping by norm, against one process with batches of 8. With the loaders
// unshuffled, rank r's DistributedSampler takes examples r, r+2, ...: the 8 examples of the two
// ranks' 2 x 2 micro-batches are the one process's batch.
class Blobs : public LightningModule {
 public:
  models::Module& module() override { return *net; }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = ops::cross_entropy(net->forward(b[0]), b[1]);
    log("train_loss", loss, {.sync_dist = true});
    return loss;
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {{.optimizer = std::make_shared<SGD>(net->named_parameters(), SGDOptions{.lr = 0.2, .momentum = 0.9})}};
  }
  std::unique_ptr<models::Sequential> net = models::zoo::mlp({8, 16, 3}, 2);
};

std::vector<float> fit_blobs(int devices, int64_t batch_size, int accumulate, const std::filesystem::path& dir) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < 32; ++i) {
    y.push_back(i % 3);
    for (int64_t j = 0; j < 8; ++j) x.push_back((j % 3 == i % 3 ? 1.0f : 0.0f) + 0.3f * std::sin(1.7f * static_cast<float>(i * 8 + j)));
  }
  auto data = std::make_shared<TensorDataset>(
      std::vector<Tensor>{Tensor::from_vector(x, {32, 8}), Tensor::from_indices(y, {32})});
  TrainerOptions o;
  o.accelerator = "hpu";
  o.devices = devices;
  o.strategy = devices > 1 ? "hpu_ddp" : "auto";
  o.max_epochs = 2;
  o.accumulate_grad_batches = accumulate;
  o.gradient_clip_val = 1.0;
  o.logger = std::vector<std::shared_ptr<Logger>>{};
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.default_root_dir = dir;
  o.dist_timeout = 120s;
  std::ostringstream sink;
  o.out = &sink;
  Blobs m;
  {
    Trainer t(o);
    t.fit(m, DataLoader(data, {.batch_size = batch_size}));
    EXPECT_EQ(t.global_step(), 8);
  }  // rank 0: the Trainer's teardown waits for rank 1
  std::vector<float> out;
  for (auto& [name, p] : m.net->named_parameters())
    for (float v : p->to_vector()) out.push_back(v);
  return out;
}

TEST(DDPMultiProcess, TrainerWithTwoDevicesMatchesOneProcess) {
  const bool launched = std::getenv("LOCAL_RANK") != nullptr;
  if (launched && !working_for_this_test()) GTEST_SKIP() << "a launched child of another test";
  std::optional<ScopedEnv> env;
  if (!launched) {
    auto vars = clean_dist_env();
    vars[kTestVar] = this_test();
    vars["GTEST_FILTER"] = this_test();
    env.emplace(vars);
  }
  const auto dir = test::temp_dir("DDPTrainer");
  const std::vector<float> want = fit_blobs(1, 8, 1, dir / "one");
  expect_close(fit_blobs(2, 2, 2, dir / "ddp"), want, "Trainer devices=2 vs 1");
  std::filesystem::remove_all(dir);
}

// A process the test starts: argv[0] an absolute path, variables set or removed, stdout and
// stderr to `log`. Killed (with what it started: PR_SET_PDEATHSIG) if still running at the end.
class Worker {
 public:
  Worker(const std::vector<std::string>& argv, const std::map<std::string, std::optional<std::string>>& vars,
         std::filesystem::path log)
      : log_(std::move(log)) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : vars) v ? void(env[k] = *v) : void(env.erase(k));
    std::vector<std::string> envs;
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : envs) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr), e.push_back(nullptr);
    const std::string log_path = log_.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
  }
  ~Worker() {
    if (pid_ > 0 && ::kill(pid_, SIGKILL) == 0) ::waitpid(pid_, nullptr, 0);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // The wait status, or nullopt when it ran past `limit` (it is killed then).
  std::optional<int> wait(std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return st;
      }
      if (std::chrono::steady_clock::now() > end) return std::nullopt;
      std::this_thread::sleep_for(20ms);
    }
  }
  std::string output() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
};

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The worker side of KilledRankMakesTheOtherExitWithAClearMessage: trains until rank 1 kills
// itself at step 3; rank 0 must not get past it.
[[noreturn]] void train_until_rank_one_dies(int devices, int num_nodes) {
  LazyMode lazy;
  DDPStrategy s;
  s.setup_environment({.device = Device::hpu(0), .devices = devices, .num_nodes = num_nodes, .timeout = 300s});
  const Device d = Device::hpu(0);
  auto net = models::zoo::mlp({8, 16, 4}, 5);
  net->to(d);
  SGD opt(net->named_parameters(), SGDOptions{.lr = 0.1});
  s.setup_module(*net);
  for (int64_t step = 0; step < 1000; ++step) {
    if (step == 3 && s.global_rank() == 1) ::raise(SIGKILL);
    auto [x, y] = rows(step % 8, s.global_rank() * 8, 8, d);
    s.backward(ops::cross_entropy(net->forward(x), y), true);
    s.finish_gradient_sync();
    opt.step();
    opt.zero_grad();
    graphs::mark_step(d);
  }
  std::fprintf(stderr, "rank %d trained past its peer's death\n", s.global_rank());
  std::_Exit(0);
}

TEST(DDPMultiProcess, KilledRankMakesTheOtherExitWithAClearMessage) {
  if (working_for_this_test()) train_until_rank_one_dies(role() == "launched" ? 2 : 1, role() == "launched" ? 1 : 2);
  if (std::getenv("LOCAL_RANK")) GTEST_SKIP() << "a launched child of another test";
  const auto dir = test::temp_dir("DDPKill");
  const std::vector<std::string> argv{self_exe(), "--gtest_filter=" + this_test()};
  auto vars = clean_dist_env();
  vars[kTestVar] = this_test();
  // 1. Rank 1 is rank 0's launched child: rank 0's watchdog (or its next all-reduce) notices.
  {
    vars[kRoleVar] = "launched";
    Worker rank0(argv, vars, dir / "launched.log");
    const auto st = rank0.wait(120s);  // the group's timeout is 300 s: this is not it
    ASSERT_TRUE(st.has_value()) << "rank 0 still running 120 s after rank 1 died:\n" << rank0.output();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << rank0.output();
    EXPECT_THAT(rank0.output(), HasSubstr("hgraph DDP rank 0: "));
    EXPECT_THAT(rank0.output(), ::testing::ContainsRegex("signal 9|peer rank 1"));
  }
  // 2. Two independent processes (two nodes of one device): the survivor's all-reduce fails.
  {
    vars[kRoleVar] = "nodes";
    vars["MASTER_ADDR"] = "127.0.0.1";
    vars["MASTER_PORT"] = std::to_string(free_port());
    vars["NODE_RANK"] = "0";
    Worker rank0(argv, vars, dir / "node0.log");
    vars["NODE_RANK"] = "1";
    Worker rank1(argv, vars, dir / "node1.log");
    const auto st = rank0.wait(120s);
    ASSERT_TRUE(st.has_value()) << "rank 0 still running 120 s after rank 1 died:\n" << rank0.output();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << rank0.output();
    EXPECT_THAT(rank0.output(), HasSubstr("hgraph DDP rank 0: "));
    EXPECT_THAT(rank0.output(), HasSubstr("failed"));
    const auto st1 = rank1.wait(10s);
    ASSERT_TRUE(st1.has_value());
    EXPECT_TRUE(WIFSIGNALED(*st1) && WTERMSIG(*st1) == SIGKILL) << rank1.output();
  }
  std::filesystem::remove_all(dir);
}

// Two namespaces joined by a veth pair, 10.213.<pid % 250>.1 and .2; removed at the end.
class VethPair {
 public:
  VethPair() {
    const std::string id = std::to_string(::getpid());
    ns_ = {"hgddp" + id + "a", "hgddp" + id + "b"};
    const std::string va = "hgv" + id + "a", vb = "hgv" + id + "b", net = "10.213." + std::to_string(::getpid() % 250);
    addr_ = {net + ".1", net + ".2"};
    const std::vector<std::string> cmds{
        "ip netns add " + ns_[0], "ip netns add " + ns_[1],
        "ip link add " + va + " type veth peer name " + vb,
        "ip link set " + va + " netns " + ns_[0], "ip link set " + vb + " netns " + ns_[1],
        "ip -n " + ns_[0] + " addr add " + addr_[0] + "/24 dev " + va,
        "ip -n " + ns_[1] + " addr add " + addr_[1] + "/24 dev " + vb,
        "ip -n " + ns_[0] + " link set " + va + " up", "ip -n " + ns_[1] + " link set " + vb + " up",
        "ip -n " + ns_[0] + " link set lo up", "ip -n " + ns_[1] + " link set lo up"};
    for (const auto& c : cmds)
      if (std::system((c + " 2>/dev/null").c_str()) != 0) {
        error_ = "'" + c + "' failed";
        return;
      }
  }
  ~VethPair() {
    for (const auto& n : ns_) (void)!std::system(("ip netns del " + n + " 2>/dev/null").c_str());  // takes the veth along
  }
  const std::string& error() const { return error_; }
  const std::string& ns(int i) const { return ns_[i]; }
  const std::string& addr(int i) const { return addr_[i]; }

 private:
  std::vector<std::string> ns_, addr_;
  std::string error_;
};

std::string ip_command() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

TEST(DDPMultiProcess, TwoNodesInNetworkNamespacesOverAVethPair) {
  if (working_for_this_test()) {  // a node: NODE_RANK, MASTER_ADDR, MASTER_PORT from the test
    LazyMode lazy;
    DDPStrategy s;
    s.setup_environment({.device = Device::hpu(0), .devices = 1, .num_nodes = 2, .timeout = 120s});
    EXPECT_EQ(s.world_size(), 2);
    EXPECT_EQ(s.global_rank(), std::atoi(std::getenv("NODE_RANK")));
    train_and_compare(s, {{"sgd", 1}, {"adamw", 2}});
    s.teardown();
    return;
  }
  if (std::getenv("LOCAL_RANK")) GTEST_SKIP() << "a launched child of another test";
  const std::string ip = ip_command();
  if (ip.empty()) GTEST_SKIP() << "no 'ip' command (iproute2): cannot create network namespaces";
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN); running as uid " << ::geteuid();
  VethPair veth;
  if (!veth.error().empty()) GTEST_SKIP() << "cannot create network namespaces here: " << veth.error();
  const auto dir = test::temp_dir("DDPNetns");
  auto vars = clean_dist_env();
  vars[kTestVar] = this_test();
  vars["MASTER_ADDR"] = veth.addr(0);
  vars["MASTER_PORT"] = "29571";  // a fresh namespace: nothing else listens there
  std::vector<std::unique_ptr<Worker>> nodes;
  for (int n = 0; n < 2; ++n) {
    vars["NODE_RANK"] = std::to_string(n);
    nodes.push_back(std::make_unique<Worker>(
        std::vector<std::string>{ip, "netns", "exec", veth.ns(n), self_exe(), "--gtest_filter=" + this_test()}, vars,
        dir / ("node" + std::to_string(n) + ".log")));
  }
  for (int n = 0; n < 2; ++n) {
    const auto st = nodes[n]->wait(240s);
    ASSERT_TRUE(st.has_value()) << "node " << n << " still running after 240 s:\n" << nodes[n]->output();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "node " << n << ":\n" << nodes[n]->output();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hg::training
