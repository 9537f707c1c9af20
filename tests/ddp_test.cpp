// DDP in one process (training/ddp_reducer.h, training/ddp_strategy.h): bucket layout; the
// reducer with a stand-in all-reduce playing the other ranks (lazy segments, no_sync, unused
// parameters, communication errors); the strategy's environment errors and its lazy step graphs.
// Over real processes: ddp_multiprocess_test.cpp.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"
#include "graphs/lazy.h"
#include "models/zoo.h"
#include "tests/ddp_test_util.h"
#include "tests/errors.h"
#include "tests/wait.h"
#include "training/ddp_reducer.h"
#include "training/ddp_strategy.h"
#include "training/sgd.h"

namespace hg::training {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using hg::test::error_of;
using namespace ddp_test;
using namespace std::chrono_literals;

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
  if (lazy()) {
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

// Overlap: bucket 0 (w2) is all-reduced while backward is still computing w1's gradient. A hook
// on w1 waits (bounded) for bucket 0's all-reduce to have started on the communication thread.
// Also with in_graph reduction when eager (lazily, backward is recorded first, then run as one graph).
TEST_P(DDPReducerTest, FirstBucketIsReducedWhileBackwardStillRuns) {
  for (bool in_graph : {false, true}) {
    if (in_graph && lazy()) continue;
    Tiny t(dev());
    std::promise<void> started;
    DDPReducer r({t.params.begin(), t.params.begin() + 3}, [&](float*, size_t, uint32_t tag) {
      if (tag == 1000) started.set_value();
    }, 2, {.bucket_cap_mb = 1, .first_bucket_mb = 12.0 / kMB, .in_graph = in_graph});
    ASSERT_EQ(r.bucket_indices(), (std::vector<std::vector<size_t>>{{2}, {1, 0}}));
    std::future<void> f = started.get_future();
    bool overlapped = false;
    Tensor loss = t.loss();
    r.prepare_for_backward(loss, true);
    auto h = register_post_accumulate_grad_hook(t.w1, [&](const Tensor&) {
      overlapped = hg::test::ready_within(f, hg::test::kWaitLimit, "bucket 0's all-reduce to start while backward still runs");
    });
    loss.backward();
    r.finish();
    if (dev().is_hpu()) synchronize(dev());
    EXPECT_TRUE(overlapped) << (in_graph ? "in_graph" : "host-side");
  }
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

INSTANTIATE_TEST_SUITE_P(LazyAndEager, DDPReducerTest,
                         ::testing::Values(Where::LazyHpu, Where::EagerHpu, Where::EagerCpu), where_name);

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

// One process (world 1): no reducer, plain backward — the lazy step stays one graph (forward,
// backward, update), from the graph cache after the first steps, and trains as without DDP.
TEST(DDPStrategyTest, WorldOfOneIsPlainBackwardOneCachedGraphPerStep) {
  ScopedEnv env(clean_dist_env());
  LazyMode lazy;
  DDPStrategy s(DDPOptions{.bucket_cap_mb = 200.0 / kMB, .first_bucket_mb = 200.0 / kMB});
  s.setup_environment({.device = Device::hpu(0)});
  EXPECT_EQ(s.world_size(), 1);
  EXPECT_EQ(s.process_group(), nullptr);
  const uint64_t s0 = graphs::lazy_stats().steps;
  const std::vector<float> want = train("sgd", nullptr);
  const uint64_t s1 = graphs::lazy_stats().steps;
  const std::vector<float> got = train("sgd", &s);
  const uint64_t s2 = graphs::lazy_stats().steps;
  EXPECT_EQ(s2 - s1, s1 - s0);  // the graphs plain training runs, no more
  EXPECT_LE(s2 - s1, static_cast<uint64_t>(kSteps) + 1);
  EXPECT_EQ(got, want);
  s.teardown();
}

// With more ranks (a stand-in all-reduce: the other rank has the same gradients) the reducer
// splits the lazy step at each completed bucket; from the second step on every segment and the
// update come from the graph cache.
TEST(DDPStrategyTest, ReducerLazyStepIsOneGraphPerBucketPlusTheUpdateAllCached) {
  LazyMode lazy;
  const Device d = Device::hpu(0);
  auto net = models::zoo::mlp({8, 16, 4}, 5);
  net->to(d);
  SGD opt(net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
  // 2.bias + 2.weight (272 bytes) fill the first bucket, 0.bias + 0.weight the second.
  DDPReducer r(net->named_parameters(), [](float* g, size_t n, uint32_t) { for (size_t k = 0; k < n; ++k) g[k] *= 2; },
               2, {.bucket_cap_mb = 200.0 / kMB, .first_bucket_mb = 200.0 / kMB});
  ASSERT_EQ(r.bucket_indices().size(), 2u);
  graphs::LazyStats before{};
  for (int64_t step = 0; step < 4; ++step) {
    if (step == 2) before = graphs::lazy_stats();
    auto [x, y] = rows(step, 0, 8, d);
    Tensor loss = ops::cross_entropy(net->forward(x), y);
    r.prepare_for_backward(loss, true);
    loss.backward();
    r.finish();
    opt.step();
    opt.zero_grad();
    graphs::mark_step(d);
  }
  const graphs::LazyStats after = graphs::lazy_stats();
  EXPECT_EQ(after.steps - before.steps, 2u * 3u);  // 2 backward segments + the update, per step
  EXPECT_EQ(after.cache_misses - before.cache_misses, 0u);
}

}  // namespace
}  // namespace hg::training
