// Models without a batch dimension (Triton's max_batch_size 0): ONNX exports whose batch is not
// dimension 0 (a sequence-first LSTM with initial states [layers, batch, hidden]) or that have no
// dynamic batch (every shape fixed) import unbatched, run whole tensors one request per run, match
// PyTorch (scripts/testdata_onnx.py) and are served with max_batch_size 0; a config that asks to
// batch them is refused naming why, and a batched model configured with max_batch_size 0 takes
// whole tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "golden.h"
#include "models/onnx_import.h"
#include "models/package.h"
#include "models/predictor.h"
#include "models/safetensors.h"
#include "server/kserve.h"
#include "server/model_repository.h"
#include "server/server_metrics.h"
#include "tests/test_env.h"

#ifndef HG_TESTDATA_DIR
#error "HG_TESTDATA_DIR must be defined (tests/CMakeLists.txt)"
#endif

namespace hg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::Predictor;

fs::path data_dir() { return fs::path(HG_TESTDATA_DIR) / "onnx"; }

// A repository under the test temp dir holding `model` (the test data's `file`.onnx as
// <model>/1/model.onnx) and, when given, its config.json.
fs::path repository(const std::string& model, const std::string& file, const std::string& config = "") {
  const fs::path root = test::temp_dir("unbatched_" + model);  // per process: suites may run side by side
  fs::create_directories(root / model / "1");
  fs::copy_file(data_dir() / (file + ".onnx"), root / model / "1" / "model.onnx");
  if (!config.empty()) std::ofstream(root / model / "config.json") << config;
  return root;
}

std::vector<float> floats(const safetensors::Entry& e) {
  std::vector<float> v(e.data.size() / sizeof(float));
  std::memcpy(v.data(), e.data.data(), e.data.size());
  return v;
}

const char* const kSets[] = {"a", "b"};  // scripts/testdata_onnx.py SEQ_FIRST_SETS: (6, 2), (3, 5)
const char* const kInputs[] = {"input", "h0", "c0"};
const char* const kOutputs[] = {"output", "hn", "cn"};

TEST(Unbatched, SequenceFirstLstmImportsWholeAndMatchesPyTorch) {
  const fs::path dir = repository("seq_first", "sequence_first_op14") / "seq_first" / "1";
  auto p = Predictor::load(dir, {.batch_buckets = {1, 4}});
  const models::PackageSpec& spec = p->package().spec;
  EXPECT_FALSE(spec.batched);
  EXPECT_EQ(spec.inputs[0].shape, (Shape{-1, -1, 4}));
  EXPECT_EQ(spec.inputs[1].shape, (Shape{2, -1, 5}));
  EXPECT_EQ(p->buckets(), (std::vector<int64_t>{1}));  // one request per run
  const auto ref = safetensors::read(data_dir() / "sequence_first_op14.safetensors");
  for (const char* set : kSets) {
    std::vector<Shape> shapes;
    std::vector<const void*> in;
    for (const char* name : kInputs) {
      const auto& e = *ref.find(std::string(name) + "_" + set);
      shapes.push_back(e.shape);
      in.push_back(e.data.data());
    }
    const std::vector<Shape> out_shapes = p->output_shapes(shapes);
    std::vector<std::vector<float>> out;
    std::vector<void*> out_ptrs;
    for (size_t j = 0; j < 3; ++j) {
      const auto& want = *ref.find(std::string(kOutputs[j]) + "_" + set);
      EXPECT_EQ(out_shapes[j], want.shape) << kOutputs[j] << " set " << set;
      out.emplace_back(static_cast<size_t>(numel(want.shape)));
    }
    for (auto& o : out) out_ptrs.push_back(o.data());
    p->run(in, 1, out_ptrs, shapes);
    for (size_t j = 0; j < 3; ++j)
      test::expect_close(out[j], floats(*ref.find(std::string(kOutputs[j]) + "_" + set)), 1e-5,
                         std::string(kOutputs[j]) + " set " + set, 1e-6);
  }
  EXPECT_EQ(p->signature_stats().live, 2u);
  const auto& x = *ref.find("input_a");
  std::vector<float> sink(1000);
  try {
    p->run({x.data.data(), x.data.data(), x.data.data()}, 2, {sink.data(), sink.data(), sink.data()},
           {x.shape, {2, 2, 5}, {2, 2, 5}});
    ADD_FAILURE() << "an unbatched model ran a batch of 2";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("has no batch dimension"), std::string::npos) << e.what();
  }
  try {  // h0's dimension 0 is the layer count, fixed at 2
    (void)p->output_shapes({x.shape, {3, 2, 5}, {2, 2, 5}});
    ADD_FAILURE() << "h0 with 3 layers accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("input 'h0': dimension 0 is 3; the model takes 2"), std::string::npos) << e.what();
  }
}

TEST(Unbatched, StaticExportCapturesItsOneShapeAndRoundTripsThroughModelJson) {
  const fs::path dir = repository("static_mlp", "static_mlp_op13") / "static_mlp" / "1";
  auto p = Predictor::load(dir, {});
  EXPECT_FALSE(p->package().spec.batched);
  EXPECT_EQ(p->package().spec.inputs[0].shape, (Shape{2, 64}));
  EXPECT_EQ(p->input_size(0), 128);
  EXPECT_EQ(p->output_size(0), 20);
  const auto infos = p->capture_all();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_TRUE(infos[0].captured);
  const auto ref = safetensors::read(data_dir() / "static_mlp_op13.safetensors");
  std::vector<float> out(20);
  p->run({ref.find("input")->data.data()}, 1, {out.data()});
  test::expect_close(out, floats(*ref.find("output")), 1e-5, "static mlp", 1e-6);
  // model.json keeps "batched": false (hgraph-convert's packages and the import cache)
  models::ModelPackage imported = models::import_onnx(dir / "model.onnx");
  const json j = models::package_json(imported.spec);
  EXPECT_EQ(j.at("batched"), false);
  const models::ModelPackage again = models::package_from(j, std::move(imported.weights), dir);
  EXPECT_FALSE(again.spec.batched);
  EXPECT_EQ(again.spec.inputs[0].shape, (Shape{2, 64}));
}

struct Served {
  std::unique_ptr<server::ModelRepository> repo;
  server::ServerMetrics metrics;
  std::unique_ptr<server::KServeHandler> h;
  explicit Served(const fs::path& root) {
    server::RepositoryOptions o;
    o.dir = root;
    o.predictor = {Device::hpu(0), {1, 4}};
    repo = std::make_unique<server::ModelRepository>(o);
    h = std::make_unique<server::KServeHandler>(*repo, metrics, server::KServeOptions{});
  }
};

json tensor(const char* name, const safetensors::Entry& e) {
  return {{"name", name}, {"datatype", "FP32"}, {"shape", e.shape}, {"data", floats(e)}};
}

TEST(Unbatched, ServedWithMaxBatchSizeZeroAndWholeShapes) {
  Served s(repository("seq_first", "sequence_first_op14"));
  ASSERT_NO_THROW(s.repo->resolve("seq_first", std::nullopt));
  const auto meta = json::parse(s.h->handle({"GET", "/v2/models/seq_first", "", {}}).body);
  EXPECT_EQ(meta["inputs"][0]["shape"], json({-1, -1, 4})) << meta.dump();
  EXPECT_EQ(meta["inputs"][1]["shape"], json({2, -1, 5})) << meta.dump();
  const auto config = json::parse(s.h->handle({"GET", "/v2/models/seq_first/config", "", {}}).body);
  EXPECT_EQ(config["max_batch_size"], 0) << config.dump();
  const auto ref = safetensors::read(data_dir() / "sequence_first_op14.safetensors");
  for (const char* set : kSets) {
    json body = {{"inputs", json::array()}};
    for (const char* name : kInputs) body["inputs"].push_back(tensor(name, *ref.find(std::string(name) + "_" + set)));
    const auto r = s.h->handle({"POST", "/v2/models/seq_first/infer", body.dump(), {}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    for (size_t k = 0; k < 3; ++k) {
      const json& o = j["outputs"][k];
      const auto& want = *ref.find(o["name"].get<std::string>() + "_" + set);
      EXPECT_EQ(o["shape"].get<Shape>(), want.shape) << o["name"];
      test::expect_close(o["data"].get<std::vector<float>>(), floats(want), 1e-5, o["name"].get<std::string>(), 1e-6);
    }
  }
  json bad = {{"inputs", json::array()}};
  for (const char* name : kInputs) bad["inputs"].push_back(tensor(name, *ref.find(std::string(name) + "_a")));
  bad["inputs"][1]["shape"] = {2, 2};  // h0 without its hidden dimension
  bad["inputs"][1]["data"] = std::vector<float>(4, 0.f);
  const auto r = s.h->handle({"POST", "/v2/models/seq_first/infer", bad.dump(), {}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("input 'h0'"), std::string::npos) << r.body;
}

TEST(Unbatched, ConfigThatBatchesAModelWithoutABatchIsRefused) {
  Served s(repository("seq_first", "sequence_first_op14", R"({"max_batch_size": 8})"));
  try {
    s.repo->resolve("seq_first", std::nullopt);
    ADD_FAILURE() << "a sequence-first model loaded with max_batch_size 8";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("max_batch_size is 8 but the model has no batch dimension"), std::string::npos) << what;
    EXPECT_NE(what.find("'h0' FP32 [2,-1,5]"), std::string::npos) << what;
  }
}

// A batched export configured with max_batch_size 0: its tensors are whole, dimension 0 included.
TEST(Unbatched, MaxBatchSizeZeroServesABatchedModelWhole) {
  Served s(repository("mlp", "mlp_op13", R"({"max_batch_size": 0})"));
  ASSERT_NO_THROW(s.repo->resolve("mlp", std::nullopt));
  const auto ref = safetensors::read(data_dir() / "mlp_op13.safetensors");
  json body = {{"inputs", {tensor("input", *ref.find("input"))}}};
  const auto r = s.h->handle({"POST", "/v2/models/mlp/infer", body.dump(), {}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["outputs"][0]["shape"].get<Shape>(), ref.find("output")->shape);
  test::expect_close(j["outputs"][0]["data"].get<std::vector<float>>(), floats(*ref.find("output")), 1e-5, "mlp whole", 1e-6);
}

}  // namespace
}  // namespace hg
