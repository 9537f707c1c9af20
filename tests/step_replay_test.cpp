// Replayed training steps (graphs/step_replay.h): bitwise the same parameters as tracing every
// step, the fallbacks to tracing, and the reasons a step is never replayed.
#include <gtest/gtest.h>

#include <memory>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/ops.h"
#include "graphs/lazy.h"
#include "graphs/step_replay.h"
#include "models/module.h"
#include "tests/golden.h"
#include "tests/hpu_test_util.h"
#include "training/adam.h"
#include "training/sgd.h"

namespace hg {
namespace {

using test::kHpu;

std::unique_ptr<models::Sequential> small_net(bool dropout) {
  auto net = std::make_unique<models::Sequential>();
  net->add(std::make_shared<models::Linear>(8, 16, 1));
  net->add(std::make_shared<models::ReLU>());
  if (dropout) net->add(std::make_shared<models::Dropout>(0.25));
  net->add(std::make_shared<models::Linear>(16, 4, 2));
  net->to(kHpu);
  net->train();
  return net;
}

// Batch k: 6 rows of a ramp (rows = 5 for k in `short_batches`), labels k, k+1, ...
std::pair<Tensor, Tensor> batch(int k, int64_t rows = 6) {
  std::vector<int64_t> y;
  for (int64_t i = 0; i < rows; ++i) y.push_back((k + i) % 4);
  return {test::ramp({rows, 8}, 0.05f * static_cast<float>(k % 5 + 1)), Tensor::from_indices(y, {rows}, kHpu)};
}

struct Trainee {
  std::unique_ptr<models::Sequential> net;
  std::unique_ptr<training::SGD> sgd;
  std::vector<Tensor> losses;
  int body_calls = 0;

  explicit Trainee(bool dropout = false) : net(small_net(dropout)) {
    sgd = std::make_unique<training::SGD>(net->named_parameters(), training::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    ++body_calls;
    Tensor loss = ops::cross_entropy(net->forward(in[0]), in[1]);
    loss.backward();
    sgd->step();
    sgd->zero_grad();
    return {loss};
  }
  std::vector<std::vector<float>> params() const {
    std::vector<std::vector<float>> out;
    for (const auto& [name, p] : net->named_parameters()) out.push_back(p->to_vector());
    return out;
  }
};

// Trains `replayed` through a StepReplay and `plain` by tracing every step (mark_step), on the
// same batches; `before(k)` runs before step k on both (a schedule, a rebinding).
void train_both(Trainee& replayed, Trainee& plain, graphs::StepReplay& sr, int steps,
                const std::function<int64_t(int)>& rows = [](int) { return 6; },
                const std::function<void(int, Trainee&)>& before = [](int, Trainee&) {}) {
  for (int k = 0; k < steps; ++k) {
    const auto [x, y] = batch(k, rows(k));
    before(k, replayed);
    before(k, plain);
    auto out = sr.run({x, y}, [&](const std::vector<Tensor>& in) { return replayed.step(in); },
                      replayed.sgd->replay_guard());
    ASSERT_EQ(out.size(), 1u);
    replayed.losses.push_back(out[0]);
    plain.losses.push_back(plain.step({x, y})[0]);
    graphs::mark_step(kHpu);
  }
}

void expect_same(const Trainee& a, const Trainee& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t k = 0; k < a.losses.size(); ++k) EXPECT_EQ(a.losses[k].to_vector(), b.losses[k].to_vector()) << "loss " << k;
  const auto pa = a.params(), pb = b.params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i], pb[i]) << "parameter " << i;
  for (const auto& v : pa)
    for (float f : v) ASSERT_TRUE(std::isfinite(f));
}

TEST(StepReplay, ReplaysAfterTwoEqualStepsBitwiseAsTracing) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Trainee replayed, plain;
  graphs::StepReplay sr(kHpu);
  train_both(replayed, plain, sr, 12);
  // step 1 creates the momentum buffers (a different graph), steps 2 and 3 are equal
  EXPECT_EQ(sr.stats().traced, 3u);
  EXPECT_EQ(sr.stats().replayed, 9u);
  EXPECT_EQ(replayed.body_calls, 3);
  EXPECT_TRUE(sr.ready());
  EXPECT_EQ(sr.stats().last_fallback, "");
  expect_same(replayed, plain);
  EXPECT_LT(replayed.losses.back().item(), replayed.losses.front().item());
}

TEST(StepReplay, AResultReturnedTwiceGetsItsValueBothTimes) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Trainee replayed, plain;
  graphs::StepReplay sr(kHpu);
  for (int k = 0; k < 6; ++k) {
    const auto [x, y] = batch(k);
    auto out = sr.run({x, y}, [&](const std::vector<Tensor>& in) {
      auto r = replayed.step(in);
      return std::vector<Tensor>{r[0], ops::relu(in[0]), r[0]};  // the loss twice, a value between
    });
    ASSERT_EQ(out.size(), 3u);
    const Tensor want = plain.step({x, y})[0];
    graphs::mark_step(kHpu);
    EXPECT_EQ(out[0].to_vector(), want.to_vector()) << "step " << k;
    EXPECT_EQ(out[2].to_vector(), want.to_vector()) << "step " << k;
    EXPECT_EQ(out[1].to_vector(), ops::relu(x).to_vector()) << "step " << k;
  }
  EXPECT_EQ(sr.stats().replayed, 3u);
}

TEST(StepReplay, DropoutSeedsAreRedrawnAsTracingDraws) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Trainee replayed(true), plain(true);
  graphs::StepReplay sr(kHpu);
  // both draw seeds from hpu:0's generator in turn: replayed step k draws before plain step k
  default_generator(kHpu).manual_seed(5);
  train_both(replayed, plain, sr, 8);
  EXPECT_EQ(sr.stats().replayed, 5u);
  // the masks differ between steps (the seeds are redrawn), so the losses do too
  Trainee again(true);
  graphs::StepReplay sr2(kHpu);
  default_generator(kHpu).manual_seed(5);
  for (int k = 0; k < 8; ++k) {
    const auto [x, y] = batch(0);
    again.losses.push_back(sr2.run({x, y}, [&](const std::vector<Tensor>& in) { return again.step(in); },
                                   again.sgd->replay_guard())[0]);
  }
  EXPECT_NE(again.losses[6].to_vector(), again.losses[7].to_vector());
}

TEST(StepReplay, GuardShapeAndRebindingFallBackToTracing) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Trainee replayed, plain;
  graphs::StepReplay sr(kHpu);
  auto rows = [](int k) -> int64_t { return k == 7 ? 5 : 6; };  // a short batch at step 7
  auto before = [](int k, Trainee& r) {
    if (k == 5) r.sgd->param_groups()[0].set_lr(0.05);  // a scheduler: the guard changes
    if (k == 10) {  // the model's first weight rebound to a new tensor (a loaded checkpoint does this)
      Tensor* w = r.net->named_parameters()[0].second;
      Tensor fresh = Tensor::full(w->shape(), 0.01f, kHpu);
      fresh.set_requires_grad(true);
      *w = fresh;
    }
  };
  train_both(replayed, plain, sr, 16, rows, before);
  expect_same(replayed, plain);
  // traced: 1-3, 6-7 (new lr), 8 (short), 9-10 (full again), 11-12 (rebound); replayed: the rest
  EXPECT_EQ(sr.stats().traced, 10u);
  EXPECT_EQ(sr.stats().replayed, 6u);
  EXPECT_EQ(replayed.net->named_parameters()[0].second->to_vector(), plain.net->named_parameters()[0].second->to_vector());
}

// Runs `body` through a StepReplay 6 times and returns the reason it never replayed.
std::string never_replays(const std::function<std::vector<Tensor>(Trainee&, const std::vector<Tensor>&)>& body,
                          Trainee& r) {
  graphs::StepReplay sr(kHpu);
  for (int k = 0; k < 6; ++k) {
    const auto [x, y] = batch(k);
    sr.run({x, y}, [&](const std::vector<Tensor>& in) { return body(r, in); });
  }
  EXPECT_EQ(sr.stats().replayed, 0u);
  EXPECT_EQ(sr.stats().traced, 6u);
  EXPECT_FALSE(sr.ready());
  return sr.stats().last_fallback;
}

TEST(StepReplay, StepsThatCannotReplaySayWhy) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  {
    Trainee r;  // a scalar made on the host at every step
    const std::string why = never_replays(
        [](Trainee& r, const std::vector<Tensor>& in) {
          auto out = r.step(in);
          return std::vector<Tensor>{ops::mul(out[0], Tensor::full({}, 2.0f, kHpu))};
        },
        r);
    EXPECT_NE(why.find("new tensor at every step"), std::string::npos) << why;
  }
  {
    Trainee r;  // a host read inside the body runs the step there
    const std::string why = never_replays(
        [](Trainee& r, const std::vector<Tensor>& in) {
          auto out = r.step(in);
          out[0].item();
          return out;
        },
        r);
    EXPECT_NE(why.find("recorded nothing"), std::string::npos) << why;
  }
  {
    Trainee r;  // a value kept outside that the next step does not read
    Tensor kept;
    const std::string why = never_replays(
        [&kept](Trainee& r, const std::vector<Tensor>& in) {
          kept = ops::relu(in[0]);
          return r.step(in);
        },
        r);
    EXPECT_NE(why.find("still held"), std::string::npos) << why;
  }
  {
    Trainee r;  // a result that is not computed by the step
    const std::string why = never_replays(
        [](Trainee& r, const std::vector<Tensor>& in) {
          auto out = r.step(in);
          out.push_back(in[1]);
          return out;
        },
        r);
    EXPECT_NE(why.find("not computed by the step"), std::string::npos) << why;
  }
}

TEST(StepReplay, AdamWReplaysWithItsStepCountsAdvancedOnTheHost) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Trainee replayed, plain;
  auto adamw = [](Trainee& r) {
    return std::make_unique<training::AdamW>(r.net->named_parameters(),
                                             training::AdamOptions{.lr = 1e-2, .weight_decay = 0.1});
  };
  auto ar = adamw(replayed), ap = adamw(plain);
  auto body = [](Trainee& r, training::Adam& opt, const std::vector<Tensor>& in) {
    ++r.body_calls;
    Tensor loss = ops::cross_entropy(r.net->forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return std::vector<Tensor>{loss};
  };
  graphs::StepReplay sr(kHpu);
  for (int k = 0; k < 10; ++k) {
    const auto [x, y] = batch(k);
    replayed.losses.push_back(sr.run({x, y}, [&](const std::vector<Tensor>& in) { return body(replayed, *ar, in); },
                                     ar->replay_guard(), [&] { ar->on_replayed_step(); })[0]);
    plain.losses.push_back(body(plain, *ap, {x, y})[0]);
    graphs::mark_step(kHpu);
  }
  // the first step reads zero moments made on the host, the second the first's: one graph
  EXPECT_EQ(sr.stats().traced, 2u);
  EXPECT_EQ(sr.stats().replayed, 8u);
  EXPECT_EQ(replayed.body_calls, 2);
  expect_same(replayed, plain);
  EXPECT_EQ(ar->state_dict().json["state"], ap->state_dict().json["state"]);  // step counts: 10
  EXPECT_EQ(ar->state_dict().json["state"].begin()->at("step"), 10);
}

TEST(StepReplay, EagerModeRunsTheBodyAndCaptureRefuses) {
  Trainee r;
  graphs::StepReplay sr(kHpu);
  for (int k = 0; k < 3; ++k) {
    const auto [x, y] = batch(k);
    sr.run({x, y}, [&](const std::vector<Tensor>& in) { return r.step(in); });
  }
  EXPECT_EQ(sr.stats().eager, 3u);
  EXPECT_EQ(r.body_calls, 3);
  EXPECT_FALSE(sr.ready());
  EXPECT_THROW(graphs::StepReplay(Device::cpu()), DeviceError);
}

}  // namespace
}  // namespace hg
