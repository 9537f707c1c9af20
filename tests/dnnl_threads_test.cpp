// One prepared oneDNN kernel run by several threads at once: each run must give the same result
// as a run alone (primitives take their scratchpad from the running thread).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "engine/dnnl_context.h"
#include "engine/op.h"
#include "tests/golden.h"

using namespace hg;

namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// out matches ref within 1e-4 (1 + |ref|) element-wise, all finite.
bool matches(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return false;
  for (size_t i = 0; i < out.size(); ++i)
    if (!hg::test::within_tolerance(out[i], ref[i], 1e-4, 1e-4)) return false;
  return true;
}

TEST(DnnlThreadsHelpers, MatchesFailsOnNaNAndInfinity) {
  EXPECT_TRUE(matches({1.f, -2.f}, {1.f, -2.f}));
  EXPECT_FALSE(matches({1.f, NAN}, {1.f, -2.f}));
  EXPECT_FALSE(matches({1.f, -INFINITY}, {1.f, -2.f}));
  EXPECT_FALSE(matches({1.f, -2.f}, {1.f, INFINITY}));
}

// Runs `k` on `in` from two threads, `reps` times each, and counts results differing from `ref`.
int wrong_results(const Kernel& k, const std::vector<const void*>& in, const std::vector<float>& ref, int reps) {
  std::atomic<int> wrong{0};
  auto worker = [&] {
    std::vector<float> out(ref.size());
    for (int r = 0; r < reps; ++r) {
      k(in.data(), out.data());
      if (!matches(out, ref)) ++wrong;
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  return wrong;
}

}  // namespace

TEST(DnnlThreads, OneBmmKernelOnTwoThreadsGivesTheSingleThreadResult) {
  const TensorMeta qa{{4, 128, 32}, DType::F32}, kb{{4, 32, 128}, DType::F32}, out{{4, 128, 128}, DType::F32};
  const OpSchema& bmm = op_schema("bmm");
  Kernel k = bmm.prepare({qa, kb}, out, Attrs{{0, 0}, {}});
  auto a = random_floats(qa.numel(), 1), b = random_floats(kb.numel(), 2);
  std::vector<const void*> in{a.data(), b.data()};
  std::vector<float> ref(out.numel());
  k(in.data(), ref.data());
  EXPECT_EQ(wrong_results(k, in, ref, 300), 0);
}

TEST(DnnlThreads, OneLinearKernelOnTwoThreadsGivesTheSingleThreadResult) {
  const TensorMeta x{{1, 768}, DType::F32}, w{{768, 768}, DType::F32}, bias{{768}, DType::F32}, out{{1, 768}, DType::F32};
  Kernel k = op_schema("linear").prepare({x, w, bias}, out, Attrs{{0}, {}});
  auto xv = random_floats(x.numel(), 3), wv = random_floats(w.numel(), 4), bv = random_floats(bias.numel(), 5);
  std::vector<const void*> in{xv.data(), wv.data(), bv.data()};
  std::vector<float> ref(out.numel());
  k(in.data(), ref.data());
  EXPECT_EQ(wrong_results(k, in, ref, 300), 0);
}

// A thread that runs the kernels of many models in turn (a server's loader, reloading) keeps
// memory objects only for calls that still exist: the entries of destroyed calls are dropped.
TEST(DnnlThreads, BindingsOfDestroyedCallsAreDropped) {
  using hg::kernels::DnnlCall;
  using hg::kernels::thread_bound_calls;
  const dnnl::memory::desc md({1, 64}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  const dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, md, 0.f, 0.f),
      hg::kernels::user_scratchpad(), hg::kernels::dnnl_engine());
  const dnnl::primitive prim = dnnl::eltwise_forward(pd);
  std::vector<float> x = random_floats(64, 3), y(64);
  const void* ptrs[] = {x.data(), y.data()};
  DnnlCall kept(prim, {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
  kept.run(ptrs);
  for (int i = 0; i < 5000; ++i) {  // a "reload": a new call, run, then freed
    DnnlCall c(prim, {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
    c.run(ptrs);
  }
  EXPECT_LE(thread_bound_calls(), 128u) << "memory objects of destroyed calls kept";
  kept.run(ptrs);  // still bound (or bound again) and correct
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], std::max(x[i], 0.f)) << i;
}
