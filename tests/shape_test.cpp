// The shape family: broadcasting edge cases of add/sub/mul, permute/transpose, expand, slice,
// concat, split, reductions over axes, argmax, bmm and scaled dot-product attention against
// PyTorch golden values (tests/golden/shape.json, scripts/golden_shape.py) on cpu, hpu eager
// and hpu lazy; finite differences (F64 for our own loops, F32 for oneDNN bmm and attention);
// error messages; views, dtypes and empty tensors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/op.h"
#include "engine/ops.h"
#include "golden.h"
#include "gradcheck.h"
#include "graphs/lazy.h"

using namespace hg;
using namespace hg::test;
using ::testing::HasSubstr;

namespace {

Tensor bools(const std::vector<int>& v, const Shape& shape, Device dev = Device::cpu()) {
  Tensor t = Tensor::empty(shape, DType::BOOL);
  uint8_t* p = t.data<uint8_t>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i] != 0;
  return t.to(dev);
}

// (Empty tensors are made with zeros(): Tensor::from_vector memcpy's from the null data()
// of an empty vector, which UBSan rejects.)
Tensor golden_input(const nlohmann::json& j, Device dev) {
  const Shape shape = j["shape"].get<Shape>();
  if (numel(shape) == 0) return Tensor::zeros(shape, DType::F32, dev);
  if (j.value("dtype", std::string("F32")) == "BOOL") return bools(j["data"].get<std::vector<int>>(), shape, dev);
  return test::tensor_from(j, dev);
}

Shape ints(const nlohmann::json& a, const char* key) { return a.contains(key) ? a[key].get<Shape>() : Shape{}; }

Tensor run_shape_op(const std::string& op, const nlohmann::json& a, const std::vector<Tensor>& in) {
  const bool keepdim = a.value("keepdim", false);
  if (op == "add") return ops::add(in[0], in[1]);
  if (op == "sub") return ops::sub(in[0], in[1]);
  if (op == "mul") return ops::mul(in[0], in[1]);
  if (op == "permute") return ops::permute(in[0], ints(a, "dims"));
  if (op == "transpose") {  // Tensor::transpose on a tensor that requires grad: the permute op
    const Shape d = ints(a, "dims");
    return in[0].transpose(static_cast<int>(d[0]), static_cast<int>(d[1]));
  }
  if (op == "expand") return ops::expand(in[0], ints(a, "shape"));
  if (op == "slice") return ops::slice(in[0], a["dim"], a["start"], a["end"], a["step"]);
  if (op == "concat") return ops::concat(in, a["dim"]);
  if (op == "split") {
    auto parts = a.contains("sizes") ? ops::split(in[0], ints(a, "sizes"), a["dim"])
                                     : ops::split(in[0], a["size"].get<int64_t>(), a["dim"]);
    return parts.at(a["index"].get<size_t>());
  }
  if (op == "sum") return ops::sum(in[0], ints(a, "dims"), keepdim);
  if (op == "mean") return ops::mean(in[0], ints(a, "dims"), keepdim);
  if (op == "max") return ops::max(in[0], ints(a, "dims"), keepdim);
  if (op == "argmax") return ops::argmax(in[0], a.value("dim", ops::kAllDims), keepdim);
  if (op == "bmm") return ops::bmm(in[0], in[1], a.value("trans_a", false), a.value("trans_b", false));
  if (op == "matmul") return ops::matmul(in[0], in[1]);
  if (op == "sdpa")
    return ops::scaled_dot_product_attention(in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor(),
                                             a.value("causal", false), a.value("scale", NAN));
  ADD_FAILURE() << "golden case for unknown op " << op;
  return {};
}

// {rtol, atol}: copies are exact; sums accumulate in double; oneDNN's F32 GEMM rounds per step.
std::pair<double, double> tolerance(const std::string& op) {
  if (op == "permute" || op == "transpose" || op == "expand" || op == "slice" || op == "concat" || op == "split" ||
      op == "max")
    return {0, 0};
  if (op == "bmm" || op == "matmul" || op == "sdpa") return {1e-4, 1e-5};
  return {1e-5, 1e-6};
}

class ShapeConformance : public ::testing::TestWithParam<Mode> {};

TEST_P(ShapeConformance, ForwardAndBackwardMatchPyTorch) {
  ModeGuard guard(GetParam());
  const Device dev = GetParam() == Mode::Cpu ? Device::cpu() : Device::hpu(0);
  const auto cases = test::load_json("shape.json");
  ASSERT_GE(cases.size(), 60u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string op = c["op"];
    std::vector<Tensor> in;
    for (const auto& j : c["inputs"]) {
      in.push_back(golden_input(j, dev));
      if (in.back().dtype() == DType::F32) in.back().set_requires_grad(true);
    }
    Tensor out = run_shape_op(op, c["attrs"], in);
    ASSERT_TRUE(out.defined());
    ASSERT_EQ(out.device(), dev);
    EXPECT_EQ(out.shape(), c["output"]["shape"].get<Shape>());
    if (op == "argmax") {
      EXPECT_EQ(out.dtype(), DType::I64);
      EXPECT_EQ(out.to_indices(), c["output"]["data"].get<std::vector<int64_t>>());
      continue;
    }
    const auto [rtol, atol] = tolerance(op);
    test::expect_close(out.to_vector(), c["output"]["data"].get<std::vector<float>>(), rtol, "output", atol);
    Tensor loss = ops::sum(ops::mul(out, golden_input(c["upstream"], dev)));
    loss.backward();
    size_t g = 0;
    for (const auto& t : in) {
      if (t.dtype() != DType::F32) continue;
      ASSERT_TRUE(t.grad().defined()) << "input " << g;
      EXPECT_EQ(t.grad().shape(), t.shape());
      test::expect_close(t.grad().to_vector(), c["grads"][g++].get<std::vector<float>>(), std::max(rtol, 1e-5),
                         "grad", std::max(atol, 1e-6));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDevices, ShapeConformance, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) {
                           return info.param == Mode::Cpu ? "cpu" : info.param == Mode::HpuEager ? "hpu_eager" : "hpu_lazy";
                         });

// ---- finite differences ----

Tensor rand_t(const Shape& shape, unsigned seed, DType t = DType::F64) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (auto& x : v) x = static_cast<float>(nd(rng));
  return Tensor::from_vector(v, shape).to(t).detach();
}

// F64: eps 1e-6, tolerance 1e-7 (+ relative); F32 (oneDNN): eps 1e-3 and a loose tolerance.
void fd_check(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
              const std::vector<size_t>& check, const std::string& what) {
  const bool f64 = inputs[check[0]].dtype() == DType::F64;
  const double tol = f64 ? 1e-7 : 5e-3;
  expect_fd_gradients(f, std::move(inputs), check, what, {.eps = f64 ? 1e-6 : 1e-3, .rtol = tol, .atol = tol});
}

TEST(ShapeFiniteDifferences, MovementOpsInF64) {
  fd_check([](auto& in) { return ops::permute(in[0], {2, 0, 3, 1}); }, {rand_t({2, 3, 2, 2}, 1)}, {0}, "permute 4-D");
  fd_check([](auto& in) { return in[0].transpose(0, 2); }, {rand_t({2, 3, 2}, 2)}, {0}, "Tensor::transpose");
  fd_check([](auto& in) { return ops::slice(in[0], 1, -5, 7, 2); }, {rand_t({2, 6, 2}, 3)}, {0}, "slice step 2");
  fd_check([](auto& in) { return ops::concat(in, 1); }, {rand_t({2, 1, 3}, 4), rand_t({2, 2, 3}, 5), rand_t({2, 3, 3}, 6)},
           {0, 1, 2}, "concat inner dim");
  fd_check([](auto& in) { return ops::split(in[0], {2, 1, 2}, -1)[1]; }, {rand_t({3, 5}, 7)}, {0}, "split piece");
  fd_check([](auto& in) { return ops::causal_fill(in[0], -3.0); }, {rand_t({2, 3, 4}, 8)}, {0}, "causal_fill");
  fd_check([](auto& in) { return dispatch("contiguous", {in[0]}); }, {rand_t({3, 2}, 9)}, {0}, "contiguous op");
}

TEST(ShapeFiniteDifferences, ReductionsOverAxesInF64) {
  for (bool keep : {false, true}) {
    fd_check([=](auto& in) { return ops::sum(in[0], {0, 2}, keep); }, {rand_t({2, 3, 4}, 10)}, {0}, "sum {0, 2}");
    fd_check([=](auto& in) { return ops::mean(in[0], {-1, 1}, keep); }, {rand_t({2, 3, 2, 2}, 11)}, {0}, "mean {-1, 1}");
    fd_check([=](auto& in) { return ops::max(in[0], {1, 3}, keep); }, {rand_t({2, 3, 2, 3}, 12)}, {0}, "max {1, 3}");
  }
  fd_check([](auto& in) { return ops::max(in[0]); }, {rand_t({3, 4}, 13)}, {0}, "max of all");
  fd_check([](auto& in) { return ops::mean(in[0]); }, {rand_t({3, 4}, 14)}, {0}, "mean of all (single-dim form)");
  fd_check([](auto& in) { return ops::sum(in[0], 1, true); }, {rand_t({3, 4}, 15)}, {0}, "sum dim 1 (single-dim form)");
}

TEST(ShapeFiniteDifferences, BatchedMatmulAndAttentionInF32) {
  auto f32 = [](const Shape& s, unsigned seed) { return rand_t(s, seed, DType::F32); };
  fd_check([](auto& in) { return ops::bmm(in[0], in[1]); }, {f32({2, 1, 3, 2}, 20), f32({1, 2, 2, 3}, 21)}, {0, 1},
           "bmm broadcast");
  fd_check([](auto& in) { return ops::bmm(in[0], in[1], true, true); }, {f32({2, 3, 2}, 22), f32({4, 3}, 23)}, {0, 1},
           "bmm transposed, 2-D weight");
  fd_check([](auto& in) { return ops::scaled_dot_product_attention(in[0], in[1], in[2], {}, true); },
           {f32({1, 2, 3, 2}, 24), f32({1, 2, 3, 2}, 25), f32({1, 2, 3, 2}, 26)}, {0, 1, 2}, "sdpa causal");
  const Tensor mask = bools({1, 0, 1, 1, 1, 0}, {2, 3});
  fd_check([&](auto& in) { return ops::scaled_dot_product_attention(in[0], in[1], in[2], mask, false, 0.7); },
           {f32({2, 2, 2}, 27), f32({2, 3, 2}, 28), f32({2, 3, 2}, 29)}, {0, 1, 2}, "sdpa bool mask");
}

// ---- errors ----

void expect_shape_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << parts[0];
  } catch (const ShapeError& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

TEST(ShapeErrors, StridesThatOverflowAreRefused) {
  // Zero elements pass the byte caps; the other dimensions' strides must still fit int64 (the
  // fuzzer's ONNX initializer of shape [0, ~2^62, 764734]).
  EXPECT_THROW(Tensor::empty({0, int64_t{1} << 40, int64_t{1} << 40}, DType::F32), ShapeError);
  EXPECT_EQ(Tensor::empty({0, int64_t{1} << 20, 4}, DType::F32).strides(), (Shape{int64_t{1} << 22, 4, 1}));
}

TEST(ShapeErrors, NameTheOpAndOperands) {
  const Tensor x = Tensor::zeros({2, 3});
  expect_shape_error([&] { ops::permute(x, {0, 0}); }, {"op 'permute'", "F32[2, 3]", "repeat"});
  expect_shape_error([&] { ops::permute(x, {0}); }, {"op 'permute'", "each of the 2 dims"});
  expect_shape_error([&] { ops::slice(x, 1, 0, 3, 0); }, {"op 'slice'", "F32[2, 3]", "step must be positive"});
  expect_shape_error([&] { ops::slice(x, 2, 0, 1); }, {"op 'slice'", "dim 2 out of range"});
  expect_shape_error([&] { ops::concat({x, Tensor::zeros({3, 3})}, 1); },
                     {"op 'concat'", "F32[2, 3], F32[3, 3]", "input 1 differs in dim 0"});
  expect_shape_error([&] { ops::concat({x, Tensor::zeros({2})}, 0); }, {"op 'concat'", "different rank"});
  expect_shape_error([&] { ops::split(x, {1, 1}, 1); }, {"op 'split'", "F32[2, 3]", "add up to 2"});
  expect_shape_error([&] { ops::sum(x, {0, 2}); }, {"op 'reduce'", "F32[2, 3]", "dim 2 out of range"});
  expect_shape_error([&] { ops::mean(x, {1, -1}); }, {"op 'reduce'", "appears more than once"});
  expect_shape_error([&] { ops::max(Tensor::zeros({0, 3}), {0}); }, {"op 'reduce'", "F32[0, 3]", "empty dim 0"});
  expect_shape_error([&] { ops::max(Tensor::zeros({0, 3})); }, {"op 'reduce'", "F32[0, 3]"});
  expect_shape_error([&] { ops::argmax(Tensor::zeros({2, 0}), 1); }, {"op 'argmax'", "empty"});
  expect_shape_error([&] { ops::bmm(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 5, 6})); },
                     {"op 'bmm'", "F32[2, 3, 4], F32[2, 5, 6]", "inner dimensions differ (4 vs 5)"});
  expect_shape_error([&] { ops::bmm(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})); },
                     {"op 'bmm'", "cannot be broadcast"});
  expect_shape_error([&] { ops::matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({5, 6})); }, {"op 'bmm'", "(4 vs 5)"});
  expect_shape_error([&] { ops::bmm(Tensor::zeros({4}), Tensor::zeros({4, 2})); }, {"op 'bmm'", "rank >= 2"});
  expect_shape_error([&] { ops::expand(Tensor::zeros({3}), {-1, 3}); }, {"op 'expand'", "F32[3]", "[-1, 3]"});
  expect_shape_error([&] { ops::causal_fill(Tensor::zeros({3}), 0); }, {"op 'causal_fill'", "rank >= 2"});
  expect_shape_error([&] { ops::unsqueeze(x, 3); }, {"op 'unsqueeze'", "dim 3 out of range"});
  const Tensor q = Tensor::zeros({1, 2, 4}), k = Tensor::zeros({1, 3, 5});
  expect_shape_error([&] { ops::scaled_dot_product_attention(q, k, k); },
                     {"op 'scaled_dot_product_attention'", "F32[1, 2, 4], F32[1, 3, 5]", "head dim"});
  expect_shape_error([&] { ops::scaled_dot_product_attention(q, q, q, bools({1, 0, 1}, {3})); },
                     {"op 'scaled_dot_product_attention'", "BOOL[3]", "does not broadcast"});
  try {
    ops::bmm(Tensor::zeros({2, 2, 2}, DType::F64), Tensor::zeros({2, 2, 2}, DType::F64));
    ADD_FAILURE() << "no error";
  } catch (const DTypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 'bmm': inputs F64[2, 2, 2], F64[2, 2, 2]: supports F32 and BF16"));
  }
  try {
    ops::concat({x, Tensor::zeros({2, 3}, DType::F64)}, 0);
    ADD_FAILURE() << "no error";
  } catch (const DTypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 'concat'"));
  }
  EXPECT_THROW(ops::sum(Tensor::from_indices({1, 2}, {2}), {0}), DTypeError);
  EXPECT_THROW(ops::concat({}, 0), InvalidArgument);
}

// ---- views, dtypes, empty tensors ----

TEST(ShapeOps, TransposeKeepsHistoryOnlyWhenGradIsNeeded) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(x.transpose(0, 1).impl()->storage, x.impl()->storage);  // a view without grad
  x.set_requires_grad(true);
  Tensor t = x.transpose(0, 1);
  EXPECT_TRUE(t.requires_grad());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  ops::sum(ops::mul(t, Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}))).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 3, 5, 2, 4, 6}));
  NoGradGuard ng;
  EXPECT_EQ(x.transpose(0, 1).impl()->storage, x.impl()->storage);
}

TEST(ShapeOps, SqueezeUnsqueezeFlattenContiguous) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 2, 1, 3});
  EXPECT_EQ(ops::squeeze(x).shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::squeeze(x, -2).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(ops::squeeze(x, 1).shape(), x.shape());  // not size 1: unchanged, as PyTorch
  EXPECT_EQ(ops::unsqueeze(x, -1).shape(), (Shape{1, 2, 1, 3, 1}));
  EXPECT_EQ(ops::unsqueeze(x, 0).shape(), (Shape{1, 1, 2, 1, 3}));
  EXPECT_EQ(ops::flatten(x, 1).shape(), (Shape{1, 6}));
  EXPECT_EQ(ops::flatten(x).shape(), (Shape{6}));
  EXPECT_EQ(ops::view(x, {3, -1}).shape(), (Shape{3, 2}));
  EXPECT_EQ(ops::contiguous(x).impl(), x.impl());
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  Tensor c = ops::contiguous(t);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(ShapeOps, MovementOpsTakeAnyDtype) {
  Tensor i = Tensor::from_indices({0, 1, 2, 3, 4, 5}, {2, 3});
  EXPECT_EQ(ops::permute(i, {1, 0}).to_indices(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(ops::slice(i, 1, 0, 3, 2).to_indices(), (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(ops::concat({i, i}, 0).shape(), (Shape{4, 3}));
  Tensor b = ops::permute(bools({1, 0, 0, 1, 1, 0}, {2, 3}), {1, 0});
  EXPECT_EQ(b.dtype(), DType::BOOL);
  const uint8_t* p = b.data<uint8_t>();
  EXPECT_EQ(std::vector<int>(p, p + 6), (std::vector<int>{1, 1, 0, 1, 0, 0}));
  Tensor h = Tensor::from_vector({1.5f, -2, 3, 4}, {2, 2}).to(DType::BF16);
  EXPECT_EQ(ops::slice(h, 0, 1, 2).to(DType::F32).to_vector(), (std::vector<float>{3, 4}));
}

TEST(ShapeOps, SplitConcatRoundTripAndManyInputsInLazyMode) {
  Tensor x = rand_t({3, 7}, 30, DType::F32);
  auto parts = ops::split(x, 3, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{3, 1}));
  EXPECT_EQ(ops::concat(parts, 1).to_vector(), x.to_vector());
  EXPECT_EQ(ops::split(Tensor::zeros({0, 2}), 2, 0).size(), 1u);  // as torch.split
  ModeGuard guard(Mode::HpuLazy);
  std::vector<Tensor> many;
  std::vector<float> want;
  for (int k = 0; k < 20; ++k) {  // more inputs than a compiled graph binds per op
    many.push_back(Tensor::full({1, 2}, static_cast<float>(k), Device::hpu(0)).set_requires_grad(true));
    want.insert(want.end(), {float(k), float(k)});
  }
  Tensor cat = ops::concat(many, 0);
  EXPECT_EQ(cat.shape(), (Shape{20, 2}));
  EXPECT_EQ(cat.to_vector(), want);
  ops::sum(ops::mul(cat, cat)).backward();  // d/dx = 2x
  for (int k = 0; k < 20; ++k) EXPECT_EQ(many[k].grad().to_vector(), (std::vector<float>{2.f * k, 2.f * k}));
}

TEST(ShapeOps, EmptyReductionsAndNaN) {
  const Tensor e = Tensor::zeros({0, 3});
  EXPECT_EQ(ops::sum(e, {0}).to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(ops::sum(e).item(), 0.0f);
  for (float v : ops::mean(e, {0}).to_vector()) EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(std::isnan(ops::mean(e).item()));
  EXPECT_EQ(ops::max(e, {1}).shape(), (Shape{0}));  // nothing is reduced over an empty dim
  Tensor n = Tensor::from_vector({1, NAN, 3, 2, 5, 4}, {2, 3});
  const auto m = ops::max(n, 1).to_vector();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_EQ(m[1], 5.0f);
  EXPECT_EQ(ops::argmax(n, 1).to_indices(), (std::vector<int64_t>{1, 1}));  // NaN counts as the max
  EXPECT_EQ(ops::argmax(n, ops::kAllDims, true).shape(), (Shape{1, 1}));
}

TEST(ShapeOps, ReductionsInF64AndBF16) {
  Tensor x = rand_t({3, 4, 5}, 31, DType::F32);
  const auto want = ops::sum(x, {0, 2}).to_vector();
  test::expect_close(ops::sum(x.to(DType::F64), {0, 2}).to(DType::F32).to_vector(), want, 1e-6, "F64 sum");
  Tensor h = x.to(DType::BF16);
  Tensor hs = ops::mean(h, {-1}, true);
  EXPECT_EQ(hs.dtype(), DType::BF16);
  test::expect_close(hs.to(DType::F32).to_vector(), ops::mean(h.to(DType::F32), {-1}, true).to_vector(), 1e-2, "BF16");
  EXPECT_EQ(ops::max(x.to(DType::F64), {1}).to(DType::F32).to_vector(), ops::max(x, {1}).to_vector());
}

TEST(ShapeOps, BatchedMatmulBF16AndZeroSizes) {
  Tensor a = rand_t({2, 3, 8}, 32, DType::F32), b = rand_t({8, 4}, 33, DType::F32);
  const auto ref = ops::bmm(a, b).to_vector();
  Tensor hb = ops::bmm(a.to(DType::BF16), b.to(DType::BF16));
  EXPECT_EQ(hb.dtype(), DType::BF16);
  EXPECT_EQ(hb.shape(), (Shape{2, 3, 4}));
  test::expect_close(hb.to(DType::F32).to_vector(), ref, 3e-2, "bf16 bmm", 5e-2);
  EXPECT_EQ(ops::bmm(Tensor::zeros({2, 0, 4}), Tensor::zeros({4, 3})).shape(), (Shape{2, 0, 3}));
  Tensor k0 = ops::bmm(Tensor::zeros({2, 3, 0}), Tensor::zeros({2, 0, 4}));
  EXPECT_EQ(k0.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(k0.to_vector(), std::vector<float>(24, 0.0f));
}

TEST(ShapeOps, AttentionMasksAFullyMaskedRowToNaN) {
  const Tensor q = rand_t({1, 2, 2}, 34, DType::F32), k = rand_t({1, 3, 2}, 35, DType::F32);
  const auto out = ops::scaled_dot_product_attention(q, k, k, bools({0, 0, 0, 1, 1, 0}, {2, 3})).to_vector();
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));  // as PyTorch's math path
  EXPECT_FALSE(std::isnan(out[2]) || std::isnan(out[3]));
  // causal with one key: every query attends only to it, so the output is v.
  const Tensor v = rand_t({1, 1, 2}, 36, DType::F32);
  const auto one = ops::scaled_dot_product_attention(q, rand_t({1, 1, 2}, 37, DType::F32), v, {}, true).to_vector();
  const auto vv = v.to_vector();
  EXPECT_EQ(one, (std::vector<float>{vv[0], vv[1], vv[0], vv[1]}));
}

}  // namespace
