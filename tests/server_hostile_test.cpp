// hgraph-serve against hostile clients, end to end over real HTTP, each test with its own
// child process: deep JSON everywhere JSON enters, huge counts, idle and slow connections
// beyond the limit while probes answer, large bodies to small endpoints and without a token,
// HEAD, control characters in names and the access log, cancellation of queued work,
// signals during loading, and the refusal of open management on a public address. After each
// the process must be alive and its probes fast.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "tests/resident.h"
#include "tests/server_e2e.h"

namespace hg::test {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
const std::string kInfer = "/v2/models/digits_mlp/infer";

// The live probe answers on a fresh connection, well within a bound that allows a loaded machine.
void expect_alive(const ServerProcess& server, const char* after) {
  const auto t0 = Clock::now();
  HttpConn c(server.port(), 30s);
  EXPECT_EQ(c.request("GET", "/v2/health/live").status, 200) << "after " << after;
  EXPECT_LT(Clock::now() - t0, 10s) << "the live probe was slow after " << after;
}

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(E2eHostileTest, DeepJsonIsRefusedWhereverJsonEnters) {
  TempRepo repo("deep_json");
  repo.add_digits();
  ServerProcess server({"--model-repository", repo.str(), "--model-control-mode", "explicit", "--load-model",
                        "digits_mlp"});
  HttpConn c(server.port(), 60s);
  const std::string deep = nested(200000);
  // The body itself, on every endpoint that reads one.
  for (const std::string& path : {kInfer, std::string("/v2/repository/index"),
                                  std::string("/v2/repository/models/digits_mlp/load")}) {
    const HttpReply r = c.request("POST", path, deep);
    EXPECT_EQ(r.status, 400) << path << ": " << r.body.substr(0, 200);
    EXPECT_THAT(error_of(r.body), HasSubstr("nested deeper than")) << path;
  }
  // A load's parameters.config, a string holding JSON: the crash this suite was written for.
  const json load = {{"parameters", {{"config", deep}}}};
  HttpReply r = c.request("POST", "/v2/repository/models/digits_mlp/load", load.dump());
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 200);
  EXPECT_THAT(error_of(r.body), HasSubstr("parameters.config is nested deeper than 16 levels"));
  // A config.json on disk.
  std::ofstream(repo.dir() / "digits_mlp" / "config.json") << "{\"x\":" << nested(100000) << "}";
  r = c.request("POST", "/v2/repository/models/digits_mlp/load", "");
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 200);
  EXPECT_THAT(error_of(r.body), HasSubstr("nested deeper than 16 levels"));
  expect_alive(server, "deep JSON");
  EXPECT_EQ(c.request("POST", kInfer, digits_body({1})).status, 200) << "the old version still serves";
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eHostileTest, HugeCountsAreRefusedBeforePerItemWork) {
  TempRepo repo("huge_counts");
  repo.add_digits();
  ServerProcess server({"--model-repository", repo.str()});
  HttpConn c(server.port(), 60s);
  json outputs = json::array();
  for (int i = 0; i < 400000; ++i) outputs.push_back({{"name", "o" + std::to_string(i)}});
  json body = json::parse(digits_body({1}));
  body["outputs"] = outputs;
  const auto t0 = Clock::now();
  HttpReply r = c.request("POST", kInfer, body.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(error_of(r.body), HasSubstr("'outputs' has 400000 entries; the model has 1 outputs"));
  EXPECT_LT(Clock::now() - t0, 30s) << "a linear refusal, not a quadratic duplicate check";
  json inputs = json::parse(digits_body({1}));
  for (int i = 0; i < 3; ++i) inputs["inputs"].push_back(inputs["inputs"][0]);
  r = c.request("POST", kInfer, inputs.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(error_of(r.body), HasSubstr("'inputs' has 4 entries; the model has 1 inputs"));
  expect_alive(server, "huge counts");
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eHostileTest, IdleAndHalfSentRequestsBeyondTheLimitLeaveProbesAnswering) {
  TempRepo repo("connections");
  repo.add_digits();
  ServerProcess server({"--model-repository", repo.str(), "--max-connections", "32", "--header-timeout-ms", "60000"});
  std::vector<std::unique_ptr<HttpConn>> hostile;
  for (int i = 0; i < 200; ++i) {
    try {
      hostile.push_back(std::make_unique<HttpConn>(server.port(), 60s));
      // Half of them send a header promising a body that never comes, half nothing at all.
      if (i % 2) hostile.back()->send_raw("POST " + kInfer + " HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n");
    } catch (const HttpConnError&) {  // refused or closed beyond the reserve: expected
    }
  }
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    HttpConn probe(server.port(), 30s);
    const HttpReply r = probe.request("GET", i % 2 ? "/v2/health/live" : "/v2/health/ready");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_LT(Clock::now() - t0, 10s) << "probe " << i << " waited behind hostile connections";
  }
  hostile.clear();
  HttpConn c(server.port(), 60s);
  EXPECT_EQ(c.request("POST", kInfer, digits_body({2})).status, 200);
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eHostileTest, LargeBodiesToSmallEndpointsAndWithoutATokenAreNotRead) {
  TempRepo repo("large_bodies");
  repo.add_digits();
  const fs::path token = repo.dir() / "token";
  std::ofstream(token) << "s3cret\n";
  ServerProcess server({"--model-repository", repo.str(), "--auth-token-file", token.string(), "--auth-all"});
  const auto answer_without_body = [&](const std::string& path, const std::string& auth) {
    HttpConn c(server.port(), 60s);
    // 60 MB promised, nothing sent: the answer must come from the head alone.
    c.send_raw("POST " + path + " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 60000000\r\n\r\n");
    const auto t0 = Clock::now();
    const HttpReply r = c.read();
    EXPECT_LT(Clock::now() - t0, 10s) << path;
    return r;
  };
  HttpReply r = answer_without_body("/v2/repository/index", "Authorization: Bearer s3cret\r\n");
  EXPECT_EQ(r.status, 413);
  EXPECT_THAT(error_of(r.body), HasSubstr("exceeds the limit of 1048576 bytes for POST /v2/repository/index"));
  r = answer_without_body(kInfer, "");
  EXPECT_EQ(r.status, 401);
  r = answer_without_body(kInfer, "Authorization: Bearer wrong\r\n");
  EXPECT_EQ(r.status, 401);
  r = answer_without_body("/v2/nowhere", "Authorization: Bearer s3cret\r\n");
  EXPECT_EQ(r.status, 404);
  r = answer_without_body("/v2/health/live", "");
  EXPECT_EQ(r.status, 405);
  expect_alive(server, "large bodies");
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eHostileTest, HeadIsAGetWithoutBodyAndControlCharactersAreEscaped) {
  TempRepo repo("head_ctl");
  repo.add_digits();
  const fs::path access = repo.dir() / "access.log";
  ServerProcess server({"--model-repository", repo.str(), "--access-log", access.string()});
  HttpConn c(server.port(), 60s);
  const HttpReply get = c.request("GET", "/v2/models/digits_mlp");
  const HttpReply head = c.request("HEAD", "/v2/models/digits_mlp");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(head.header("Content-Length"), std::to_string(get.body.size()));
  EXPECT_EQ(c.request("HEAD", kInfer).status, 405);
  EXPECT_EQ(c.request("GET", "/v2/health/ready").status, 200) << "the connection stays framed after HEAD";
  HttpConn evil(server.port(), 60s);  // refused from its head: the connection closes after the answer
  const HttpReply bad = evil.request("POST", "/v2/models/evil%0d%0aINJECTED/infer", digits_body({1}, {{"id", "a\nb"}}));
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(error_of(bad.body), HasSubstr("evil\\x0d\\x0aINJECTED"));
  EXPECT_THAT(error_of(bad.body), HasSubstr("control character"));
  EXPECT_EQ(c.request("POST", kInfer, digits_body({1}, {{"id", "req-7"}})).status, 200);
  EXPECT_EQ(server.terminate(30s), 0);
  // One JSON line per response; no raw control character from a request reaches the file.
  std::ifstream in(access);
  std::string line;
  int lines = 0;
  bool saw_id = false;
  while (std::getline(in, line)) {
    ++lines;
    for (char ch : line) EXPECT_GE(static_cast<unsigned char>(ch), 0x20) << "raw control character in: " << line;
    const json j = json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    for (const char* k : {"time", "method", "path", "status", "request_bytes", "response_bytes", "duration_us"})
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
    if (j.value("id", "") == "req-7") {
      saw_id = true;
      EXPECT_EQ(j.value("model", ""), "digits_mlp");
      EXPECT_EQ(j.value("status", 0), 200);
    }
  }
  EXPECT_EQ(lines, 6);
  EXPECT_TRUE(saw_id) << "the infer request's id is logged";
}

TEST(E2eHostileTest, AQueuedRequestWhoseClientLeftNeverRuns) {
  TempRepo repo("cancel");
  repo.add_digits();
  // A lone request waits 3 s for company before it runs.
  repo.write_config("digits_mlp", {{"max_batch_size", 32},
                                   {"dynamic_batching", {{"max_queue_delay_microseconds", 3000000}}}});
  ServerProcess server({"--model-repository", repo.str()});
  {
    HttpConn gone(server.port(), 60s);
    gone.send("POST", kInfer, digits_body({5}));
    std::this_thread::sleep_for(200ms);  // queued (this is not a synchronisation: either way it must not run)
  }  // closed before its answer
  HttpConn c(server.port(), 60s);
  bool counted = false;
  const auto deadline = Clock::now() + 60s;
  while (!counted && Clock::now() < deadline) {
    counted = metric_sum(c.request("GET", "/metrics").body, "hg_inference_request_failure_total", "CANCELED") >= 1;
    if (!counted) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(counted) << "/metrics never counted the request as CANCELED";
  const json stats = json_of(c.request("GET", "/v2/models/digits_mlp/stats"))["model_stats"][0];
  EXPECT_EQ(stats.value("execution_count", -1), 0) << "the model ran for a client that had left: " << stats.dump();
  expect_alive(server, "a cancelled request");
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eHostileTest, SigtermWhileLoadingAtStartExits0Promptly) {
  TempRepo repo("sigterm_startup");
  repo.add_onnx("resnet", "resnet18_op17.onnx");
  std::vector<int64_t> buckets;
  for (int b = 1; b <= 64; ++b) buckets.push_back(b);
  repo.write_config("resnet", {{"batch_buckets", buckets}});  // 64 captures before listening: seconds
  ServerProcess server({"--model-repository", repo.str()}, 180s, HG_SERVE_BIN, /*wait_listening=*/false);
  std::this_thread::sleep_for(300ms);
  const auto t0 = Clock::now();
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(60s), 0) << "exit code after SIGTERM during the start-up loading";
  EXPECT_LT(Clock::now() - t0, 20s);
  EXPECT_THAT(server.stdout_after_exit(), ::testing::Not(HasSubstr("listening")))
      << "the loading finished before the signal: the test did not exercise the start-up path";
}

TEST(E2eHostileTest, SigtermDuringAnExplicitLoadRespectsTheDrainTimeout) {
  TempRepo repo("sigterm_load");
  repo.add_digits();
  repo.add_onnx("resnet", "resnet18_op17.onnx");
  std::vector<int64_t> buckets;
  for (int b = 1; b <= 64; ++b) buckets.push_back(b);
  repo.write_config("resnet", {{"batch_buckets", buckets}});  // 64 captures: seconds of loading
  ServerProcess server({"--model-repository", repo.str(), "--model-control-mode", "explicit", "--load-model",
                        "digits_mlp", "--drain-timeout", "1"});
  HttpConn loader(server.port(), 120s);
  loader.send("POST", "/v2/repository/models/resnet/load", "");
  std::this_thread::sleep_for(500ms);
  const auto t0 = Clock::now();
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(60s), 0);
  EXPECT_LT(Clock::now() - t0, 15s) << "waited for the load, not for --drain-timeout 1";
}

TEST(E2eHostileTest, ExplicitModeOnAPublicAddressWithoutATokenIsRefused) {
  TempRepo repo("open_mgmt");
  repo.add_digits();
  // Refused while reading the options: nothing is bound, no model loaded.
  const std::string cmd = std::string(HG_SERVE_BIN) + " --model-repository " + repo.str() +
                          " --model-control-mode explicit --host 0.0.0.0 --port 0 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << out;
  EXPECT_THAT(out, HasSubstr("--allow-unauthenticated-management"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("listening")));
}

}  // namespace
}  // namespace hg::test

namespace hg::test {
namespace {

// A load whose config asks for more memory than the server's model memory budget (a KV cache of
// 2^29 tokens, or a bucket spec that never ends) gets an answer naming the field, and the server
// keeps serving: nothing was allocated for it.
TEST(E2eHostileTest, LoadsBeyondTheModelMemoryBudgetAreRefusedNamingTheField) {
  TempRepo repo("memory_budget");
  repo.add_digits();
  repo.add_gpt();
  ServerProcess server({"--model-repository", repo.str(), "--model-control-mode", "explicit", "--load-model",
                        "digits_mlp", "--model-memory-mb", "256"});
  const size_t rss_before = resident_bytes(server.pid());
  HttpConn c(server.port(), 120s);
  auto r = c.request("POST", "/v2/repository/models/gpt/load",
                     R"({"parameters": {"config": "{\"generation\": {\"max_batch_total_tokens\": 536870912}}"}})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_THAT(r.body, HasSubstr("generation.max_batch_total_tokens (a KV cache of 536870912 tokens in F32) needs"));
  EXPECT_THAT(r.body, HasSubstr("--model-memory-mb 256"));
  r = c.request("POST", "/v2/repository/models/gpt/load",
                R"({"parameters": {"config": "{\"batch_buckets\": \"exp:4611686018427387905:9223372036854775807\"}"}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("batch_buckets"));
  EXPECT_LT(resident_bytes(server.pid()), rss_before + (size_t{128} << 20)) << "the refused loads held memory";
  expect_alive(server, "loads beyond the memory budget");
  EXPECT_EQ(c.request("POST", kInfer, digits_body({1})).status, 200);
  r = c.request("POST", "/v2/repository/models/gpt/load", "");
  EXPECT_EQ(r.status, 200) << r.body;  // the default config fits
  EXPECT_EQ(server.terminate(30s), 0);
}

}  // namespace
}  // namespace hg::test
