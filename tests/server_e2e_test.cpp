// End-to-end over real HTTP: hgraph-serve as a child process on 127.0.0.1 (ephemeral port)
// over a repository built in a temporary directory (digits_mlp versions 1 and 2, a config.json
// with dynamic batching and both versions served; an identity model of every datatype). Every
// endpoint with and without /versions/{v} (health, metadata, ready, infer as JSON, binary
// tensors and raw mode, config, statistics, repository index, /metrics) and every error status
// the protocol layer answers itself: 400 (bad JSON, shape, datatype, batch, limits on depth and
// elements), 404 (model, version, path), 405 with Allow, 413, and the HTTP layer's 400 and 431.
// Queueing, auth, readiness and repository control: server_control_test.cpp; load:
// server_load_test.cpp; shutdown: server_shutdown_test.cpp; generate: server_generate_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tests/server_e2e.h"

namespace hg::test {
namespace {

constexpr size_t kMaxBody = 64 * 1024;
constexpr int kMaxDepth = 8;
constexpr int kMaxElements = 4096;
const std::string kInfer = "/v2/models/digits_mlp/infer";
// The datatypes of the identity model "ident": input IN_<type> [-1, 3] comes back as OUT_<type>.
constexpr const char* kDatatypes[] = {"BOOL",  "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                                      "INT32", "INT64", "FP16",   "BF16",   "FP32",   "FP64"};

class ServerE2eTest : public SharedServerTest {
 protected:
  static void SetUpTestSuite() {
    repo_ = std::make_unique<TempRepo>("endpoints");
    repo_->add_digits("digits_mlp", 1);
    repo_->add_digits("digits_mlp", 2);
    repo_->write_config("digits_mlp", {{"max_batch_size", 8},
                                       {"dynamic_batching", {{"max_queue_delay_microseconds", 100}}},
                                       {"version_policy", {{"all", json::object()}}}});
    json io_in = json::array(), io_out = json::array();
    for (const char* dt : kDatatypes) {
      io_in.push_back({{"name", std::string("IN_") + dt}, {"datatype", dt}, {"dims", {3}}});
      io_out.push_back({{"name", std::string("OUT_") + dt}, {"datatype", dt}, {"dims", {3}}});
    }
    repo_->write_config("ident", {{"platform", "identity"}, {"max_batch_size", 4}, {"input", io_in}, {"output", io_out}});
    fs::create_directories(repo_->dir() / "ident" / "1");
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model-repository", repo_->str(), "--max-body-bytes", std::to_string(kMaxBody), "--max-json-depth",
        std::to_string(kMaxDepth), "--max-elements", std::to_string(kMaxElements), "--http-threads", "2"});
  }
  // A 400 for `body` posted to the infer endpoint, whose message contains every one of `words`.
  void expect_400(std::string_view body, const std::vector<std::string>& words) {
    HttpReply r = post(kInfer, body);
    EXPECT_EQ(r.status, 400) << r.body;
    const std::string e = error_of(r.body);
    for (const auto& w : words) EXPECT_NE(e.find(w), std::string::npos) << "'" << w << "' not in: " << e;
  }
};

// ---- health, metadata, ready ---------------------------------------------------------------

TEST_F(ServerE2eTest, HealthLiveAndReady) {
  HttpReply live = get("/v2/health/live");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(json_of(live), json({{"live", true}}));
  EXPECT_NE(live.header("Content-Type").find("application/json"), std::string::npos);
  HttpReply ready = get("/v2/health/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(json_of(ready), json({{"ready", true}}));
}

TEST_F(ServerE2eTest, ServerMetadataAdvertisesTheExtensions) {
  for (const char* path : {"/v2", "/v2/"}) {
    HttpReply r = get(path);
    ASSERT_EQ(r.status, 200) << path << ": " << r.body;
    json m = json_of(r);
    EXPECT_EQ(m["name"], "hgraph");
    EXPECT_TRUE(m["version"].is_string());
    ASSERT_TRUE(m["extensions"].is_array());
    const auto ext = m["extensions"].get<std::vector<std::string>>();
    for (const char* e : {"binary_tensor_data", "model_repository", "model_configuration", "statistics"})
      EXPECT_NE(std::find(ext.begin(), ext.end(), e), ext.end()) << e << " not advertised: " << m.dump();
  }
}

TEST_F(ServerE2eTest, ModelMetadataWithAndWithoutVersion) {
  HttpReply r = get("/v2/models/digits_mlp");
  ASSERT_EQ(r.status, 200) << r.body;
  json m = json_of(r);
  EXPECT_EQ(m["name"], "digits_mlp");
  EXPECT_TRUE(m["platform"].is_string());
  auto versions = m["versions"].get<std::vector<std::string>>();
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(versions, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(m["inputs"], json::parse(R"([{"name":"input","datatype":"FP32","shape":[-1,64]}])"));
  EXPECT_EQ(m["outputs"], json::parse(R"([{"name":"logits","datatype":"FP32","shape":[-1,10]}])"));
  for (const char* v : {"1", "2"}) {
    HttpReply rv = get(std::string("/v2/models/digits_mlp/versions/") + v);
    ASSERT_EQ(rv.status, 200) << rv.body;
    EXPECT_EQ(json_of(rv)["inputs"], m["inputs"]);
  }
}

TEST_F(ServerE2eTest, ModelReadyWithAndWithoutVersion) {
  for (const char* path : {"/v2/models/digits_mlp/ready", "/v2/models/digits_mlp/versions/1/ready",
                           "/v2/models/digits_mlp/versions/2/ready"}) {
    HttpReply r = get(path);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    json j = json_of(r);
    EXPECT_EQ(j["name"], "digits_mlp") << path;
    EXPECT_EQ(j["ready"], true) << path;
  }
}

// ---- inference -------------------------------------------------------------------------------

TEST_F(ServerE2eTest, InferJsonOnEveryVersionPathEchoesIdAndVersion) {
  const std::string body = digits_body({1, 2}, {{"id", "req-7"}});
  HttpReply latest = post(kInfer, body);
  ASSERT_EQ(latest.status, 200) << latest.body;
  json j = json_of(latest);
  EXPECT_EQ(j["model_name"], "digits_mlp");
  EXPECT_EQ(j["model_version"], "2");  // the highest served version
  EXPECT_EQ(j["id"], "req-7");
  ASSERT_EQ(j["outputs"].size(), 1u);
  EXPECT_EQ(j["outputs"][0]["name"], "logits");
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({2, 10}));
  const std::vector<float> want = logits_of(latest.body);
  ASSERT_EQ(want.size(), 20u);
  for (const char* v : {"1", "2"}) {
    HttpReply r = post(std::string("/v2/models/digits_mlp/versions/") + v + "/infer", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json_of(r)["model_version"], v);
    const std::vector<float> got = logits_of(r.body);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "version " << v << " logit " << i;
  }
}

TEST_F(ServerE2eTest, InferBatchRowsMatchSingleRows) {
  HttpReply three = post(kInfer, digits_body({11, 12, 13}));
  ASSERT_EQ(three.status, 200) << three.body;
  const std::vector<float> rows = logits_of(three.body);
  ASSERT_EQ(rows.size(), 30u);
  for (int row = 0; row < 3; ++row) {
    const std::vector<float> one = logits_of(post(kInfer, digits_body({11 + row})).body);
    ASSERT_EQ(one.size(), 10u);
    for (int k = 0; k < 10; ++k)
      EXPECT_NEAR(rows[row * 10 + k], one[k], 1e-4f * (1 + std::fabs(one[k]))) << "row " << row << " logit " << k;
  }
}

std::string le_floats(const std::vector<float>& v) {
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // the test hosts are little-endian
  return bytes;
}

std::vector<float> floats_of(std::string_view bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

TEST_F(ServerE2eTest, InferBinaryTensorsBothWays) {
  std::vector<float> x = digits_sample(21), x2 = digits_sample(22);
  x.insert(x.end(), x2.begin(), x2.end());
  const std::string header =
      R"({"id":"bin","inputs":[{"name":"input","shape":[2,64],"datatype":"FP32","parameters":{"binary_data_size":512}}],)"
      R"("outputs":[{"name":"logits","parameters":{"binary_data":true}}]})";
  HttpReply r = post(kInfer, header + le_floats(x),
                     {{"Content-Type", "application/octet-stream"},
                      {"Inference-Header-Content-Length", std::to_string(header.size())}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string hlen = r.header("Inference-Header-Content-Length");
  ASSERT_FALSE(hlen.empty()) << "a binary response names its JSON length";
  const size_t n = std::stoul(hlen);
  ASSERT_LE(n, r.body.size());
  json j = json::parse(r.body.substr(0, n));
  EXPECT_EQ(j["id"], "bin");
  ASSERT_EQ(j["outputs"].size(), 1u);
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({2, 10}));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 80);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  ASSERT_EQ(r.body.size(), n + 80);
  const std::vector<float> got = floats_of(std::string_view(r.body).substr(n));
  const std::vector<float> want = logits_of(post(kInfer, digits_body({21, 22})).body);
  ASSERT_EQ(want.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;

  // Binary input, JSON output (binary_data_output not asked for).
  const std::string header_json_out =
      R"({"inputs":[{"name":"input","shape":[2,64],"datatype":"FP32","parameters":{"binary_data_size":512}}]})";
  HttpReply rj = post(kInfer, header_json_out + le_floats(x),
                      {{"Inference-Header-Content-Length", std::to_string(header_json_out.size())}});
  ASSERT_EQ(rj.status, 200) << rj.body;
  EXPECT_EQ(logits_of(rj.body), want);

  // A binary_data_size that disagrees with the bytes sent is a 400.
  HttpReply bad = post(kInfer, header + le_floats(x).substr(4),
                       {{"Inference-Header-Content-Length", std::to_string(header.size())}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  error_of(bad.body);
}

TEST_F(ServerE2eTest, InferRawModeIsOneSampleInBinaryOut) {
  HttpReply r = post(kInfer, le_floats(digits_sample(31)),
                     {{"Content-Type", "application/octet-stream"}, {"Inference-Header-Content-Length", "0"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const size_t n = std::stoul(r.header("Inference-Header-Content-Length"));
  json j = json::parse(r.body.substr(0, n));
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({1, 10}));
  ASSERT_EQ(r.body.size(), n + 40);
  const std::vector<float> got = floats_of(std::string_view(r.body).substr(n));
  const std::vector<float> want = logits_of(post(kInfer, digits_body({31})).body);
  ASSERT_EQ(want.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
}

// Every datatype of the protocol through the identity model in one request: the JSON ones as
// JSON (at their extremes), FP16 and BF16 (no JSON form) as binary tensors, both ways.
TEST_F(ServerE2eTest, EveryDatatypeRoundTripsThroughTheIdentityModel) {
  const json values = {
      {"BOOL", {true, false, true}},
      {"UINT8", {0, 255, 7}},
      {"UINT16", {0, 65535, 7}},
      {"UINT32", {0, 4294967295u, 7}},
      {"UINT64", {0, 18446744073709551615ull, 7}},
      {"INT8", {-128, 127, 0}},
      {"INT16", {-32768, 32767, 0}},
      {"INT32", {-2147483647 - 1, 2147483647, 0}},
      {"INT64", {INT64_MIN, INT64_MAX, 0}},
      {"FP32", {1.5, -0.25, 3.0e38}},
      {"FP64", {1e300, -2.5, 5e-324}}};
  const std::string fp16("\x00\x3c\x00\xc0\xff\x7b", 6);  // 1, -2, 65504
  const std::string bf16("\x80\x3f\x00\xc0\x7f\x7f", 6);  // 1, -2, 3.39e38
  json header = {{"id", "every-type"}, {"inputs", json::array()}, {"outputs", json::array()}};
  for (const char* dt : kDatatypes) {
    json in = {{"name", std::string("IN_") + dt}, {"datatype", dt}, {"shape", {1, 3}}};
    json out = {{"name", std::string("OUT_") + dt}};
    if (values.contains(dt)) {
      in["data"] = values[dt];
    } else {
      in["parameters"] = {{"binary_data_size", 6}};
      out["parameters"] = {{"binary_data", true}};
    }
    header["inputs"].push_back(in);
    header["outputs"].push_back(out);
  }
  const std::string h = header.dump();
  HttpReply r = post("/v2/models/ident/infer", h + fp16 + bf16, {{"Inference-Header-Content-Length", std::to_string(h.size())}});
  ASSERT_EQ(r.status, 200) << r.body;
  const size_t n = std::stoul(r.header("Inference-Header-Content-Length"));
  json j = json::parse(r.body.substr(0, n));
  EXPECT_EQ(j["id"], "every-type");
  ASSERT_EQ(j["outputs"].size(), std::size(kDatatypes));
  std::string binary = r.body.substr(n);
  for (size_t i = 0; i < std::size(kDatatypes); ++i) {
    const std::string dt = kDatatypes[i];
    const json& o = j["outputs"][i];
    EXPECT_EQ(o["name"], "OUT_" + dt);
    EXPECT_EQ(o["datatype"], dt);
    EXPECT_EQ(o["shape"], json::array({1, 3})) << dt;
    if (dt == "FP32") {
      EXPECT_EQ(o["data"].get<std::vector<float>>(), values[dt].get<std::vector<float>>());
    } else if (values.contains(dt)) {
      EXPECT_EQ(o["data"], values[dt]) << dt;
    } else {  // binary, in the order of the outputs
      EXPECT_EQ(o["parameters"]["binary_data_size"], 6) << dt;
      EXPECT_EQ(binary.substr(0, 6), dt == "FP16" ? fp16 : bf16) << dt;
      binary.erase(0, 6);
    }
  }
  EXPECT_TRUE(binary.empty()) << binary.size() << " bytes left over";
}

// ---- configuration, statistics, repository index, metrics -----------------------------------

TEST_F(ServerE2eTest, ModelConfigIsTheConfigJson) {
  for (const char* path : {"/v2/models/digits_mlp/config", "/v2/models/digits_mlp/versions/1/config"}) {
    HttpReply r = get(path);
    ASSERT_EQ(r.status, 200) << path << ": " << r.body;
    json c = json_of(r);
    EXPECT_EQ(c["name"], "digits_mlp");
    EXPECT_EQ(c["max_batch_size"], 8);
    EXPECT_EQ(c["dynamic_batching"]["max_queue_delay_microseconds"], 100);
  }
}

TEST_F(ServerE2eTest, StatisticsCountInferences) {
  ASSERT_EQ(post("/v2/models/digits_mlp/versions/1/infer", digits_body({41, 42})).status, 200);
  HttpReply r = get("/v2/models/digits_mlp/versions/1/stats");
  ASSERT_EQ(r.status, 200) << r.body;
  json s = json_of(r);
  ASSERT_EQ(s["model_stats"].size(), 1u) << s.dump();
  const json& m = s["model_stats"][0];
  EXPECT_EQ(m["name"], "digits_mlp");
  EXPECT_EQ(m["version"], "1");
  EXPECT_GE(m["inference_count"].get<int64_t>(), 2);
  EXPECT_GE(m["execution_count"].get<int64_t>(), 1);
  EXPECT_GE(m["inference_stats"]["success"]["count"].get<int64_t>(), 1);
  EXPECT_GT(m["inference_stats"]["success"]["ns"].get<int64_t>(), 0);
  // Every version of the model, and every model.
  ASSERT_EQ(post("/v2/models/digits_mlp/versions/2/infer", digits_body({43})).status, 200);
  HttpReply all_versions = get("/v2/models/digits_mlp/stats");
  ASSERT_EQ(all_versions.status, 200) << all_versions.body;
  EXPECT_EQ(json_of(all_versions)["model_stats"].size(), 2u) << all_versions.body;
  HttpReply all = get("/v2/models/stats");
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_GE(json_of(all)["model_stats"].size(), 2u) << all.body;
}

TEST_F(ServerE2eTest, RepositoryIndexListsTheModel) {
  for (const char* body : {"", "{}", R"({"ready":true})"}) {
    HttpReply r = post("/v2/repository/index", body);
    ASSERT_EQ(r.status, 200) << "body '" << body << "': " << r.body;
    json idx = json_of(r);
    ASSERT_TRUE(idx.is_array()) << r.body;
    bool found = false;
    for (const auto& e : idx)
      if (e["name"] == "digits_mlp") {
        found = true;
        EXPECT_EQ(e["state"], "READY") << e.dump();
      }
    EXPECT_TRUE(found) << r.body;
  }
}

TEST_F(ServerE2eTest, MetricsArePrometheusText) {
  ASSERT_EQ(post(kInfer, digits_body({51})).status, 200);
  HttpReply r = get("/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.header("Content-Type").find("text/plain"), std::string::npos) << r.header("Content-Type");
  EXPECT_NE(r.body.find("# TYPE hg_inference_request_success_total counter"), std::string::npos);
  EXPECT_GE(metric_sum(r.body, "hg_inference_request_success_total", "digits_mlp"), 1);
  EXPECT_GE(metric_sum(r.body, "hg_request_duration_us_count", "digits_mlp"), 1);
  EXPECT_GE(metric_sum(r.body, "hg_batch_size_count", "digits_mlp"), 1);
  EXPECT_GE(metric_sum(r.body, "hg_http_responses_total", "2xx"), 1);
}

TEST_F(ServerE2eTest, LoadInControlModeNoneIsRefused) {
  HttpReply r = post("/v2/repository/models/digits_mlp/load", "");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(error_of(r.body).find("explicit"), std::string::npos) << "names the mode that allows it";
  EXPECT_EQ(post("/v2/repository/models/digits_mlp/unload", "").status, 400);
  EXPECT_EQ(post(kInfer, digits_body({1})).status, 200) << "still serving";
}

// ---- 400 -----------------------------------------------------------------------------------

TEST_F(ServerE2eTest, BadJsonIs400) {
  expect_400(R"({"inputs":[{"name":"input",)", {"JSON"});
  expect_400(R"({"inputs":[{"name":"input","shape":[1,1],"datatype":"FP32","data":[1e999]}]})", {});
  expect_400("[1,2,3]", {});
  expect_400(R"({"id":"x"})", {"inputs"});
}

TEST_F(ServerE2eTest, BadShapeIs400) {
  json body = json::parse(digits_body({1}));
  body["inputs"][0]["shape"] = {1, 63};
  expect_400(body.dump(), {"input", "64"});
  body["inputs"][0]["shape"] = {64};
  expect_400(body.dump(), {"input"});
  body["inputs"][0]["shape"] = {2, 64};  // 128 elements wanted, 64 given
  expect_400(body.dump(), {"128", "64"});
  expect_400(digits_body({1, 2, 3, 4, 5, 6, 7, 8, 9}), {"8"});  // batch 9 over max_batch_size 8
}

TEST_F(ServerE2eTest, BadTypeOrDatatypeIs400) {
  json body = json::parse(digits_body({1}));
  body["inputs"][0]["datatype"] = "INT32";
  body["inputs"][0]["data"] = std::vector<int>(64, 3);  // valid INT32 data, for an FP32 input
  expect_400(body.dump(), {"FP32", "INT32"});
  body["inputs"][0]["datatype"] = "INT64";
  body["inputs"][0]["data"][0] = 0.5;  // not an integer
  expect_400(body.dump(), {"input", "0.5"});
  body["inputs"][0]["datatype"] = "FLOAT";
  expect_400(body.dump(), {"FLOAT"});
  body["inputs"][0]["datatype"] = "FP32";
  body["inputs"][0]["data"][5] = "x";
  expect_400(body.dump(), {"input"});
  body["inputs"][0]["data"][5] = true;
  expect_400(body.dump(), {"input"});
  body = json::parse(digits_body({1}));
  body["inputs"][0]["name"] = "pixels";
  expect_400(body.dump(), {"pixels"});
  body = json::parse(digits_body({1}));
  body["outputs"] = {{{"name", "probs"}}};
  expect_400(body.dump(), {"probs"});
}

TEST_F(ServerE2eTest, JsonDepthAndElementLimitsAre400) {
  std::string deep = "1";
  for (int i = 0; i <= kMaxDepth; ++i) deep = "[" + deep + "]";
  expect_400(R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,1],"data":)" + deep + "}]}",
             {"nested", std::to_string(kMaxDepth)});
  // More elements than --max-elements in a body under --max-body-bytes.
  std::string data = "0";
  for (int i = 1; i <= kMaxElements; ++i) data += ",0";
  const std::string many = R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,)" +
                           std::to_string(kMaxElements + 1) + R"(],"data":[)" + data + "]}]}";
  ASSERT_LT(many.size(), kMaxBody);
  expect_400(many, {std::to_string(kMaxElements)});
}

// ---- 404, 405, 413 ------------------------------------------------------------------------

TEST_F(ServerE2eTest, UnknownModelVersionOrPathIs404) {
  for (const char* path : {"/v2/models/no_such_model", "/v2/models/no_such_model/ready",
                           "/v2/models/no_such_model/config", "/v2/models/no_such_model/stats",
                           "/v2/models/digits_mlp/versions/999", "/v2/models/digits_mlp/versions/999/ready",
                           "/v2/models/digits_mlp/versions/999/config", "/v2/models/digits_mlp/versions/abc",
                           "/v2/nothing/here", "/", "/v3", "/v2/models/digits_mlp/versions/1/extra"}) {
    HttpReply r = get(path);
    EXPECT_EQ(r.status, 404) << path << ": " << r.body;
    error_of(r.body);
  }
  HttpReply m = post("/v2/models/no_such_model/infer", digits_body({1}));
  EXPECT_EQ(m.status, 404);
  EXPECT_NE(error_of(m.body).find("no_such_model"), std::string::npos);
  HttpReply v = post("/v2/models/digits_mlp/versions/999/infer", digits_body({1}));
  EXPECT_EQ(v.status, 404);
  EXPECT_NE(error_of(v.body).find("999"), std::string::npos);
}

TEST_F(ServerE2eTest, PathTraversalInModelNamesIsRefused) {
  for (const char* name : {"..", "..%2F..%2Fetc", "%2E%2E", ".hidden", "a%2Fb"}) {
    HttpReply r = post(std::string("/v2/models/") + name + "/infer", digits_body({1}));
    EXPECT_TRUE(r.status == 400 || r.status == 404) << name << ": " << r.status << " " << r.body;
    error_of(r.body);
  }
}

TEST_F(ServerE2eTest, WrongMethodIs405WithAllow) {
  struct Case {
    const char* method;
    const char* path;
    const char* allow;
  };
  for (const Case& c : {Case{"GET", "/v2/models/digits_mlp/infer", "POST"},
                        Case{"GET", "/v2/models/digits_mlp/versions/1/infer", "POST"},
                        Case{"POST", "/v2/health/live", "GET"}, Case{"DELETE", "/v2/health/ready", "GET"},
                        Case{"PUT", "/v2", "GET"}, Case{"POST", "/v2/models/digits_mlp", "GET"},
                        Case{"POST", "/v2/models/digits_mlp/ready", "GET"},
                        Case{"POST", "/v2/models/digits_mlp/config", "GET"},
                        Case{"POST", "/v2/models/digits_mlp/stats", "GET"},
                        Case{"GET", "/v2/repository/index", "POST"},
                        Case{"GET", "/v2/repository/models/digits_mlp/load", "POST"},
                        Case{"GET", "/v2/repository/models/digits_mlp/unload", "POST"},
                        Case{"POST", "/metrics", "GET"}}) {
    HttpReply r = conn_->request(c.method, c.path);
    EXPECT_EQ(r.status, 405) << c.method << " " << c.path;
    EXPECT_EQ(r.header("Allow"), c.allow) << c.method << " " << c.path;
    error_of(r.body);
  }
}

TEST_F(ServerE2eTest, BodyOverLimitIs413AndTheServerGoesOn) {
  HttpReply r = post(kInfer, std::string(kMaxBody + 1, ' '));
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(error_of(r.body).find(std::to_string(kMaxBody)), std::string::npos) << "names the limit";
  HttpConn fresh(server_->port());  // a 413 may close its connection
  EXPECT_EQ(fresh.request("GET", "/v2/health/live").status, 200);
  EXPECT_EQ(fresh.request("POST", kInfer, digits_body({3})).status, 200);
}

// The HTTP layer's own errors: unparsable HTTP is a 400, a header block over its limit a 431,
// both as {"error"} bodies.
TEST_F(ServerE2eTest, MalformedHttpIs400AndHugeHeadersAre431) {
  HttpConn garbage(server_->port());
  garbage.send_raw("THIS IS NOT HTTP\r\n\r\n");
  HttpReply r = garbage.read();
  EXPECT_EQ(r.status, 400);
  error_of(r.body);
  HttpConn huge(server_->port());
  HttpReply h = huge.request("GET", "/v2/health/live", "", {{"X-Padding", std::string(64 * 1024, 'x')}});
  EXPECT_EQ(h.status, 431);
  error_of(h.body);
  EXPECT_EQ(get("/v2/health/live").status, 200);
}

// Runs bad requests itself so that it holds when each test runs in its own process.
TEST_F(ServerE2eTest, StillServesAfterEveryKindOfBadRequest) {
  EXPECT_EQ(post(kInfer, "{not json").status, 400);
  EXPECT_EQ(post(kInfer, R"({"inputs":[]})").status, 400);
  EXPECT_EQ(get(kInfer).status, 405);
  EXPECT_EQ(get("/v2/models/none").status, 404);
  EXPECT_EQ(post(kInfer, "\xff\xfe\x00garbage").status, 400);
  EXPECT_EQ(get("/v2/health/ready").status, 200);
  HttpReply r = post(kInfer, digits_body({4, 5}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(logits_of(r.body).size(), 20u);
}

}  // namespace
}  // namespace hg::test
