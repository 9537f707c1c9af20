// End-to-end tests of hgraph-serve: start the real server process on an ephemeral loopback
// port with the bundled repository, talk KServe v2 to it through hg::server::Client, check
// every answer (health, metadata, inference, each kind of bad request), then SIGTERM it and
// require a clean exit on its own. A repository with a broken model checks readiness. In
// process, without sockets: the KServe handler over a hand-built repository (multi-input
// models, routing edge cases) and the FP32 printing.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/safetensors.h"
#include "server/client.h"
#include "server/kserve.h"
#include "server/model_repository.h"
#include "tests/server_process.h"
#include "tests/test_env.h"

#ifndef HG_SOURCE_DIR
#error "HG_SOURCE_DIR must be defined as the repository root"
#endif

namespace {

using hg::server::Client;
using hg::server::RawResponse;
using hg::server::Tensor;
using hg::test::ServerProcess;
using json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kModel = "digits_mlp";
const std::string kRepository = HG_SOURCE_DIR "/models/repository";
constexpr size_t kMaxBody = 64 * 1024;

// A digits-like sample (8x8 pixels in [0, 16]), different per seed.
std::vector<float> sample(int seed) {
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>((i * 7 + seed * 13 + (i / 8) * seed) % 17);
  return v;
}

std::vector<float> batch_of(const std::vector<int>& seeds) {
  std::vector<float> v;
  for (int s : seeds) {
    auto x = sample(s);
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

int argmax(const float* p, int n) { return static_cast<int>(std::max_element(p, p + n) - p); }

std::string infer_body(const std::string& input_json) { return R"({"inputs":[)" + input_json + "]}"; }

std::string input_json(const std::string& name, const std::string& datatype, const std::string& shape,
                       size_t count) {
  std::string data;
  for (size_t i = 0; i < count; ++i) data += (i ? "," : "") + std::to_string(i % 17);
  return R"({"name":")" + name + R"(","datatype":")" + datatype + R"(","shape":)" + shape + R"(,"data":[)" + data +
         "]}";
}

// The error message of an error response; fails the test if the body is not {"error": str}.
std::string error_of(const RawResponse& r) {
  json j = json::parse(r.body, nullptr, false);
  EXPECT_TRUE(j.is_object() && j.contains("error") && j["error"].is_string()) << "body: " << r.body;
  return j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "";
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model-repository", kRepository, "--max-body-bytes", std::to_string(kMaxBody), "--http-threads", "2"});
  }
  static void TearDownTestSuite() {
    if (!server_) return;
    int status = server_->terminate(20s);
    EXPECT_EQ(status, 0) << "hgraph-serve must exit 0 by itself after SIGTERM";
    server_.reset();
  }
  void SetUp() override {
    ASSERT_TRUE(server_) << "server did not start";
    client_ = std::make_unique<Client>(server_->url(), 30s);
  }
  RawResponse post(const std::string& path, const std::string& body) { return client_->request("POST", path, body); }
  std::string infer_path() const { return "/v2/models/" + kModel + "/infer"; }

  static std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};
std::unique_ptr<ServerProcess> ServerTest::server_;

// ---- health and metadata ----------------------------------------------------------------

TEST_F(ServerTest, LiveAndReady) {
  EXPECT_TRUE(client_->live());
  EXPECT_TRUE(client_->ready());
  RawResponse live = client_->request("GET", "/v2/health/live");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(json::parse(live.body), json({{"live", true}}));
  EXPECT_NE(live.header("Content-Type").find("application/json"), std::string::npos);
  RawResponse ready = client_->request("GET", "/v2/health/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(json::parse(ready.body), json({{"ready", true}}));
}

TEST_F(ServerTest, ServerMetadata) {
  json m = client_->server_metadata();
  EXPECT_EQ(m["name"], "hgraph");
  EXPECT_EQ(m["version"], "0.1.0");
  for (const char* ext : {"binary_tensor_data", "model_repository", "model_configuration", "statistics", "generate"})
    EXPECT_NE(std::find(m["extensions"].begin(), m["extensions"].end(), ext), m["extensions"].end()) << ext;
}

TEST_F(ServerTest, ModelMetadata) {
  json m = client_->model_metadata(kModel);
  EXPECT_EQ(m["name"], kModel);
  ASSERT_TRUE(m["versions"].is_array());
  ASSERT_EQ(m["versions"].size(), 1u);
  EXPECT_TRUE(m["platform"].is_string());
  EXPECT_EQ(m["inputs"], json::parse(R"([{"name":"input","datatype":"FP32","shape":[-1,64]}])"));
  EXPECT_EQ(m["outputs"], json::parse(R"([{"name":"logits","datatype":"FP32","shape":[-1,10]}])"));
  EXPECT_EQ(m["properties"], json::parse(R"({"precision":"fp32"})"));
  // The same through the version that is loaded.
  const std::string version = m["versions"][0].get<std::string>();
  EXPECT_EQ(client_->model_metadata(kModel, version), m);
}

TEST_F(ServerTest, ModelReady) {
  EXPECT_TRUE(client_->model_ready(kModel));
  RawResponse r = client_->request("GET", "/v2/models/" + kModel + "/ready");
  EXPECT_EQ(r.status, 200);
  json j = json::parse(r.body);
  EXPECT_EQ(j["name"], kModel);
  EXPECT_EQ(j["ready"], true);
  const std::string version = client_->model_metadata(kModel)["versions"][0].get<std::string>();
  EXPECT_TRUE(client_->model_ready(kModel, version));
}

// ---- inference --------------------------------------------------------------------------

TEST_F(ServerTest, InferBatch1) {
  hg::server::InferOptions opt;
  opt.id = "req-7";
  hg::server::InferResult r = client_->infer_result(kModel, {{"input", {1, 64}, sample(1)}}, opt);
  EXPECT_EQ(r.model_name, kModel);
  EXPECT_FALSE(r.model_version.empty());
  EXPECT_EQ(r.id, "req-7");
  ASSERT_EQ(r.outputs.size(), 1u);
  const Tensor& o = r.outputs[0];
  EXPECT_EQ(o.name, "logits");
  EXPECT_EQ(o.datatype, hg::server::WireType::FP32);
  EXPECT_EQ(o.shape, (std::vector<int64_t>{1, 10}));
  std::vector<float> logits = o.as<float>();
  ASSERT_EQ(logits.size(), 10u);
  for (float x : logits) EXPECT_TRUE(std::isfinite(x));
  int cls = argmax(logits.data(), 10);
  EXPECT_GE(cls, 0);
  EXPECT_LT(cls, 10);
}

TEST_F(ServerTest, InferBatch3MatchesBatch1) {
  auto out3 = client_->infer(kModel, {{"input", {3, 64}, batch_of({1, 2, 3})}});
  ASSERT_EQ(out3.size(), 1u);
  EXPECT_EQ(out3[0].name, "logits");
  EXPECT_EQ(out3[0].shape, (std::vector<int64_t>{3, 10}));
  const std::vector<float> logits3 = out3[0].as<float>();
  ASSERT_EQ(logits3.size(), 30u);
  for (int row = 0; row < 3; ++row) {
    int cls = argmax(logits3.data() + row * 10, 10);
    EXPECT_GE(cls, 0);
    EXPECT_LT(cls, 10);
    // Each row equals the same sample run alone (batch 1 and batch 3 run in different buckets).
    auto out1 = client_->infer(kModel, {{"input", {1, 64}, sample(row + 1)}});
    const std::vector<float> logits1 = out1[0].as<float>();
    ASSERT_EQ(logits1.size(), 10u);
    for (int k = 0; k < 10; ++k)
      EXPECT_NEAR(logits3[row * 10 + k], logits1[k], 1e-4f * (1 + std::fabs(logits1[k])))
          << "row " << row << " logit " << k;
  }
}

TEST_F(ServerTest, InferNestedDataOutputSelectionAndVersionPath) {
  std::vector<float> x = sample(5);
  std::string nested = "[[";
  for (size_t i = 0; i < x.size(); ++i) nested += (i ? "," : "") + std::to_string(static_cast<int>(x[i]));
  nested += "]]";
  const std::string version = client_->model_metadata(kModel)["versions"][0].get<std::string>();
  RawResponse r = post("/v2/models/" + kModel + "/versions/" + version + "/infer",
                       R"({"id":"n","inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"data":)" + nested +
                           R"(}],"outputs":[{"name":"logits"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["model_version"], version);
  auto flat = client_->infer(kModel, {{"input", {1, 64}, x}});
  std::vector<float> got = hg::server::tensor_data(j["outputs"][0]["data"]);
  ASSERT_EQ(got.size(), 10u);
  for (int k = 0; k < 10; ++k) EXPECT_FLOAT_EQ(got[k], flat[0].as<float>()[k]);
}

// ---- bad requests -----------------------------------------------------------------------

TEST_F(ServerTest, MalformedJsonIs400) {
  RawResponse r = post(infer_path(), R"({"inputs":[{"name":"input",)");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("malformed JSON"), std::string::npos);
}

TEST_F(ServerTest, NumberBeyondDoubleRangeIs400) {  // nlohmann throws out_of_range, not parse_error
  RawResponse r = post(infer_path(), R"({"inputs":[{"name":"input","shape":[1,1],"datatype":"FP32","data":[1e999]}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("malformed JSON"), std::string::npos);
}

TEST_F(ServerTest, MissingInputsFieldIs400) {
  RawResponse r = post(infer_path(), R"({"id":"x"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("'inputs'"), std::string::npos);
}

TEST_F(ServerTest, MissingInputIs400) {
  RawResponse r = post(infer_path(), R"({"inputs":[]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("missing input 'input'"), std::string::npos) << r.body;
}

TEST_F(ServerTest, UnknownInputIs400) {
  RawResponse r = post(infer_path(), infer_body(input_json("pixels", "FP32", "[1,64]", 64)));
  EXPECT_EQ(r.status, 400);
  std::string e = error_of(r);
  EXPECT_NE(e.find("unknown input 'pixels'"), std::string::npos) << e;
  EXPECT_NE(e.find("'input'"), std::string::npos) << e;  // names what the model expects
}

TEST_F(ServerTest, WrongDatatypeIs400) {
  RawResponse r = post(infer_path(), infer_body(input_json("input", "INT32", "[1,64]", 64)));
  EXPECT_EQ(r.status, 400);
  std::string e = error_of(r);
  EXPECT_NE(e.find("FP32"), std::string::npos) << e;
  EXPECT_NE(e.find("INT32"), std::string::npos) << e;
}

TEST_F(ServerTest, ElementCountMismatchIs400) {
  RawResponse r = post(infer_path(), infer_body(input_json("input", "FP32", "[2,64]", 127)));
  EXPECT_EQ(r.status, 400);
  std::string e = error_of(r);
  EXPECT_NE(e.find("128"), std::string::npos) << e;
  EXPECT_NE(e.find("127"), std::string::npos) << e;
}

TEST_F(ServerTest, WrongNonBatchShapeIs400) {
  RawResponse r = post(infer_path(), infer_body(input_json("input", "FP32", "[1,63]", 63)));
  EXPECT_EQ(r.status, 400);
  std::string e = error_of(r);
  EXPECT_NE(e.find("[-1,64]"), std::string::npos) << e;
  EXPECT_NE(e.find("[1,63]"), std::string::npos) << e;
  RawResponse rank = post(infer_path(), infer_body(input_json("input", "FP32", "[64]", 64)));
  EXPECT_EQ(rank.status, 400);
}

TEST_F(ServerTest, NonNumericDataIs400) {
  RawResponse r = post(infer_path(),
                       R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,2],"data":[1,"x"]}]})");
  EXPECT_EQ(r.status, 400);
  error_of(r);
}

TEST_F(ServerTest, UnknownOutputIs400) {
  RawResponse r = post(infer_path(), R"({"inputs":[)" + input_json("input", "FP32", "[1,64]", 64) +
                                         R"(],"outputs":[{"name":"probs"}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).find("unknown output 'probs'"), std::string::npos);
}

TEST_F(ServerTest, UnknownModelIs404) {
  RawResponse r = post("/v2/models/no_such_model/infer", infer_body(input_json("input", "FP32", "[1,64]", 64)));
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(error_of(r).find("no_such_model"), std::string::npos);
  EXPECT_EQ(client_->request("GET", "/v2/models/no_such_model").status, 404);
  EXPECT_EQ(client_->request("GET", "/v2/models/no_such_model/ready").status, 404);
}

TEST_F(ServerTest, UnknownVersionIs404) {
  RawResponse r = post("/v2/models/" + kModel + "/versions/999/infer",
                       infer_body(input_json("input", "FP32", "[1,64]", 64)));
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(error_of(r).find("999"), std::string::npos);
  EXPECT_EQ(client_->request("GET", "/v2/models/" + kModel + "/versions/999").status, 404);
  EXPECT_EQ(client_->request("GET", "/v2/models/" + kModel + "/versions/abc/ready").status, 404);
}

TEST_F(ServerTest, WrongMethodIs405WithAllow) {
  RawResponse r = client_->request("GET", infer_path());
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("Allow"), "POST");
  error_of(r);
  RawResponse p = post("/v2/health/live", "");
  EXPECT_EQ(p.status, 405);
  EXPECT_EQ(p.header("Allow"), "GET");
  error_of(p);
}

TEST_F(ServerTest, UnknownPathIs404) {
  RawResponse r = client_->request("GET", "/v2/nothing/here");
  EXPECT_EQ(r.status, 404);
  error_of(r);
  EXPECT_EQ(client_->request("GET", "/").status, 404);
}

TEST_F(ServerTest, BodyOverLimitIs413) {
  // A well-formed request whose body is larger than --max-body-bytes.
  const size_t n = kMaxBody / 2;  // about 2-3 bytes per element
  RawResponse r = post(infer_path(), infer_body(input_json("input", "FP32", "[" + std::to_string(n / 64) + ",64]", n)));
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(error_of(r).find("limit"), std::string::npos);
}

// Also runs the bad requests itself, so that it holds when each test runs in its own process.
TEST_F(ServerTest, StillAnswersAfterBadRequests) {
  const std::string big(kMaxBody + 1, ' ');
  EXPECT_EQ(post(infer_path(), "{not json").status, 400);
  EXPECT_EQ(post(infer_path(), R"({"inputs":[]})").status, 400);
  EXPECT_EQ(post(infer_path(), big).status, 413);
  EXPECT_EQ(client_->request("GET", infer_path()).status, 405);
  EXPECT_EQ(client_->request("DELETE", "/v2/health/ready").status, 405);
  EXPECT_EQ(client_->request("GET", "/v2/models/none").status, 404);
  EXPECT_TRUE(client_->live());
  EXPECT_TRUE(client_->ready());
  auto out = client_->infer(kModel, {{"input", {2, 64}, batch_of({4, 5})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{2, 10}));
  // A fresh connection too (a 413 closes its connection).
  Client fresh(server_->url(), 10s);
  EXPECT_TRUE(fresh.live());
}

TEST_F(ServerTest, ConcurrentClients) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Client c(server_->url(), 30s);
      for (int i = 0; i < 10; ++i) {
        auto out = c.infer(kModel, {{"input", {1 + (i % 3), 64}, batch_of(std::vector<int>(1 + (i % 3), t))}});
        if (out.size() == 1 && out[0].shape[0] == 1 + (i % 3)) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 40);
}

// ---- a repository with a model that fails to load ---------------------------------------

TEST(ServerUnavailableModelTest, BrokenModelMakesServerNotReady) {
  namespace fs = std::filesystem;
  fs::path repo = fs::temp_directory_path() / ("hg_server_test_repo_" + std::to_string(getpid()));
  fs::remove_all(repo);
  fs::create_directories(repo / "broken" / "1");
  std::ofstream(repo / "broken" / "1" / "model.json") << "{ this is not json";
  fs::create_directory_symlink(fs::path(kRepository) / kModel, repo / kModel);
  {
    ServerProcess server({"--model-repository", repo.string()});
    Client c(server.url(), 30s);
    EXPECT_TRUE(c.live());
    RawResponse ready = c.request("GET", "/v2/health/ready");
    EXPECT_EQ(ready.status, 503);
    EXPECT_NE(error_of(ready).find("broken"), std::string::npos);
    RawResponse mr = c.request("GET", "/v2/models/broken/ready");
    EXPECT_EQ(mr.status, 503);
    error_of(mr);
    EXPECT_EQ(c.request("GET", "/v2/models/broken/versions/2/ready").status, 404);
    EXPECT_TRUE(c.model_ready(kModel));
    auto out = c.infer(kModel, {{"input", {1, 64}, sample(9)}});
    EXPECT_EQ(out[0].shape, (std::vector<int64_t>{1, 10}));
    EXPECT_EQ(server.terminate(20s), 0);
  }
  fs::remove_all(repo);
}

// A version folder holding model.onnx (the BERT classifier exported by scripts/testdata_onnx.py)
// is imported at load and served with INT64 token ids, matching PyTorch's logits.
TEST(ServerOnnxTest, ServesModelOnnxWithInt64InputsOverHttp) {
  namespace fs = std::filesystem;
  const fs::path data = fs::path(HG_TESTDATA_DIR) / "onnx";
  fs::path repo = fs::temp_directory_path() / ("hg_server_onnx_repo_" + std::to_string(getpid()));
  fs::remove_all(repo);
  fs::create_directories(repo / "bert" / "1");
  fs::copy_file(data / "bert_op13.onnx", repo / "bert" / "1" / "model.onnx");
  const auto ref = hg::safetensors::read(data / "bert_op13.safetensors");
  const auto* ids = ref.find("input");
  const auto* logits = ref.find("output");
  std::vector<int64_t> id_values(ids->data.size() / sizeof(int64_t));
  std::memcpy(id_values.data(), ids->data.data(), ids->data.size());
  std::vector<float> want(logits->data.size() / sizeof(float));
  std::memcpy(want.data(), logits->data.data(), logits->data.size());
  {
    ServerProcess server({"--model-repository", repo.string(), "--batch-sizes", "1,4"});
    Client c(server.url(), 30s);
    const json meta = c.model_metadata("bert");
    EXPECT_EQ(meta["inputs"][0]["datatype"], "INT64");
    EXPECT_EQ(meta["inputs"][0]["shape"], json::parse("[-1,16]"));
    const json body = {{"inputs", {{{"name", "input"}, {"datatype", "INT64"}, {"shape", ids->shape}, {"data", id_values}}}}};
    RawResponse r = c.request("POST", "/v2/models/bert/infer", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const auto got = json::parse(r.body)["outputs"][0]["data"].get<std::vector<float>>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::fabs(want[i])) << i;
    // An integer above INT64's range is refused, not wrapped into a negative id.
    json big = body;
    big["inputs"][0]["data"][0] = UINT64_MAX;
    r = c.request("POST", "/v2/models/bert/infer", big.dump());
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("out of range for INT64"), std::string::npos) << r.body;
    EXPECT_EQ(server.terminate(20s), 0);
  }
  fs::remove_all(repo);
}

// ---- shutdown ---------------------------------------------------------------------------

TEST(ServerShutdownTest, SigtermWithIdleKeepAliveConnectionExitsPromptly) {
  ServerProcess server({"--model-repository", kRepository});
  Client c(server.url(), 30s);
  EXPECT_TRUE(c.live());  // leaves a kept-alive connection open
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.terminate(20s), 0);
  // Idle connections are closed at once; nothing waits for the 30 s drain timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_THROW(c.live(), hg::server::ClientError);
}

// ---- in process: the handler over a hand-built repository, no sockets ------------------

// Two inputs "a" [-1,2] and "b" [-1,3]; outputs "sum" [-1,1] (all of a and b) and "a2" [-1,2].
class TwoInputModel : public hg::server::ServedModel {
 public:
  TwoInputModel() {
    spec_.name = "two";
    spec_.inputs = {{"a", "FP32", {-1, 2}}, {"b", "FP32", {-1, 3}}};
    spec_.outputs = {{"sum", "FP32", {-1, 1}}, {"a2", "FP32", {-1, 2}}};
  }
  const hg::models::PackageSpec& spec() const override { return spec_; }
  int64_t input_size(size_t i) const override { return i == 0 ? 2 : 3; }
  int64_t output_size(size_t j) const override { return j == 0 ? 1 : 2; }
  void run(const std::vector<const void*>& in_raw, int64_t batch, const std::vector<void*>& out_raw,
           const std::vector<hg::Shape>&) override {
    const float* in[2] = {static_cast<const float*>(in_raw[0]), static_cast<const float*>(in_raw[1])};
    float* out[2] = {static_cast<float*>(out_raw[0]), static_cast<float*>(out_raw[1])};
    for (int64_t r = 0; r < batch; ++r) {
      out[0][r] = in[0][r * 2] + in[0][r * 2 + 1] + in[1][r * 3] + in[1][r * 3 + 1] + in[1][r * 3 + 2];
      out[1][r * 2] = 2 * in[0][r * 2];
      out[1][r * 2 + 1] = 2 * in[0][r * 2 + 1];
    }
  }

 private:
  hg::models::PackageSpec spec_;
};

// A repository of empty version folders two/3 and bad/2: its factory serves TwoInputModel for
// "two" and fails "bad" the way a truncated weights file would.
class KServeHandlerTest : public ::testing::Test {
 protected:
  static hg::server::RepositoryOptions options(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir / "two" / "3");
    std::filesystem::create_directories(dir / "bad" / "2");
    hg::server::RepositoryOptions o;
    o.dir = dir;
    o.factory = [](const std::string& model, int64_t, const std::filesystem::path&,
                   const hg::server::ModelConfig&) -> std::shared_ptr<hg::server::ServedModel> {
      if (model == "bad") throw hg::FormatError("weights.safetensors: truncated");
      return std::make_shared<TwoInputModel>();
    };
    return o;
  }
  ~KServeHandlerTest() override { std::filesystem::remove_all(dir_); }
  hg::server::HttpResponse call(const std::string& method, const std::string& path, const std::string& body = "") {
    hg::server::KServeHandler h(repo_, metrics_, {});
    return h.handle({method, path, body, {}});
  }
  std::filesystem::path dir_ = hg::test::temp_dir("KServeHandlerTest");
  hg::server::ServerMetrics metrics_;
  hg::server::ModelRepository repo_{options(dir_)};
};

TEST_F(KServeHandlerTest, MultiInputInferWithOutputSelection) {
  auto r = call("POST", "/v2/models/two/versions/3/infer",
                R"({"inputs":[{"name":"b","datatype":"FP32","shape":[2,3],"data":[[1,2,3],[4,5,6]]},)"
                R"({"name":"a","datatype":"FP32","shape":[2,2],"data":[0.5,0.25,1,2]}],)"
                R"("outputs":[{"name":"a2"},{"name":"sum"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["model_name"], "two");
  EXPECT_EQ(j["model_version"], "3");
  EXPECT_FALSE(j.contains("id"));
  ASSERT_EQ(j["outputs"].size(), 2u);
  EXPECT_EQ(j["outputs"][0]["name"], "a2");
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({2, 2}));
  EXPECT_EQ(j["outputs"][0]["data"], json::parse("[1,0.5,2,4]"));
  EXPECT_EQ(j["outputs"][1]["name"], "sum");
  EXPECT_EQ(j["outputs"][1]["data"], json::parse("[6.75,18]"));
}

TEST_F(KServeHandlerTest, InputsDisagreeingOnBatchIs400) {
  auto r = call("POST", "/v2/models/two/infer",
                R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1,2],"data":[1,2]},)"
                R"({"name":"b","datatype":"FP32","shape":[2,3],"data":[1,2,3,4,5,6]}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("batch"), std::string::npos) << r.body;
  auto dup = call("POST", "/v2/models/two/infer",
                  R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1,2],"data":[1,2]},)"
                  R"({"name":"a","datatype":"FP32","shape":[1,2],"data":[1,2]}]})");
  EXPECT_EQ(dup.status, 400);
}

TEST_F(KServeHandlerTest, UnavailableModelIs503AndServerNotReady) {
  EXPECT_EQ(call("GET", "/v2/health/live").status, 200);
  auto ready = call("GET", "/v2/health/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find("truncated"), std::string::npos);
  EXPECT_EQ(call("GET", "/v2/models/bad/ready").status, 503);
  EXPECT_EQ(call("GET", "/v2/models/bad/versions/2/ready").status, 503);
  EXPECT_EQ(call("GET", "/v2/models/bad/versions/1/ready").status, 404);
  EXPECT_EQ(call("POST", "/v2/models/bad/infer", "{}").status, 503);
  EXPECT_EQ(call("GET", "/v2/models/two/ready").status, 200);
}

// Strict readiness counts the models the server is meant to serve: in explicit mode a folder
// never asked for, or a model unloaded on purpose, does not make the server unready.
TEST(KServeReadinessTest, ExplicitModeCountsOnlyTheModelsItServes) {
  const auto dir = hg::test::temp_dir("KServeReadinessTest");
  std::filesystem::create_directories(dir / "two" / "3");
  std::filesystem::create_directories(dir / "other" / "1");
  hg::server::RepositoryOptions o;
  o.dir = dir;
  o.mode = hg::server::ControlMode::Explicit;
  o.startup_models = {"two"};
  o.factory = [](const std::string&, int64_t, const std::filesystem::path&,
                 const hg::server::ModelConfig&) -> std::shared_ptr<hg::server::ServedModel> {
    return std::make_shared<TwoInputModel>();
  };
  {
    hg::server::ServerMetrics metrics;
    hg::server::ModelRepository repo(o);
    hg::server::KServeHandler h(repo, metrics, {});
    auto ready = h.handle({"GET", "/v2/health/ready", "", {}});
    EXPECT_EQ(ready.status, 200) << ready.body;
    auto unload = h.handle({"POST", "/v2/repository/models/two/unload", "", {}});
    EXPECT_EQ(unload.status, 200) << unload.body;
    ready = h.handle({"GET", "/v2/health/ready", "", {}});
    EXPECT_EQ(ready.status, 200) << ready.body;
    EXPECT_EQ(h.handle({"GET", "/v2/models/two/ready", "", {}}).status, 404);
    h.begin_drain();
    EXPECT_EQ(h.handle({"GET", "/v2/health/ready", "", {}}).status, 503);
    auto load = h.handle({"POST", "/v2/repository/models/two/load", "", {}});
    EXPECT_EQ(load.status, 503) << load.body;  // draining refuses loads
  }
  std::filesystem::remove_all(dir);
}

TEST_F(KServeHandlerTest, HugeRequestTimeoutIsClampedNotOverflowed) {
  auto r = call("POST", "/v2/models/two/infer",
                R"({"parameters":{"timeout":18446744073709551615},)"
                R"("inputs":[{"name":"a","datatype":"FP32","shape":[1,2],"data":[1,2]},)"
                R"({"name":"b","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]})");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(KServeHandlerTest, RoutingEdgeCases) {
  EXPECT_EQ(call("GET", "/v2?x=1").status, 200);                 // query ignored
  EXPECT_EQ(call("GET", "/v2/models/t%77o").status, 200);        // percent-decoded name
  EXPECT_EQ(call("GET", "/v2/models/two/versions").status, 404);
  EXPECT_EQ(call("GET", "/v2/models/two/versions/3/extra").status, 404);
  EXPECT_EQ(call("GET", "/v3").status, 404);
  auto r = call("PUT", "/v2");
  EXPECT_EQ(r.status, 405);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0], (std::pair<std::string, std::string>{"Allow", "GET"}));
}

}  // namespace
