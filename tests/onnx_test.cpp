// ONNX import against PyTorch: the zoo models exported by torch.onnx.export at opsets 11-17
// (scripts/testdata_onnx.py, run as a ctest fixture) run through Predictor (HPU graph capture,
// batch buckets) and match torch within 1e-4 relative; external data; error messages for
// unsupported ops and corrupt files; hgraph-convert round trip; the server loading model.onnx.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/atomic_file.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "golden.h"
#include "graphs/hpu_graph.h"
#include "models/module.h"
#include "models/onnx_import.h"
#include "models/onnx_ops.h"
#include "models/predictor.h"
#include "models/safetensors.h"
#include "server/kserve.h"
#include "server/model_repository.h"
#include "wait.h"
#include "tests/test_env.h"

#ifndef HG_TESTDATA_DIR
#error "HG_TESTDATA_DIR must be defined (tests/CMakeLists.txt)"
#endif

namespace {

namespace fs = std::filesystem;
using hg::models::Predictor;

fs::path data_dir() { return fs::path(HG_TESTDATA_DIR) / "onnx"; }

// A fresh directory under the test temp dir.
fs::path scratch(const std::string& name) { return hg::test::temp_dir("onnx_" + name); }  // per process

// The input batch and PyTorch's output of a case (scripts/testdata_onnx.py).
struct Reference {
  hg::safetensors::Entry input, output;
};
Reference reference(const std::string& c) {
  const auto f = hg::safetensors::read(data_dir() / (c + ".safetensors"));
  return {*f.find("input"), *f.find("output")};
}

std::vector<float> as_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// A version folder holding the case's export as model.onnx.
fs::path onnx_version_dir(const std::string& c) {
  const fs::path dir = scratch("repo_" + c) / c / "1";
  fs::create_directories(dir);
  fs::copy_file(data_dir() / (c + ".onnx"), dir / "model.onnx");
  return dir;
}

std::vector<float> predict(Predictor& p, const Reference& ref) {
  const int64_t batch = ref.input.shape[0];
  std::vector<float> out(static_cast<size_t>(batch * p.output_size(0)));
  p.run({ref.input.data.data()}, batch, {out.data()});
  return out;
}

struct Case {
  const char* name;
  const char* input_datatype;
};

class OnnxModelTest : public testing::TestWithParam<Case> {};

// Batch 3 through buckets {1, 2} (two replays) and {4} (one padded replay): the dynamic batch.
TEST_P(OnnxModelTest, MatchesPyTorchThroughPredictor) {
  const Case c = GetParam();
  const Reference ref = reference(c.name);
  const fs::path dir = onnx_version_dir(c.name);
  for (const auto& buckets : {std::vector<int64_t>{1, 2}, std::vector<int64_t>{4}}) {
    auto p = Predictor::load(dir, {hg::Device::hpu(0), buckets});
    const auto& spec = p->package().spec;
    ASSERT_EQ(spec.inputs.size(), 1u);
    EXPECT_EQ(spec.inputs[0].datatype, c.input_datatype);
    EXPECT_EQ(spec.inputs[0].shape[0], -1);
    EXPECT_EQ(hg::Shape(spec.inputs[0].shape.begin() + 1, spec.inputs[0].shape.end()),
              hg::Shape(ref.input.shape.begin() + 1, ref.input.shape.end()));
    ASSERT_EQ(spec.outputs.size(), 1u);
    EXPECT_EQ(spec.outputs[0].shape[0], -1);
    EXPECT_EQ(spec.graph["type"], "ops");
    hg::test::expect_close(predict(*p, ref), as_floats(ref.output.data), 1e-4,
                           std::string(c.name) + " with " + std::to_string(buckets.size()) + " buckets", 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, OnnxModelTest,
                         testing::Values(Case{"mlp_op13", "FP32"}, Case{"lenet5_op14", "FP32"},
                                         Case{"lenet5_op15", "FP32"}, Case{"resnet18_op17", "FP32"},
                                         Case{"bert_op13", "INT64"}, Case{"bert_op16", "INT64"},
                                         Case{"bert_op17", "INT64"}, Case{"act_pad_op11", "FP32"},
                                         Case{"act_pad_op13", "FP32"}, Case{"act_pad_op14", "FP32"},
                                         Case{"upsample_op11", "FP32"}, Case{"upsample_op17", "FP32"},
                                         Case{"lstm_l2_bi_op14", "FP32"}, Case{"gru_l1_op11", "FP32"},
                                         Case{"gru_l2_bi_op17", "FP32"}, Case{"rnn_l2_op13", "FP32"},
                                         Case{"segmenter_op13", "FP32"}, Case{"einsum_op12", "FP32"},
                                         Case{"einsum_op17", "FP32"}, Case{"window_mask_op13", "FP32"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Shape arithmetic is not folded at import (no probe runs): BERT's graph keeps its Shape nodes,
// and no attribute depends on a batch formula; the module evaluates it per concrete shape.
TEST(OnnxImportTest, ShapeArithmeticStaysInTheGraph) {
  const auto p = hg::models::import_onnx(data_dir() / "bert_op13.onnx");
  int shapes = 0;
  for (const auto& n : p.spec.graph["nodes"]) {
    shapes += n["op"] == "Shape";
    EXPECT_EQ(n["attrs"].dump().find("\"batch\""), std::string::npos) << n.dump();
  }
  EXPECT_GT(shapes, 0);
}

// Batch and sequence dynamic (dynamic_axes {0: batch, 1: seq}): the spec says -1 for both, and
// the module answers as PyTorch at two batch sizes and sequence lengths, on the cpu and through
// lazy hpu:0 (where the shape arithmetic runs on the host while the rest is traced).
TEST(OnnxImportTest, AnyDimensionMayBeDynamic) {
  const auto p = hg::models::import_onnx(data_dir() / "bert_seq_op17.onnx");
  ASSERT_EQ(p.spec.inputs.size(), 1u);
  EXPECT_EQ(p.spec.inputs[0].shape, (hg::Shape{-1, -1}));
  EXPECT_EQ(p.spec.outputs[0].shape, (hg::Shape{-1, 2}));
  const auto f = hg::safetensors::read(data_dir() / "bert_seq_op17.safetensors");
  for (hg::Device d : {hg::Device::cpu(), hg::Device::hpu(0)}) {
    auto net = hg::models::build_module(p, d);
    for (const char* key : {"input", "input_short"}) {
      const auto& in = *f.find(key);
      const auto& want = *f.find(std::string(key) == "input" ? "output" : "output_short");
      const hg::Tensor ids = hg::Tensor::from_indices(
          std::vector<int64_t>(reinterpret_cast<const int64_t*>(in.data.data()),
                               reinterpret_cast<const int64_t*>(in.data.data()) + in.data.size() / 8),
          in.shape, d);
      const auto out = net->forward_all({ids});
      hg::test::expect_close(out[0].to_vector(), as_floats(want.data), 1e-4, std::string(key) + " on " + d.str(), 1e-5);
    }
  }
}

// A value computed from the batch size used as data (a ViT's class token expanded to the
// batch), and opsets 11 and 12, through the Predictor's buckets.
TEST(OnnxImportTest, ShapeValuesUsedAsDataAndOlderOpsets) {
  for (const char* c : {"class_token_op14", "lenet5_op11", "bert_op12"}) {
    const Reference ref = reference(c);
    auto p = Predictor::load(onnx_version_dir(c), {.batch_buckets = {1, 2, 4}});
    hg::test::expect_close(predict(*p, ref), as_floats(ref.output.data), 1e-4, c, 1e-5);
  }
}

// Fixed inputs, an output the file leaves open (upsampled to the input's size): the Predictor
// learns its dimensions at load and the spec (metadata, responses) says them. (Exports whose
// batch is elsewhere: tests/unbatched_test.cpp.)
TEST(OnnxImportTest, OpenOutputDimsAreLearnt) {
  auto p = Predictor::load(onnx_version_dir("segmenter_op13"), {.batch_buckets = {1, 2}});
  EXPECT_EQ(p->package().spec.outputs[0].shape, (hg::Shape{-1, 2, 13, 17}));
  EXPECT_EQ(p->output_size(0), 2 * 13 * 17);
}

// Softmax before opset 13 works on the input flattened to 2-D at `axis`.
TEST(OnnxImportTest, SoftmaxBeforeOpset13IsOverTheFlattenedTail) {
  const Reference ref = reference("softmax_axis1_op12");
  auto net = hg::models::build_module(hg::models::import_onnx(data_dir() / "softmax_axis1_op12.onnx"));
  const hg::Tensor x = hg::Tensor::from_vector(as_floats(ref.input.data), ref.input.shape);
  hg::test::expect_close(net->forward_all({x})[0].to_vector(), as_floats(ref.output.data), 1e-6, "softmax axis 1", 1e-7);
}

// Token ids outside the embedding table are refused before the replay (a replayed kernel cannot
// throw: it gave zeros), naming the input, the element and the value; valid ids still run.
TEST(OnnxServeTest, PredictorRefusesIdsOutsideTheEmbeddingTable) {
  auto p = Predictor::load(onnx_version_dir("bert_op17"), {});
  const int64_t per = p->input_size(0);
  std::vector<int64_t> ids(static_cast<size_t>(2 * per), 1);
  std::vector<float> out(static_cast<size_t>(2 * p->output_size(0)));
  EXPECT_NO_THROW(p->run({ids.data()}, 2, {out.data()}));
  for (int64_t bad : {int64_t{-1}, int64_t{1000}, int64_t{1} << 40}) {
    ids[static_cast<size_t>(per + 3)] = bad;
    try {
      p->run({ids.data()}, 2, {out.data()});
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const hg::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("element " + std::to_string(per + 3) + " is " + std::to_string(bad)), std::string::npos) << what;
      EXPECT_NE(what.find("outside the embedding table's 1000 rows"), std::string::npos) << what;
    }
  }
  ids[static_cast<size_t>(per + 3)] = 999;
  EXPECT_NO_THROW(p->run({ids.data()}, 2, {out.data()}));
}

// The erf form of GELU that torch.onnx writes (Div, Erf, Add, Mul, Mul) imports as one Gelu per
// feed-forward block; the model still matches PyTorch (MatchesPyTorchThroughPredictor).
TEST(OnnxImportTest, ErfGeluBecomesOneGeluNode) {
  for (const char* model : {"bert_op13.onnx", "bert_op17.onnx"}) {
    const auto p = hg::models::import_onnx(data_dir() / model);
    int gelu = 0;
    for (const auto& n : p.spec.graph["nodes"]) {
      EXPECT_NE(n["op"], "Erf") << model << ": " << n.dump();
      gelu += n["op"] == "Gelu";
    }
    EXPECT_EQ(gelu, 2) << model << ": one per encoder layer";
  }
}

// ONNX's external data (onnx.save(..., save_as_external_data=True)): same graph, same outputs.
TEST(OnnxImportTest, ExternalDataLoads) {
  const Reference ref = reference("mlp_op13");
  const fs::path dir = scratch("external") / "1";
  fs::create_directories(dir);
  fs::copy_file(data_dir() / "mlp_external.onnx", dir / "model.onnx");
  fs::copy_file(data_dir() / "mlp_external.data", dir / "mlp_external.data");
  auto p = Predictor::load(dir, {hg::Device::hpu(0), {4}});
  hg::test::expect_close(predict(*p, ref), as_floats(ref.output.data), 1e-4, "mlp from external data", 1e-5);
  EXPECT_EQ(p->package().weights.entries.size(), 4u);
}

TEST(OnnxImportTest, MissingOrShortExternalDataNamesTheTensor) {
  const fs::path dir = scratch("external_bad");
  fs::copy_file(data_dir() / "mlp_external.onnx", dir / "model.onnx");
  try {
    hg::models::import_onnx(dir / "model.onnx");
    FAIL() << "no error without the data file";
  } catch (const hg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp_external.data"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor '"), std::string::npos) << e.what();
  }
  auto data = hg::read_file(data_dir() / "mlp_external.data");
  data.resize(data.size() / 2);
  hg::write_file_atomic(dir / "mlp_external.data", {data});
  try {
    hg::models::import_onnx(dir / "model.onnx");
    FAIL() << "no error for a truncated data file";
  } catch (const hg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not hold"), std::string::npos) << e.what();
  }
}

TEST(OnnxImportTest, UnsupportedOpNamesOpNodeAndOpset) {
  try {
    hg::models::import_onnx(data_dir() / "unsupported.onnx");
    FAIL() << "Det imported";
  } catch (const hg::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unsupported ONNX op 'Det'"), std::string::npos) << m;
    EXPECT_NE(m.find("node 'det_node'"), std::string::npos) << m;
    EXPECT_NE(m.find("opset 15"), std::string::npos) << m;
    EXPECT_NE(m.find("unsupported.onnx"), std::string::npos) << m;
  }
}

// Truncations at several points and garbage bytes: an hg::Error naming the file, never a crash.
TEST(OnnxImportTest, CorruptFilesRaiseErrorsNamingTheFile) {
  const auto bytes = hg::read_file(data_dir() / "lenet5_op15.onnx");
  const fs::path bad = scratch("corrupt") / "bad.onnx";
  for (size_t cut : {size_t{0}, size_t{7}, size_t{100}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    hg::write_file_atomic(bad, {hg::ByteSpan(bytes.data(), cut)});
    try {
      hg::models::import_onnx(bad);
      ADD_FAILURE() << "a file truncated to " << cut << " bytes imported";
    } catch (const hg::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.onnx"), std::string::npos) << e.what();
    }
  }
  std::vector<uint8_t> garbage(4096);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  hg::write_file_atomic(bad, {garbage});
  EXPECT_THROW(hg::models::import_onnx(bad), hg::Error);
  EXPECT_THROW(hg::models::import_onnx(bad.parent_path() / "missing.onnx"), hg::IoError);
}

// hgraph-convert writes a package; load_package + Predictor give the same outputs as torch.
TEST(OnnxConvertTest, ConvertedPackageRoundTrips) {
  const Reference ref = reference("bert_op17");
  const fs::path out = scratch("convert") / "bert" / "1";
  fs::create_directories(out.parent_path());
  const std::string cmd = std::string(HG_CONVERT_BIN) + " " + (data_dir() / "bert_op17.onnx").string() + " " +
                          out.string() + " --name bert > " + (out.parent_path() / "log.txt").string() + " 2>&1";
  ASSERT_EQ(hg::test::run_command(cmd, std::chrono::seconds(300), "hgraph-convert of bert_op17.onnx").exit_code, 0) << cmd;
  const auto pkg = hg::models::load_package(out);
  EXPECT_EQ(pkg.spec.name, "bert");
  EXPECT_EQ(pkg.spec.graph["type"], "ops");
  EXPECT_EQ(pkg.spec.inputs[0].datatype, "INT64");
  EXPECT_EQ(pkg.spec.metadata["opset"], 17);
  auto p = Predictor::load(out, {hg::Device::hpu(0), {4}});
  hg::test::expect_close(predict(*p, ref), as_floats(ref.output.data), 1e-4, "converted bert", 1e-5);
  // A bad argument: exit status 1 and the error on stderr.
  const std::string bad = std::string(HG_CONVERT_BIN) + " " + (data_dir() / "unsupported.onnx").string() + " " +
                          (out.parent_path() / "x").string() + " 2> " + (out.parent_path() / "err.txt").string();
  EXPECT_NE(hg::test::run_command(bad, std::chrono::seconds(300), "hgraph-convert of unsupported.onnx").exit_code, 0);
  std::ifstream err(out.parent_path() / "err.txt");
  const std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Det"), std::string::npos) << text;
}

// The server's repository loads a version folder holding model.onnx and serves INT64 inputs.
TEST(OnnxServeTest, RepositoryServesModelOnnxWithInt64Inputs) {
  const Reference ref = reference("bert_op13");
  const fs::path dir = onnx_version_dir("bert_op13");
  hg::server::RepositoryOptions ropt;
  ropt.dir = dir.parent_path().parent_path();
  ropt.predictor = {hg::Device::hpu(0), {1, 4}};
  hg::server::ModelRepository repo(ropt);
  ASSERT_NO_THROW(repo.resolve("bert_op13", std::nullopt));  // throws the reason when not READY
  nlohmann::json ids = nlohmann::json::array();
  std::vector<int64_t> v(ref.input.data.size() / sizeof(int64_t));
  std::memcpy(v.data(), ref.input.data.data(), ref.input.data.size());
  nlohmann::json body = {{"inputs", {{{"name", "input"}, {"datatype", "INT64"}, {"shape", ref.input.shape}, {"data", v}}}}};
  hg::server::ServerMetrics metrics;
  hg::server::KServeHandler h(repo, metrics, {});
  auto r = h.handle({"POST", "/v2/models/bert_op13/infer", body.dump(), {}});
  ASSERT_EQ(r.status, 200) << r.body;
  const auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  hg::test::expect_close(j["outputs"][0]["data"].get<std::vector<float>>(), as_floats(ref.output.data), 1e-4,
                         "served bert", 1e-5);
  body["inputs"][0]["data"][0] = 1.5;  // INT64 takes integers only
  auto bad = h.handle({"POST", "/v2/models/bert_op13/infer", body.dump(), {}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("INT64"), std::string::npos) << bad.body;
}


// model.json's "ops" graph is validated on load: errors name the file and the field.
TEST(OnnxConvertTest, OpsGraphValidationNamesTheField) {
  const fs::path dir = scratch("ops_invalid");
  const auto p = hg::models::import_onnx(data_dir() / "lenet5_op15.onnx");
  hg::models::save_package(dir, *hg::models::build_module(p), p.spec);
  const auto original = nlohmann::json::parse(hg::read_file(dir / "model.json"));
  auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& field) {
    nlohmann::json j = original;
    edit(j);
    hg::write_file_atomic(dir / "model.json", {hg::as_bytes(j.dump())});
    try {
      hg::models::load_package(dir);
      ADD_FAILURE() << "loaded with a bad " << field;
    } catch (const hg::Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.json: field '" + field + "'"), std::string::npos) << e.what();
    }
  };
  expect_error([](auto& j) { j["graph"]["nodes"][1]["op"] = "Det"; }, "graph.nodes[1].op");
  expect_error([](auto& j) { j["graph"]["nodes"][2]["inputs"][0] = "nowhere"; }, "graph.nodes[2].inputs[0]");
  expect_error([](auto& j) { j["graph"]["outputs"][0] = "nothing"; }, "graph.outputs[0]");
  expect_error([](auto& j) { j["graph"]["nodes"][0].erase("outputs"); }, "graph.nodes[0].outputs");
  expect_error([](auto& j) { j["inputs"][0]["datatype"] = "STRING"; }, "inputs[0].datatype");
}

// A tensor-typed attribute (ConstantOfShape's value) imports, and the filled table feeds a Gather.
TEST(OnnxImportTest, ConstantOfShapeTensorValueImports) {
  const auto p = hg::models::import_onnx(data_dir() / "const_of_shape_table.onnx");
  const auto out = hg::models::build_module(p)->forward_all({hg::Tensor::from_indices({0, 3}, {2})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (hg::Shape{2, 3}));
  for (float v : out[0].to_vector()) EXPECT_EQ(v, 0.25f);
}

// Hand-built graphs asking for impossible sizes or holding bad attributes: an hg::Error naming the
// file and the input or node (scripts/testdata_onnx.py, BAD_MODELS), never bad_alloc or a crash.
TEST(OnnxImportTest, ImpossibleSizesAndBadAttributesNameTheInputOrNode) {
  const std::pair<const char*, const char*> cases[] = {
      {"huge_input", "input 'input'"},
      {"fill_value_string", "node 'fill' (op ConstantOfShape"},
      {"fill_huge", "node 'fill' (op ConstantOfShape"},
      {"range_inf", "node 'range' (op Range"},
      {"expand_huge", "node 'expand' (op Expand"},
  };
  for (const auto& [name, what] : cases) {
    const std::string file = std::string("bad_") + name + ".onnx";
    try {
      hg::models::import_onnx(data_dir() / file);
      ADD_FAILURE() << file << " imported";
    } catch (const hg::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(file), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << file << ": not an hg::Error: " << e.what();
    }
  }
}

// External data fields: a file name holding ".." loads; a ".." component, numbers with trailing
// characters and negative offsets or lengths are rejected.
TEST(OnnxImportTest, ExternalDataFieldsAreCheckedStrictly) {
  const auto p = hg::models::import_onnx(data_dir() / "ext_dots.onnx");
  const auto* w = p.weights.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(as_floats(w->data), (std::vector<float>{1.5f, -2.0f}));
  const std::pair<const char*, const char*> cases[] = {
      {"parent", "must be a relative path below the model"},
      {"length_suffix", "field 'length' is not a non-negative integer: '8abc'"},
      {"length_negative", "field 'length' is not a non-negative integer: '-8'"},
      {"offset_negative", "field 'offset' is not a non-negative integer: '-4'"},
  };
  for (const auto& [name, what] : cases) {
    const std::string file = std::string("ext_") + name + ".onnx";
    try {
      hg::models::import_onnx(data_dir() / file);
      ADD_FAILURE() << file << " imported";
    } catch (const hg::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tensor 'w'"), std::string::npos) << e.what();
    }
  }
}

// One op of a model.json "ops" graph, run as OpGraphModule runs it (node "n1", inputs x0, x1, ...).
std::vector<hg::Tensor> run_op(const std::string& op, const nlohmann::json& attrs, const std::vector<hg::Tensor>& in = {},
                               int64_t batch = 2) {
  hg::models::OpNode n{op, "n1", {}, {"y"}, attrs};
  for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back("x" + std::to_string(i));
  return hg::models::run_onnx_node(n, in, batch);
}

TEST(OnnxOpsTest, ConstantOfShapeFillsExactlyInItsDtype) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not a float, not a double
  const auto i = run_op("ConstantOfShape", {{"shape", {2, 3}}, {"value", {{"dtype", "I64"}, {"shape", {1}}, {"data", {big}}}}});
  ASSERT_EQ(i[0].dtype(), hg::DType::I64);
  EXPECT_EQ(i[0].to_indices(), std::vector<int64_t>(6, big));
  const auto d = run_op("ConstantOfShape", {{"shape", {2}}, {"value", {{"dtype", "F64"}, {"shape", {1}}, {"data", {0.1}}}}});
  ASSERT_EQ(d[0].dtype(), hg::DType::F64);
  EXPECT_EQ(d[0].data<double>()[0], 0.1);
  EXPECT_EQ(d[0].data<double>()[1], 0.1);
}

// The host-side elementwise ops of shape arithmetic: Python's Mod (the divisor's sign) and C's
// (fmod 1), comparisons as BOOL, Min/Max over broadcast inputs, in the first input's dtype.
TEST(OnnxOpsTest, HostElementwiseOpsFollowOnnxSemantics) {
  const hg::Tensor a = hg::Tensor::from_indices({7, -7, 7, -7}, {4}), b = hg::Tensor::from_indices({3, 3, -3, -3}, {4});
  using json = nlohmann::json;
  EXPECT_EQ(run_op("Mod", json::object(), {a, b})[0].to_indices(), (std::vector<int64_t>{1, 2, -2, -1}));
  EXPECT_EQ(run_op("Mod", {{"fmod", 1}}, {a, b})[0].to_indices(), (std::vector<int64_t>{1, -1, 1, -1}));
  const hg::Tensor g = run_op("Greater", json::object(), {a, b})[0];
  EXPECT_EQ(g.dtype(), hg::DType::BOOL);
  EXPECT_EQ(g.to(hg::DType::I64).to_indices(), (std::vector<int64_t>{1, 0, 1, 0}));
  const hg::Tensor m = run_op("Min", json::object(), {a, hg::Tensor::from_indices({0}, {1}), b})[0];
  EXPECT_EQ(m.dtype(), hg::DType::I64);
  EXPECT_EQ(m.to_indices(), (std::vector<int64_t>{0, -7, -3, -7}));
  EXPECT_EQ(run_op("Not", json::object(), {g})[0].to(hg::DType::I64).to_indices(), (std::vector<int64_t>{0, 1, 0, 1}));
}

// LSTM/GRU/RNN layers run as one `recurrent` node per layer and direction, the sequence loop
// inside its kernel: the captured graph of a 2-layer LSTM is the same at 5 and at 40 steps.
TEST(OnnxImportTest, RecurrentLayersReplayTheirLoopInsideOneNode) {
  const hg::Device hpu = hg::Device::hpu(0);
  auto net = hg::models::build_module(hg::models::import_onnx(data_dir() / "sequence_first_op14.onnx"), hpu);
  net->eval();
  std::vector<size_t> nodes;
  for (int64_t steps : {5, 40}) {
    const std::vector<hg::Tensor> in{hg::Tensor::zeros({steps, 2, 4}, hg::DType::F32, hpu),
                                     hg::Tensor::zeros({2, 2, 5}, hg::DType::F32, hpu),
                                     hg::Tensor::zeros({2, 2, 5}, hg::DType::F32, hpu)};
    hg::graphs::HPUGraph g(hpu);
    std::vector<hg::Tensor> out;
    hg::NoGradGuard no_grad;
    g.capture([&] { out = net->forward_all(in); });
    size_t loops = 0;
    for (const auto& n : g.executable().graph().nodes) loops += n.op && n.op->name == "recurrent";
    EXPECT_EQ(loops, 2u) << steps << " steps";  // one per layer
    nodes.push_back(g.executable().graph().nodes.size());
    g.replay();
    EXPECT_EQ(out[0].shape(), (hg::Shape{steps, 2, 5}));
  }
  EXPECT_EQ(nodes[0], nodes[1]) << "the graph grows with the sequence";
}

// ScatterND writes (or combines) updates at index tuples, negative indices from the end; an index
// outside the data names its tuple. Dropout's mask output keeps everything. Einsum refuses what
// it does not do, naming the label.
TEST(OnnxOpsTest, ScatterNDDropoutAndEinsumFollowOnnxSemantics) {
  using json = nlohmann::json;
  const hg::Tensor data = hg::Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  const hg::Tensor rows = hg::Tensor::from_indices({2, -3}, {2, 1});
  const hg::Tensor upd = hg::Tensor::from_vector({10, 20, 30, 40}, {2, 2});
  EXPECT_EQ(run_op("ScatterND", json::object(), {data, rows, upd})[0].to_vector(),
            (std::vector<float>{30, 40, 3, 4, 10, 20}));
  EXPECT_EQ(run_op("ScatterND", {{"reduction", "add"}}, {data, rows, upd})[0].to_vector(),
            (std::vector<float>{31, 42, 3, 4, 15, 26}));
  const hg::Tensor cell = hg::Tensor::from_indices({1, 1}, {1, 2});
  EXPECT_EQ(run_op("ScatterND", {{"reduction", "max"}}, {data, cell, hg::Tensor::from_vector({-1}, {1})})[0].to_vector(),
            (std::vector<float>{1, 2, 3, 4, 5, 6}));
  try {
    run_op("ScatterND", json::object(), {data, hg::Tensor::from_indices({0, 3}, {2, 1}), upd});
    ADD_FAILURE() << "index 3 of a dimension of 3 accepted";
  } catch (const hg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("index tuple 1: index 3 is outside dimension 0 of size 3"), std::string::npos)
        << e.what();
  }
  const hg::Tensor a = hg::Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  hg::models::OpNode dropout{"Dropout", "n1", {"x0"}, {"y", "mask"}, nlohmann::json::object()};  // Swin's, mask kept
  const auto kept = hg::models::run_onnx_node(dropout, {a}, 2);
  EXPECT_EQ(kept[0].to_vector(), a.to_vector());
  EXPECT_EQ(kept[1].dtype(), hg::DType::BOOL);
  EXPECT_EQ(kept[1].to(hg::DType::I64).to_indices(), (std::vector<int64_t>(6, 1)));
  EXPECT_EQ(run_op("Einsum", {{"equation", "ij->ji"}}, {a})[0].to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(run_op("Einsum", {{"equation", "ij,ij->i"}}, {a, a})[0].to_vector(), (std::vector<float>{14, 77}));
  for (const auto& [eq, what] : {std::pair{"ii->i", "label 'i' repeats in term 'ii'"},
                                 std::pair{"ij,jk,kl->il", "3 terms for 2 inputs"},
                                 std::pair{"ij,kj->iz", "output label 'z' is in no input"},
                                 std::pair{"ijk->i", "3 labels for an operand of rank 2"}})
    try {
      run_op("Einsum", {{"equation", eq}}, std::string(eq).find(',') == std::string::npos ? std::vector{a} : std::vector{a, a});
      ADD_FAILURE() << eq << " ran";
    } catch (const hg::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
}

// Bad attributes (as a hand-edited model.json may hold them): an hg::Error naming node and op.
TEST(OnnxOpsTest, BadAttributesRaiseErrorsNamingNodeAndOp) {
  auto expect_error = [](const std::string& op, const nlohmann::json& attrs, const std::vector<hg::Tensor>& in,
                         const std::string& what) {
    try {
      run_op(op, attrs, in);
      ADD_FAILURE() << op << " ran with " << attrs.dump();
    } catch (const hg::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("node 'n1' (op " + op + ")"), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << op << " with " << attrs.dump() << ": not an hg::Error: " << e.what();
    }
  };
  const hg::Tensor x = hg::Tensor::zeros({2, 3});
  expect_error("Unsqueeze", {{"axes", {1, 1}}}, {x}, "axis 1 is repeated");
  expect_error("Unsqueeze", {{"axes", {1, -3}}}, {x}, "axis -3 is repeated");
  expect_error("Unsqueeze", {{"axes", {4}}}, {x}, "axis 4 is out of range");
  for (const nlohmann::json& value : {nlohmann::json("x"), nlohmann::json({{"dtype", "F32"}, {"data", "x"}}),
                                      nlohmann::json({{"dtype", 5}, {"data", {1}}}),
                                      nlohmann::json({{"dtype", "F32"}, {"data", {"1"}}})})
    expect_error("ConstantOfShape", {{"shape", {2}}, {"value", value}}, {}, "attribute 'value'");
  expect_error("ConstantOfShape", {{"shape", {2}}, {"value", {{"dtype", "I64"}, {"data", {0.5}}}}}, {}, "attribute 'value'");
  expect_error("ConstantOfShape", {{"shape", {1 << 20, 1 << 20, 1 << 20}}}, {}, "elements");
  expect_error("ConstantOfShape", {{"shape", {-1}}}, {}, "negative");
  expect_error("Range", {{"start", {0}}, {"limit", {4}}, {"delta", {1}}, {"start_dtype", 5}}, {},
               "attribute 'start_dtype' is not a string");
  for (double limit : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 1e300})
    expect_error("Range", {{"start", {0.0}}, {"limit", {limit}}, {"delta", {1.0}}}, {}, "a finite length");
  expect_error("Reshape", {{"shape", {{{"batch", std::numeric_limits<int64_t>::max()}, {"plus", 0}}}}}, {x}, "overflows");
  expect_error("Expand", {{"shape", {1 << 16, 1 << 16, 1 << 16}}}, {hg::Tensor::zeros({1})}, "elements");
}

}  // namespace
