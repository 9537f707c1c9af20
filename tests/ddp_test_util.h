// Shared by the DDP tests (ddp_test.cpp, ddp_multiprocess_test.cpp): scoped environment
// variables, lazy mode for a scope, and a small MLP trained on hpu:0 — in one process on the
// global batch, or as one rank of a strategy on its shard of it.
//
//   hg::training::ddp_test::ScopedEnv env(hg::training::ddp_test::clean_dist_env());
//   std::vector<float> want = hg::training::ddp_test::train("sgd", nullptr);   // 1 process
//   std::vector<float> got = hg::training::ddp_test::train("sgd", &strategy, /*accum=*/2);
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops.h"
#include "graphs/lazy.h"
#include "models/zoo.h"
#include "training/adam.h"
#include "training/sgd.h"
#include "training/strategy.h"

namespace hg::training::ddp_test {

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

inline std::map<std::string, std::optional<std::string>> clean_dist_env() {
  return {{"MASTER_ADDR", std::nullopt}, {"MASTER_PORT", std::nullopt}, {"NODE_RANK", std::nullopt},
          {"GROUP_RANK", std::nullopt},  {"LOCAL_RANK", std::nullopt},  {"WORLD_SIZE", std::nullopt}};
}

// Two-rank tests: this process is rank 0, and the launcher re-executes the test binary for
// rank 1 with LOCAL_RANK=1, this test as its GTEST_FILTER and HG_DDP_TEST naming it.
//
//   if (ddp_test::launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
//   const auto env = ddp_test::rank_zero_env();   // nothing in the launched child
inline constexpr const char* kTestVar = "HG_DDP_TEST";  // the test a re-executed process works for
inline std::string current_test() {
  const auto* i = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(i->test_suite_name()) + "." + i->name();
}
inline bool working_for_this_test() {
  const char* t = std::getenv(kTestVar);
  return t && current_test() == t;
}
// A launched child whose filter also selected this test, which it does not work for.
inline bool launched_for_another_test() { return std::getenv("LOCAL_RANK") != nullptr && !working_for_this_test(); }
// Rank 0's environment for the test's scope: no inherited DDP variables, the launched rank's
// filter and HG_DDP_TEST naming this test, plus `extra`. Null in the launched child.
inline std::unique_ptr<ScopedEnv> rank_zero_env(const std::map<std::string, std::optional<std::string>>& extra = {}) {
  if (std::getenv("LOCAL_RANK")) return nullptr;
  auto vars = clean_dist_env();
  vars[kTestVar] = current_test();
  vars["GTEST_FILTER"] = current_test();
  for (const auto& [k, v] : extra) vars[k] = v;
  return std::make_unique<ScopedEnv>(vars);
}

class LazyMode {
 public:
  LazyMode() { graphs::enable_lazy_mode(true); }
  ~LazyMode() { graphs::enable_lazy_mode(false); }
};

constexpr int64_t kGlobalBatch = 16, kSteps = 4;

// Step `step`'s rows [first, first + n) of a fixed data set: 8 features, 4 classes.
inline std::pair<Tensor, Tensor> rows(int64_t step, int64_t first, int64_t n, Device d) {
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
inline std::vector<float> train(const std::string& optimizer, Strategy* s, int accum = 1, int shard_of_two = -1) {
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
      if (s) s->before_forward(*net);
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

// The largest |a[k] - b[k]|; NaN when any element of either is NaN or infinite, so that both
// max_diff(...) <= tol and max_diff(...) > tol fail then (std::max(worst, NaN) would keep
// worst, and a NaN weight would pass as equal).
inline float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    if (!std::isfinite(a[k]) || !std::isfinite(b[k])) return std::numeric_limits<float>::quiet_NaN();
    worst = std::max(worst, std::abs(a[k] - b[k]));
  }
  return worst;
}

// Equal within 1e-5, every value finite.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k)
    if (!std::isfinite(got[k]) || !std::isfinite(want[k])) {
      ADD_FAILURE() << what << ": element " << k << " is not finite: got " << got[k] << ", want " << want[k];
      return;
    }
  EXPECT_LE(max_diff(got, want), 1e-5f) << what;
}

inline void train_and_compare(Strategy& s, const std::vector<std::pair<std::string, int>>& configs) {
  for (const auto& [optimizer, accum] : configs) {
    const std::vector<float> want = train(optimizer, nullptr);
    // The comparison can tell: this rank's half alone trains to other weights.
    EXPECT_GT(max_diff(train(optimizer, nullptr, 1, s.global_rank()), want), 1e-3f) << optimizer;
    expect_close(train(optimizer, &s, accum), want,
                 optimizer + ", accumulate " + std::to_string(accum) + ", rank " + std::to_string(s.global_rank()));
  }
}

// The reducer in one process (ddp_test.cpp, ddp_in_graph_test.cpp): a stand-in all-reduce
// plays the other ranks, on a tiny network in lazy mode, eager on hpu:0 or eager on the cpu.
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

inline std::vector<std::vector<float>> grads_of(const Tiny& t) {
  std::vector<std::vector<float>> out;
  for (const Tensor* p : {&t.w1, &t.b1, &t.w2}) out.push_back(p->grad().to_vector());
  return out;
}

inline std::vector<std::vector<float>> plain_grads(Device d, int backwards) {
  Tiny t(d);
  for (int k = 0; k < backwards; ++k) t.loss().backward();
  if (d.is_hpu()) graphs::mark_step(d);
  return grads_of(t);
}

constexpr int64_t kMB = 1 << 20;

enum class Where { LazyHpu, EagerHpu, EagerCpu };

class DDPReducerTest : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override { graphs::enable_lazy_mode(lazy()); }
  void TearDown() override { graphs::enable_lazy_mode(false); }
  bool lazy() const { return GetParam() == Where::LazyHpu; }
  Device dev() const { return GetParam() == Where::EagerCpu ? Device::cpu() : Device::hpu(0); }
};

inline std::string where_name(const ::testing::TestParamInfo<Where>& i) {
  return i.param == Where::LazyHpu ? "LazyHpu" : i.param == Where::EagerHpu ? "EagerHpu" : "EagerCpu";
}

}  // namespace hg::training::ddp_test
