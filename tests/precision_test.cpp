// Reduced precision (BF16) for inference: the precision pass (graphs/pass_precision.cpp) with a
// golden before/after dump, BF16 answers near FP32's on a CNN and a transformer block, what stays
// FP32, the cache keys, the BF16 sdpa kernel, Predictor::check_precision, and config.json's
// "precision" / "precision_check" as the model repository applies them (a load that fails below
// the minimum agreement, the report in the served version).
// HG_UPDATE_GOLDENS=1 rewrites tests/golden/passes/precision.txt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "engine/fused_ops.h"
#include "engine/int8_quant.h"
#include "engine/ops.h"
#include "engine/post_ops.h"
#include "graphs/graph_cache.h"
#include "graphs/passes.h"
#include "models/predictor.h"
#include "models/safetensors.h"
#include "tests/errors.h"
#include "tests/fusion_test_util.h"
#include "server/kserve.h"
#include "server/server_metrics.h"
#include "tests/model_repository_util.h"

namespace hg {
namespace {

using graphs::Graph;
using graphs::Precision;
using test::fusion::count_ops;
using test::fusion::max_rel;
using test::fusion::run_graph;
using ::testing::HasSubstr;

struct Builder : test::fusion::GraphBuilder {
  int conv(int x, int64_t out) {
    const int64_t c = g.nodes[x].meta.shape[1];
    return op("conv2d", {x, weight({out, c, 3, 3}), weight({out})}, Attrs{{1, 1, 1, 1, 1, 1, 1}, {}});
  }
  int linear(int x, int64_t out) {
    const int64_t k = g.nodes[x].meta.shape[1];
    return op("linear", {x, weight({out, k}), weight({out})}, Attrs{{0}, {}});
  }
};

// A stem, a residual block and a classifier head: x = relu(conv(input)), then conv -> relu ->
// conv + x -> relu -> pool -> linear -> softmax.
Graph residual_head() {
  Builder b;
  const int x = b.op("relu", {b.conv(b.in({2, 3, 6, 6}), 8)});
  const int y = b.op("relu", {b.conv(x, 8)});
  const int r = b.op("relu", {b.op("binary", {b.conv(y, 8), x}, Attrs{{0}, {}})});
  const int pooled = b.op("adaptive_avg_pool2d", {r}, Attrs{{1, 1}, {}});
  const int flat = b.op("reshape", {pooled}, Attrs{{2, 8}, {}});
  b.g.outputs = {b.op("softmax", {b.linear(flat, 5)}, Attrs{{1, 0}, {}})};
  return b.g;
}

// A transformer feed-forward block: layer_norm(x + linear(gelu(linear(x)))).
Graph ffn_block() {
  Builder b;
  const int x = b.in({4, 16});
  const int h = b.op("gelu", {b.linear(x, 32)}, Attrs{{0}, {}});
  const int sum = b.op("binary", {x, b.linear(h, 16)}, Attrs{{0}, {}});
  b.g.outputs = {b.op("layer_norm", {sum, b.weight({16}), b.weight({16})}, Attrs{{16}, {1e-5}})};
  return b.g;
}

// Every pass, with the precision pass in BF16.
Graph optimized_bf16(Graph g) {
  graphs::PassOptions passes;
  passes.precision = Precision::Bf16;
  graphs::run_passes(g, passes);
  return g;
}

DType dtype_of_first(const Graph& g, const std::string& op) {
  for (const auto& n : g.nodes)
    if (n.kind == graphs::Node::Kind::Op && n.op->name == op) return n.meta.dtype;
  ADD_FAILURE() << "no " << op << " node";
  return DType::F32;
}

TEST(PassesPrecision, GoldenResidualBlockAndHead) {
  const Graph before = residual_head();
  Graph after = before;
  EXPECT_EQ(graphs::lower_precision(after, Precision::Bf16), 10);  // 3 convs, 3 relus, add, pool, reshape, linear
  test::fusion::expect_golden("passes", "precision", before, after);
  EXPECT_EQ(graphs::lower_precision(after, Precision::Bf16), 0) << "a second run finds nothing to lower";
}

TEST(PassesPrecision, Fp32LeavesTheGraphAlone) {
  Graph g = residual_head();
  const std::string before = g.dump();
  EXPECT_EQ(graphs::lower_precision(g, Precision::Fp32), 0);
  EXPECT_EQ(g.dump(), before);
}

TEST(PassesPrecision, Bf16AnswersNearFp32) {
  for (const Graph& g : {residual_head(), ffn_block()}) {
    const auto data = test::fusion::scaled_inputs(g, 3);
    const Graph opt = optimized_bf16(g);
    const auto low = run_graph(opt, data);  // already optimized: run as it is
    const auto want = run_graph(g, data);
    const double err = max_rel(low, want);
    EXPECT_LT(err, 3e-2) << opt.dump();
    EXPECT_GT(err, 0) << "BF16 rounding must show: the graph ran in FP32\n" << opt.dump();
    for (int o : opt.outputs) EXPECT_EQ(opt.nodes[o].meta.dtype, DType::F32) << "outputs keep their dtype";
  }
}

TEST(PassesPrecision, NormsSoftmaxAndMixedReadersStayFp32) {
  Graph g = ffn_block();
  graphs::lower_precision(g, Precision::Bf16);
  EXPECT_EQ(dtype_of_first(g, "linear"), DType::BF16);
  EXPECT_EQ(dtype_of_first(g, "gelu"), DType::BF16) << "an activation of a BF16 linear follows it";
  EXPECT_EQ(dtype_of_first(g, "layer_norm"), DType::F32);
  // The residual add reads x, an FP32 graph input that is not constant: it stays FP32.
  EXPECT_EQ(dtype_of_first(g, "binary"), DType::F32);
  for (const auto& n : g.nodes)
    if (n.kind == graphs::Node::Kind::Op && n.op->name == "layer_norm") {
      for (int in : n.inputs) EXPECT_EQ(g.nodes[in].meta.dtype, DType::F32);
    }
  Graph r = residual_head();
  graphs::lower_precision(r, Precision::Bf16);
  EXPECT_EQ(dtype_of_first(r, "softmax"), DType::F32);
  EXPECT_EQ(count_ops(r, "cast"), 1 + 8 + 1) << "the input down, 8 weights and biases, the logits up\n" << r.dump();
}

TEST(PassesPrecision, CacheKeysTellPrecisionsApart) {
  const Graph g = residual_head();
  graphs::PassOptions fp32, bf16;
  bf16.precision = Precision::Bf16;
  EXPECT_NE(graphs::memory_key(g, fp32), graphs::memory_key(g, bf16));
  EXPECT_NE(graphs::compile_key(g, fp32), graphs::compile_key(g, bf16));
  EXPECT_EQ(graphs::parse_precision("bf16"), Precision::Bf16);
  EXPECT_THAT(test::error_of<InvalidArgument>([] { graphs::parse_precision("int4"); }),
              HasSubstr("precision must be \"fp32\", \"bf16\" or \"int8\", got \"int4\""));
}

// The fused attention kernel on BF16 q, k, v against its FP32 answer (masked, causal).
TEST(SdpaBf16, NearFp32WithAMask) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  auto random = [&](const Shape& s) {
    std::vector<float> v(static_cast<size_t>(numel(s)));
    for (auto& x : v) x = nd(rng);
    return Tensor::from_vector(v, s);
  };
  const Tensor q = random({2, 3, 7, 16}), k = random({2, 3, 9, 16}), v = random({2, 3, 9, 8});
  const Tensor mask = random({7, 9});
  const Attrs a{{sdpa::kAdd, sdpa::kCausalAfterMask, 0}, {0.25, -INFINITY, 0}};
  const Tensor want = dispatch("sdpa", {q, k, v, mask}, a);
  const Tensor got = dispatch("sdpa", {q.to(DType::BF16), k.to(DType::BF16), v.to(DType::BF16), mask}, a);
  ASSERT_EQ(got.dtype(), DType::BF16);
  EXPECT_LT(max_rel({got.to(DType::F32).to_vector()}, {want.to_vector()}), 2e-2);
  EXPECT_THAT(test::error_of<Error>([&] { dispatch("sdpa", {q.to(DType::BF16), k, v, mask}, a); }),
              HasSubstr("F32"));
}

// matmul_int8 against its definition: a quantized per tensor (u8, asymmetric), b per output column
// (s8, symmetric), the s32 product scaled back, plus bias, then the activation. The reference below
// computes exactly that in double, so the kernel must agree to float rounding.
std::vector<float> int8_reference(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& bias,
                                  int64_t m, int64_t k, int64_t n, bool tb, bool relu) {
  float lo = 0, hi = 0;
  for (float v : a) lo = std::min(lo, v), hi = std::max(hi, v);
  const double levels = kernels::int8_activation_levels();  // 255, or 127 without VNNI
  const double sa = (hi - lo) / levels;
  const double zp = std::clamp(std::nearbyint(-lo / sa), 0.0, levels);
  std::vector<float> out(static_cast<size_t>(m * n));
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (int64_t p = 0; p < k; ++p) amax = std::max(amax, std::abs(tb ? b[j * k + p] : b[p * n + j]));
    const float sw = amax / 127.0f;
    for (int64_t i = 0; i < m; ++i) {
      int64_t acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double qa = std::clamp(std::nearbyint(a[i * k + p] / sa) + zp, 0.0, levels);
        const double qw = std::nearbyint((tb ? b[j * k + p] : b[p * n + j]) / sw);
        acc += static_cast<int64_t>(qa - zp) * static_cast<int64_t>(qw);
      }
      const double y = static_cast<double>(acc) * sa * sw + bias[j];
      out[i * n + j] = static_cast<float>(relu ? std::max(y, 0.0) : y);
    }
  }
  return out;
}

TEST(MatmulInt8, MatchesTheQuantizedDefinitionAndStaysNearFp32) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  auto randv = [&](size_t count) {
    std::vector<float> v(count);
    for (auto& x : v) x = nd(rng);
    return v;
  };
  for (auto [m, k, n, tb] : {std::tuple<int64_t, int64_t, int64_t, bool>{3, 40, 24, true}, {64, 128, 96, false}}) {
    const auto a = randv(static_cast<size_t>(m * k)), b = randv(static_cast<size_t>(k * n)), bias = randv(static_cast<size_t>(n));
    const Shape bshape = tb ? Shape{n, k} : Shape{k, n};
    const Tensor ta = Tensor::from_vector(a, {m, k}), tw = Tensor::from_vector(b, bshape), tbias = Tensor::from_vector(bias, {n});
    const Attrs act{{0, tb, static_cast<int64_t>(FusedAct::Relu)}, {}};
    // Eager: the weights are not constant, so they are quantized with every call, one scale for
    // all columns; the graph below pre-packs them per column, as the reference does.
    const Tensor eager = dispatch("matmul_int8", {ta, tw, tbias}, act);
    const Tensor fp32 = dispatch("matmul", {ta, tw, tbias}, act);
    EXPECT_LT(max_rel({eager.to_vector()}, {fp32.to_vector()}), 3e-2);
    Builder g;
    const int x = g.in({m, k});
    g.g.outputs = {g.op("matmul_int8", {x, g.weight(bshape), g.weight({n})}, act)};
    std::vector<test::fusion::Buffer> data(3);
    for (auto [i, v] : {std::pair{0, &a}, {1, &b}, {2, &bias}}) {
      data[i].resize(v->size() * 4);
      std::memcpy(data[i].data(), v->data(), data[i].size());
    }
    const auto got = run_graph(g.g, data);
    const auto want = int8_reference(a, b, bias, m, k, n, tb, true);
    test::fusion::expect_near(got, {want}, 1e-4, 1e-4);
    EXPECT_GT(max_rel(got, {fp32.to_vector()}), 0) << "INT8 rounding must show";
  }
  EXPECT_THAT(test::error_of<Error>([] {
                dispatch("matmul_int8", {Tensor::zeros({2, 3}), Tensor::zeros({4, 5})}, Attrs{{0, 0, 0}, {}});
              }),
              HasSubstr("inner dimensions differ (3 vs 4)"));
  EXPECT_THAT(test::error_of<Error>([] {
                dispatch("matmul_int8", {Tensor::zeros({3, 2}), Tensor::zeros({3, 5})}, Attrs{{1, 0, 0}, {}});
              }),
              HasSubstr("a transposed is not supported"));
}

TEST(PassesPrecision, Int8LowersLinearsByConstantWeightsOnly) {
  Graph g = ffn_block();
  const auto data = test::fusion::scaled_inputs(g, 3);
  graphs::PassOptions passes;
  passes.precision = Precision::Int8;
  Graph opt = g;
  graphs::run_passes(opt, passes);
  EXPECT_EQ(count_ops(opt, "matmul_int8"), 2) << opt.dump();
  EXPECT_EQ(count_ops(opt, "linear") + count_ops(opt, "matmul"), 0) << opt.dump();
  const double err = max_rel(run_graph(opt, data), run_graph(g, data));
  EXPECT_LT(err, 5e-2);
  EXPECT_GT(err, 0);
  Graph act = ffn_block();
  const int q = act.add_input({{4, 16}, DType::F32});
  act.outputs.push_back(act.add_op(op_schema("matmul"), {q, q}, Attrs{{0, 1}, {}}));
  EXPECT_EQ(graphs::lower_precision(act, Precision::Int8), 2) << "the activation x activation matmul stays FP32";
}

TEST(PredictorPrecision, CheckAgainstFp32) {
  models::PredictorOptions opt{.batch_buckets = {1, 4}, .precision = Precision::Bf16};
  auto p = models::Predictor::load(test::repo::kPackage, opt);
  const models::PrecisionReport r = p->check_precision({.samples = 10, .seed = 1});
  EXPECT_EQ(r.samples, 10);
  EXPECT_EQ(r.rows, 10);
  EXPECT_GE(r.top1_agreement, 0.9);
  EXPECT_GT(r.max_relative_error, 0) << "the captured graphs must run in BF16";
  EXPECT_LT(r.max_relative_error, 5e-2);
  EXPECT_THAT(r.summary(), HasSubstr("bf16 against fp32 on 10 samples: top-1 agreement"));
  // The same seed gives the same inputs, and so the same report.
  const models::PrecisionReport again = p->check_precision({.samples = 10, .seed = 1});
  EXPECT_EQ(again.max_relative_error, r.max_relative_error);
  auto int8 = models::Predictor::load(test::repo::kPackage, {.batch_buckets = {4}, .precision = Precision::Int8});
  const models::PrecisionReport q = int8->check_precision({.samples = 16});
  EXPECT_GE(q.top1_agreement, 0.8);
  EXPECT_GT(q.max_relative_error, 0);
  EXPECT_LT(q.max_relative_error, 0.1);
  EXPECT_THAT(q.summary(), HasSubstr("int8 against fp32 on 16 samples"));
  auto fp32 = models::Predictor::load(test::repo::kPackage, {.batch_buckets = {1}});
  EXPECT_EQ(fp32->check_precision().samples, 0) << "nothing to check in FP32";
}

TEST(RepositoryPrecision, ReportsTheAgreementAndFailsBelowTheMinimum) {
  using namespace test::repo;
  TempRepo r("RepoPrecision");
  r.add_model("low", {1}, R"({"batch_buckets": [1, 2], "precision": "bf16", "precision_check": {"samples": 8}})");
  r.add_model("strict", {1}, R"({"batch_buckets": [1], "precision": "bf16",
                                 "precision_check": {"samples": 8, "max_relative_error": 1e-9}})");
  ModelRepository repo(options(r));
  auto v = repo.resolve("low", std::nullopt);
  EXPECT_EQ(v->config.precision, Precision::Bf16);
  EXPECT_EQ(v->precision.samples, 8);
  EXPECT_GT(v->precision.max_relative_error, 0);
  EXPECT_EQ(v->config.to_json()["precision"], "bf16");
  const auto [status, logits] = infer(*v, sample(1));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(logits.size(), 10u);
  // The model metadata's "properties" (strings, as the protocol's schema says).
  server::ServerMetrics metrics;
  server::KServeHandler h(repo, metrics, {});
  const auto meta = h.handle({"GET", "/v2/models/low", "", {}});
  ASSERT_EQ(meta.status, 200) << meta.body;
  const nlohmann::json props = nlohmann::json::parse(meta.body)["properties"];
  EXPECT_EQ(props["precision"], "bf16");
  EXPECT_EQ(props["precision_check_samples"], "8");
  EXPECT_EQ(std::stod(props["precision_top1_agreement"].get<std::string>()), v->precision.top1_agreement);
  EXPECT_GT(std::stod(props["precision_max_relative_error"].get<std::string>()), 0);
  EXPECT_THAT(test::error_of<server::HttpError>([&] { repo.resolve("strict", std::nullopt); }),
              testing::AllOf(HasSubstr("bf16 against fp32 on 8 samples"),
                             HasSubstr("above precision_check.max_relative_error")));
}

// The inputs of the check from a safetensors file: the served version reports its N samples; a
// file that does not fit the model fails the load naming the file and the tensor.
TEST(RepositoryPrecision, ChecksOnTheInputsOfASamplesFile) {
  using namespace test::repo;
  TempRepo r("RepoPrecisionSamples");
  const std::string config = R"({"batch_buckets": [1, 4], "precision": "bf16",
                                 "precision_check": {"inputs": "samples.safetensors"}})";
  r.add_model("good", {1}, config);
  r.add_model("bad_dtype", {1}, config);
  r.add_model("bad_shape", {1}, config);
  r.add_model("missing", {1}, config);
  auto write = [&](const std::string& model, const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
    safetensors::File f;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) / 16.0f;
    std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(v.data()),
                               reinterpret_cast<const uint8_t*>(v.data()) + v.size() * 4);
    if (dtype == "I32") bytes.assign(bytes.size(), 0);
    f.entries.push_back({name, dtype, shape, bytes});
    safetensors::write(r.dir() / model / "samples.safetensors", f);
  };
  write("good", "input", "F32", {6, 64});
  write("bad_dtype", "input", "I32", {6, 64});
  write("bad_shape", "input", "F32", {6, 65});
  write("missing", "pixels", "F32", {6, 64});
  ModelRepository repo(options(r));
  auto v = repo.resolve("good", std::nullopt);
  EXPECT_EQ(v->precision.samples, 6);
  EXPECT_EQ(v->precision.rows, 6);
  EXPECT_GT(v->precision.max_relative_error, 0);
  EXPECT_EQ(v->config.to_json()["precision_check"]["inputs"], "samples.safetensors");
  auto reason = [&](const std::string& name) {
    return test::error_of<server::HttpError>([&] { repo.resolve(name, std::nullopt); });
  };
  EXPECT_THAT(reason("bad_dtype"), HasSubstr("samples.safetensors: tensor 'input' is I32, the input is F32"));
  EXPECT_THAT(reason("bad_shape"), HasSubstr("tensor 'input' has shape [6, 65]; it must be [N, sample shape]"));
  EXPECT_THAT(reason("missing"), HasSubstr("no tensor 'input'"));
}

TEST(ModelConfigPrecision, FieldsAndErrors) {
  using server::ModelConfig;
  auto parse = [](const std::string& text) { return ModelConfig::parse(nlohmann::json::parse(text), "config.json", "m"); };
  auto error = [&](const std::string& text) { return test::error_of<FormatError>([&] { parse(text); }); };
  const ModelConfig c = parse(R"({"precision": "bf16", "precision_check": {"samples": 100, "seed": 7,
                                  "min_top1_agreement": 0.99, "max_relative_error": 0.05}})");
  EXPECT_EQ(c.precision, Precision::Bf16);
  EXPECT_EQ(c.precision_check.samples, 100);
  EXPECT_EQ(c.precision_check.seed, 7u);
  EXPECT_DOUBLE_EQ(c.precision_check.min_top1_agreement, 0.99);
  EXPECT_DOUBLE_EQ(*c.precision_check.max_relative_error, 0.05);
  const ModelConfig back = ModelConfig::parse(c.to_json(), "config.json", "m");
  EXPECT_EQ(back.precision, Precision::Bf16);
  EXPECT_EQ(back.precision_check.samples, 100);
  EXPECT_EQ(parse("{}").precision, Precision::Fp32);
  EXPECT_THAT(error(R"({"precision": "int4"})"),
              HasSubstr("config.json: precision must be \"fp32\", \"bf16\" or \"int8\", got \"int4\""));
  EXPECT_EQ(parse(R"({"precision": "int8"})").precision, Precision::Int8);
  EXPECT_THAT(error(R"({"precision": 16})"), HasSubstr("precision must be a string"));
  EXPECT_THAT(error(R"({"precision_check": {"min_top1_agreement": 1.5}})"),
              HasSubstr("precision_check.min_top1_agreement must be a number in [0.0, 1.0], got 1.5"));
  EXPECT_THAT(error(R"({"precision_check": {"samples": 5000}})"), HasSubstr("precision_check.samples must be at most 4096"));
  EXPECT_THAT(error(R"({"precision_check": {"top1": 0.9}})"), HasSubstr("precision_check.top1 is not a known field"));
  EXPECT_THAT(error(R"({"precision_check": {"inputs": "/etc/passwd"}})"),
              HasSubstr("precision_check.inputs must name a file inside the model's folder"));
  EXPECT_THAT(error(R"({"precision_check": {"inputs": "../other/samples.safetensors"}})"),
              HasSubstr("precision_check.inputs must name a file inside the model's folder"));
  const ModelConfig q = parse(R"({"precision": "int8", "calibration": {"inputs": "calib.safetensors", "samples": 300}})");
  ASSERT_TRUE(q.calibration);
  EXPECT_EQ(q.calibration->inputs, "calib.safetensors");
  EXPECT_EQ(q.calibration->samples, 300);
  EXPECT_EQ(ModelConfig::parse(q.to_json(), "config.json", "m").calibration->samples, 300);
  EXPECT_THAT(error(R"({"precision": "bf16", "calibration": {"inputs": "c.safetensors"}})"),
              HasSubstr("calibration sets the ranges of INT8 convolutions: it needs \"precision\": \"int8\""));
  EXPECT_THAT(error(R"({"precision": "int8", "calibration": {}})"), HasSubstr("calibration.inputs must name a file"));
  EXPECT_THAT(error(R"({"precision": "int8", "calibration": {"inputs": "c", "rows": 3}})"),
              HasSubstr("calibration.rows is not a known field"));
}

}  // namespace
}  // namespace hg
