// make_graphed_callables (gradients == eager autograd) and wrap_in_hpu_graph (every zoo model ==
// eager, LRU eviction, bypass, signature keys). Zoo weights and inputs come from
// scripts/testdata_zoo.py, as in tests/zoo_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/ops.h"
#include "errors.h"
#include "golden.h"
#include "hpu_test_util.h"
#include "zoo_data.h"
#include "graphs/graphed_callables.h"
#include "graphs/hpu_graph.h"
#include "graphs/lazy.h"
#include "models/hpu_wrap.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "models/zoo.h"
#include "training/sgd.h"

using namespace hg;
using namespace hg::graphs;
using ::testing::HasSubstr;

namespace {

using test::error_of;
using test::kHpu;
using test::ramp;
using test::zoo_data;

// ---------------------------------------------------------------------------------------------
// make_graphed_callables

// Copies of one model's parameters, so an eager twin can be compared with a graphed one.
void copy_params(models::Module& from, models::Module& to) {
  auto src = from.named_parameters(), dst = to.named_parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].second->copy_from(*src[i].second);
}

std::vector<Tensor> params_of(models::Module& m) {
  std::vector<Tensor> r;
  for (auto& [n, p] : m.named_parameters()) r.push_back(*p);
  return r;
}

void expect_same_grads(models::Module& graphed, models::Module& eager, const std::string& what) {
  auto g = graphed.named_parameters(), e = eager.named_parameters();
  ASSERT_EQ(g.size(), e.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i].second->grad().defined()) << what << " " << g[i].first;
    test::expect_close(g[i].second->grad().to_vector(), e[i].second->grad().to_vector(), 1e-4,
                       what + " grad of " + g[i].first, 1e-5);
  }
}

TEST(GraphedCallables, MlpTrainingLoopMatchesEagerAutograd) {
  auto eager = models::zoo::mlp({12, 24, 5}, 4), graphed = models::zoo::mlp({12, 24, 5}, 9);
  eager->to(kHpu);
  graphed->to(kHpu);
  copy_params(*eager, *graphed);
  Tensor sample = ramp({6, 12}, 0.1f);
  sample.set_requires_grad(true);
  auto step = make_graphed_callables(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{graphed->forward(in[0])}; }, {sample},
      params_of(*graphed));
  EXPECT_TRUE(step->forward_graph().captured());
  EXPECT_TRUE(step->backward_graph().captured());
  for (auto& [n, p] : graphed->named_parameters()) EXPECT_FALSE(p->grad().defined()) << "capture left a grad on " << n;
  training::SGD opt_e(eager->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  training::SGD opt_g(graphed->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor labels = Tensor::from_indices({0, 1, 2, 3, 4, 0}, {6}, kHpu);
  for (int it = 0; it < 3; ++it) {
    Tensor xe = ramp({6, 12}, 0.05f * static_cast<float>(it + 1)), xg = xe.clone();
    xe.set_requires_grad(true);
    xg.set_requires_grad(true);
    opt_e.zero_grad();
    opt_g.zero_grad();
    Tensor le = ops::cross_entropy(eager->forward(xe), labels);
    Tensor lg = ops::cross_entropy((*step)({xg})[0], labels);
    EXPECT_NEAR(lg.item(), le.item(), 1e-5) << "step " << it;
    le.backward();
    lg.backward();
    expect_same_grads(*graphed, *eager, "step " + std::to_string(it));
    test::expect_close(xg.grad().to_vector(), xe.grad().to_vector(), 1e-4, "input grad", 1e-6);
    opt_e.step();
    opt_g.step();  // in place: the graphs read the updated weights
  }
  EXPECT_EQ(step->forward_graph().stats().replays, 3u);
  EXPECT_EQ(step->backward_graph().stats().replays, 3u);
}

TEST(GraphedCallables, LeNetGradsMatchEager) {
  auto eager = models::zoo::lenet5(10, 1), graphed = models::zoo::lenet5(10, 2);
  eager->to(kHpu);
  graphed->to(kHpu);
  copy_params(*eager, *graphed);
  const Tensor x = ramp({2, 1, 32, 32}, 0.02f);
  auto step = make_graphed_callables(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{graphed->forward(in[0])}; }, {x},
      params_of(*graphed));
  const Tensor r = ramp({2, 10}, 0.3f);
  ops::sum(ops::mul(eager->forward(x), r)).backward();
  ops::sum(ops::mul((*step)({x})[0], r)).backward();
  expect_same_grads(*graphed, *eager, "lenet5");
}

TEST(GraphedCallables, MultipleOutputsAndNoGrad) {
  Tensor w = ramp({4, 4}, 0.1f);
  w.set_requires_grad(true);
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor h = ops::matmul(in[0], w);
    return std::vector<Tensor>{ops::relu(h), ops::sum(ops::mul(h, h))};
  };
  const Tensor x = ramp({3, 4}, 0.25f);
  auto g = make_graphed_callables(fn, {x}, {w});
  auto loss_of = [](const std::vector<Tensor>& o) { return ops::add(ops::sum(ops::scale(o[0], 2)), o[1]); };
  loss_of(fn({x})).backward();
  const std::vector<float> eager_grad = w.grad().to_vector();
  w.zero_grad();
  loss_of((*g)({x})).backward();
  test::expect_close(w.grad().to_vector(), eager_grad, 1e-5, "two-output grad", 1e-5);
  EXPECT_EQ(g->backward_graph().stats().replays, 2u);  // one per output that got a gradient
  NoGradGuard no_grad;
  auto outs = (*g)({x});
  EXPECT_FALSE(outs[0].requires_grad());
  test::expect_close(outs[1].to_vector(), fn({x})[1].to_vector(), 1e-6, "no-grad forward");
}

TEST(GraphedCallables, ErrorsNameTheProblem) {
  Tensor w = ramp({4, 2}, 0.1f);
  w.set_requires_grad(true);
  Tensor x = ramp({3, 4}, 0.2f), unused = ramp({2}, 1.0f);
  unused.set_requires_grad(true);
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::matmul(in[0], w)}; };
  EXPECT_THAT(error_of<InvalidArgument>([&] { make_graphed_callables(fn, {x, unused}, {w}); }),
              HasSubstr("sample input 1 requires grad but the callable's outputs do not depend on it"));
  auto g = make_graphed_callables(fn, {x, unused}, {w}, {.allow_unused_input = true});
  EXPECT_THAT(error_of<InvalidArgument>([&] { (*g)({ramp({5, 4}, 1.0f), unused}); }),
              HasSubstr("input 0 is F32[5, 4] on hpu:0, it was captured with F32[3, 4]"));
  Tensor first = (*g)({x, unused})[0];
  Tensor second = (*g)({x, unused})[0];
  EXPECT_THAT(error_of<InvalidArgument>([&] { ops::sum(first).backward(); }),
              HasSubstr("run each call's backward before the next call"));
  ops::sum(second).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                make_graphed_callables([&](const std::vector<Tensor>& in) { return in; }, {x}, {});
              }),
              HasSubstr("output 0 is not computed by the callable"));
}

// ---------------------------------------------------------------------------------------------
// wrap_in_hpu_graph

struct ZooCase {
  std::string name;
  std::shared_ptr<models::Module> module;
  Tensor input, other;  // two inputs of one signature
};

std::vector<ZooCase> zoo_cases() {
  std::vector<ZooCase> r;
  r.push_back({"mlp", models::zoo::mlp({64, 32, 10}, 2), ramp({4, 64}, 0.1f, Device::cpu()),
               ramp({4, 64}, -0.07f, Device::cpu())});
  for (const char* name : {"lenet5", "resnet18", "bert_classifier"}) {
    std::shared_ptr<models::Module> m;
    if (name == std::string("lenet5")) m = models::zoo::lenet5();
    else if (name == std::string("resnet18")) m = models::zoo::resnet18();
    else m = models::zoo::bert_classifier();
    m->load_state_dict(zoo_data(name));
    const Tensor x = zoo_data(std::string(name) + "_io")["input"];
    Tensor other;
    if (x.dtype() == DType::I64) {  // other token ids below the vocabulary size (1000)
      std::vector<int64_t> ids = x.to_indices();
      for (auto& v : ids) v = (v * 7 + 3) % 1000;
      other = Tensor::from_indices(ids, x.shape());
    } else {
      other = ops::scale(x, -0.5);
    }
    r.push_back({name, m, x, other});
  }
  std::vector<int64_t> ids(2 * 12), ids2(2 * 12);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(i * 37 % 256);
    ids2[i] = static_cast<int64_t>(i * 11 % 256);
  }
  const models::GPTConfig gpt{.d_model = 64, .nhead = 4, .layers = 2, .ff = 128, .max_len = 64};
  r.push_back({"gpt", std::make_shared<models::GPT>(gpt, 3),
               Tensor::from_indices(ids, {2, 12}), Tensor::from_indices(ids2, {2, 12})});
  return r;
}

TEST(WrapInHPUGraph, EveryZooModelEqualsEager) {
  for (ZooCase& c : zoo_cases()) {
    c.module->to(kHpu);
    c.module->eval();
    std::vector<float> eager_a, eager_b;
    {
      NoGradGuard no_grad;
      eager_a = c.module->forward(c.input.to(kHpu)).to_vector();
      eager_b = c.module->forward(c.other.to(kHpu)).to_vector();
    }
    auto wrapped = models::wrap_in_hpu_graph(c.module);
    const Tensor a = wrapped->forward(c.input.to(kHpu));  // capture (weights frozen)
    test::expect_close(a.to_vector(), eager_a, 1e-4, c.name + " capture vs eager", 1e-4);
    const Tensor b = wrapped->forward(c.other.to(kHpu));  // replay
    test::expect_close(b.to_vector(), eager_b, 1e-4, c.name + " replay vs eager", 1e-4);
    EXPECT_EQ(b.impl(), a.impl()) << c.name << ": a replay returns the static outputs, as Habana's";
    const models::HPUGraphWrapStats s = wrapped->stats();
    EXPECT_EQ(s.calls, 2u) << c.name;
    EXPECT_EQ(s.misses, 1u) << c.name;
    EXPECT_EQ(s.hits, 1u) << c.name;
    EXPECT_EQ(s.captures, 1u) << c.name;
    EXPECT_EQ(s.graphs, 1u) << c.name;
  }
}

std::shared_ptr<models::Module> small_mlp() {
  std::shared_ptr<models::Module> m = models::zoo::mlp({8, 16, 3}, 5);
  m->to(kHpu);
  m->eval();
  return m;
}

std::vector<float> eager_of(models::Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  return m.forward(x).to_vector();
}

TEST(WrapInHPUGraph, EvictsTheLeastRecentlyUsedGraph) {
  auto m = small_mlp();
  auto w = models::wrap_in_hpu_graph(m, {.max_graphs = 2});
  auto batch = [](int64_t n) { return ramp({n, 8}, 0.1f * static_cast<float>(n)); };
  auto key = [](int64_t n) { return "eval|F32@hpu:0[" + std::to_string(n) + ", 8]"; };
  for (int64_t n : {1, 2, 1}) w->forward(batch(n));  // b1 miss, b2 miss, b1 hit
  EXPECT_EQ(w->cached_keys(), (std::vector<std::string>{key(1), key(2)}));
  const Tensor y3 = w->forward(batch(3));  // evicts b2, the least recently used
  EXPECT_EQ(w->cached_keys(), (std::vector<std::string>{key(3), key(1)}));
  test::expect_close(y3.to_vector(), eager_of(*m, batch(3)), 1e-5, "b3");
  const Tensor y2 = w->forward(batch(2));  // captured again; evicts b1
  EXPECT_EQ(w->cached_keys(), (std::vector<std::string>{key(2), key(3)}));
  test::expect_close(y2.to_vector(), eager_of(*m, batch(2)), 1e-5, "b2 again");
  const models::HPUGraphWrapStats s = w->stats();
  EXPECT_EQ(s.calls, 5u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.captures, 4u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.graphs, 2u);
  EXPECT_GT(s.arena_bytes, 0u);
  w->clear_cache();
  EXPECT_TRUE(w->cached_keys().empty());
  EXPECT_EQ(w->stats().graphs, 0u);
  w->forward(batch(3));
  EXPECT_EQ(w->stats().captures, 5u);
}

TEST(WrapInHPUGraph, BypassRunsEagerAndSignatureSeesDtypeAndLayout) {
  auto m = small_mlp();
  auto w = models::wrap_in_hpu_graph(m);
  const Tensor x = ramp({2, 8}, 0.3f);
  const std::vector<Tensor> out = w->call({x}, {}, /*bypass=*/true);
  EXPECT_FALSE(out[0].is_lazy());
  test::expect_close(out[0].to_vector(), eager_of(*m, x), 1e-6, "bypass");
  EXPECT_EQ(w->stats().bypasses, 1u);
  EXPECT_EQ(w->stats().graphs, 0u);
  // A transposed input of the same shape is another layout: another graph.
  const Tensor xt = ramp({8, 2}, 0.3f).transpose(0, 1);
  w->forward(x);
  test::expect_close(w->forward(xt).to_vector(), eager_of(*m, xt.contiguous()), 1e-5, "transposed input");
  EXPECT_EQ(w->stats().graphs, 2u);
  EXPECT_THAT(w->cached_keys()[0], HasSubstr("strides[1, 2]"));
  // The BERT classifier takes I64 or I32 ids: one graph each.
  std::shared_ptr<models::Module> bert =
      models::zoo::bert_classifier({.vocab = 50, .d_model = 16, .nhead = 2, .layers = 1, .ff = 32, .max_len = 8});
  bert->to(kHpu);
  bert->eval();
  auto wb = models::wrap_in_hpu_graph(bert);
  const Tensor ids = Tensor::from_indices({1, 5, 7, 9}, {1, 4}, kHpu);
  const std::vector<float> a = wb->forward(ids).to_vector(), b = wb->forward(ids.to(DType::I32)).to_vector();
  EXPECT_EQ(wb->stats().captures, 2u);
  test::expect_close(b, a, 1e-6, "I32 ids vs I64 ids");
}

TEST(WrapInHPUGraph, TrainModeReadsLiveWeightsAndReplacedStateRecaptures) {
  auto m = small_mlp();
  m->train();
  auto w = models::wrap_in_hpu_graph(m);
  EXPECT_TRUE(m->training());
  const Tensor x = ramp({3, 8}, 0.2f);
  w->forward(x);
  Tensor& w0 = *m->named_parameters()[0].second;
  w0.copy_from(ops::scale(w0, 1.5));  // in place, as an optimizer step: the graph sees it
  test::expect_close(w->forward(x).to_vector(), eager_of(*m, x), 1e-5, "train mode after an in-place update");
  EXPECT_EQ(w->stats().captures, 1u);
  // Eval mode: the weights are frozen into a new graph (the mode is part of the key).
  w->eval();
  test::expect_close(w->forward(x).to_vector(), eager_of(*m, x), 1e-5, "eval mode");
  EXPECT_EQ(w->stats().invalidations, 1u);  // the cache of the train-mode graphs was dropped
  // A parameter replaced by another tensor (as to(device) does): the graphs holding the old one
  // are dropped.
  w0 = ops::scale(w0, 2).detach();
  w0.set_requires_grad(true);
  test::expect_close(w->forward(x).to_vector(), eager_of(*m, x), 1e-5, "after replacing a parameter");
  EXPECT_EQ(w->stats().invalidations, 2u);
  EXPECT_EQ(w->stats().captures, 3u);
}

TEST(WrapInHPUGraph, TrainModeWithGradGivesEagerGradients) {
  auto m = small_mlp();
  m->train();
  auto twin = models::zoo::mlp({8, 16, 3}, 6);
  twin->to(kHpu);
  copy_params(*m, *twin);
  auto w = models::wrap_in_hpu_graph(m);
  const Tensor r = ramp({4, 3}, 0.2f);
  for (int it = 0; it < 2; ++it) {
    const Tensor x = ramp({4, 8}, 0.1f * static_cast<float>(it + 1));
    for (auto* mod : {static_cast<models::Module*>(m.get()), static_cast<models::Module*>(twin.get())})
      for (auto& [n, p] : mod->named_parameters()) p->zero_grad();
    const Tensor y = w->forward(x);
    EXPECT_TRUE(y.requires_grad());
    ops::sum(ops::mul(y, r)).backward();
    ops::sum(ops::mul(twin->forward(x), r)).backward();
    expect_same_grads(*m, *twin, "wrapped train step " + std::to_string(it));
  }
  EXPECT_EQ(w->stats().captures, 1u);
  EXPECT_EQ(w->stats().hits, 1u);
  EXPECT_THAT(w->cached_keys()[0], HasSubstr("train+grad"));
  NoGradGuard no_grad;  // train mode without grad: a forward-only graph of its own
  const Tensor x = ramp({4, 8}, 0.3f);
  const Tensor y = w->forward(x);
  EXPECT_FALSE(y.requires_grad());
  test::expect_close(y.to_vector(), twin->forward(x).to_vector(), 1e-5, "train mode, no grad");
  EXPECT_EQ(w->stats().captures, 2u);
}

TEST(WrapInHPUGraph, NonTensorArgumentsAreKeyedOnlyWhenAsked) {
  auto m = small_mlp();
  models::ModuleFn scaled = [](models::Module& mod, const std::vector<Tensor>& in, const std::vector<models::Arg>& a) {
    return std::vector<Tensor>{ops::scale(mod.forward(in[0]), static_cast<double>(std::get<int64_t>(a.at(0))))};
  };
  const Tensor x = ramp({2, 8}, 0.1f);
  auto plain = models::wrap_in_hpu_graph(m, {}, scaled);
  EXPECT_THAT(error_of<InvalidArgument>([&] { plain->call({x}, {int64_t{3}}); }),
              HasSubstr("non-tensor argument 0 (3) would be baked into the captured graph"));
  auto keyed = models::wrap_in_hpu_graph(m, {.key_args_by_value = true}, scaled);
  const std::vector<float> base = eager_of(*m, x);
  for (int64_t k : {2, 3, 2}) {
    const std::vector<float> got = keyed->call({x}, {k})[0].to_vector();
    for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(got[i], base[i] * static_cast<float>(k), 1e-5) << "k=" << k;
  }
  EXPECT_EQ(keyed->stats().captures, 2u);
  EXPECT_EQ(keyed->stats().hits, 1u);
}

TEST(WrapInHPUGraph, DisableTensorCacheDryRunAndAsynchronous) {
  auto m = small_mlp();
  const Tensor x1 = ramp({2, 8}, 0.1f), x2 = ramp({2, 8}, -0.2f);
  auto fresh = models::wrap_in_hpu_graph(m, {.disable_tensor_cache = true});
  const Tensor a = fresh->forward(x1), b = fresh->forward(x2);
  EXPECT_NE(a.impl()->storage, b.impl()->storage);  // caller-owned outputs: the first stays valid
  test::expect_close(a.to_vector(), eager_of(*m, x1), 1e-5, "first output kept");
  test::expect_close(b.to_vector(), eager_of(*m, x2), 1e-5, "second output");
  EXPECT_EQ(fresh->stats().hits, 1u);
  for (models::HPUGraphWrapOptions opt : {models::HPUGraphWrapOptions{.dry_run = true},
                                          models::HPUGraphWrapOptions{.asynchronous = true}}) {
    auto w = models::wrap_in_hpu_graph(m, opt);
    test::expect_close(w->forward(x1).to_vector(), eager_of(*m, x1), 1e-5, "first call");
    test::expect_close(w->forward(x2).to_vector(), eager_of(*m, x2), 1e-5, "second call");
    EXPECT_EQ(w->stats().captures, 1u);
  }
}

}  // namespace
