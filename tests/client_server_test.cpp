// hg::server::Client against a real hgraph-serve process (tests/server_process.h) holding the
// bundled digits_mlp in explicit control mode with a bearer token: inference the same in every
// encoding (JSON, binary inputs, binary outputs per output and request-wide, raw mode), the
// repository extension with and without the token, config, statistics, metrics, errors.
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/client.h"
#include "tests/server_process.h"
#include "tests/test_env.h"

#ifndef HG_SOURCE_DIR
#error "HG_SOURCE_DIR must be defined as the repository root"
#endif

namespace {

using hg::server::Client;
using hg::server::ClientError;
using hg::server::ClientOptions;
using hg::server::InferOptions;
using hg::server::Tensor;
using json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kModel = "digits_mlp";
const std::string kToken = "client-test-token";

std::vector<float> pixels(int seed) {
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>((i * 5 + seed * 11) % 17);
  return v;
}

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ClientError& e) {
    return e.status();
  }
  return 200;
}

class ClientServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    token_file_ = hg::test::temp_dir("client_server") / "token.txt";
    std::ofstream(token_file_) << kToken << "\n";
    server_ = std::make_unique<hg::test::ServerProcess>(std::vector<std::string>{
        "--model-repository", HG_SOURCE_DIR "/models/repository", "--model-control-mode", "explicit",
        "--load-model", kModel, "--auth-token-file", token_file_.string()});
  }
  static void TearDownTestSuite() {
    if (server_) {
      EXPECT_EQ(server_->terminate(20s), 0);
    }
    server_.reset();
    std::filesystem::remove_all(token_file_.parent_path());
  }
  void SetUp() override {
    ASSERT_TRUE(server_) << "hgraph-serve did not start";
    ClientOptions o;
    o.token = kToken;
    admin_ = std::make_unique<Client>(server_->url(), o);
    anonymous_ = std::make_unique<Client>(server_->url());
  }

  static inline std::filesystem::path token_file_;
  static inline std::unique_ptr<hg::test::ServerProcess> server_;
  std::unique_ptr<Client> admin_, anonymous_;
};

TEST_F(ClientServerTest, EveryEncodingGivesTheSameLogits) {
  Client& c = *anonymous_;
  ASSERT_TRUE(c.live());
  ASSERT_TRUE(c.ready());
  ASSERT_TRUE(c.model_ready(kModel));
  const std::vector<float> x = pixels(3);
  InferOptions json_opt;
  json_opt.id = "ref";
  auto ref = c.infer_result(kModel, {{"input", {1, 64}, x}}, json_opt);
  EXPECT_EQ(ref.id, "ref");
  EXPECT_EQ(ref.model_name, kModel);
  const std::string version = ref.model_version;
  ASSERT_FALSE(version.empty());
  const std::vector<float> want = ref.output("logits").as<float>();
  ASSERT_EQ(want.size(), 10u);
  EXPECT_FALSE(ref.output("logits").binary);

  Tensor binary_in("input", {1, 64}, x);
  binary_in.binary = true;
  InferOptions per_output;
  per_output.version = version;
  per_output.outputs = {{"logits", true}};
  InferOptions request_wide;
  request_wide.binary_output = true;
  InferOptions raw;
  raw.raw = true;
  struct Case {
    const char* what;
    Tensor input;
    InferOptions opt;
    bool binary_out;
  };
  const std::vector<Case> cases = {{"binary input", binary_in, {}, false},
                                   {"binary output per output", {"input", {1, 64}, x}, per_output, true},
                                   {"binary_data_output", binary_in, request_wide, true},
                                   {"raw mode", binary_in, raw, true}};
  for (const Case& k : cases) {
    auto r = c.infer_result(kModel, {k.input}, k.opt);
    const Tensor& logits = r.output("logits");
    EXPECT_EQ(logits.binary, k.binary_out) << k.what;
    EXPECT_EQ(logits.shape, (std::vector<int64_t>{1, 10})) << k.what;
    EXPECT_EQ(logits.as<float>(), want) << k.what;
  }
}

TEST_F(ClientServerTest, RepositoryNeedsTheTokenAndLoadsAndUnloads) {
  auto index = anonymous_->repository_index();
  ASSERT_FALSE(index.empty());
  EXPECT_EQ(index[0].name, kModel);
  EXPECT_EQ(index[0].state, "READY");
  const int refused = status_of([&] { anonymous_->unload_model(kModel); });
  EXPECT_TRUE(refused == 401 || refused == 403) << refused;
  EXPECT_TRUE(anonymous_->model_ready(kModel));

  admin_->unload_model(kModel);
  EXPECT_FALSE(admin_->model_ready(kModel));
  EXPECT_TRUE(admin_->repository_index(/*ready_only=*/true).empty());
  EXPECT_NE(status_of([&] { admin_->infer(kModel, {{"input", {1, 64}, pixels(1)}}); }), 200);

  admin_->load_model(kModel, R"({"max_batch_size": 4})");
  EXPECT_TRUE(admin_->model_ready(kModel));
  EXPECT_EQ(admin_->model_config(kModel)["max_batch_size"], 4);
  auto out = admin_->infer(kModel, {{"input", {4, 64}, std::vector<float>(256, 1.0f)}});
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{4, 10}));
  EXPECT_EQ(status_of([&] { admin_->infer(kModel, {{"input", {5, 64}, std::vector<float>(320, 1.0f)}}); }), 400);
}

TEST_F(ClientServerTest, ConfigStatisticsAndMetrics) {
  Client& c = *admin_;
  c.infer(kModel, {{"input", {1, 64}, pixels(2)}});
  const json config = c.model_config(kModel);
  EXPECT_EQ(config["name"], kModel);
  const json all = c.model_statistics();
  ASSERT_TRUE(all.contains("model_stats")) << all.dump();
  const json one = c.model_statistics(kModel);
  ASSERT_EQ(one["model_stats"].size(), 1u) << one.dump();
  EXPECT_EQ(one["model_stats"][0]["name"], kModel);
  EXPECT_GE(one["model_stats"][0]["inference_count"].get<int64_t>(), 1);
  const std::string version = one["model_stats"][0]["version"].get<std::string>();
  EXPECT_EQ(c.model_statistics(kModel, version)["model_stats"][0]["version"], version);
  const std::string text = c.metrics();
  EXPECT_NE(text.find("# TYPE"), std::string::npos);
  EXPECT_NE(text.find(kModel), std::string::npos);
}

TEST_F(ClientServerTest, ErrorsCarryTheServersStatusAndMessage) {
  Client& c = *anonymous_;
  try {
    c.infer("no_such_model", {{"input", {1, 64}, pixels(1)}});
    FAIL() << "no throw";
  } catch (const ClientError& e) {
    EXPECT_EQ(e.status(), 404);
    EXPECT_NE(std::string(e.what()).find("no_such_model"), std::string::npos) << e.what();
  }
  try {
    c.infer(kModel, {{"input", {1, 63}, std::vector<float>(63)}});
    FAIL() << "no throw";
  } catch (const ClientError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("input"), std::string::npos) << e.what();
  }
  EXPECT_EQ(status_of([&] { c.model_metadata(kModel, "999"); }), 404);
}

}  // namespace
