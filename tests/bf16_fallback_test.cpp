// BF16 ops where oneDNN has no BF16 primitives (engine/prepare_kernel.h): the process caps
// oneDNN at AVX2, as on a CPU without AVX-512, before its first primitive, so the fallback runs on
// every machine. The answers are the F32 kernels' on the BF16 values, rounded to BF16: eager and
// in a captured graph whose weights and bias are constants (widened once, read at every replay).
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <vector>

#include "engine/dnnl_context.h"
#include "engine/ops.h"
#include "engine/ops_nn.h"
#include "graphs/hpu_graph.h"
#include "tests/golden.h"

namespace hg {
namespace {

const Device kHpu = Device::hpu(0);

Tensor values(const Shape& shape, float scale, float shift) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i) * 0.7f + shift) * scale;
  return Tensor::from_vector(v, shape);
}

// F32 on the BF16-rounded values, rounded to BF16.
std::vector<float> rounded(const Tensor& t) { return t.to(DType::BF16).to(DType::F32).to_vector(); }

TEST(Bf16ViaF32, WithoutBf16PrimitivesBf16OpsComputeInF32) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success ||
      dnnl::get_effective_cpu_isa() != dnnl::cpu_isa::avx2)
    GTEST_SKIP() << "oneDNN already chose its ISA in this process (run this test alone, as ctest does)";
  ASSERT_FALSE(kernels::dnnl_has_bf16());
  const Tensor x = values({4, 16}, 1.0f, 0.1f), w = values({8, 16}, 0.5f, 0.3f), b = values({8}, 0.2f, 0.5f);
  auto bf = [](const Tensor& t) { return t.to(DType::BF16); };
  auto f32 = [](const Tensor& t) { return t.to(DType::BF16).to(DType::F32); };
  const std::vector<float> want = rounded(ops::relu(ops::linear(f32(x), f32(w), f32(b))));
  const Tensor eager = ops::relu(ops::linear(bf(x), bf(w), bf(b)));
  ASSERT_EQ(eager.dtype(), DType::BF16);
  test::expect_close(eager.to(DType::F32).to_vector(), want, 1e-2, "eager BF16 linear", 1e-2);

  // A 3x3 convolution and a pooling, eager.
  const Tensor img = values({2, 8, 6, 6}, 1.0f, 0.2f), k = values({8, 8, 3, 3}, 0.3f, 0.4f);
  const std::vector<float> conv_want = rounded(ops::max_pool2d(ops::conv2d(f32(img), f32(k), {1, 1}, {1, 1}), {2, 2}));
  const Tensor conv = ops::max_pool2d(ops::conv2d(bf(img), bf(k), {1, 1}, {1, 1}), {2, 2});
  test::expect_close(conv.to(DType::F32).to_vector(), conv_want, 2e-2, "eager BF16 conv + pool", 2e-2);

  // Captured, the weights and bias frozen: constants of the graph.
  const Tensor wh = bf(w).to(kHpu), bh = bf(b).to(kHpu);
  Tensor in = bf(x).to(kHpu), out;
  graphs::HPUGraph g(kHpu);
  g.capture([&] { out = ops::relu(ops::linear(in, wh, bh)); }, {.frozen = {wh, bh}});
  g.replay();
  test::expect_close(out.to(DType::F32).to_vector(), want, 1e-2, "captured BF16 linear", 1e-2);
}

}  // namespace
}  // namespace hg
