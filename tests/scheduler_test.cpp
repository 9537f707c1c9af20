// Learning-rate schedulers against torch.optim.lr_scheduler (tests/golden/optim_sched.json, made
// by scripts/golden_optim.py): the lr of two param groups after construction and after each of
// 40 steps (and OneCycleLR's momentum or beta1); state_dict round trips and their validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "errors.h"
#include "golden.h"
#include "training/adam.h"
#include "training/optimizer_config.h"
#include "training/schedulers.h"
#include "training/sgd.h"

namespace hg {
namespace {

using ::testing::HasSubstr;
using training::LRScheduler;

// Two groups with lr 0.1 and 0.02, as in the generator; SGD unless the case names Adam.
struct TwoGroups {
  Tensor a = Tensor::zeros({1}), b = Tensor::zeros({1});
  std::unique_ptr<training::Optimizer> owned;
  training::Optimizer& opt;
  explicit TwoGroups(const std::string& kind = "SGD") : owned(make_opt(kind)), opt(*owned) {}
  std::unique_ptr<training::Optimizer> make_opt(const std::string& kind) {
    std::vector<training::ParamGroup> groups{{{{"a", &a}}, {{"lr", 0.1}}}, {{{"b", &b}}, {{"lr", 0.02}}}};
    if (kind == "Adam") return std::make_unique<training::Adam>(groups, training::AdamOptions{.lr = 0.1});
    return std::make_unique<training::SGD>(groups, training::SGDOptions{.lr = 0.1});
  }
};

std::string optimizer_of(const nlohmann::json& c) { return c.value("optimizer", std::string("SGD")); }

std::shared_ptr<LRScheduler> make(training::Optimizer& opt, const std::string& name, const nlohmann::json& a) {
  using namespace training;
  auto num = [&](const char* k) { return a[k].get<double>(); };
  auto integer = [&](const char* k) { return a[k].get<int64_t>(); };
  if (name == "StepLR") return std::make_shared<StepLR>(opt, integer("step_size"), num("gamma"));
  if (name == "MultiStepLR")
    return std::make_shared<MultiStepLR>(opt, a["milestones"].get<std::vector<int64_t>>(), num("gamma"));
  if (name == "CosineAnnealingLR") return std::make_shared<CosineAnnealingLR>(opt, integer("t_max"), num("eta_min"));
  if (name == "LinearLR")
    return std::make_shared<LinearLR>(opt, num("start_factor"), num("end_factor"), integer("total_iters"));
  if (name == "ExponentialLR") return std::make_shared<ExponentialLR>(opt, num("gamma"));
  if (name == "OneCycleLR") {  // the golden's args are hgraph-train's "onecycle" keys
    nlohmann::json j = a;
    j["name"] = "onecycle";
    return make_scheduler_config(j, opt);
  }
  if (name == "LambdaLR") {  // (t + 1) / warmup during the warm-up, then decay^(t - warmup)
    const int64_t warmup = integer("warmup");
    const double decay = num("decay");
    return std::make_shared<LambdaLR>(opt, std::vector<LambdaLR::Fn>{[warmup, decay](int64_t t) {
      return t < warmup ? static_cast<double>(t + 1) / static_cast<double>(warmup)
                        : std::pow(decay, static_cast<double>(t - warmup));
    }});
  }
  if (name == "SequentialLR") {
    auto warm = std::make_shared<LinearLR>(opt, 0.1, 1.0, integer("warmup"));
    auto cos = std::make_shared<CosineAnnealingLR>(opt, integer("t_max"), 0.0);
    return std::make_shared<SequentialLR>(opt, std::vector<std::shared_ptr<LRScheduler>>{warm, cos},
                                          std::vector<int64_t>{integer("warmup")});
  }
  return std::make_shared<ReduceLROnPlateau>(
      opt, ReduceLROnPlateauOptions{.mode = a["mode"].get<std::string>(), .factor = num("factor"),
                                    .patience = integer("patience"), .threshold = num("threshold"),
                                    .threshold_mode = a["threshold_mode"].get<std::string>(),
                                    .cooldown = integer("cooldown"), .min_lr = num("min_lr")});
}

void expect_lrs(const training::Optimizer& opt, const LRScheduler& s, const nlohmann::json& want,
                const std::string& what) {
  for (size_t g = 0; g < 2; ++g) {
    const double w = want[g].get<double>();
    EXPECT_NEAR(opt.param_groups()[g].lr(), w, 1e-12 * std::fabs(w) + 1e-15) << what << " group " << g;
    EXPECT_NEAR(s.get_last_lr()[g], w, 1e-12 * std::fabs(w) + 1e-15) << what << " group " << g << " last_lr";
  }
}

// OneCycleLR's cycled momentum: SGD's momentum or Adam's beta1.
void expect_momentums(const training::Optimizer& opt, const nlohmann::json& c, size_t k, const std::string& what) {
  if (!c.contains("momentums")) return;
  const std::string key = optimizer_of(c) == "Adam" ? "beta1" : "momentum";
  for (size_t g = 0; g < 2; ++g) {
    const double w = c["momentums"][k][g].get<double>();
    EXPECT_NEAR(opt.param_groups()[g].options.at(key), w, 1e-12) << what << " group " << g << " " << key;
  }
}

void step(LRScheduler& s, const nlohmann::json& c, size_t k) {
  if (c.contains("metrics"))
    s.step(c["metrics"][k].get<double>());
  else
    s.step();
}

TEST(Scheduler, LrTrajectoriesMatchTorch) {
  const auto cases = test::load_json("optim_sched.json");
  ASSERT_EQ(cases.size(), 13u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    TwoGroups t(optimizer_of(c));
    auto s = make(t.opt, c["scheduler"], c["args"]);
    EXPECT_EQ(s->name(), c["scheduler"].get<std::string>());
    EXPECT_EQ(s->needs_metric(), c.contains("metrics")) << name;
    ASSERT_EQ(c["lrs"].size(), 41u);
    expect_lrs(t.opt, *s, c["lrs"][0], name + " after construction");
    expect_momentums(t.opt, c, 0, name + " after construction");
    for (size_t k = 0; k + 1 < c["lrs"].size(); ++k) {
      step(*s, c, k);
      expect_lrs(t.opt, *s, c["lrs"][k + 1], name + " step " + std::to_string(k + 1));
      expect_momentums(t.opt, c, k + 1, name + " step " + std::to_string(k + 1));
    }
    EXPECT_EQ(s->last_epoch(), 40) << name;
  }
}

TEST(Scheduler, StateRoundTripContinuesIdentically) {
  for (const auto& c : test::load_json("optim_sched.json")) {
    const std::string name = c["name"];
    TwoGroups a(optimizer_of(c));
    auto sa = make(a.opt, c["scheduler"], c["args"]);
    for (size_t k = 0; k < 17; ++k) step(*sa, c, k);
    const nlohmann::json saved = nlohmann::json::parse(sa->state_dict().dump());
    // A fresh run resumed from the checkpoint: the optimizer's lrs come from its own state.
    TwoGroups b(optimizer_of(c));
    auto sb = make(b.opt, c["scheduler"], c["args"]);
    b.opt.load_state_dict(a.opt.state_dict());
    sb->load_state_dict(saved);
    EXPECT_EQ(sb->last_epoch(), 17) << name;
    for (size_t k = 17; k < 40; ++k) {
      step(*sa, c, k);
      step(*sb, c, k);
      for (size_t g = 0; g < 2; ++g) EXPECT_EQ(b.opt.param_groups()[g].lr(), a.opt.param_groups()[g].lr()) << name;
    }
    expect_lrs(b.opt, *sb, c["lrs"][40], name + " resumed");
    expect_momentums(b.opt, c, 40, name + " resumed");
  }
}

TEST(Scheduler, BadStateThrowsNamingTheField) {
  TwoGroups t;
  training::StepLR s(t.opt, 5, 0.5);
  const auto good = s.state_dict();
  auto bad = good;
  bad["name"] = "CosineAnnealingLR";
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.load_state_dict(bad); }),
              HasSubstr("field 'name' is 'CosineAnnealingLR', not 'StepLR'"));
  bad = good;
  bad.erase("last_epoch");
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.load_state_dict(bad); }),
              HasSubstr("field 'last_epoch' is missing"));
  bad = good;
  bad["last_lr"] = {0.1};
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.load_state_dict(bad); }),
              HasSubstr("field 'last_lr' has 1 entries, expected 2"));
  bad = good;
  bad["step_size"] = 0;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.load_state_dict(bad); }), HasSubstr("'step_size' must be > 0"));
  EXPECT_EQ(s.state_dict(), good);  // nothing changed

  auto w = std::make_shared<training::LinearLR>(t.opt, 0.5, 1.0, 3);
  auto c = std::make_shared<training::CosineAnnealingLR>(t.opt, 10);
  training::SequentialLR seq(t.opt, {w, c}, {3});
  auto sbad = seq.state_dict();
  sbad["schedulers"][1]["t_max"] = -4;
  const auto before = seq.state_dict();
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { seq.load_state_dict(sbad); }),
              HasSubstr("CosineAnnealingLR state: field 't_max' must be > 0"));
  EXPECT_EQ(seq.state_dict(), before);
}

TEST(Scheduler, MisuseIsRejected) {
  TwoGroups t;
  training::ReduceLROnPlateau plateau(t.opt);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { plateau.step(); }), HasSubstr("call step(metric)"));
  training::StepLR step(t.opt, 3);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { step.step(0.5); }), HasSubstr("StepLR: step(metric)"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::LinearLR(t.opt, 0.0, 1.0, 5); }),
              HasSubstr("start_factor"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::ExponentialLR(t.opt, 0.0); }),
              HasSubstr("ExponentialLR: gamma 0.000000 must be > 0"));
  auto one = [](int64_t) { return 1.0; };
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::LambdaLR(t.opt, {one, one, one}); }),
              HasSubstr("LambdaLR: 3 functions for 2 param groups"));
  training::LambdaLR nan_at_2(t.opt, {[](int64_t s) { return s == 2 ? NAN : 1.0; }});
  nan_at_2.step();
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { nan_at_2.step(); }),
              HasSubstr("LambdaLR: the function of group 0 returned nan at step 2"));
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [&] { training::ReduceLROnPlateau(t.opt, {.mode = "up"}); }),
              HasSubstr("mode 'up'"));
  TwoGroups other;
  auto foreign = std::make_shared<training::StepLR>(other.opt, 3);
  auto mine = std::make_shared<training::StepLR>(t.opt, 3);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::SequentialLR(t.opt, {mine, foreign}, {4}); }),
              HasSubstr("scheduler 1 (StepLR) drives another optimizer"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::SequentialLR(t.opt, {mine}, {4}); }),
              HasSubstr("1 schedulers need 0 milestones, got 1"));
}

TEST(Scheduler, OneCycleLRRejectsBadArgumentsNamingThem) {
  using training::OneCycleLR;
  using O = training::OneCycleLROptions;
  TwoGroups t;
  auto err = [&](O o) { return test::error_of<InvalidArgument>([&] { OneCycleLR(t.opt, o); }); };
  EXPECT_THAT(err({.max_lr = {0.1}}), HasSubstr("OneCycleLR: give total_steps, or epochs and steps_per_epoch"));
  EXPECT_THAT(err({.max_lr = {0.1}, .total_steps = -3}), HasSubstr("total_steps -3 must be > 0"));
  EXPECT_THAT(err({.max_lr = {0.1}, .epochs = 2}), HasSubstr("steps_per_epoch 0 must be > 0"));
  EXPECT_THAT(err({.max_lr = {}, .total_steps = 10}), HasSubstr("max_lr is required"));
  EXPECT_THAT(err({.max_lr = {0.1, 0.2, 0.3}, .total_steps = 10}),
              HasSubstr("max_lr has 3 values for 2 param groups"));
  EXPECT_THAT(err({.max_lr = {-0.1}, .total_steps = 10}), HasSubstr("max_lr -0.1 must be > 0"));
  EXPECT_THAT(err({.max_lr = {0.1}, .total_steps = 10, .pct_start = 1.5}), HasSubstr("pct_start 1.5 must be in [0, 1]"));
  EXPECT_THAT(err({.max_lr = {0.1}, .total_steps = 10, .anneal_strategy = "exp"}),
              HasSubstr("anneal_strategy 'exp' is not cos or linear"));
  EXPECT_THAT(err({.max_lr = {0.1}, .total_steps = 10, .div_factor = 0}), HasSubstr("div_factor 0.0 must be > 0"));
  EXPECT_THAT(err({.max_lr = {0.1}, .total_steps = 10, .base_momentum = {0.99}}),
              HasSubstr("base_momentum 0.99 and max_momentum 0.95 must satisfy 0 <= base <= max < 1"));
  EXPECT_THAT(err({.max_lr = {0.1}, .total_steps = 10, .pct_start = 0.1}),
              HasSubstr("pct_start 0.1 with total_steps 10 leaves a phase without steps"));
  EXPECT_THAT(err({.max_lr = {0.1}, .total_steps = 10, .pct_start = 1.0}),
              HasSubstr("leaves a phase without steps"));
  EXPECT_EQ(t.opt.param_groups()[0].lr(), 0.1);  // nothing changed

  // As PyTorch: construction is step 0, total_steps more steps are allowed, then an error.
  OneCycleLR s(t.opt, {.max_lr = {0.1}, .total_steps = 5});
  for (int i = 0; i < 5; ++i) s.step();
  const auto lrs = s.get_last_lr();
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.step(); }),
              HasSubstr("OneCycleLR: tried to step 7 times (the constructor's step included); total_steps is 5"));
  EXPECT_EQ(s.last_epoch(), 5);
  EXPECT_EQ(s.get_last_lr(), lrs);

  auto bad = s.state_dict();
  bad["anneal_strategy"] = "step";
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.load_state_dict(bad); }),
              HasSubstr("OneCycleLR state: anneal_strategy 'step' is not cos or linear"));
  bad = s.state_dict();
  bad["three_phase"] = 1;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.load_state_dict(bad); }),
              HasSubstr("OneCycleLR state: field 'three_phase' is not a boolean"));
  bad = s.state_dict();
  bad["cycle_momentum"] = false;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.load_state_dict(bad); }),
              HasSubstr("field 'cycle_momentum' is false, this scheduler was made with true"));
  EXPECT_EQ(s.last_epoch(), 5);
}

TEST(Scheduler, RecordsInitialLrAsPyTorch) {
  TwoGroups t;
  training::CosineAnnealingLR s(t.opt, 10);
  EXPECT_EQ(t.opt.param_groups()[0].options.at("initial_lr"), 0.1);
  EXPECT_EQ(t.opt.param_groups()[1].options.at("initial_lr"), 0.02);
  EXPECT_EQ(s.get_last_lr(), (std::vector<double>{0.1, 0.02}));
}

}  // namespace
}  // namespace hg
