// Zoo models and layers vs PyTorch (test data by scripts/testdata_zoo.py): state_dict keys,
// outputs on cpu, hpu eager and hpu lazy, BatchNorm training, strict loading errors, packages
// of zoo models, and HPU graph replay == eager.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/hpu_graph.h"
#include "models/attention.h"
#include "models/package.h"
#include "models/predictor.h"
#include "models/state_dict.h"
#include "models/zoo.h"
#include "tests/golden.h"
#include "tests/zoo_data.h"

namespace hg {
namespace {

using namespace models;
using ::testing::HasSubstr;
using test::Mode;
using Tensors = std::map<std::string, Tensor>;

const std::string kDir = std::string(HG_TESTDATA_DIR) + "/zoo/";

// The entries of `t` whose names start with prefix, without it.
Tensors with_prefix(const Tensors& t, const std::string& prefix) {
  Tensors r;
  for (auto& [k, v] : t)
    if (k.rfind(prefix, 0) == 0) r[k.substr(prefix.size())] = v;
  return r;
}

// |got - want| <= rtol * (|want| + max(max |want|, floor)): relative to the tensor's scale.
void expect_matches(const Tensor& got, const Tensor& want, double rtol, const std::string& what, float floor = 0) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> w = want.to_vector();
  float scale = floor;
  for (float v : w) scale = std::max(scale, std::fabs(v));
  test::expect_close(got.to_vector(), w, rtol, what, rtol * scale);
}

std::vector<std::string> keys_of(const Module& m) {
  std::vector<std::string> r;
  for (auto& [k, t] : m.state_dict()) r.push_back(k);
  return r;
}

std::unique_ptr<Module> layers_model() {  // the nn.Sequential of testdata_zoo.py
  auto net = std::make_unique<Sequential>();
  net->add(std::make_shared<Conv2d>(2, 4, ops::Size2{3, 3}, Conv2dOptions{.stride = {2, 2}, .padding = {1, 1}}))
      .add(std::make_shared<BatchNorm2d>(4))
      .add(std::make_shared<SiLU>())
      .add(std::make_shared<AvgPool2d>(ops::Size2{3, 3}, ops::Size2{2, 2}, ops::Size2{1, 1}))
      .add(std::make_shared<GELU>())
      .add(std::make_shared<Flatten>())
      .add(std::make_shared<Linear>(16, 5))
      .add(std::make_shared<Tanh>())
      .add(std::make_shared<Linear>(5, 3))
      .add(std::make_shared<Sigmoid>());
  return net;
}

std::unique_ptr<Module> model(const std::string& name) {
  if (name == "lenet5") return zoo::lenet5();
  if (name == "resnet18") return zoo::resnet18();
  if (name == "bert_classifier") return zoo::bert_classifier();
  return layers_model();
}

// A zoo model with the PyTorch weights, in eval mode.
std::unique_ptr<Module> loaded(const std::string& name) {
  auto m = model(name);
  m->load_state_dict(test::zoo_data(name));
  m->eval();
  return m;
}

TEST(Zoo, StateDictKeysEqualPyTorchs) {
  nlohmann::json keys;
  std::ifstream(kDir + "keys.json") >> keys;
  for (const char* name : {"lenet5", "resnet18", "bert_classifier", "layers"})
    EXPECT_EQ(keys_of(*model(name)), keys[name].get<std::vector<std::string>>()) << name;
  EXPECT_EQ(keys_of(MultiheadAttention(16, 4)), keys["mha"].get<std::vector<std::string>>());
  EXPECT_EQ(keys_of(TransformerEncoderLayer({.d_model = 16, .nhead = 2, .dim_feedforward = 32, .norm_first = true})),
            keys["tel"].get<std::vector<std::string>>());
  EXPECT_EQ(keys["resnet18"].size(), 122u);  // torchvision's count, num_batches_tracked included
}

class ZooModes : public ::testing::TestWithParam<Mode> {};

TEST_P(ZooModes, OutputsMatchPyTorch) {
  test::ModeGuard mode(GetParam());
  const Device d = test::device_of(GetParam());
  NoGradGuard no_grad;
  for (const char* name : {"lenet5", "resnet18", "bert_classifier", "layers"}) {
    auto m = loaded(name);
    m->to(d);
    auto io = test::zoo_data(std::string(name) + "_io");
    expect_matches(m->forward_all({io["input"].to(d)})[0], io["output"], 1e-4, name);
  }
}

TEST_P(ZooModes, AttentionLayersMatchPyTorch) {
  test::ModeGuard mode(GetParam());
  const Device d = test::device_of(GetParam());
  NoGradGuard no_grad;
  auto t = test::zoo_data("attention");
  MultiheadAttention mha(16, 4);
  mha.load_state_dict(with_prefix(t, "mha."));
  mha.eval();
  mha.to(d);
  const Tensor q = t["mha_query"].to(d), kv = t["mha_kv"].to(d);
  expect_matches(mha.attend(q, kv, kv), t["mha_cross"], 1e-4, "cross attention");
  expect_matches(mha.attend(kv, kv, kv, {}, /*causal=*/true), t["mha_causal"], 1e-4, "causal self-attention");
  TransformerEncoderLayer tel({.d_model = 16, .nhead = 2, .dim_feedforward = 32, .activation = "relu", .norm_first = true});
  tel.load_state_dict(with_prefix(t, "tel."));
  tel.eval();
  tel.to(d);
  expect_matches(tel.forward(t["tel_in"].to(d)), t["tel_out"], 1e-4, "norm-first encoder layer");
}

// Backward through every module: gradients of sum(R * output) vs PyTorch's (lenet5 and BERT in
// eval mode; the layers Sequential in training mode, so BatchNorm uses batch statistics).
TEST_P(ZooModes, GradientsMatchPyTorch) {
  test::ModeGuard mode(GetParam());
  const Device d = test::device_of(GetParam());
  for (const char* name : {"lenet5", "bert_classifier", "layers"}) {
    auto m = loaded(name);
    if (std::string(name) == "layers") m->train();
    m->to(d);
    auto g = test::zoo_data(std::string(name) + "_grad");
    const Tensor y = m->forward(test::zoo_data(std::string(name) + "_io")["input"].to(d));
    expect_matches(y, g["output"], 1e-4, std::string(name) + " output");
    ops::sum(ops::mul(y, g["weight"].to(d))).backward();
    for (auto& [k, p] : m->named_parameters()) {
      ASSERT_TRUE(p->grad().defined()) << name << " " << k;
      // floor: the conv bias before a training-mode BatchNorm has gradient 0 (PyTorch: +-1e-8)
      expect_matches(p->grad(), g.at("grad." + k), 1e-4, std::string(name) + " grad of " + k, 1e-3f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ZooModes, ::testing::Values(Mode::Cpu, Mode::HpuEager, Mode::HpuLazy),
                         [](const auto& info) {
                           return std::string(info.param == Mode::Cpu ? "Cpu" : info.param == Mode::HpuEager ? "HpuEager" : "HpuLazy");
                         });

TEST(Zoo, ResNet18At224MatchesPyTorch) {
  auto m = loaded("resnet18");
  auto io = test::zoo_data("resnet18_io");
  NoGradGuard no_grad;
  expect_matches(m->forward(io["input224"]), io["output224"], 1e-4, "resnet18 224x224");
}

TEST(Zoo, ResNet18InitialisesLikeTorchvision) {
  auto m = zoo::resnet18();
  const StateDict list = m->state_dict();
  const Tensors sd(list.begin(), list.end());
  auto stddev = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    const double mean = s / v.size();
    return std::sqrt(s2 / v.size() - mean * mean);
  };
  // kaiming normal, fan_out: std = sqrt(2 / (out * k * k)).
  EXPECT_NEAR(stddev(sd.at("conv1.weight").to_vector()), std::sqrt(2.0 / (64 * 49)), 0.03 * std::sqrt(2.0 / (64 * 49)));
  EXPECT_NEAR(stddev(sd.at("layer4.1.conv2.weight").to_vector()), std::sqrt(2.0 / (512 * 9)), 0.01 * std::sqrt(2.0 / (512 * 9)));
  EXPECT_EQ(sd.at("layer2.0.downsample.1.weight").to_vector(), std::vector<float>(128, 1.0f));
  EXPECT_EQ(sd.at("layer2.0.downsample.1.running_var").to_vector(), std::vector<float>(128, 1.0f));
}

TEST(Zoo, BatchNormTrainingMatchesPyTorch) {
  for (Device d : {Device::cpu(), Device::hpu(0)}) {
    auto t = test::zoo_data("batchnorm");
    BatchNorm2d bn(3, 1e-5, /*momentum=*/0.2);
    bn.load_state_dict(with_prefix(t, "state."));
    bn.to(d);
    bn.train();
    NoGradGuard no_grad;
    expect_matches(bn.forward(t["x1"].to(d)), t["y1"], 1e-5, "step 1");
    expect_matches(bn.forward(t["x2"].to(d)), t["y2"], 1e-5, "step 2");
    const Tensors after = with_prefix(t, "after.");
    for (auto& [k, v] : bn.state_dict()) {
      if (v.dtype() == DType::I64)
        EXPECT_EQ(v.to_indices(), after.at(k).to_indices()) << k;
      else
        expect_matches(v, after.at(k), 1e-5, k);
    }
    // Eval mode normalises with the running statistics and leaves them alone (bit for bit; they
    // match PyTorch's to rounding: the batch means sum in F32 blocks).
    const std::vector<float> running_mean = bn.state_dict()[2].second.to_vector();
    bn.eval();
    const auto w = after.at("weight").to_vector(), b = after.at("bias").to_vector();
    const auto rm = after.at("running_mean").to_vector(), rv = after.at("running_var").to_vector();
    const auto x = t["x1"].to_vector();
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t c = i / 25 % 3;
      want[i] = static_cast<float>((x[i] - rm[c]) / std::sqrt(rv[c] + 1e-5) * w[c] + b[c]);
    }
    test::expect_close(bn.forward(t["x1"].to(d)).to_vector(), want, 1e-5, "eval", 1e-5);
    EXPECT_EQ(bn.state_dict()[2].second.to_vector(), running_mean);
    EXPECT_EQ(bn.state_dict()[4].second.to_indices(), (std::vector<int64_t>{5}));
  }
}

TEST(Zoo, StrictLoadNamesTheKey) {
  auto expect_error = [](Tensors w, const std::string& needle) {
    auto m = zoo::resnet18();
    try {
      m->load_state_dict(w);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  const Tensors w = test::zoo_data("resnet18");
  Tensors missing = w, unexpected = w, shape = w, dtype = w;
  missing.erase("layer2.0.downsample.1.running_var");
  expect_error(missing, "tensor 'layer2.0.downsample.1.running_var' is missing");
  unexpected["fc.extra"] = Tensor::zeros({1});
  expect_error(unexpected, "tensor 'fc.extra' is not a parameter or buffer of the model");
  shape["layer3.1.conv2.weight"] = Tensor::zeros({256, 256, 1, 1});
  expect_error(shape, "tensor 'layer3.1.conv2.weight' has shape [256, 256, 1, 1], expected [256, 256, 3, 3]");
  dtype["bn1.num_batches_tracked"] = Tensor::zeros({});
  expect_error(dtype, "tensor 'bn1.num_batches_tracked' has dtype F32, expected I64");
  // Torchvision weights of another head size: strict=false does not skip a shape mismatch.
  auto m = zoo::resnet18(10);
  EXPECT_THROW(m->load_state_dict(w, false), InvalidArgument);
  Tensors body = w;
  body.erase("fc.weight"), body.erase("fc.bias");
  m->load_state_dict(body, false);
  EXPECT_EQ(m->state_dict()[0].second.to_vector(), w.at("conv1.weight").to_vector());
}

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("hgraph_zoo_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

PackageSpec spec_for(const std::string& name) {
  PackageSpec s;
  s.name = name;
  if (name == "lenet5") s.inputs = {{"image", "FP32", {-1, 1, 32, 32}}}, s.outputs = {{"logits", "FP32", {-1, 10}}};
  if (name == "resnet18") s.inputs = {{"image", "FP32", {-1, 3, 64, 64}}}, s.outputs = {{"logits", "FP32", {-1, 1000}}};
  if (name == "bert_classifier") s.inputs = {{"ids", "INT64", {-1, 16}}}, s.outputs = {{"logits", "FP32", {-1, 2}}};
  return s;
}

TEST(Zoo, PackagesRoundTrip) {
  for (const char* name : {"lenet5", "resnet18", "bert_classifier"}) {
    const auto dir = temp_dir(name);
    auto m = loaded(name);
    save_package(dir, *m, spec_for(name));
    ModelPackage p = load_package(dir);
    EXPECT_EQ(p.spec.graph, m->spec());
    EXPECT_EQ(p.spec.graph["type"], "zoo");
    auto back = build_module(p);
    back->eval();
    EXPECT_EQ(keys_of(*back), keys_of(*m));
    auto io = test::zoo_data(std::string(name) + "_io");
    NoGradGuard no_grad;
    EXPECT_EQ(back->forward(io["input"]).to_vector(), m->forward(io["input"]).to_vector()) << name;
    std::filesystem::remove_all(dir);
  }
}

TEST(Zoo, PackageErrorsNameTheField) {
  const auto dir = temp_dir("bad");
  save_package(dir, *zoo::lenet5(), spec_for("lenet5"));
  std::string good;
  {
    std::ifstream in(dir / "model.json");
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto j = nlohmann::json::parse(good);
  auto expect_error = [&](auto edit, const std::string& needle) {
    auto c = j;
    edit(c);
    std::ofstream(dir / "model.json") << c.dump();
    try {
      load_package(dir);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
      EXPECT_THAT(e.what(), HasSubstr("model.json"));
    }
  };
  expect_error([](auto& c) { c["graph"]["model"] = "alexnet"; }, "graph.model' names an unknown zoo model 'alexnet'");
  expect_error([](auto& c) { c["graph"].erase("model"); }, "graph.model");
  expect_error([](auto& c) { c["graph"]["config"]["depth"] = 3; }, "graph.config.depth' is not a config key");
  expect_error([](auto& c) { c["graph"]["config"]["classes"] = -2; }, "graph.config.classes' must be a positive integer");
  expect_error([](auto& c) { c["graph"]["config"] = 5; }, "graph.config' has type number");
  expect_error([](auto& c) { c["inputs"][0]["shape"] = {-1, 3, 32, 32}; }, "inputs[0].shape");
  expect_error([](auto& c) { c["outputs"][0]["shape"] = {-1, 11}; }, "outputs[0].shape");
  expect_error([](auto& c) { c["graph"]["type"] = "zooo"; }, "graph.type' is 'zooo'");
  // The weights must be the model's: a 7-class head does not fit classes = 10.
  std::ofstream(dir / "model.json") << good;
  save_package(dir / "other", *zoo::lenet5(7), spec_for("lenet5"));
  std::filesystem::copy_file(dir / "other" / "weights.safetensors", dir / "weights.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  try {
    load_package(dir);
    ADD_FAILURE() << "no error for the 7-class weights";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("weights.safetensors"));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'fc3.weight' has shape [7, 84], expected [10, 84]"));
  }
  std::filesystem::remove_all(dir);
}

TEST(Zoo, PredictorServesZooPackages) {
  for (const char* name : {"lenet5", "bert_classifier"}) {
    const auto dir = temp_dir(std::string("predictor_") + name);
    save_package(dir, *loaded(name), spec_for(name));
    auto pred = Predictor::load(dir, {.device = Device::hpu(0), .batch_buckets = {1, 2}});
    auto io = test::zoo_data(std::string(name) + "_io");
    const Tensor x = io["input"].contiguous();
    const int64_t batch = x.dim(0);  // lenet5: 3 = 2 + 1 through two buckets
    std::vector<float> out(static_cast<size_t>(batch * pred->output_size(0)));
    pred->run({x.raw_data()}, batch, {out.data()});
    test::expect_close(out, io["output"].to_vector(), 1e-4, std::string(name) + " through Predictor", 1e-5);
    std::filesystem::remove_all(dir);
  }
}

TEST(Zoo, HpuGraphReplayEqualsEager) {
  for (const char* name : {"lenet5", "resnet18", "bert_classifier"}) {
    auto m = loaded(name);
    m->to(Device::hpu(0));
    auto io = test::zoo_data(std::string(name) + "_io");
    const Tensor x = io["input"];
    NoGradGuard no_grad;
    const std::vector<float> eager = m->forward(x.to(Device::hpu(0))).to_vector();
    Tensor in = Tensor::zeros(x.shape(), x.dtype(), Device::hpu(0));
    graphs::HPUGraph g(Device::hpu(0));
    g.capture_begin();
    Tensor out = m->forward_all({in})[0];
    g.capture_end();
    for (int rep = 0; rep < 2; ++rep) {
      in.copy_from(x);
      g.replay();
      test::expect_close(out.to_vector(), eager, 1e-5, std::string(name) + " replay vs eager", 1e-5);
    }
    expect_matches(out, io["output"], 1e-4, std::string(name) + " replay vs PyTorch");
  }
}

}  // namespace
}  // namespace hg
