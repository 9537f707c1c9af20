// Optimizers and gradient clipping against PyTorch (tests/golden/optim*.json, made by
// scripts/golden_optim.py): every case on cpu, eagerly on hpu:0 and lazily traced on hpu:0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <memory>

#include "errors.h"
#include "golden.h"
#include "training/adam.h"
#include "training/sgd.h"

namespace hg {
namespace {

using ::testing::HasSubstr;
using test::Mode;

std::unique_ptr<training::Optimizer> make(const std::string& kind, std::vector<training::ParamGroup> groups,
                                          const nlohmann::json& d) {
  auto num = [&](const char* k, double dflt) { return d.contains(k) ? d[k].get<double>() : dflt; };
  if (kind == "SGD")
    return std::make_unique<training::SGD>(
        std::move(groups), training::SGDOptions{.lr = num("lr", 0.01), .momentum = num("momentum", 0),
                                                .dampening = num("dampening", 0),
                                                .weight_decay = num("weight_decay", 0),
                                                .nesterov = num("nesterov", 0) != 0});
  const training::AdamOptions o{.lr = num("lr", 1e-3), .beta1 = num("beta1", 0.9), .beta2 = num("beta2", 0.999),
                                .eps = num("eps", 1e-8), .weight_decay = num("weight_decay", 0),
                                .amsgrad = num("amsgrad", 0) != 0};
  if (kind == "Adam") return std::make_unique<training::Adam>(std::move(groups), o);
  return std::make_unique<training::AdamW>(std::move(groups), o);
}

// The parameters of one golden case, owned here; groups point at them.
struct Case {
  std::deque<Tensor> storage;
  std::map<std::string, Tensor*> by_name;
  std::vector<training::ParamGroup> groups;
  Case(const nlohmann::json& c, Device d) {
    for (const auto& [name, t] : c["init"].items()) {
      storage.push_back(test::tensor_from(t, d));
      storage.back().set_requires_grad(true);
      by_name[name] = &storage.back();
    }
    for (const auto& g : c["groups"]) {
      training::ParamGroup group;
      for (const auto& n : g["params"]) group.params.emplace_back(n.get<std::string>(), by_name.at(n.get<std::string>()));
      for (const auto& [k, v] : g["options"].items()) group.options[k] = v.get<double>();
      groups.push_back(group);
    }
  }
  void set_grads(const nlohmann::json& grads, Device d) {
    for (auto& [name, p] : by_name)
      p->impl()->grad = Tensor::from_vector(grads[name].get<std::vector<float>>(), p->shape(), d).impl_ptr();
  }
};

class OptimizerGolden : public ::testing::TestWithParam<Mode> {};

TEST_P(OptimizerGolden, MatchesTorchOptimEveryStep) {
  const Mode mode = GetParam();
  test::ModeGuard guard(mode);
  const Device d = test::device_of(mode);
  const auto cases = test::load_json("optim.json");
  ASSERT_GE(cases.size(), 12u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    Case pc(c, d);
    auto opt = make(c["optimizer"], pc.groups, c["defaults"]);
    EXPECT_EQ(opt->name(), c["optimizer"].get<std::string>()) << name;
    ASSERT_EQ(c["grads"].size(), 12u);
    for (size_t step = 0; step < c["grads"].size(); ++step) {
      pc.set_grads(c["grads"][step], d);
      opt->step();
      if (mode == Mode::HpuLazy) graphs::mark_step(d);
      for (auto& [pname, p] : pc.by_name) {
        EXPECT_TRUE(p->requires_grad()) << name;
        EXPECT_EQ(p->device(), d) << name;
        test::expect_close(p->to_vector(), c["expected"][step][pname].get<std::vector<float>>(), 2e-5,
                           name + " step " + std::to_string(step + 1) + " " + pname, 1e-6);
      }
    }
  }
}

TEST_P(OptimizerGolden, ClippingMatchesTorch) {
  const Mode mode = GetParam();
  test::ModeGuard guard(mode);
  const Device d = test::device_of(mode);
  for (const auto& c : test::load_json("optim_clip.json")) {
    const std::string name = c["name"];
    std::deque<Tensor> ps;
    training::NamedParams params;
    for (const auto& [pname, g] : c["grads"].items()) {
      ps.push_back(Tensor::zeros(g["shape"].get<Shape>(), DType::F32, d));
      ps.back().set_requires_grad(true);
      ps.back().impl()->grad = test::tensor_from(g, d).impl_ptr();
      params.emplace_back(pname, &ps.back());
    }
    if (c["kind"] == "norm") {
      const double norm_type = c["norm_type"].is_number() ? c["norm_type"].get<double>() : INFINITY;
      Tensor total = training::clip_grad_norm(params, c["max_norm"], norm_type);
      EXPECT_EQ(total.device(), d) << name;
      EXPECT_NEAR(total.item(), c["total_norm"].get<double>(), 1e-5 * c["total_norm"].get<double>()) << name;
    } else {
      training::clip_grad_value(params, c["clip_value"]);
    }
    for (auto& [pname, p] : params)
      test::expect_close(p->grad().to_vector(), c["clipped"][pname].get<std::vector<float>>(), 1e-5,
                         name + " " + pname, 1e-7);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, OptimizerGolden, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) {
                           return std::string(info.param == Mode::Cpu        ? "Cpu"
                                              : info.param == Mode::HpuEager ? "HpuEager"
                                                                             : "HpuLazy");
                         });

}  // namespace
}  // namespace hg
