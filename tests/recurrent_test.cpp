// The recurrent op's two paths give the same answers: its kernel prepared with the recurrent
// weights frozen (a captured graph: one oneDNN matmul per step with the weights pre-packed) and
// without them (eager: sgemm), for every cell kind, batch 1 and a few rows, reverse and GRU's
// two reset forms. The answers themselves are checked against PyTorch by the ONNX import tests.
#include <gtest/gtest.h>

#include <random>

#include "engine/op.h"
#include "engine/ops_recurrent.h"
#include "tests/fusion_test_util.h"

namespace hg {
namespace {

std::vector<float> random_values(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<float> run_kernel(const Kernel& k, const std::vector<std::vector<float>>& in, int64_t out_elems) {
  std::vector<const void*> ptrs;
  for (const auto& v : in) ptrs.push_back(v.data());
  std::vector<float> out(static_cast<size_t>(out_elems));
  k(ptrs.data(), out.data());
  return out;
}

TEST(RecurrentOp, PrepackedWeightsGiveTheSameAnswers) {
  const OpSchema& op = op_schema("recurrent");
  ASSERT_NE(op.prepack, nullptr);
  std::mt19937 rng(3);
  const int64_t steps = 6, hidden = 24;
  for (int64_t cell : {0, 1, 2})
    for (int64_t batch : {1, 3})
      for (int64_t variant : {0, 1}) {  // reverse, relu (RNN), linear_before_reset + Rb (GRU)
        const int64_t gates = cell == 0 ? 4 : cell == 1 ? 3 : 1, gh = gates * hidden;
        std::vector<TensorMeta> metas{{{steps, batch, gh}, DType::F32}, {{gh, hidden}, DType::F32}, {{batch, hidden}, DType::F32}};
        if (cell == 0) metas.push_back({{batch, hidden}, DType::F32});
        if (cell == 1 && variant) metas.push_back({{gh}, DType::F32});
        const Attrs a{{cell, variant, cell == 2 && variant, cell == 1 && variant}, {}};
        const TensorMeta out = op.infer(op, metas, a);
        std::vector<std::vector<float>> in;
        for (const auto& m : metas) in.push_back(random_values(m.numel(), rng));
        std::vector<const void*> constant(metas.size(), nullptr);
        constant[1] = in[1].data();
        const auto plain = run_kernel(op.prepare(metas, out, a), in, out.numel());
        const auto packed = run_kernel(op.prepack(metas, out, a, constant), in, out.numel());
        test::fusion::expect_near({packed}, {plain}, 1e-4, 1e-5);  // two GEMMs: other summation orders
        if (HasFailure()) FAIL() << "cell " << cell << " batch " << batch << " variant " << variant;
      }
}

}  // namespace
}  // namespace hg
