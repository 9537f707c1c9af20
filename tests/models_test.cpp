// Model packages: round trip, validation errors, and the Predictor's bucketed replays.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <fstream>

#include "engine/autograd.h"
#include "engine/error.h"
#include "golden.h"
#include "models/package.h"
#include "models/predictor.h"
#include "models/zoo.h"
#include "test_env.h"

using namespace hg;
using namespace hg::models;
using ::testing::HasSubstr;

namespace {

using hg::test::temp_dir;

PackageSpec mlp_spec() {
  PackageSpec s;
  s.name = "golden_mlp";
  s.inputs = {{"input", "FP32", {-1, 64}}};
  s.outputs = {{"logits", "FP32", {-1, 10}}};
  s.metadata = {{"source", "tests/golden/mlp.json"}};
  return s;
}

std::unique_ptr<Sequential> golden_mlp() {
  const auto golden = test::load_json("mlp.json");
  auto net = zoo::mlp({64, 32, 10});
  for (auto& [name, p] : net->named_parameters()) p->copy_from(test::tensor_from(golden["weights"][name], Device::cpu()));
  return net;
}

void write_text(const std::filesystem::path& p, const std::string& s) { std::ofstream(p) << s; }

TEST(Package, RoundTripKeepsOutputs) {
  const auto dir = temp_dir("roundtrip");
  auto net = golden_mlp();
  save_package(dir, *net, mlp_spec());
  ModelPackage p = load_package(dir);
  EXPECT_EQ(p.spec.name, "golden_mlp");
  EXPECT_EQ(p.spec.inputs[0].shape, (Shape{-1, 64}));
  EXPECT_EQ(p.spec.metadata["source"], "tests/golden/mlp.json");
  auto loaded = build_module(p);
  const auto golden = test::load_json("mlp.json");
  NoGradGuard g;
  Tensor x = test::tensor_from(golden["input"], Device::cpu());
  test::expect_close(loaded->forward(x).to_vector(), golden["output"]["data"].get<std::vector<float>>(), 1e-5, "loaded");
  std::filesystem::remove_all(dir);
}

TEST(Package, ErrorsNameTheFileAndField) {
  const auto dir = temp_dir("bad");
  save_package(dir, *golden_mlp(), mlp_spec());
  const auto good = std::string(std::istreambuf_iterator<char>(std::ifstream(dir / "model.json").rdbuf()), {});
  auto expect_error = [&](const std::string& json, const std::string& needle) {
    write_text(dir / "model.json", json);
    try {
      load_package(dir);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
      EXPECT_THAT(e.what(), HasSubstr("model.json"));
    }
  };
  expect_error(good.substr(0, good.size() / 2), "malformed JSON in");
  auto j = nlohmann::json::parse(good);
  auto with = [&](auto edit) {
    auto c = j;
    edit(c);
    return c.dump();
  };
  expect_error(with([](auto& c) { c["format_version"] = 9; }), "format_version");
  expect_error(with([](auto& c) { c.erase("inputs"); }), "'inputs' is missing");
  expect_error(with([](auto& c) { c["inputs"][0]["datatype"] = "INT8"; }), "inputs[0].datatype");
  expect_error(with([](auto& c) { c["inputs"][0]["shape"] = {-1, 63}; }), "in_features");
  expect_error(with([](auto& c) { c["graph"]["layers"][1]["op"] = "conv3d"; }), "graph.layers[1].op: unknown layer 'conv3d'");
  expect_error(with([](auto& c) { c["graph"]["layers"][0]["in_features"] = 1 << 24; }),
               "graph.layers[0].in_features: is 16777216, the layer receives [64] (last dim 64)");
  expect_error(with([](auto& c) { c["outputs"][0]["shape"] = {-1, 11}; }), "outputs[0].shape");
  // Weights that do not fit the graph.
  write_text(dir / "model.json", good);
  auto other = zoo::mlp({64, 16, 10});
  save_package(dir / "other", *other, mlp_spec());
  std::filesystem::copy_file(dir / "other" / "weights.safetensors", dir / "weights.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  try {
    load_package(dir);
    ADD_FAILURE() << "no error for mismatched weights";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'graph.layers' describe 2410 parameter and buffer elements, weights.safetensors holds 1210"));
  }
  EXPECT_THROW(load_package(dir / "missing"), IoError);
  std::filesystem::remove_all(dir);
}

TEST(Predictor, BucketedReplaysMatchEager) {
  const auto dir = temp_dir("predictor");
  auto net = golden_mlp();
  save_package(dir, *net, mlp_spec());
  auto pred = Predictor::load(dir, {.device = Device::hpu(0), .batch_buckets = {1, 2, 4}});
  const auto info = pred->capture_all();
  ASSERT_EQ(info.size(), 3u);
  EXPECT_EQ(info[2].batch, 4);
  EXPECT_GT(info[2].arena_bytes, 0u);
  EXPECT_EQ(pred->input_size(0), 64);
  EXPECT_EQ(pred->output_size(0), 10);
  for (int64_t batch : {1, 3, 4, 7}) {  // 3 pads into the 4 bucket; 7 runs unpadded (above the largest)
    std::vector<float> x(static_cast<size_t>(batch * 64));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 17) / 17.0f - 0.5f;
    std::vector<float> out(static_cast<size_t>(batch * 10));
    pred->run({x.data()}, batch, {out.data()});
    NoGradGuard g;
    const auto eager = net->forward(Tensor::from_vector(x, {batch, 64})).to_vector();
    // A replay may run another GEMM kernel than eager (the small-batch one at 4 rows and below):
    // the same sums in another order.
    test::expect_close(out, eager, 1e-5, "batch " + std::to_string(batch), 1e-6);
    // The staged form: the samples go straight into the bucket's buffers (room for the bucket,
    // the padding zeroed by the Predictor) and the outputs are read from its own buffers.
    std::vector<float> staged(static_cast<size_t>(batch * 10), NAN);
    const void* written_to = nullptr;
    pred->run_staged(
        batch,
        [&](const std::vector<void*>& in) {
          ASSERT_EQ(in.size(), 1u);
          written_to = in[0];
          std::memcpy(in[0], x.data(), x.size() * sizeof(float));
        },
        [&](const std::vector<const void*>& outs) {
          ASSERT_EQ(outs.size(), 1u);
          std::memcpy(staged.data(), outs[0], staged.size() * sizeof(float));
        });
    ASSERT_NE(written_to, nullptr);
    EXPECT_NE(written_to, static_cast<const void*>(x.data()));
    test::expect_close(staged, eager, 1e-5, "staged batch " + std::to_string(batch), 1e-6);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
