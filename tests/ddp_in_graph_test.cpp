// The DDP reducer with in_graph reduction (training/ddp_reducer.h): the same means as the
// host-side reducer, the step one lazy graph that nothing on the host waits for, errors from
// the communication thread, and steps replayed by graphs::StepReplay bitwise as tracing every
// step with the host-side reducer (bucket 0 sent while backward still runs: ddp_test.cpp). A
// stand-in all-reduce plays the other rank (two real processes: ddp_multiprocess_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"
#include "graphs/lazy.h"
#include "graphs/step_replay.h"
#include "models/zoo.h"
#include "tests/ddp_test_util.h"
#include "tests/errors.h"
#include "training/ddp_reducer.h"
#include "training/process_group.h"
#include "training/sgd.h"

namespace hg::training {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using hg::test::error_of;
using namespace ddp_test;

// The fixture's lazy / eager hpu / eager cpu, and the device has run everything queued.
class InGraphReducer : public DDPReducerTest {
 protected:
  void run_queued() const {
    if (lazy()) graphs::mark_step(dev());
    if (dev().is_hpu()) device_backend(dev()).queue()->synchronize();
  }
};

std::vector<std::pair<std::string, Tensor*>> used(Tiny& t) { return {t.params.begin(), t.params.begin() + 3}; }

TEST_P(InGraphReducer, MeanOverRanksInBucketOrderWithoutWaitingOnTheHost) {
  Tiny t(dev());
  std::mutex mu;
  std::vector<uint32_t> tags;
  auto allreduce = [&](float* d, size_t n, uint32_t tag) {  // the other rank: ours + 1
    std::lock_guard lk(mu);
    tags.push_back(tag);
    for (size_t k = 0; k < n; ++k) d[k] = 2 * d[k] + 1;
  };
  // The first bucket (12 bytes) is w2's alone; b1 and w1 share the second.
  DDPReducer r(used(t), allreduce, 2, {.bucket_cap_mb = 1, .first_bucket_mb = 12.0 / kMB, .in_graph = true});
  ASSERT_EQ(r.bucket_indices(), (std::vector<std::vector<size_t>>{{2}, {1, 0}}));
  const uint64_t steps = graphs::lazy_stats().steps;
  Tensor loss = t.loss();
  r.prepare_for_backward(loss, true);
  loss.backward();
  r.finish();
  if (lazy()) {
    std::lock_guard lk(mu);
    EXPECT_TRUE(tags.empty()) << "lazy: nothing runs before the step's graph";
    EXPECT_EQ(graphs::lazy_stats().steps, steps) << "the reducer split the step";
  }
  run_queued();
  if (lazy()) {
    EXPECT_EQ(graphs::lazy_stats().steps - steps, 1u) << "forward, backward and the reduction: one graph";
  }
  auto want = plain_grads(dev(), 1);
  for (auto& g : want)
    for (float& v : g) v += 0.5f;
  EXPECT_EQ(grads_of(t), want);
  std::lock_guard lk(mu);
  EXPECT_THAT(tags, ElementsAre(1000u, 1001u));
}

TEST_P(InGraphReducer, CommunicationErrorFailsTheStepAndEveryLaterCall) {
  Tiny t(dev());
  DDPReducer r(used(t), [](float*, size_t, uint32_t) { throw DistError("allreduce: peer rank 1 closed the connection"); },
               2, {.in_graph = true});
  Tensor loss = t.loss();
  r.prepare_for_backward(loss, true);
  loss.backward();
  // On the cpu the bucket left during backward: finish may already know the error and throw it.
  bool finished = false;
  try {
    r.finish();
    run_queued();
    finished = true;
  } catch (const DistError& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer rank 1"));
  }
  if (finished) {
    for (const auto& g : grads_of(t))  // the step's means: the device's ops do not throw
      for (float v : g) EXPECT_TRUE(std::isnan(v));
  }
  EXPECT_THAT(error_of<DistError>([&] { r.check_error(); }), HasSubstr("peer rank 1"));
  Tensor again = t.loss();
  EXPECT_THAT(error_of<DistError>([&] { r.prepare_for_backward(again, true); }), HasSubstr("peer rank 1"));
}

TEST_P(InGraphReducer, AParameterWithoutGradientIsAnErrorBeforeAnyBucketIsSent) {
  Tiny t(dev());
  std::atomic<int> calls = 0;
  DDPReducer r(t.params, [&](float*, size_t, uint32_t) { ++calls; }, 2, {.in_graph = true});
  Tensor loss = t.loss();
  r.prepare_for_backward(loss, true);
  loss.backward();
  EXPECT_THAT(error_of<InvalidArgument>([&] { r.finish(); }),
              HasSubstr("parameters that got no gradient in this backward: 'unused'"));
  run_queued();
  EXPECT_EQ(calls.load(), 0);  // one bucket holds all four: it was never complete
  EXPECT_THROW(DDPReducer(t.params, [](float*, size_t, uint32_t) {}, 2, {.find_unused_parameters = true, .in_graph = true}),
               InvalidArgument);
}

// A bucket of more parameters than a graph op takes inputs (BERT's encoder has ~200 in a few
// buckets) is recorded as a chain of pieces; the all-reduce runs once, after the last piece.
TEST_P(InGraphReducer, ABucketOfManyParametersIsReducedOnce) {
  constexpr int kParams = 37;  // three pieces: 16 + 15 + 6
  std::vector<Tensor> w;
  std::vector<std::pair<std::string, Tensor*>> named;
  w.reserve(kParams);
  for (int k = 0; k < kParams; ++k) {
    w.push_back(Tensor::from_vector({0.5f * k, -1.0f}, {2}, dev()));
    w.back().set_requires_grad(true);
  }
  for (int k = 0; k < kParams; ++k) named.emplace_back("w" + std::to_string(k), &w[static_cast<size_t>(k)]);
  std::mutex mu;
  std::vector<size_t> sizes;
  auto allreduce = [&](float* d, size_t n, uint32_t) {  // the other rank: ours + 1
    std::lock_guard lk(mu);
    sizes.push_back(n);
    for (size_t i = 0; i < n; ++i) d[i] = 2 * d[i] + 1;
  };
  DDPReducer r(named, allreduce, 2, {.in_graph = true});
  ASSERT_EQ(r.bucket_indices().size(), 1u);
  Tensor loss;
  for (int k = 0; k < kParams; ++k) {  // d loss / d w_k = [k, k + 1]
    Tensor c = Tensor::from_vector({float(k), float(k + 1)}, {2}, dev());
    Tensor term = ops::sum(ops::mul(w[static_cast<size_t>(k)], c));
    loss = k == 0 ? term : ops::add(loss, term);
  }
  r.prepare_for_backward(loss, true);
  loss.backward();
  r.finish();
  run_queued();
  for (int k = 0; k < kParams; ++k)
    EXPECT_THAT(w[static_cast<size_t>(k)].grad().to_vector(), ElementsAre(k + 0.5f, k + 1.5f)) << "w" << k;
  std::lock_guard lk(mu);
  EXPECT_THAT(sizes, ElementsAre(size_t{2 * kParams}));
}

INSTANTIATE_TEST_SUITE_P(LazyAndEager, InGraphReducer,
                         ::testing::Values(Where::LazyHpu, Where::EagerHpu, Where::EagerCpu), where_name);

// A DDP step (stand-in all-reduce: the other rank has the same gradients) replayed through
// StepReplay with the in-graph reducer gives bitwise the parameters of tracing every step with
// the host-side reducer (which splits each step at its buckets and waits for them).
TEST(InGraphReducerReplay, ReplayedDDPStepsMatchTracedStepsBitwise) {
  LazyMode lazy;
  const Device d = Device::hpu(0);
  auto twice = [](float* g, size_t n, uint32_t) {
    for (size_t k = 0; k < n; ++k) g[k] *= 2;
  };
  struct Run {
    std::unique_ptr<models::Sequential> net = models::zoo::mlp({8, 16, 4}, 5);
    std::unique_ptr<SGD> sgd;
    std::unique_ptr<DDPReducer> reducer;
    Run(bool in_graph, const DDPReducer::AllReduce& ar, bool inline_allreduce = false) {
      net->to(Device::hpu(0));
      sgd = std::make_unique<SGD>(net->named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
      // 2.bias + 2.weight (272 bytes) fill the first bucket, 0.bias + 0.weight the second.
      reducer = std::make_unique<DDPReducer>(net->named_parameters(), ar, 2,
                                             DDPReducerOptions{.bucket_cap_mb = 200.0 / kMB,
                                                               .first_bucket_mb = 200.0 / kMB, .in_graph = in_graph,
                                                               .allreduce_inline = inline_allreduce});
    }
    std::vector<Tensor> step(const std::vector<Tensor>& in) {
      Tensor loss = ops::cross_entropy(net->forward(in[0]), in[1]);
      reducer->prepare_for_backward(loss, true);
      loss.backward();
      reducer->finish();
      sgd->step();
      sgd->zero_grad();
      return {loss};
    }
    std::vector<float> params() const {
      std::vector<float> out;
      for (auto& [name, p] : net->named_parameters())
        for (float v : p->to_vector()) out.push_back(v);
      return out;
    }
  };
  Run replayed(true, twice), plain(false, twice);
  // allreduce_inline (a shared-memory group): the buckets reduced on the device's queue (in
  // graph), or the last one on the host thread: the same bits.
  Run replayed_inline(true, twice, true), plain_inline(false, twice, true);
  ASSERT_EQ(replayed.reducer->bucket_indices().size(), 2u);
  graphs::StepReplay sr(d), sr_inline(d);
  std::vector<Tensor> losses, plain_losses;
  for (int64_t step = 0; step < 10; ++step) {
    auto [x, y] = rows(step % 4, 0, 8, d);
    losses.push_back(sr.run({x, y}, [&](const std::vector<Tensor>& in) { return replayed.step(in); },
                            replayed.sgd->replay_guard(), [&] { replayed.reducer->check_error(); })[0]);
    plain_losses.push_back(plain.step({x, y})[0]);
    graphs::mark_step(d);
    sr_inline.run({x, y}, [&](const std::vector<Tensor>& in) { return replayed_inline.step(in); },
                  replayed_inline.sgd->replay_guard(), [&] { replayed_inline.reducer->check_error(); });
    plain_inline.step({x, y});
    graphs::mark_step(d);
  }
  EXPECT_EQ(sr.stats().last_fallback, "");
  EXPECT_EQ(sr.stats().replayed, 7u);  // step 1 makes the momentum buffers, steps 2 and 3 are equal
  for (size_t k = 0; k < losses.size(); ++k) EXPECT_EQ(losses[k].item(), plain_losses[k].item()) << "loss " << k;
  const std::vector<float> got = replayed.params(), want = plain.params();
  EXPECT_EQ(got, want);
  EXPECT_EQ(max_diff(got, want), 0.0f);  // and finite
  EXPECT_EQ(sr_inline.stats().replayed, 7u) << sr_inline.stats().last_fallback;
  EXPECT_EQ(replayed_inline.params(), want);
  EXPECT_EQ(plain_inline.params(), want);
  EXPECT_LT(losses.back().item(), losses.front().item());
}

}  // namespace
}  // namespace hg::training
