// Sequential stacks from JSON layer lists (models/layer_spec.h): the planned shapes and parameter
// counts agree with the built modules, a package of every layer kind loads back and computes the
// same outputs, hgraph-train's "sequential" model trains and exports, and every bad field is
// named with its layer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "engine/ops.h"
#include "models/layer_spec.h"
#include "models/package.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "training/train_config.h"

namespace hg::models {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

int64_t state_elements(const Module& m) {
  int64_t n = 0;
  for (const auto& [k, t] : m.state_dict()) n += t.numel();
  return n;
}

const json kCnn = json::array({
    {{"op", "conv2d"}, {"in_channels", 1}, {"out_channels", 4}, {"kernel", 3}, {"padding", 1}},
    {{"op", "batch_norm2d"}, {"num_features", 4}},
    {{"op", "relu"}},
    {{"op", "max_pool2d"}, {"kernel", 2}},
    {{"op", "conv2d"}, {"in_channels", 4}, {"out_channels", 8}, {"kernel", {3, 2}}, {"stride", 2}, {"groups", 2}, {"bias", false}},
    {{"op", "silu"}},
    {{"op", "avg_pool2d"}, {"kernel", 1}},
    {{"op", "adaptive_avg_pool2d"}, {"output_size", 2}},
    {{"op", "flatten"}},
    {{"op", "dropout"}, {"p", 0.2}},
    {{"op", "linear"}, {"in_features", 32}, {"out_features", 16}},
    {{"op", "layer_norm"}, {"dim", 16}},
    {{"op", "gelu"}, {"approximate", "tanh"}},
    {{"op", "tanh"}},
    {{"op", "linear"}, {"in_features", 16}, {"out_features", 5}},
    {{"op", "sigmoid"}},
});

const json kTokens = json::array({
    {{"op", "embedding"}, {"num_embeddings", 50}, {"dim", 16}},
    {{"op", "transformer_encoder_layer"}, {"d_model", 16}, {"nhead", 4}, {"dim_feedforward", 32}, {"dropout", 0.0},
     {"activation", "gelu"}, {"norm_first", true}},
    {{"op", "flatten"}},
    {{"op", "linear"}, {"in_features", 96}, {"out_features", 3}},
});

TEST(LayerSpec, PlannedShapesAndCountsMatchTheModules) {
  const SequentialPlan cnn = plan_sequential(kCnn, {1, 12, 12}, "layers");
  EXPECT_EQ(cnn.output, (Shape{5}));
  EXPECT_EQ(cnn.input_datatype, "FP32");
  auto net = build_sequential(cnn, 3);
  EXPECT_EQ(cnn.parameters, state_elements(*net));
  net->eval();
  const Tensor y = net->forward(Tensor::full({2, 1, 12, 12}, 0.5f));
  EXPECT_EQ(y.shape(), (Shape{2, 5}));
  const SequentialPlan tok = plan_sequential(kTokens, {6}, "layers");
  EXPECT_EQ(tok.input_datatype, "INT64");
  EXPECT_EQ(tok.output, (Shape{3}));
  EXPECT_EQ(tok.parameters, state_elements(*build_sequential(tok, 0)));
  // The normalised list names every field, so a module's spec() plans to the same list.
  EXPECT_EQ(plan_sequential(net->spec()["layers"], {1, 12, 12}, "again").layers, cnn.layers);
}

TEST(LayerSpec, PackagesOfEveryLayerLoadAndComputeTheSame) {
  const auto dir = test::temp_dir("LayerSpecPackage");
  for (const auto& [layers, input, dtype] : {std::tuple{kCnn, Shape{1, 12, 12}, "FP32"}, std::tuple{kTokens, Shape{6}, "INT64"}}) {
    const SequentialPlan plan = plan_sequential(layers, input, "layers");
    auto net = build_sequential(plan, 11);
    net->eval();
    Shape in{-1};
    in.insert(in.end(), input.begin(), input.end());
    const PackageSpec spec{.name = "stack", .inputs = {{"input", dtype, in}}, .outputs = {{"out", "FP32", {-1, plan.output[0]}}},
                           .graph = net->spec()};
    save_package(dir, *net, spec);
    auto back = build_module(load_package(dir));
    back->eval();
    Shape full{3};
    full.insert(full.end(), input.begin(), input.end());
    Tensor x = Tensor::empty(full, dtype_from_kserve(dtype));
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (x.dtype() == DType::I64) x.data<int64_t>()[i] = (i * 7) % 50;
      else x.data<float>()[i] = std::sin(static_cast<float>(i));
    }
    const auto want = net->forward(x).to_vector(), got = back->forward(x).to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i]));
      EXPECT_FLOAT_EQ(got[i], want[i]) << dtype << " output " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(LayerSpec, BadLayersAreNamed) {
  auto error = [](json layers, Shape in) { return test::error_of<InvalidArgument>([&] { plan_sequential(layers, in, "m.layers"); }); };
  const json conv = {{"op", "conv2d"}, {"in_channels", 3}, {"out_channels", 4}, {"kernel", 3}};
  EXPECT_THAT(error({conv}, {1, 8, 8}), HasSubstr("m.layers[0].in_channels: is 3, the layer receives [1, 8, 8]"));
  EXPECT_THAT(error({conv}, {3, 2, 8}), HasSubstr("m.layers[0].kernel: a window of 3 does not fit the input of 2"));
  EXPECT_THAT(error({conv}, {64}), HasSubstr("m.layers[0]: conv2d takes [C, H, W], the layer receives [64]"));
  EXPECT_THAT(error({{{"op", "linear"}, {"in_features", 8}, {"out_features", 2}, {"bais", false}}}, {8}),
              HasSubstr("m.layers[0].bais: unknown field"));
  EXPECT_THAT(error({{{"op", "linear"}, {"in_features", 8}}}, {8}), HasSubstr("m.layers[0].out_features: is required"));
  EXPECT_THAT(error({{{"op", "relu"}}, {{"op", "embedding"}, {"num_embeddings", 4}, {"dim", 2}}}, {8}),
              HasSubstr("m.layers[1]: an embedding must be the first layer"));
  EXPECT_THAT(error({{{"op", "transformer_encoder_layer"}, {"d_model", 6}, {"nhead", 4}}}, {5, 6}),
              HasSubstr("m.layers[0].nhead: 4 does not divide d_model 6"));
  EXPECT_THAT(error({{{"op", "flatten"}, {"start_dim", 3}, {"end_dim", 1}}}, {2, 3, 4}), HasSubstr("m.layers[0].end_dim: comes before start_dim"));
  EXPECT_THAT(error({{{"op", "gelu"}, {"approximate", "fast"}}}, {4}), HasSubstr("expected one of \"none\", \"tanh\""));
  EXPECT_THAT(error({{{"op", "lstm"}}}, {4}), HasSubstr("m.layers[0].op: unknown layer 'lstm'"));
  // Sizes that would take more memory than any model: refused before anything is built.
  EXPECT_THAT(error({{{"op", "linear"}, {"in_features", 1 << 24}, {"out_features", 1 << 24}}}, {1 << 24}),
              HasSubstr("passes 4294967296 parameters"));
  EXPECT_THAT(error({{{"op", "linear"}, {"in_features", 4}, {"out_features", 1 << 24}}}, {1 << 10, 4}),
              HasSubstr("more than 2^32 elements an example"));
  EXPECT_THAT(error(json::array(), {4}), HasSubstr("m.layers: no layers"));
  EXPECT_THAT(error(json::object(), {4}), HasSubstr("m.layers: expected a list of layers"));
}

TEST(LayerSpec, HgraphTrainBuildsASequentialClassifier) {
  const auto dir = test::temp_dir("LayerSpecTrain");
  json c = {{"data", {{"image_size", 32}, {"batch_size", 32}}},
            {"model", {{"name", "sequential"},
                       {"config", {{"input", {1, 32, 32}},
                                   {"layers", {{{"op", "conv2d"}, {"in_channels", 1}, {"out_channels", 6}, {"kernel", 5}, {"stride", 2}},
                                               {{"op", "relu"}},
                                               {{"op", "max_pool2d"}, {"kernel", 2}},
                                               {{"op", "flatten"}},
                                               {{"op", "linear"}, {"in_features", 294}, {"out_features", 10}}}}}}}},
            {"optimizer", {{"name", "adam"}, {"lr", 3e-3}}},
            {"trainer", {{"max_epochs", 4}, {"logger", false}, {"enable_checkpointing", false}, {"enable_progress_bar", false},
                         {"num_sanity_val_steps", 0}, {"default_root_dir", dir.string()}}},
            {"export", {{"dir", (dir / "repo").string()}}}};
  std::ostringstream out;
  const auto r = training::run_training(training::parse_train_config(c), out);
  std::cout << "digits, a sequential CNN, 4 epochs: test_acc " << r.test.at("test_acc") << "\n";
  EXPECT_GE(r.test.at("test_acc"), 0.9);
  EXPECT_EQ(r.export_dir, dir / "repo" / "digits_sequential" / "1");
  const auto pkg = load_package(r.export_dir);
  EXPECT_EQ(pkg.spec.inputs[0].shape, (Shape{-1, 1, 32, 32}));
  auto net = build_module(pkg);
  net->eval();
  r.module->module().eval();
  const Tensor x = Tensor::full({2, 1, 32, 32}, 0.25f);
  const Device d = r.module->module().named_parameters()[0].second->device();
  const auto want = r.module->module().forward(x.to(d)).to(Device::cpu()).to_vector(), got = net->forward(x).to_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
  c["model"]["config"]["layers"][4]["in_features"] = 200;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::parse_train_config(c); }),
              HasSubstr("model.config.layers[4].in_features: is 200, the layer receives [294] (last dim 294)"));
  c["model"]["config"]["layers"].erase(4);
  c["model"]["config"]["layers"].erase(3);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { training::parse_train_config(c); }),
              HasSubstr("model.config.layers: end in [6, 7, 7] per example"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hg::models
