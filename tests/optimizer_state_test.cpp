// Optimizer state_dict round trips and validation, option checks, parameters that move or
// have no gradient, and the lazy-mode training step: forward, cross_entropy, backward,
// clip_grad_norm, AdamW and a cosine schedule compile once and match eager mode.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "engine/ops.h"
#include "errors.h"
#include "golden.h"
#include "graphs/lazy.h"
#include "models/zoo.h"
#include "training/adam.h"
#include "training/schedulers.h"
#include "training/sgd.h"

namespace hg {
namespace {

using ::testing::HasSubstr;
const Device kHpu = Device::hpu(0);

// Parameters "w" [3, 4] and "b" [4] with deterministic values, and gradients for step k.
struct Params {
  std::deque<Tensor> t;
  training::NamedParams named;
  explicit Params(Device d, float shift = 0) {
    std::vector<float> w(12), b(4);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i) - 0.5f + shift;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.2f - 0.15f * static_cast<float>(i) + shift;
    t.push_back(Tensor::from_vector(w, {3, 4}, d));
    t.push_back(Tensor::from_vector(b, {4}, d));
    for (Tensor& x : t) x.set_requires_grad(true);
    named = {{"w", &t[0]}, {"b", &t[1]}};
  }
  void set_grads(int k) {
    for (auto& [name, p] : named) {
      std::vector<float> g(static_cast<size_t>(p->numel()));
      for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7f * static_cast<float>(i + 1) * static_cast<float>(k + 1));
      p->impl()->grad = Tensor::from_vector(g, p->shape(), p->device()).impl_ptr();
    }
  }
  std::vector<float> values() const {
    std::vector<float> all;
    for (const Tensor& x : t) {
      auto v = x.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

template <class Opt, class Options>
void expect_round_trip_continues(Options options, Device resume_on) {
  Params a(Device::cpu());
  Opt opt_a(a.named, options);
  for (int k = 0; k < 5; ++k) {
    a.set_grads(k);
    opt_a.step();
  }
  training::StateBlob saved = opt_a.state_dict();
  saved.json = nlohmann::json::parse(saved.json.dump());  // as a checkpoint file would hold it
  for (const auto& [key, t] : saved.tensors) EXPECT_EQ(t.device(), Device::cpu()) << key;
  Params b(resume_on);
  for (size_t i = 0; i < b.t.size(); ++i) b.t[i].copy_from(a.t[i]);
  Opt opt_b(b.named, Options{});
  opt_b.load_state_dict(saved);
  EXPECT_EQ(opt_b.param_groups()[0].options, opt_a.param_groups()[0].options);
  for (int k = 5; k < 10; ++k) {
    a.set_grads(k);
    b.set_grads(k);
    opt_a.step();
    opt_b.step();
  }
  EXPECT_EQ(b.values(), a.values()) << opt_a.name() << " resumed on " << resume_on.str();
}

TEST(OptimizerState, RoundTripContinuesIdentically) {
  expect_round_trip_continues<training::SGD>(training::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true},
                                             Device::cpu());
  expect_round_trip_continues<training::Adam>(training::AdamOptions{.lr = 0.01, .amsgrad = true}, Device::cpu());
  expect_round_trip_continues<training::AdamW>(training::AdamOptions{.lr = 0.01, .weight_decay = 0.1}, kHpu);
}

TEST(OptimizerState, LayoutFollowsPyTorch) {
  Params p(Device::cpu());
  training::Adam opt(p.named, {.lr = 0.01, .amsgrad = true});
  p.set_grads(0);
  p.t[1].zero_grad();  // "b" gets no update and no state
  opt.step();
  const auto s = opt.state_dict();
  EXPECT_EQ(s.json["param_groups"][0]["params"], nlohmann::json({"w", "b"}));
  EXPECT_EQ(s.json["param_groups"][0]["lr"], 0.01);
  EXPECT_EQ(s.json["state"]["w"]["step"], 1);
  EXPECT_FALSE(s.json["state"].contains("b"));
  std::vector<std::string> keys;
  for (const auto& [k, t] : s.tensors) keys.push_back(k);
  EXPECT_THAT(keys, ::testing::UnorderedElementsAre("w.exp_avg", "w.exp_avg_sq", "w.max_exp_avg_sq"));
}

TEST(OptimizerState, BadStateThrowsNamingTheKeyAndChangesNothing) {
  Params p(Device::cpu());
  training::SGD opt(p.named, {.lr = 0.1, .momentum = 0.9});
  p.set_grads(0);
  opt.step();
  const training::StateBlob good = opt.state_dict();
  training::SGD other(p.named, {.lr = 0.5});
  auto expect_rejected = [&](training::StateBlob s, const std::string& what) {
    EXPECT_THAT(test::error_of<InvalidArgument>([&] { other.load_state_dict(s); }), HasSubstr(what));
    EXPECT_EQ(other.param_groups()[0].lr(), 0.5) << what;
    EXPECT_TRUE(other.state_dict().tensors.empty()) << what;
  };
  auto s = good;
  s.json["state"]["ghost"] = s.json["state"]["w"];
  expect_rejected(s, "unknown parameter 'ghost'");
  s = good;
  s.json["param_groups"][0]["params"][1] = "bias";
  expect_rejected(s, "unknown parameter 'bias'");
  s = good;
  s.tensors[0].second = Tensor::zeros({2, 2});
  expect_rejected(s, "tensor '" + s.tensors[0].first + "' has shape [2, 2]");
  s = good;
  s.tensors.emplace_back("w.exp_avg", Tensor::zeros({3, 4}));
  expect_rejected(s, "unknown buffer 'exp_avg'");
  s = good;
  s.json["param_groups"].push_back(s.json["param_groups"][0]);
  expect_rejected(s, "'param_groups' has 2 groups, the optimizer 1");
  s = good;
  s.json["param_groups"][0]["lr"] = "fast";
  expect_rejected(s, "option 'lr' is not a number");
  s = good;
  s.json["param_groups"][0]["lr"] = -1;
  expect_rejected(s, "invalid learning rate");
}

TEST(OptimizerState, IncompleteStateThrowsNamingWhatIsMissing) {
  Params p(Device::cpu());
  training::Adam opt(p.named, {.lr = 0.01, .amsgrad = true});
  p.set_grads(0);
  opt.step();
  const training::StateBlob good = opt.state_dict();
  training::Adam other(p.named, {.lr = 0.5});
  auto expect_rejected = [&](const training::StateBlob& s, const std::string& what) {
    EXPECT_THAT(test::error_of<InvalidArgument>([&] { other.load_state_dict(s); }), HasSubstr(what));
    EXPECT_EQ(other.param_groups()[0].lr(), 0.5) << what;
    EXPECT_TRUE(other.state_dict().tensors.empty()) << what;
  };
  auto without = [&](const std::string& key) {
    training::StateBlob s = good;
    std::erase_if(s.tensors, [&](const auto& t) { return t.first == key; });
    return s;
  };
  expect_rejected(without("w.exp_avg_sq"), "state['w'] lacks tensor 'w.exp_avg_sq'");
  expect_rejected(without("b.exp_avg"), "state['b'] lacks tensor 'b.exp_avg'");
  expect_rejected(without("w.max_exp_avg_sq"), "state['w'] lacks tensor 'w.max_exp_avg_sq'");  // amsgrad
  training::StateBlob s = good;
  s.json["state"]["w"].erase("step");
  expect_rejected(s, "state['w'] lacks 'step'");
  s = without("w.max_exp_avg_sq");  // without amsgrad the max buffer is optional
  s.json["param_groups"][0]["amsgrad"] = 0;
  other.load_state_dict(s);
  EXPECT_EQ(other.state_dict().json["state"]["w"]["step"], 1);

  training::SGD sgd(p.named, {.lr = 0.1, .momentum = 0.9});
  sgd.step();
  training::StateBlob m = sgd.state_dict();
  m.tensors.clear();
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { sgd.load_state_dict(m); }),
              HasSubstr("state['b'] lacks tensor 'b.momentum_buffer'"));
}

TEST(OptimizerState, OptionsAreChecked) {
  Params p(Device::cpu());
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::SGD(p.named, {.lr = -1}); }),
              HasSubstr("invalid learning rate"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::SGD(p.named, {.lr = 0.1, .nesterov = true}); }),
              HasSubstr("Nesterov"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::Adam(p.named, {.beta2 = 1.0}); }),
              HasSubstr("invalid beta2"));
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [&] { training::SGD({{p.named, {{"betas", 0.9}}}}, training::SGDOptions{}); }),
              HasSubstr("param_groups[0]: unknown option 'betas'"));
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [&] { training::AdamW({{p.named, {}}, {{p.named[0]}, {}}}, training::AdamOptions{}); }),
              HasSubstr("parameter 'w' appears more than once"));
  training::AdamW w(p.named, {});
  EXPECT_EQ(w.param_groups()[0].options.at("weight_decay"), 1e-2);  // AdamW's default
  training::Adam a(p.named, {});
  EXPECT_EQ(a.param_groups()[0].options.at("weight_decay"), 0.0);
}

TEST(OptimizerState, EagerUpdatesAreInPlaceAndKeepGradients) {
  Params p(Device::cpu());
  training::SGD opt(p.named, {.lr = 0.1});
  const Tensor alias = p.t[0];  // shares the parameter's storage, as an HPU graph does
  const void* storage = p.t[0].impl()->storage->data;
  p.set_grads(0);
  const auto grad = p.t[0].grad().to_vector();
  opt.step();
  EXPECT_EQ(p.t[0].impl()->storage->data, storage);
  EXPECT_EQ(alias.to_vector(), p.t[0].to_vector());
  EXPECT_EQ(p.t[0].grad().to_vector(), grad);
  EXPECT_TRUE(p.t[0].requires_grad());
  opt.zero_grad();
  EXPECT_FALSE(p.t[0].grad().defined());
}

TEST(OptimizerState, StateFollowsAParameterToAnotherDevice) {
  // The same 6 steps, once all on hpu:0 and once moving from cpu to hpu:0 after 3 steps.
  Params ref(kHpu), moved(Device::cpu());
  training::Adam opt_ref(ref.named, {.lr = 0.02}), opt_moved(moved.named, {.lr = 0.02});
  for (int k = 0; k < 6; ++k) {
    if (k == 3)
      for (Tensor& t : moved.t) t = t.to(kHpu).set_requires_grad(true);
    ref.set_grads(k);
    moved.set_grads(k);
    opt_ref.step();
    opt_moved.step();
  }
  EXPECT_EQ(moved.values(), ref.values());
  for (const auto& [key, t] : opt_moved.state_dict().tensors) EXPECT_EQ(t.device(), Device::cpu()) << key;
}

// An optimizer and the scheduler that drives it, made for a model's parameters.
struct Training {
  std::unique_ptr<training::Optimizer> opt;
  std::unique_ptr<training::LRScheduler> sched;
};
using MakeTraining = std::function<Training(const training::NamedParams&)>;

Training adamw_cosine(const training::NamedParams& params) {
  auto opt = std::make_unique<training::AdamW>(params, training::AdamOptions{.lr = 0.05, .weight_decay = 0.05});
  auto sched = std::make_unique<training::CosineAnnealingLR>(*opt, 12, 1e-3);
  return {std::move(opt), std::move(sched)};
}

Training sgd_nesterov_step(const training::NamedParams& params) {
  auto opt = std::make_unique<training::SGD>(
      params, training::SGDOptions{.lr = 0.2, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
  auto sched = std::make_unique<training::StepLR>(*opt, 1, 0.9);
  return {std::move(opt), std::move(sched)};
}

// OneCycleLR cycling AdamW's beta1 / SGD's momentum every step (total_steps 12: the 12 steps end
// at its last one).
Training adamw_one_cycle(const training::NamedParams& params) {
  auto opt = std::make_unique<training::AdamW>(params, training::AdamOptions{.lr = 0.05});
  auto sched = std::make_unique<training::OneCycleLR>(*opt, training::OneCycleLROptions{.max_lr = {0.05}, .total_steps = 12});
  return {std::move(opt), std::move(sched)};
}

Training sgd_one_cycle(const training::NamedParams& params) {
  auto opt = std::make_unique<training::SGD>(params, training::SGDOptions{.lr = 0.2, .momentum = 0.9, .nesterov = true});
  auto sched = std::make_unique<training::OneCycleLR>(*opt, training::OneCycleLROptions{.max_lr = {0.2}, .total_steps = 12});
  return {std::move(opt), std::move(sched)};
}

// 12 training steps of a small MLP on hpu:0 (lr changing every step); returns the final weights
// and, in `stats`, the lazy-mode counters before the first step and after each step.
std::vector<float> train_mlp(bool lazy, const MakeTraining& make, std::vector<graphs::LazyStats>* stats) {
  graphs::enable_lazy_mode(lazy);
  auto net = models::zoo::mlp({8, 16, 4}, 3);
  net->to(kHpu);
  std::vector<float> xs(6 * 8);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.37f * static_cast<float>(i));
  const Tensor x = Tensor::from_vector(xs, {6, 8}, kHpu);
  const Tensor labels = Tensor::from_indices({0, 1, 2, 3, 1, 2}, {6}, kHpu);
  Training t = make(net->named_parameters());
  std::vector<double> lrs;
  if (stats) stats->push_back(graphs::lazy_stats());
  for (int step = 0; step < 12; ++step) {
    t.opt->zero_grad();
    Tensor loss = ops::cross_entropy(net->forward(x), labels);
    loss.backward();
    training::clip_grad_norm(t.opt->params(), 0.5);
    t.opt->step();
    t.sched->step();
    lrs.push_back(t.opt->param_groups()[0].lr());
    graphs::mark_step(kHpu);
    if (stats) stats->push_back(graphs::lazy_stats());
  }
  EXPECT_NE(lrs.front(), lrs.back());
  std::vector<float> w;
  for (auto& [name, p] : net->named_parameters()) {
    EXPECT_TRUE(p->requires_grad()) << name;
    auto v = p->to_vector();
    w.insert(w.end(), v.begin(), v.end());
  }
  graphs::enable_lazy_mode(false);
  return w;
}

void expect_compiles_only_at_first(const MakeTraining& make, size_t compiling_steps, const std::string& what) {
  std::vector<graphs::LazyStats> stats;
  const auto lazy = train_mlp(true, make, &stats);
  ASSERT_EQ(stats.size(), 13u);
  for (size_t s = 1; s < stats.size(); ++s) {
    // One graph per step: nothing in the step (clipping, update, scheduler) read a value.
    EXPECT_EQ(stats[s].steps, stats[s - 1].steps + 1) << what << ": step " << s;
    if (s > compiling_steps) {
      EXPECT_EQ(stats[s].cache_misses, stats[s - 1].cache_misses) << what << ": step " << s << " compiled again";
    }
  }
  const auto eager = train_mlp(false, make, nullptr);
  test::expect_close(lazy, eager, 0, what + ": lazy vs eager weights", 1e-6);
}

TEST(OptimizerLazy, ScheduledAdamWStepCompilesOnceAndMatchesEager) {
  // Step 1 compiles the whole step (its first graph); Adam's state starts as zeros, so step 2 has
  // the same graph, with a new lr, bias corrections and decay factor as inputs.
  expect_compiles_only_at_first(adamw_cosine, 1, "AdamW + CosineAnnealingLR");
}

TEST(OptimizerLazy, ScheduledSgdMomentumCompilesTwiceAndMatchesEager) {
  // Step 1 has no momentum buffer yet (PyTorch's buf = g), step 2 onwards the same graph.
  expect_compiles_only_at_first(sgd_nesterov_step, 2, "SGD Nesterov + StepLR");
}

TEST(OptimizerLazy, OneCycleMomentumCyclingDoesNotRecompile) {
  // beta1 and the momentum change every step, as the lr: inputs of the step graph.
  expect_compiles_only_at_first(adamw_one_cycle, 1, "AdamW + OneCycleLR");
  expect_compiles_only_at_first(sgd_one_cycle, 2, "SGD Nesterov + OneCycleLR");
}

}  // namespace
}  // namespace hg
