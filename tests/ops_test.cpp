// Op conformance against PyTorch golden values on every device and mode, plus the engine's
// tensor, device and error behaviour.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <omp.h>

#include <thread>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/op.h"
#include "engine/ops.h"
#include "golden.h"
#include "graphs/lazy.h"

using namespace hg;
using namespace hg::test;
using ::testing::HasSubstr;

namespace {

Tensor run_op(const std::string& op, const nlohmann::json& attrs, const std::vector<Tensor>& in) {
  const int64_t dim = attrs.value("dim", ops::kAllDims);
  if (op == "matmul") return ops::matmul(in[0], in[1]);
  if (op == "linear") return ops::linear(in[0], in[1], in[2]);
  if (op == "relu") return ops::relu(in[0]);
  if (op == "softmax") return ops::softmax(in[0], dim);
  if (op == "log_softmax") return ops::log_softmax(in[0], dim);
  if (op == "cross_entropy") return ops::cross_entropy(in[0], in[1]);
  if (op == "add") return ops::add(in[0], in[1]);
  if (op == "sub") return ops::sub(in[0], in[1]);
  if (op == "mul") return ops::mul(in[0], in[1]);
  if (op == "sum") return ops::sum(in[0], dim);
  if (op == "mean") return ops::mean(in[0], dim);
  ADD_FAILURE() << "golden case for unknown op " << op;
  return {};
}

class OpConformance : public ::testing::TestWithParam<Mode> {};

TEST_P(OpConformance, ForwardAndBackwardMatchPyTorch) {
  ModeGuard guard(GetParam());
  const Device dev = GetParam() == Mode::Cpu ? Device::cpu() : Device::hpu(0);
  const auto cases = test::load_json("ops.json");
  ASSERT_GE(cases.size(), 16u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<Tensor> in;
    for (const auto& j : c["inputs"]) {
      in.push_back(test::tensor_from(j, dev));
      if (in.back().dtype() == DType::F32) in.back().set_requires_grad(true);
    }
    Tensor out = run_op(c["op"], c["attrs"], in);
    ASSERT_EQ(out.device(), dev);
    EXPECT_EQ(out.shape(), c["output"]["shape"].get<Shape>());
    const auto want = c["output"]["data"].get<std::vector<float>>();
    test::expect_close(out.to_vector(), want, 1e-5, "output");
    if (!c.contains("grads")) continue;
    Tensor upstream = test::tensor_from(c["upstream"], dev);
    Tensor loss = ops::sum(ops::mul(out, upstream));
    loss.backward();
    size_t g = 0;
    for (const auto& t : in) {
      if (t.dtype() != DType::F32) continue;
      ASSERT_TRUE(t.grad().defined());
      test::expect_close(t.grad().to_vector(), c["grads"][g++].get<std::vector<float>>(), 1e-5, "grad");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDevices, OpConformance, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) {
                           return info.param == Mode::Cpu ? "cpu" : info.param == Mode::HpuEager ? "hpu_eager" : "hpu_lazy";
                         });

TEST(Tensor, ViewsShareStorage) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.impl()->storage, x.impl()->storage);
  EXPECT_EQ(t.contiguous().to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor r = x.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.impl()->storage, x.impl()->storage);
  EXPECT_EQ(t.reshape({6}).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));  // copies
  EXPECT_THROW(x.reshape({4, 2}), ShapeError);
}

TEST(Tensor, TransposedOperandsMatchContiguousOnes) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({1, 0, 2, 1, 0, 3}, {2, 3});
  // a^T b through the view equals the matmul attribute form.
  const auto via_view = ops::matmul(a.transpose(0, 1), b).to_vector();
  const auto via_attr = ops::matmul(a, b, true, false).to_vector();
  EXPECT_EQ(via_view, via_attr);
  EXPECT_EQ(via_attr, (std::vector<float>{5, 0, 14, 7, 0, 19, 9, 0, 24}));
}

TEST(Tensor, CopiesBetweenDevices) {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3});
  Tensor h = x.to(Device::hpu(0));
  EXPECT_EQ(h.device(), Device::hpu(0));
  EXPECT_NE(h.impl()->storage, x.impl()->storage);
  EXPECT_EQ(ops::scale(h, 2).to(Device::cpu()).to_vector(), (std::vector<float>{2, 4, 6}));
  EXPECT_THROW(x.to(Device::hpu(7)), DeviceError);
}

TEST(Errors, NameTheOpShapesAndDtypes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  try {
    ops::matmul(a, b);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 'matmul'"));
    EXPECT_THAT(e.what(), HasSubstr("F32[2, 3]"));
    EXPECT_THAT(e.what(), HasSubstr("F32[4, 5]"));
  }
  EXPECT_THROW(ops::add(a, Tensor::zeros({4})), ShapeError);
  try {
    ops::cross_entropy(a, Tensor::zeros({2}));  // F32 target
    FAIL() << "no error";
  } catch (const DTypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("input 1 must be I64"));
  }
  try {
    ops::add(a, Tensor::zeros({2, 3}, DType::F32, Device::hpu(0)));
    FAIL() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cpu"));
    EXPECT_THAT(e.what(), HasSubstr("hpu:0"));
  }
}

TEST(Device, ParsesNames) {
  EXPECT_EQ(Device::parse("hpu:0"), Device::hpu(0));
  EXPECT_EQ(Device::parse("hpu"), Device::hpu(0));
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_THROW(Device::parse("gpu:0"), InvalidArgument);
  EXPECT_THROW(Device::parse("hpu:x"), InvalidArgument);
}

TEST(Device, MemoryStatsCountAllocations) {
  const Device d = Device::hpu(0);
  synchronize(d);
  const MemoryStats before = memory_stats(d);
  EXPECT_GT(before.limit, 0);
  {
    Tensor t = Tensor::empty({1000}, DType::F32, d);
    const MemoryStats during = memory_stats(d);
    EXPECT_EQ(during.in_use - before.in_use, 4000);
    EXPECT_EQ(during.num_allocs - before.num_allocs, 1);
    EXPECT_EQ(during.active_allocs - before.active_allocs, 1);
    EXPECT_GE(during.max_in_use, during.in_use);
    EXPECT_GE(during.max_alloc_size, 4000);
  }
  const MemoryStats after = memory_stats(d);
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(after.num_frees - before.num_frees, 1);
}

TEST(Device, OutOfMemoryIsTypedAndRecoverable) {
  const Device d = Device::hpu(0);
  const MemoryStats s = memory_stats(d);
  try {
    Tensor::empty({s.limit}, DType::F32, d);  // 4x the limit
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("hpu:0"));
  }
  EXPECT_EQ(memory_stats(d).in_use, s.in_use);
  Tensor ok = Tensor::from_vector({1, 2}, {2}, d);  // still usable
  EXPECT_EQ(ops::relu(ok).to_vector(), (std::vector<float>{1, 2}));
}

TEST(Device, OverflowingOrAbsurdShapesAreShapeErrors) {
  constexpr int64_t kHuge = int64_t{1} << 62;
  for (const Shape& shape : {Shape{kHuge, 8}, Shape{int64_t{1} << 31, int64_t{1} << 31, 4}, Shape{int64_t{1} << 40}}) {
    try {
      Tensor::empty(shape, DType::F32);
      FAIL() << "no error for " << shape_str(shape);
    } catch (const ShapeError& e) {
      EXPECT_THAT(e.what(), HasSubstr(shape_str(shape)));
    }
  }
  EXPECT_EQ(Tensor::empty({kHuge, 0}, DType::F32).numel(), 0);  // empty, whatever the other dims
}

TEST(Device, HostPoolRejectsOversizedRequestsBeforeRounding) {
  MemoryPool pool("test", INT64_MAX);
  for (size_t bytes : {SIZE_MAX, SIZE_MAX / 2 + 1, (size_t{1} << 40) + 1}) {
    try {
      pool.allocate(bytes);
      FAIL() << "no error for " << bytes;
    } catch (const OutOfMemoryError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::to_string(bytes)));
    }
  }
  EXPECT_EQ(pool.stats().in_use, 0);
  void* p = pool.allocate(100);
  pool.release(p, 100);
}

TEST(Device, QueueRunsTasksInOrderUnderConcurrentSubmitters) {
  ExecQueue q("test");
  std::vector<int> seen;  // touched only by the worker
  std::vector<std::vector<int>> per_thread(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) q.enqueue([&, t, i] { seen.push_back(t * 1000 + i); });
    });
  for (auto& th : threads) th.join();
  const uint64_t ev = q.record();
  q.synchronize();
  EXPECT_TRUE(q.done(ev));
  ASSERT_EQ(seen.size(), 2000u);
  for (int v : seen) per_thread[v / 1000].push_back(v % 1000);
  for (const auto& p : per_thread) {  // each submitter's tasks ran in its order
    ASSERT_EQ(p.size(), 500u);
    for (int i = 0; i < 500; ++i) EXPECT_EQ(p[i], i);
  }
}

TEST(Device, RunSyncWaitsForQueuedWorkAndRunsInlineWhenIdle) {
  ExecQueue q("sync");
  std::vector<int> order;
  q.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    order.push_back(1);
  });
  q.run_sync([&] { order.push_back(2); });  // must not overtake the queued task
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  std::thread::id ran_on;
  q.run_sync([&] { ran_on = std::this_thread::get_id(); });  // idle queue: runs here
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  q.enqueue([&] { order.push_back(3); });
  q.synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(Device, QueueWorkerUsesItsOwnOpenMpTeamSize) {
  for (int threads : {1, 2}) {
    ExecQueue q("threads", threads);
    int seen = 0;
    q.enqueue([&] { seen = omp_get_max_threads(); });
    q.synchronize();
    EXPECT_EQ(seen, threads);
    const int caller = omp_get_max_threads();
    q.run_sync([&] { seen = omp_get_max_threads(); });  // inline on this thread, same team size
    EXPECT_EQ(seen, threads);
    EXPECT_EQ(omp_get_max_threads(), caller);  // and the caller's setting is restored
  }
}

TEST(Device, QueueReportsAFailedTask) {
  ExecQueue q("failing");
  q.enqueue([] { throw std::runtime_error("boom"); });
  try {
    q.synchronize();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("boom"));
  }
  int ran = 0;
  q.enqueue([&] { ran = 1; });
  q.synchronize();  // the queue keeps working
  EXPECT_EQ(ran, 1);
}

TEST(Eager, KernelCacheReusesPreparedKernels) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  ops::matmul(a, a);
  const size_t n = kernel_cache_size();
  for (int i = 0; i < 10; ++i) ops::matmul(a, a);
  EXPECT_EQ(kernel_cache_size(), n);
}

TEST(Eager, KernelCacheKeysFloatAttributesExactly) {
  Tensor x = Tensor::from_vector({1e9f}, {1});
  EXPECT_FLOAT_EQ(ops::scale(x, 1e-9).item(), 1.0f);
  EXPECT_FLOAT_EQ(ops::scale(x, 2e-9).item(), 2.0f);  // 1e-9 and 2e-9 must not share a kernel
  graphs::enable_lazy_mode(true);
  Tensor h = x.to(Device::hpu(0));
  EXPECT_FLOAT_EQ(ops::scale(h, 1e-9).item(), 1.0f);
  EXPECT_FLOAT_EQ(ops::scale(h, 2e-9).item(), 2.0f);  // nor a cached graph
  graphs::enable_lazy_mode(false);
}

TEST(Autograd, AccumulatesAndStopsUnderNoGrad) {
  Tensor w = Tensor::from_vector({1, -2, 3}, {3});
  w.set_requires_grad(true);
  Tensor y = ops::sum(ops::mul(w, w));  // d/dw = 2w
  y.backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{2, -4, 6}));
  ops::sum(w).backward();  // accumulates +1
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{3, -3, 7}));
  NoGradGuard g;
  EXPECT_FALSE(ops::mul(w, w).requires_grad());
}

}  // namespace
