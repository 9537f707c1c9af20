// Shared pieces of the hgraph-serve end-to-end tests (server_e2e_test.cpp, server_load_test.cpp,
// server_shutdown_test.cpp): model repositories built in temporary directories, digits_mlp
// and ResNet-18 requests with distinct inputs, JSON and error bodies, Prometheus text, client threads and background
// load that stops by itself.
//
//   hg::test::TempRepo repo("Batching");                  // /tmp/hgraph_test_e2e_Batching_<pid>
//   repo.add_digits();                                    // <repo>/digits_mlp/1 from models/repository
//   repo.write_config("digits_mlp", {{"max_batch_size", 16}, {"dynamic_batching", {...}}});
//   hg::test::ServerProcess server({"--model-repository", repo.str()});
//   HttpConn c(server.port());
//   HttpReply r = c.request("POST", "/v2/models/digits_mlp/infer", digits_body({3, 4}));
//   double runs = metric_sum(c.request("GET", "/metrics").body, "hg_batch_size_count", "digits_mlp");
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/atomic_file.h"
#include "models/gpt.h"
#include "models/package.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "tests/http_conn.h"
#include "tests/server_process.h"
#include "tests/test_env.h"

#ifndef HG_SOURCE_DIR
#error "HG_SOURCE_DIR must be defined as the repository root"
#endif
#ifndef HG_TESTDATA_DIR
#error "HG_TESTDATA_DIR must be defined as the directory of the PyTorch-made test data"
#endif

namespace hg::test {

using json = nlohmann::json;
namespace fs = std::filesystem;

inline const fs::path kBundledRepository = fs::path(HG_SOURCE_DIR) / "models" / "repository";
inline const fs::path kTestData = fs::path(HG_TESTDATA_DIR);

// A model repository in a fresh temporary directory, removed with the object.
class TempRepo {
 public:
  explicit TempRepo(const std::string& name) : dir_(temp_dir("e2e_" + name)) {}
  ~TempRepo() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TempRepo(const TempRepo&) = delete;
  TempRepo& operator=(const TempRepo&) = delete;

  const fs::path& dir() const { return dir_; }
  std::string str() const { return dir_.string(); }

  // <repo>/<model>/<version>/ as a copy of the bundled digits_mlp package.
  void add_digits(const std::string& model = "digits_mlp", int version = 1) const {
    copy_folder(kBundledRepository / "digits_mlp" / "1", dir_ / model / std::to_string(version));
  }
  // <repo>/<model>/<version>/model.onnx from the ONNX test data (scripts/testdata_onnx.py).
  void add_onnx(const std::string& model, const std::string& file, int version = 1) const {
    fs::create_directories(dir_ / model / std::to_string(version));
    fs::copy_file(kTestData / "onnx" / file, dir_ / model / std::to_string(version) / "model.onnx",
                  fs::copy_options::overwrite_existing);
  }
  // <repo>/<model>/<version>/ as a GPT package with PyTorch's weights (scripts/testdata_gpt.py):
  // a model the generate and OpenAI endpoints serve.
  void add_gpt(const std::string& model = "gpt", int version = 1) const {
    const fs::path weights = kTestData / "gpt" / "weights.safetensors";
    ASSERT_TRUE(fs::exists(weights)) << weights << " is missing: run scripts/testdata_gpt.py";
    models::GPT gpt;
    gpt.load_state_dict(models::tensors_from(safetensors::read(weights), weights.string()));
    models::PackageSpec spec;
    spec.name = model;
    spec.inputs = {{"ids", "INT64", {-1, 16}}};
    spec.outputs = {{"logits", "FP32", {-1, 16, 256}}};
    models::save_package(dir_ / model / std::to_string(version), gpt, spec);
  }
  // <repo>/<model>/config.json, written atomically (a polling server never reads half of it).
  void write_config(const std::string& model, const json& config) const {
    fs::create_directories(dir_ / model);
    const std::string text = config.dump(2);
    write_file_atomic(dir_ / model / "config.json", {as_bytes(text)});
  }

  // Builds <to> completely beside it, then renames it in: a scan sees no half-copied version.
  static void copy_folder(const fs::path& from, const fs::path& to) {
    fs::create_directories(to.parent_path());
    const fs::path staging = to.parent_path() / ("." + to.filename().string() + ".staging");
    fs::remove_all(staging);
    fs::copy(from, staging, fs::copy_options::recursive);
    fs::rename(staging, to);
  }

 private:
  fs::path dir_;
};

// The JSON objects of the `data:` lines of an event stream (discarded values for lines that are
// not JSON, such as OpenAI's [DONE]).
inline std::vector<json> events_of(const std::string& body) {
  std::vector<json> events;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data:", 0) == 0) events.push_back(json::parse(line.substr(5), nullptr, false));
  }
  return events;
}

// A digits-like sample (8x8 pixels in [0, 16]), hashed from the seed: different seeds give
// different samples.
inline std::vector<float> digits_sample(int seed) {
  std::vector<float> v(64);
  for (uint32_t i = 0; i < 64; ++i) {
    uint32_t h = static_cast<uint32_t>(seed) * 2654435761u + i * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    v[i] = static_cast<float>(h % 17);
  }
  return v;
}

// An infer request body for digits_mlp: one row per seed, JSON FP32 data; `extra` is merged
// into the request object (e.g. {"id": "x"} or {"parameters": {"timeout": 1}}).
inline std::string digits_body(const std::vector<int>& seeds, const json& extra = json::object()) {
  std::vector<float> data;
  for (int s : seeds) {
    auto x = digits_sample(s);
    data.insert(data.end(), x.begin(), x.end());
  }
  json body = {{"inputs", {{{"name", "input"}, {"datatype", "FP32"},
                            {"shape", {static_cast<int64_t>(seeds.size()), 64}}, {"data", data}}}}};
  body.update(extra);
  return body.dump();
}

// The "logits" of a 200 digits_mlp response, flat; empty when the body is not one.
inline std::vector<float> logits_of(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("outputs") || !j["outputs"].is_array() || j["outputs"].empty()) return {};
  for (const auto& o : j["outputs"])
    if (o.value("name", "") == "logits" && o.contains("data") && o["data"].is_array())
      return o["data"].get<std::vector<float>>();
  return {};
}

// A ResNet-18 (ONNX test data) request of `batch` 3x64x64 images, JSON; `seed` varies the pixels.
inline std::string resnet_body(int batch, int seed) {
  std::vector<float> x(static_cast<size_t>(batch) * 3 * 64 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 31 + seed * 7) % 97) / 97.0f - 0.5f;
  return json({{"inputs", {{{"name", "input"}, {"datatype", "FP32"}, {"shape", {batch, 3, 64, 64}}, {"data", x}}}}})
      .dump();
}

// A body parsed as JSON; a test failure (and a discarded value) when it is not JSON.
inline json json_of(const HttpReply& r) {
  json j = json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.body;
  return j;
}

// The message of an {"error": str} body; empty (and a test failure) for any other body.
inline std::string error_of(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  const bool ok = j.is_object() && j.contains("error") && j["error"].is_string();
  EXPECT_TRUE(ok) << "not an {\"error\": str} body: " << body;
  return ok ? j["error"].get<std::string>() : "";
}

// The sum of the values of every sample of `name` (exact metric name, e.g.
// "hg_batch_size_count") in Prometheus text whose labels contain `label_part` (e.g.
// "digits_mlp"; empty: all). Returns -1 when no such sample exists.
inline double metric_sum(const std::string& text, const std::string& name, const std::string& label_part = "") {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    const size_t after = name.size();
    if (after < line.size() && line[after] != '{' && line[after] != ' ') continue;  // a longer name
    const size_t value_at = line.rfind(' ');
    const std::string labels = line.substr(after, value_at - after);
    if (!label_part.empty() && labels.find(label_part) == std::string::npos) continue;
    sum += std::stod(line.substr(value_at + 1));
    found = true;
  }
  return found ? sum : -1;
}

// Runs fn(thread_index) on `threads` threads at once and joins them all; an exception ends its
// thread as a test failure (an I/O timeout, say), not the process.
inline void run_threads(int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&fn, t] {
      try {
        fn(t);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client thread " << t << ": " << e.what();
      }
    });
  for (auto& th : pool) th.join();
}

// A thread running fn(stop), told to stop and joined when the object goes away, also when a
// failed ASSERT leaves the test early (a joinable std::thread would terminate the process).
class Background {
 public:
  explicit Background(std::function<void(const std::atomic<bool>& stop)> fn)
      : thread_([this, fn = std::move(fn)] {
          try {
            fn(stop_);
          } catch (const std::exception& e) {
            ADD_FAILURE() << "background thread: " << e.what();
          }
        }) {}
  ~Background() { join(); }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  // Asks fn to stop, then joins.
  void join() {
    stop_ = true;
    wait();
  }
  // Joins without asking: fn ends by itself.
  void wait() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A suite that shares one hgraph-serve: its SetUpTestSuite fills repo_ and starts server_; each
// test gets a fresh keep-alive connection. The server must exit 0 on SIGTERM at the end.
class SharedServerTest : public ::testing::Test {
 protected:
  // A server of the GPT (TempRepo::add_gpt) and digits_mlp: for the text generation suites.
  static void serve_gpt(const std::string& repo_name) {
    repo_ = std::make_unique<TempRepo>(repo_name);
    repo_->add_gpt();
    repo_->add_digits();
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{"--model-repository", repo_->str()});
  }
  static void TearDownTestSuite() {
    if (server_) {
      EXPECT_EQ(server_->terminate(std::chrono::seconds(30)), 0) << "exit code after SIGTERM";
    }
    server_.reset();
    repo_.reset();
  }
  void SetUp() override {
    ASSERT_TRUE(server_ && server_->running()) << "hgraph-serve is not running";
    conn_ = std::make_unique<HttpConn>(server_->port());
  }
  HttpReply get(const std::string& path) { return conn_->request("GET", path); }
  HttpReply post(const std::string& path, std::string_view body, const Headers& h = {}) {
    return conn_->request("POST", path, body, h);
  }

  static inline std::unique_ptr<TempRepo> repo_;
  static inline std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<HttpConn> conn_;
};

}  // namespace hg::test
