// Post-accumulate-grad hooks on leaf tensors (engine/autograd.h), eager on the CPU and traced
// in lazy mode on hpu:0, including a hook that runs the finished part of backward (mark_step)
// while backward goes on — what the DDP reducer does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/lazy.h"
#include "tests/errors.h"

namespace hg {
namespace {

using ::testing::ElementsAre;
using test::error_of;
using ::testing::HasSubstr;

Tensor leaf(const std::vector<float>& v, const Shape& s, Device d = {}) {
  Tensor t = Tensor::from_vector(v, s, d);
  t.set_requires_grad(true);
  return t;
}

// loss = sum((x @ w^T + b) * 2): d/dw = 2 * colsum(x) per row, d/db = 2 * rows.
struct Net {
  Tensor w, b, x;
  explicit Net(Device d = {})
      : w(leaf({1, 2, 3, 4}, {2, 2}, d)), b(leaf({0.5f, -0.5f}, {2}, d)),
        x(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, d)) {}
  Tensor loss() const { return ops::sum(ops::scale(ops::linear(x, w, b), 2)); }
};

TEST(AutogradHook, RunsOnceAfterEachLeafAccumulatedInBackwardOrder) {
  Net n;
  std::vector<std::string> calls;
  std::vector<std::vector<float>> seen;
  auto hw = register_post_accumulate_grad_hook(n.w, [&](const Tensor& t) {
    EXPECT_EQ(t.impl(), n.w.impl());
    calls.push_back("w");
    seen.push_back(t.grad().to_vector());
  });
  auto hb = register_post_accumulate_grad_hook(n.b, [&](const Tensor& t) {
    calls.push_back("b");
    seen.push_back(t.grad().to_vector());
  });
  n.loss().backward();
  ASSERT_EQ(calls.size(), 2u);  // once per leaf, whatever the order autograd picked
  EXPECT_NE(calls[0], calls[1]);
  const std::vector<float> gw{18, 24, 18, 24}, gb{6, 6};
  EXPECT_EQ(seen[calls[0] == "w" ? 0 : 1], gw);
  EXPECT_EQ(seen[calls[0] == "b" ? 0 : 1], gb);
  // A second backward accumulates: the hook sees the sum.
  calls.clear(), seen.clear();
  n.loss().backward();
  EXPECT_EQ(seen[calls[0] == "w" ? 0 : 1], (std::vector<float>{36, 48, 36, 48}));
}

TEST(AutogradHook, SeveralHooksRunInRegistrationOrderAndRemovalStopsThem) {
  Net n;
  std::vector<int> calls;
  GradHookHandle h1 = register_post_accumulate_grad_hook(n.w, [&](const Tensor&) { calls.push_back(1); });
  GradHookHandle h2 = register_post_accumulate_grad_hook(n.w, [&](const Tensor&) { calls.push_back(2); });
  n.loss().backward();
  EXPECT_THAT(calls, ElementsAre(1, 2));
  h1.remove();
  EXPECT_FALSE(h1.active());
  h1.remove();  // idempotent
  n.loss().backward();
  EXPECT_THAT(calls, ElementsAre(1, 2, 2));
  { GradHookHandle moved = std::move(h2); }  // destroyed with its handle
  n.loss().backward();
  EXPECT_THAT(calls, ElementsAre(1, 2, 2));
  EXPECT_EQ(n.w.grad().to_vector(), (std::vector<float>{54, 72, 54, 72}));  // backward unchanged
}

TEST(AutogradHook, SharedImplSharesHooksAndOtherTensorsAreNotHooked) {
  Net n;
  int calls = 0;
  Tensor alias = n.w;  // same impl
  auto h = register_post_accumulate_grad_hook(alias, [&](const Tensor&) { ++calls; });
  Tensor other = leaf({1, 2, 3, 4}, {2, 2});
  ops::sum(other).backward();
  EXPECT_EQ(calls, 0);
  n.loss().backward();
  EXPECT_EQ(calls, 1);
}

TEST(AutogradHook, RefusesNonLeavesAndTensorsWithoutGrad) {
  Net n;
  Tensor y = ops::scale(n.w, 2);
  EXPECT_THAT(error_of<InvalidArgument>([&] { (void)register_post_accumulate_grad_hook(y, [](const Tensor&) {}); }),
              HasSubstr("must be a leaf that requires grad"));
  EXPECT_THROW((void)register_post_accumulate_grad_hook(n.x, [](const Tensor&) {}), InvalidArgument);
  EXPECT_THROW((void)register_post_accumulate_grad_hook(n.w, PostAccumulateGradHook()), InvalidArgument);
}

TEST(AutogradHook, AThrowingHookEndsBackwardWithItsError) {
  Net n;
  auto h = register_post_accumulate_grad_hook(n.b, [](const Tensor&) { throw InvalidArgument("hook says no"); });
  EXPECT_THAT(error_of<InvalidArgument>([&] { n.loss().backward(); }), HasSubstr("hook says no"));
}

// Two layers: w2's gradient is complete after the outer matmul's backward, long before w1's.
struct TwoLayers {
  Tensor w1, w2, x;
  explicit TwoLayers(Device d)
      : w1(leaf({0.5f, -1, 2, 0.25f, 1, 1}, {3, 2}, d)), w2(leaf({1, -2, 0.5f}, {1, 3}, d)),
        x(Tensor::from_vector({1, 2, -1, 0.5f}, {2, 2}, d)) {}
  Tensor loss() const { return ops::sum(ops::matmul(ops::relu(ops::matmul(x, w1, false, true)), w2, false, true)); }
};

TEST(AutogradHook, ALeafIsAccumulatedAsSoonAsItsLastConsumerRan) {
  TwoLayers n(Device::cpu());
  std::vector<std::string> calls;
  Tensor w1_grad_at_w2;
  auto h1 = register_post_accumulate_grad_hook(n.w1, [&](const Tensor&) { calls.push_back("w1"); });
  auto h2 = register_post_accumulate_grad_hook(n.w2, [&](const Tensor&) {
    calls.push_back("w2");
    w1_grad_at_w2 = n.w1.grad();
  });
  n.loss().backward();
  EXPECT_THAT(calls, ElementsAre("w2", "w1"));  // the layer nearer the loss first
  EXPECT_FALSE(w1_grad_at_w2.defined());        // w1's gradient did not exist yet
}

TEST(AutogradHook, LazyGradIsPendingInTheHookAndMarkStepMidBackwardKeepsResults) {
  TwoLayers ref(Device::cpu());
  ref.loss().backward();
  graphs::enable_lazy_mode(true);
  const Device hpu = Device::hpu(0);
  for (bool split : {false, true}) {
    TwoLayers n(hpu);
    std::vector<bool> lazy_in_hook;
    auto on_grad = [&](const Tensor& t) {
      lazy_in_hook.push_back(t.grad().is_lazy());
      if (split) graphs::mark_step(hpu);  // runs the finished part of backward now
    };
    auto h1 = register_post_accumulate_grad_hook(n.w1, on_grad);
    auto h2 = register_post_accumulate_grad_hook(n.w2, on_grad);
    const uint64_t steps = graphs::lazy_stats().steps;
    n.loss().backward();
    EXPECT_THAT(lazy_in_hook, ElementsAre(true, true)) << "split " << split;
    graphs::mark_step(hpu);
    // Split: forward + backward up to w2, then the rest up to w1; else one graph.
    EXPECT_EQ(graphs::lazy_stats().steps - steps, split ? 2u : 1u);
    EXPECT_EQ(n.w1.grad().to_vector(), ref.w1.grad().to_vector());
    EXPECT_EQ(n.w2.grad().to_vector(), ref.w2.grad().to_vector());
  }
  graphs::enable_lazy_mode(false);
}

// backward frees the graph it ran and leaves a marker: an intermediate of an earlier step used
// again without detach() is an error (PyTorch: "Trying to backward through the graph a second
// time"), not a silent new leaf that would collect a .grad. Nothing is accumulated then.
TEST(AutogradFreedGraph, BackwardThroughAnEarlierStepsIntermediateIsAnError) {
  Net n;
  Tensor h = ops::linear(n.x, n.w, n.b);  // an intermediate, kept across "steps"
  ops::sum(h).backward();
  const std::vector<float> gw = n.w.grad().to_vector();
  EXPECT_TRUE(h.requires_grad());
  Tensor w2 = leaf({1, 1}, {1, 2});
  Tensor next = ops::sum(ops::matmul(h, w2, false, true));  // the next step reuses h without detach()
  EXPECT_THAT(error_of<InvalidArgument>([&] { next.backward(); }), HasSubstr("graph a second time"));
  EXPECT_FALSE(h.grad().defined());
  EXPECT_FALSE(w2.grad().defined());
  EXPECT_EQ(n.w.grad().to_vector(), gw);
  // The same loss twice, and a hook on the freed intermediate: refused too.
  Tensor loss = n.loss();
  loss.backward();
  EXPECT_THAT(error_of<InvalidArgument>([&] { loss.backward(); }), HasSubstr("graph a second time"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { (void)register_post_accumulate_grad_hook(h, [](const Tensor&) {}); }),
              HasSubstr("leaf"));
  // detach() makes it a constant of the new graph: d/dw2 = column sums of h.
  ops::sum(ops::matmul(h.detach(), w2, false, true)).backward();
  EXPECT_EQ(w2.grad().to_vector(), (std::vector<float>{34.5f, 73.5f}));
}

}  // namespace
}  // namespace hg
