// Export by tracing (models/module_trace.h, training/export.h export_traced, models/onnx_export.h):
// custom modules (an MLP with a residual add and a LayerNorm, a small CNN, a transformer block
// with causal softmax attention over a dynamic sequence) exported as "ops" packages and as ONNX
// give the module's own outputs at batch sizes and sequence lengths other than the example's,
// through load_package + build_module, the Predictor (what hgraph-serve runs) and the ONNX
// importer; Python's onnx checker accepts the files; what cannot be exported is named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "engine/ops.h"
#include "graphs/lazy.h"
#include "models/attention.h"
#include "models/module_trace.h"
#include "models/onnx_export.h"
#include "models/onnx_import.h"
#include "models/op_graph.h"
#include "models/predictor.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "training/export.h"

namespace hg::training {
namespace {

namespace fs = std::filesystem;
using models::Module;
using ::testing::HasSubstr;

Tensor random_tensor(const Shape& s, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(numel(s)));
  uint32_t x = seed * 2654435761u + 12345u;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return Tensor::from_vector(v, s);
}

Tensor random_ids(const Shape& s, int64_t vocab, uint32_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(numel(s)));
  uint32_t x = seed + 7u;
  for (int64_t& i : v) x = x * 1664525u + 1013904223u, i = static_cast<int64_t>(x >> 16) % vocab;
  return Tensor::from_indices(v, s);
}

// got == want elementwise within 1e-5 relative (and a 1e-6 floor near zero); no NaN passes.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to(Device::cpu()).to_vector(), w = want.to(Device::cpu()).to_vector();
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_TRUE(std::isfinite(w[i]) && std::isfinite(g[i])) << what << " element " << i;
    ASSERT_NEAR(g[i], w[i], 1e-5 * std::fabs(w[i]) + 1e-6) << what << " element " << i;
  }
}

Tensor eval_forward(Module& m, const Tensor& x) {
  m.eval();
  return m.forward(x);
}

// ---- the modules ----

// x -> LayerNorm(x + fc2(relu(fc1(x)))) -> head
class ResidualMlp : public Module {
 public:
  ResidualMlp() {
    fc1_ = register_module("fc1", std::make_shared<models::Linear>(16, 32, 1));
    fc2_ = register_module("fc2", std::make_shared<models::Linear>(32, 16, 2));
    norm_ = register_module("norm", std::make_shared<models::LayerNorm>(16));
    head_ = register_module("head", std::make_shared<models::Linear>(16, 4, 3));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = fc2_->forward(ops::relu(fc1_->forward(x)));
    return head_->forward(norm_->forward(ops::add(x, h)));
  }
  nlohmann::json spec() const override { return {{"op", "residual_mlp"}}; }

 private:
  std::shared_ptr<Module> fc1_, fc2_, norm_, head_;
};

// A LightningModule around it, as a user trains one.
class ResidualMlpTask : public LightningModule {
 public:
  Module& module() override { return net_; }
  Tensor training_step(const Batch& b, int64_t) override { return ops::cross_entropy(net_.forward(b[0]), b[1]); }
  std::vector<OptimizerConfig> configure_optimizers() override { return {}; }

 private:
  ResidualMlp net_;
};

// conv-bn-relu-pool, conv-relu, global pool, flatten, linear; input [N, 1, 8, 8]
class SmallCnn : public Module {
 public:
  SmallCnn() {
    conv1_ = register_module("conv1", std::make_shared<models::Conv2d>(1, 4, ops::Size2{3, 3}, models::Conv2dOptions{.padding = {1, 1}}, 1));
    bn_ = register_module("bn", std::make_shared<models::BatchNorm2d>(4));
    conv2_ = register_module("conv2", std::make_shared<models::Conv2d>(4, 6, ops::Size2{3, 3}, models::Conv2dOptions{}, 2));
    fc_ = register_module("fc", std::make_shared<models::Linear>(6 * 2 * 2, 3, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::max_pool2d(ops::relu(bn_->forward(conv1_->forward(x))), {2, 2}, {2, 2}, {0, 0});  // [N, 4, 4, 4]
    h = ops::relu(conv2_->forward(h));                                                               // [N, 6, 2, 2]
    return fc_->forward(ops::flatten(h, 1));
  }
  nlohmann::json spec() const override { return {{"op", "small_cnn"}}; }

 private:
  std::shared_ptr<Module> conv1_, bn_, conv2_, fc_;
};

// Token ids [N, T] -> embedding + positions[:T] -> pre-norm causal self-attention and a GELU MLP,
// both residual -> mean over T -> head [N, 5]. T is dynamic (up to 12).
class TinyTransformer : public Module {
 public:
  TinyTransformer() {
    emb_ = register_module("emb", std::make_shared<models::Embedding>(20, 16, 1));
    pos_ = &register_parameter("pos", random_tensor({12, 16}, 9));
    ln1_ = register_module("ln1", std::make_shared<models::LayerNorm>(16));
    attn_ = register_module("attn", std::make_shared<models::MultiheadAttention>(16, 4, 0.0, 2));
    ln2_ = register_module("ln2", std::make_shared<models::LayerNorm>(16));
    up_ = register_module("up", std::make_shared<models::Linear>(16, 32, 3));
    down_ = register_module("down", std::make_shared<models::Linear>(32, 16, 4));
    head_ = register_module("head", std::make_shared<models::Linear>(16, 5, 5));
  }
  Tensor forward(const Tensor& ids) override {
    Tensor x = ops::add(emb_->forward(ids), ops::slice(*pos_, 0, 0, ids.dim(1)));
    const Tensor n = ln1_->forward(x);
    x = ops::add(x, static_cast<models::MultiheadAttention&>(*attn_).attend(n, n, n, {}, /*causal=*/true));
    x = ops::add(x, down_->forward(ops::gelu(up_->forward(ln2_->forward(x)))));
    return head_->forward(ops::mean(x, 1));
  }
  nlohmann::json spec() const override { return {{"op", "tiny_transformer"}}; }

 private:
  Tensor* pos_;
  std::shared_ptr<Module> emb_, ln1_, attn_, ln2_, up_, down_, head_;
};

// ---- the checks ----

// Loads the version folder as hgraph-serve does (load_package + build_module).
std::unique_ptr<Module> load(const fs::path& dir) {
  std::unique_ptr<Module> m;
  models::load_package(dir, &m);
  return m;
}

bool python_has_onnx() { return std::system("timeout 60 /usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") == 0; }

// Python's onnx checker with full_check (strict shape inference) on `file`.
void expect_onnx_checker_accepts(const fs::path& file) {
  if (!python_has_onnx()) GTEST_SKIP() << "/usr/bin/python3 has no onnx module";
  const std::string cmd = "timeout 120 /usr/bin/python3 -c \"import onnx, sys; m = onnx.load(sys.argv[1]); "
                          "onnx.checker.check_model(m, full_check=True); "
                          "assert m.opset_import[0].version == 17 and m.ir_version == 8; "
                          "d = m.graph.input[0].type.tensor_type.shape.dim[0]; assert d.dim_param == 'batch', d\" " +
                          file.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "the onnx checker rejected " << file;
}

// ONNX Runtime's output for `x` (an independent implementation of the file), through
// tests/ort_run.js; an undefined tensor when node or bench/'s onnxruntime-node is not installed
// (bash scripts/setup.sh --with-bench).
Tensor run_with_ort(const fs::path& model, const std::string& input, const Tensor& x, const Shape& out_shape) {
  const std::string modules = HG_SOURCE_DIR "/bench/node_modules";
  if (!fs::exists(modules + "/onnxruntime-node") || std::system("timeout 60 node --version >/dev/null 2>&1") != 0) return {};
  const fs::path in = model.parent_path() / "ort_in.bin", out = model.parent_path() / "ort_out.bin";
  const Tensor c = x.contiguous();
  {
    std::ofstream f(in, std::ios::binary);
    f.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.meta().bytes()));
  }
  std::string dims;
  for (int64_t d : x.shape()) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  const std::string cmd = "timeout 120 node " HG_SOURCE_DIR "/tests/ort_run.js " + modules + " " + model.string() + " " + input + " " +
                          (x.dtype() == DType::I64 ? "int64 " : "float32 ") + dims + " " + in.string() + " " + out.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out, std::ios::binary);
  std::vector<float> y(static_cast<size_t>(numel(out_shape)));
  f.read(reinterpret_cast<char*>(y.data()), static_cast<std::streamsize>(y.size() * sizeof(float)));
  EXPECT_EQ(f.gcount(), static_cast<std::streamsize>(y.size() * sizeof(float))) << "ONNX Runtime's output size";
  return Tensor::from_vector(y, out_shape);
}

// ONNX Runtime agrees with the module within 1e-5 relative (1e-6 near zero).
void expect_ort_matches(const fs::path& model, const std::string& input, const Tensor& x, const Tensor& want) {
  const Tensor got = run_with_ort(model, input, x, want.shape());
  if (!got.defined()) {
    std::cout << "[ note ] onnxruntime-node not installed: " << model << " not run with ONNX Runtime\n";
    return;
  }
  const auto g = got.to_vector(), w = want.to(Device::cpu()).to_vector();
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g[i])) << model << " element " << i;
    ASSERT_NEAR(g[i], w[i], 1e-5 * std::fabs(w[i]) + 1e-6) << "ONNX Runtime on " << model << ", element " << i;
  }
}

TEST(ExportTracedTest, ResidualMlpPackageMatchesTheModuleAtOtherBatchSizes) {
  const auto dir = test::temp_dir("ExportTracedMlp");
  ResidualMlpTask task;
  const auto out = export_traced(task, {random_tensor({3, 16}, 1)}, {.dir = dir, .name = "mlp"});
  EXPECT_EQ(out, dir / "mlp" / "1");
  const auto pkg = models::load_package(out);
  EXPECT_EQ(pkg.spec.graph["type"], "ops");
  EXPECT_EQ(pkg.spec.inputs[0].shape, Shape({-1, 16}));
  EXPECT_EQ(pkg.spec.outputs[0].shape, Shape({-1, 4}));
  EXPECT_TRUE(pkg.spec.batched);
  EXPECT_NE(pkg.weights.find("fc1.weight"), nullptr);  // the parameters under their state_dict names
  EXPECT_TRUE(task.module().training());  // traced in eval mode, the training flag restored
  auto loaded = load(out);
  for (int64_t batch : {5, 1, 3}) {
    const Tensor x = random_tensor({batch, 16}, static_cast<uint32_t>(batch) + 10);
    expect_close(loaded->forward(x), eval_forward(task.module(), x), "batch " + std::to_string(batch));
  }
  fs::remove_all(dir);
}

// A module on an HPU in lazy mode, its last update still pending in the lazy trace (as after an
// optimizer step): export runs the pending step and traces on the device.
TEST(ExportTracedTest, LazyHpuModuleWithPendingUpdatesExports) {
  const bool was_lazy = graphs::lazy_mode_enabled();
  graphs::enable_lazy_mode(true);
  const auto dir = test::temp_dir("ExportTracedLazy");
  ResidualMlp net;
  net.to(Device::hpu(0));
  for (auto& [name, p] : net.named_parameters()) *p = ops::scale(*p, 1.5);  // recorded, not run
  ASSERT_TRUE(net.named_parameters()[0].second->is_lazy());
  const auto out = export_traced(net, {random_tensor({4, 16}, 1)}, {.dir = dir, .name = "lazy"});
  auto loaded = load(out);
  const Tensor x = random_tensor({2, 16}, 2);
  const Tensor want = eval_forward(net, x.to(Device::hpu(0))).to(Device::cpu());
  graphs::enable_lazy_mode(was_lazy);
  expect_close(loaded->forward(x), want, "lazy hpu module");
  fs::remove_all(dir);
}

TEST(ExportTracedTest, SmallCnnPackageServesThroughThePredictor) {
  const auto dir = test::temp_dir("ExportTracedCnn");
  SmallCnn net;
  // BatchNorm's running statistics away from 0 / 1: one training-mode forward updates them.
  net.train();
  net.forward(random_tensor({8, 1, 8, 8}, 3));
  const auto out = export_traced(net, {random_tensor({2, 1, 8, 8}, 4)}, {.dir = dir, .name = "cnn"});
  auto loaded = load(out);
  for (int64_t batch : {6, 1}) {
    const Tensor x = random_tensor({batch, 1, 8, 8}, static_cast<uint32_t>(batch));
    expect_close(loaded->forward(x), eval_forward(net, x), "batch " + std::to_string(batch));
  }
  // the server's path: captured HPU graphs per batch bucket
  auto p = models::Predictor::load(out, {.batch_buckets = {1, 4}});
  const Tensor x = random_tensor({3, 1, 8, 8}, 21);
  const auto in = x.to_vector();
  std::vector<float> y(3 * 3);
  p->run({in.data()}, 3, {y.data()});
  expect_close(Tensor::from_vector(y, {3, 3}), eval_forward(net, x), "Predictor batch 3");
  fs::remove_all(dir);
}

TEST(ExportTracedTest, TransformerWithDynamicSequenceMatchesTheModule) {
  TinyTransformer net;
  const models::TraceOptions trace{.input_names = {"ids"}, .output_names = {"logits"},
                                   .dynamic_axes = {{"ids", {{0, "batch"}, {1, "seq"}}}}};
  const models::TracedModel t = models::trace_module(net, {random_ids({2, 6}, 20, 1)}, trace);
  EXPECT_EQ(t.spec.inputs[0].shape, Shape({-1, -1}));
  EXPECT_EQ(t.spec.inputs[0].datatype, "INT64");
  EXPECT_EQ(t.spec.outputs[0].shape, Shape({-1, 5}));
  EXPECT_EQ(t.dim_names.at("ids"), (std::vector<std::string>{"batch", "seq"}));
  std::set<std::string> ops;
  for (const auto& n : t.spec.graph["nodes"]) ops.insert(n["op"].get<std::string>());
  EXPECT_TRUE(ops.count("Softmax") && ops.count("Shape") && ops.count("Gather") && ops.count("Where")) << t.spec.graph.dump();
  std::set<std::string> names;
  for (const auto& [name, c] : t.constants) names.insert(name);
  models::OpGraphModule g(models::op_graph_from_json(t.spec.graph, "traced", names), t.constants);
  for (const auto& [batch, seq] : std::vector<std::pair<int64_t, int64_t>>{{3, 9}, {1, 4}, {2, 6}, {4, 12}}) {
    const Tensor ids = random_ids({batch, seq}, 20, static_cast<uint32_t>(batch * 100 + seq));
    expect_close(g.forward(ids), eval_forward(net, ids), "batch " + std::to_string(batch) + " seq " + std::to_string(seq));
  }
  // as a package served by the Predictor: one set of captured buckets per sequence length
  const auto dir = test::temp_dir("ExportTracedTransformer");
  const auto out = export_traced(net, {random_ids({2, 6}, 20, 1)}, {.dir = dir, .name = "tf"}, trace);
  auto p = models::Predictor::load(out, {.batch_buckets = {1, 4}});
  for (const int64_t seq : {5, 11}) {
    const Tensor ids = random_ids({3, seq}, 20, static_cast<uint32_t>(seq));
    const auto in = ids.to_indices();
    std::vector<float> y(3 * 5);
    p->run({in.data()}, 3, {y.data()}, {{seq}});
    expect_close(Tensor::from_vector(y, {3, 5}), eval_forward(net, ids), "Predictor seq " + std::to_string(seq));
  }
  fs::remove_all(dir);
}

TEST(ExportTracedTest, OnnxExportReimportsAndPassesTheOnnxChecker) {
  const auto dir = test::temp_dir("ExportTracedOnnx");
  ResidualMlpTask mlp;
  const auto mlp_dir = export_traced(mlp, {random_tensor({2, 16}, 5)}, {.dir = dir, .name = "mlp", .format = "onnx"});
  ASSERT_TRUE(fs::exists(mlp_dir / "model.onnx"));
  EXPECT_FALSE(fs::exists(mlp_dir / "model.json"));
  std::unique_ptr<Module> m;
  const auto pkg = models::import_onnx(mlp_dir / "model.onnx", &m);
  EXPECT_EQ(pkg.spec.inputs[0].shape, Shape({-1, 16}));
  for (int64_t batch : {7, 1}) {
    const Tensor x = random_tensor({batch, 16}, static_cast<uint32_t>(batch) + 30);
    expect_close(m->forward(x), eval_forward(mlp.module(), x), "mlp batch " + std::to_string(batch));
  }
  expect_onnx_checker_accepts(mlp_dir / "model.onnx");
  const Tensor mx = random_tensor({6, 16}, 40);
  expect_ort_matches(mlp_dir / "model.onnx", "input", mx, eval_forward(mlp.module(), mx));

  TinyTransformer tf;
  const auto tf_dir = export_traced(tf, {random_ids({2, 5}, 20, 2)}, {.dir = dir, .name = "tf", .format = "onnx"},
                                    {.input_names = {"ids"}, .dynamic_axes = {{"ids", {{0, "batch"}, {1, "seq"}}}}});
  std::unique_ptr<Module> tm;
  const auto tpkg = models::import_onnx(tf_dir / "model.onnx", &tm);
  EXPECT_EQ(tpkg.spec.inputs[0].shape, Shape({-1, -1}));
  for (const auto& [batch, seq] : std::vector<std::pair<int64_t, int64_t>>{{3, 8}, {1, 2}}) {
    const Tensor ids = random_ids({batch, seq}, 20, static_cast<uint32_t>(batch + seq));
    expect_close(tm->forward_all({ids})[0], eval_forward(tf, ids), "transformer batch " + std::to_string(batch));
  }
  expect_onnx_checker_accepts(tf_dir / "model.onnx");
  const Tensor tx = random_ids({3, 7}, 20, 41);
  expect_ort_matches(tf_dir / "model.onnx", "ids", tx, eval_forward(tf, tx));

  SmallCnn cnn;
  const auto cnn_dir = export_traced(cnn, {random_tensor({2, 1, 8, 8}, 6)}, {.dir = dir, .name = "cnn", .format = "onnx"});
  std::unique_ptr<Module> cm;
  models::import_onnx(cnn_dir / "model.onnx", &cm);
  const Tensor x = random_tensor({5, 1, 8, 8}, 8);
  expect_close(cm->forward(x), eval_forward(cnn, x), "cnn batch 5");
  expect_onnx_checker_accepts(cnn_dir / "model.onnx");
  expect_ort_matches(cnn_dir / "model.onnx", "input", x, eval_forward(cnn, x));
  fs::remove_all(dir);
}

// Two inputs, two outputs; the first input flattened straight away (a view of a model input).
class TwoInTwoOut : public Module {
 public:
  TwoInTwoOut() {
    a_ = register_module("a", std::make_shared<models::Linear>(8, 3, 1));
    b_ = register_module("b", std::make_shared<models::Linear>(5, 3, 2));
  }
  Tensor forward(const Tensor&) override { throw InvalidArgument("TwoInTwoOut takes two inputs"); }
  std::vector<Tensor> forward_all(const std::vector<Tensor>& in) override {
    const Tensor x = ops::flatten(in[0], 1);  // [N, 2, 4] -> [N, 8]
    const Tensor y = ops::add(a_->forward(x), ops::tanh(b_->forward(in[1])));
    return {ops::softmax(y, -1), ops::relu(x)};
  }
  nlohmann::json spec() const override { return {{"op", "two_in_two_out"}}; }

 private:
  std::shared_ptr<Module> a_, b_;
};

TEST(ExportTracedTest, SeveralInputsAndOutputsKeepTheirNamesAndOrder) {
  const auto dir = test::temp_dir("ExportTracedMultiIo");
  TwoInTwoOut net;
  const auto out = export_traced(net, {random_tensor({3, 2, 4}, 1), random_tensor({3, 5}, 2)},
                                 {.dir = dir, .name = "two", .format = "onnx"},
                                 {.input_names = {"image", "extra"}, .output_names = {"probs", "features"}});
  std::unique_ptr<Module> m;
  const auto pkg = models::import_onnx(out / "model.onnx", &m);
  ASSERT_EQ(pkg.spec.inputs.size(), 2u);
  EXPECT_EQ(pkg.spec.inputs[1].name, "extra");
  EXPECT_EQ(pkg.spec.outputs[0].name, "probs");
  EXPECT_EQ(pkg.spec.outputs[1].shape, Shape({-1, 8}));
  const std::vector<Tensor> in{random_tensor({6, 2, 4}, 3), random_tensor({6, 5}, 4)};
  net.eval();
  const auto want = net.forward_all(in);
  const auto got = m->forward_all(in);
  expect_close(got[0], want[0], "probs");
  expect_close(got[1], want[1], "features");
  fs::remove_all(dir);
}

// forward branches on the batch size
class BranchesOnBatch : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.dim(0) > 2 ? ops::relu(x) : ops::tanh(x); }
  nlohmann::json spec() const override { return {{"op", "branches"}}; }
};

// forward depends on hidden state: from its third call on it doubles (the trace saw two calls)
class ChangesAfterTracing : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::scale(x, calls_++ >= 2 ? 2.0 : 1.0); }
  nlohmann::json spec() const override { return {{"op", "changes"}}; }

 private:
  int calls_ = 0;
};

// forward calls an op the exporter has no ONNX form for
class WithArgmax : public Module {
 public:
  WithArgmax() { fc_ = register_module("fc", std::make_shared<models::Linear>(4, 3, 1)); }
  Tensor forward(const Tensor& x) override { return ops::argmax(fc_->forward(x), 1); }
  nlohmann::json spec() const override { return {{"op", "with_argmax"}}; }

 private:
  std::shared_ptr<Module> fc_;
};

// forward reads a value on the host
class ReadsHost : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::scale(x, ops::sum(x).item()); }
  nlohmann::json spec() const override { return {{"op", "reads_host"}}; }
};

// a tensor made on the host from the batch size
class MakesBatchTensor : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::add(x, Tensor::full(x.shape(), 1.0f, x.device())); }
  nlohmann::json spec() const override { return {{"op", "makes_batch_tensor"}}; }
};

TEST(ExportTracedTest, WhatCannotBeExportedIsNamed) {
  const auto dir = test::temp_dir("ExportTracedErrors");
  WithArgmax a;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { export_traced(a, {random_tensor({2, 4}, 1)}, {.dir = dir, .name = "a"}); }),
              HasSubstr("op 'argmax'"));
  EXPECT_FALSE(fs::exists(dir / "a" / "1"));
  ReadsHost r;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { models::trace_module(r, {random_tensor({2, 4}, 1)}); }),
              HasSubstr("op 'reduce'"));
  MakesBatchTensor b;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { models::trace_module(b, {random_tensor({2, 4}, 1)}); }),
              HasSubstr("made inside forward"));
  BranchesOnBatch br;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { models::trace_module(br, {random_tensor({2, 4}, 1)}); }),
              HasSubstr("forward records different ops when the dynamic axes change size (node 2: op 'tanh' vs 'relu')"));
  ChangesAfterTracing ch;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { models::trace_module(ch, {random_tensor({2, 4}, 1)}); }),
              HasSubstr("export check: output 'output' for inputs of shape [2, 4]: element 0 is"));
  ChangesAfterTracing unchecked;
  EXPECT_NO_THROW(models::trace_module(unchecked, {random_tensor({2, 4}, 1)}, {.check = false}));
  ResidualMlp m;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                models::trace_module(m, {random_tensor({2, 16}, 1)}, {.dynamic_axes = {{"x", {{0, "batch"}}}}});
              }),
              HasSubstr("'x', which is not an input"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                export_traced(m, {random_tensor({2, 16}, 1)}, {.dir = dir, .name = "m", .format = "tflite"});
              }),
              HasSubstr("export.format: 'tflite'"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hg::training
