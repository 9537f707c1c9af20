// Optimizer state_dict round trips and validation, option checks, parameters that move or
// have no gradient, and the lazy-mode training step: forward, cross_entropy, backward,
// clip_grad_norm, AdamW and a cosine schedule compile once and match eager mode.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>

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

// 12 training steps of a small MLP on hpu:0; returns the final weights.
std::vector<float> train_mlp(bool lazy, std::vector<uint64_t>* misses) {
  graphs::enable_lazy_mode(lazy);
  auto net = models::zoo::mlp({8, 16, 4}, 3);
  net->to(kHpu);
  std::vector<float> xs(6 * 8);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.37f * static_cast<float>(i));
  const Tensor x = Tensor::from_vector(xs, {6, 8}, kHpu);
  const Tensor labels = Tensor::from_indices({0, 1, 2, 3, 1, 2}, {6}, kHpu);
  training::AdamW opt(net->named_parameters(), {.lr = 0.05, .weight_decay = 0.05});
  training::CosineAnnealingLR sched(opt, 12, 1e-3);
  for (int step = 0; step < 12; ++step) {
    opt.zero_grad();
    Tensor loss = ops::cross_entropy(net->forward(x), labels);
    loss.backward();
    training::clip_grad_norm(opt.params(), 0.5);
    opt.step();
    sched.step();
    graphs::mark_step(kHpu);
    if (misses) misses->push_back(graphs::lazy_stats().cache_misses);
  }
  std::vector<float> w;
  for (auto& [name, p] : net->named_parameters()) {
    EXPECT_TRUE(p->requires_grad()) << name;
    auto v = p->to_vector();
    w.insert(w.end(), v.begin(), v.end());
  }
  graphs::enable_lazy_mode(false);
  return w;
}

TEST(OptimizerLazy, ScheduledAdamWStepCompilesOnceAndMatchesEager) {
  std::vector<uint64_t> misses;
  const auto lazy = train_mlp(true, &misses);
  ASSERT_EQ(misses.size(), 12u);
  for (size_t s = 2; s < misses.size(); ++s)
    EXPECT_EQ(misses[s], misses[1]) << "step " << s + 1 << " compiled again (lr or step count baked in)";
  const auto eager = train_mlp(false, nullptr);
  test::expect_close(lazy, eager, 0, "lazy vs eager weights", 1e-6);
}

}  // namespace
}  // namespace hg
