// End-to-end over real HTTP, each test with its own hgraph-serve child over its own temporary
// repository: 503 with Retry-After when a model's queue is full, 504 for requests whose
// timeout expires in the queue (never executed), 503 for a model that failed to load (and the
// server not ready), 401 for a missing or wrong bearer token (repository control only, or
// everything with --auth-all), repository control in explicit mode (load, reload with a config
// override, unload, a failed reload that keeps the old version serving) and in poll mode.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "tests/server_e2e.h"
#include "tests/wait.h"

namespace hg::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
const std::string kInfer = "/v2/models/digits_mlp/infer";

json model_stats(HttpConn& c, const std::string& model) {
  HttpReply r = c.request("GET", "/v2/models/" + model + "/stats");
  EXPECT_EQ(r.status, 200) << r.body;
  json j = json_of(r);
  return j.contains("model_stats") && !j["model_stats"].empty() ? j["model_stats"][0] : json::object();
}


// ---- 503 queue full, 504 timeout, 503 not ready ----------------------------------------------

TEST(E2eQueueTest, QueueFullIs503WithRetryAfterAtOnce) {
  TempRepo repo("queue_full");
  repo.add_digits();
  // A batch waits 2 s for company; at most 2 requests wait.
  repo.write_config("digits_mlp", {{"max_batch_size", 32},
                                   {"dynamic_batching",
                                    {{"max_queue_delay_microseconds", 2000000},
                                     {"default_queue_policy", {{"max_queue_size", 2}}}}}});
  ServerProcess server({"--model-repository", repo.str()});
  constexpr int kClients = 6;
  std::vector<HttpReply> replies(kClients);
  std::vector<Clock::duration> took(kClients);
  run_threads(kClients, [&](int t) {
    HttpConn c(server.port());
    const auto t0 = Clock::now();
    replies[t] = c.request("POST", kInfer, digits_body({100 + t}));
    took[t] = Clock::now() - t0;
  });
  int ok = 0, full = 0;
  HttpConn c(server.port());
  for (int t = 0; t < kClients; ++t) {
    const HttpReply& r = replies[t];
    if (r.status == 200) {
      ++ok;
      EXPECT_EQ(logits_of(r.body), logits_of(c.request("POST", kInfer, digits_body({100 + t})).body))
          << "client " << t << " got another request's answer";
    } else {
      ASSERT_EQ(r.status, 503) << r.body;
      ++full;
      EXPECT_FALSE(r.header("Retry-After").empty()) << "a full queue names when to retry";
      EXPECT_NE(error_of(r.body).find("queue"), std::string::npos) << r.body;
      EXPECT_LT(took[t], 1500ms) << "refused at once, not after the 2 s batch wait";
    }
  }
  EXPECT_GE(ok, 2) << "the queue holds 2";
  EXPECT_GE(full, 1);
  EXPECT_EQ(ok + full, kClients);
  HttpReply m = c.request("GET", "/metrics");
  EXPECT_GE(metric_sum(m.body, "hg_inference_request_failure_total", "REJECTED"), full);
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eQueueTest, ExpiredRequestIs504AndNeverRuns) {
  TempRepo repo("timeout");
  repo.add_digits();
  // Every request waits 300 ms for company but may wait 100 ms at most.
  repo.write_config("digits_mlp", {{"max_batch_size", 32},
                                   {"dynamic_batching",
                                    {{"max_queue_delay_microseconds", 300000},
                                     {"default_queue_policy", {{"default_timeout_microseconds", 100000}}}}}});
  ServerProcess server({"--model-repository", repo.str()});
  HttpConn c(server.port());
  const std::vector<json> params = {json::object(),                                  // the default 100 ms
                                    {{"parameters", {{"timeout", 1000}}}},           // lowered to 1 ms
                                    {{"parameters", {{"timeout", 60000000}}}}};      // cannot raise it
  for (const json& extra : params) {
    HttpReply r = c.request("POST", kInfer, digits_body({1}, extra));
    EXPECT_EQ(r.status, 504) << extra.dump() << ": " << r.body;
    EXPECT_NE(error_of(r.body).find("timeout"), std::string::npos) << r.body;
  }
  const json s = model_stats(c, "digits_mlp");
  EXPECT_EQ(s.value("execution_count", -1), 0) << "an expired request is never executed: " << s.dump();
  EXPECT_EQ(s.value("inference_count", -1), 0) << s.dump();
  EXPECT_GE(metric_sum(c.request("GET", "/metrics").body, "hg_inference_request_failure_total", "TIMEOUT"), 3);
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eQueueTest, ModelThatFailedToLoadIs503AndServerNotReady) {
  TempRepo repo("broken");
  repo.add_digits();
  fs::create_directories(repo.dir() / "broken" / "1");
  std::ofstream(repo.dir() / "broken" / "1" / "model.json") << "{ this is not json";
  ServerProcess server({"--model-repository", repo.str()});
  HttpConn c(server.port());
  EXPECT_EQ(c.request("GET", "/v2/health/live").status, 200);
  HttpReply ready = c.request("GET", "/v2/health/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(error_of(ready.body).find("broken"), std::string::npos);
  HttpReply mr = c.request("GET", "/v2/models/broken/ready");
  EXPECT_EQ(mr.status, 503);
  error_of(mr.body);
  HttpReply inf = c.request("POST", "/v2/models/broken/infer", digits_body({1}));
  EXPECT_EQ(inf.status, 503);
  EXPECT_NE(error_of(inf.body).find("broken"), std::string::npos);
  json idx = json_of(c.request("POST", "/v2/repository/index", "{}"));
  bool listed = false;
  for (const auto& e : idx)
    if (e["name"] == "broken") {
      listed = true;
      EXPECT_EQ(e["state"], "UNAVAILABLE");
      EXPECT_FALSE(e.value("reason", "").empty()) << "the index says why: " << e.dump();
    }
  EXPECT_TRUE(listed) << idx.dump();
  EXPECT_EQ(c.request("GET", "/v2/models/digits_mlp/ready").status, 200);
  EXPECT_EQ(c.request("POST", kInfer, digits_body({1})).status, 200);
  EXPECT_EQ(server.terminate(30s), 0);
}

// ---- 401 ----------------------------------------------------------------------------------

const Headers kGoodToken = {{"Authorization", "Bearer s3cret"}};

// The token "s3cret" in a file beside the models (a file in the repository is no model).
std::string token_file(const TempRepo& repo) {
  const fs::path f = repo.dir() / "token.txt";
  std::ofstream(f) << "s3cret\n";
  return f.string();
}
const Headers kBadToken = {{"Authorization", "Bearer wrong"}};

void expect_401(HttpConn& c, const std::string& method, const std::string& path, std::string_view body) {
  for (const Headers& h : {Headers{}, kBadToken, Headers{{"Authorization", "s3cret"}}}) {
    HttpReply r = c.request(method, path, body, h);
    EXPECT_EQ(r.status, 401) << method << " " << path << " with " << (h.empty() ? "no token" : h[0].second);
    EXPECT_NE(r.header("WWW-Authenticate").find("Bearer"), std::string::npos) << method << " " << path;
    error_of(r.body);
  }
}

TEST(E2eAuthTest, RepositoryControlNeedsTheToken) {
  TempRepo repo("auth");
  repo.add_digits();
  ServerProcess server({"--model-repository", repo.str(), "--model-control-mode", "explicit", "--load-model",
                        "digits_mlp", "--auth-token-file", token_file(repo)});
  HttpConn c(server.port());
  expect_401(c, "POST", "/v2/repository/models/digits_mlp/load", "");
  expect_401(c, "POST", "/v2/repository/models/digits_mlp/unload", "");
  EXPECT_EQ(c.request("POST", kInfer, digits_body({1})).status, 200) << "still loaded after refused unloads";
  EXPECT_EQ(c.request("GET", "/v2/models/digits_mlp").status, 200) << "only repository control needs the token";
  HttpReply load = c.request("POST", "/v2/repository/models/digits_mlp/load", "", kGoodToken);
  EXPECT_EQ(load.status, 200) << load.body;
  HttpReply unload = c.request("POST", "/v2/repository/models/digits_mlp/unload", "", kGoodToken);
  EXPECT_EQ(unload.status, 200) << unload.body;
  EXPECT_NE(c.request("GET", "/v2/models/digits_mlp/ready").status, 200);
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eAuthTest, AuthAllNeedsTheTokenForEverythingButProbes) {
  TempRepo repo("auth_all");
  repo.add_digits();
  ServerProcess server({"--model-repository", repo.str(), "--auth-token-file", token_file(repo), "--auth-all"});
  HttpConn c(server.port());
  expect_401(c, "POST", kInfer, digits_body({1}));
  expect_401(c, "GET", "/v2", "");
  expect_401(c, "GET", "/v2/models/digits_mlp", "");
  expect_401(c, "GET", "/v2/models/digits_mlp/stats", "");
  expect_401(c, "POST", "/v2/repository/index", "");
  expect_401(c, "GET", "/metrics", "");
  expect_401(c, "GET", "/v2/models/no_such_model", "");  // no probing for model names either
  EXPECT_EQ(c.request("GET", "/v2/health/live").status, 200) << "liveness probes carry no token";
  EXPECT_EQ(c.request("GET", "/v2/health/ready").status, 200) << "readiness probes carry no token";
  HttpReply r = c.request("POST", kInfer, digits_body({1}), kGoodToken);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(logits_of(r.body).size(), 10u);
  EXPECT_EQ(c.request("GET", "/v2", "", kGoodToken).status, 200);
  EXPECT_EQ(c.request("GET", "/metrics", "", kGoodToken).status, 200);
  EXPECT_EQ(server.terminate(30s), 0);
}

// ---- repository control -------------------------------------------------------------------

bool has_state(const json& index, const std::string& model, const std::string& state) {
  for (const auto& e : index)
    if (e.value("name", "") == model) return e.value("state", "") == state;
  return false;
}

TEST(E2eRepositoryTest, ExplicitLoadReloadWithConfigAndUnload) {
  TempRepo repo("explicit");
  repo.add_digits();
  repo.add_digits("other");
  ServerProcess server({"--model-repository", repo.str(), "--model-control-mode", "explicit", "--load-model",
                        "digits_mlp"});
  HttpConn c(server.port());
  json idx = json_of(c.request("POST", "/v2/repository/index", ""));
  EXPECT_TRUE(has_state(idx, "digits_mlp", "READY")) << idx.dump();
  EXPECT_TRUE(has_state(idx, "other", "UNAVAILABLE")) << "listed but not loaded: " << idx.dump();
  json ready_only = json_of(c.request("POST", "/v2/repository/index", R"({"ready":true})"));
  EXPECT_EQ(ready_only.size(), 1u) << ready_only.dump();
  HttpReply before = c.request("POST", "/v2/models/other/infer", digits_body({1}));
  EXPECT_TRUE(before.status == 404 || before.status == 503) << before.status << " " << before.body;

  HttpReply load = c.request("POST", "/v2/repository/models/other/load", "");
  ASSERT_EQ(load.status, 200) << load.body;
  EXPECT_EQ(c.request("GET", "/v2/models/other/ready").status, 200);
  EXPECT_EQ(c.request("GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(logits_of(c.request("POST", "/v2/models/other/infer", digits_body({7})).body),
            logits_of(c.request("POST", kInfer, digits_body({7})).body));

  // Reload with a config given in the request: it replaces config.json.
  const json load_cfg = {{"parameters", {{"config", json({{"max_batch_size", 2}}).dump()}}}};
  HttpReply reload = c.request("POST", "/v2/repository/models/other/load", load_cfg.dump());
  ASSERT_EQ(reload.status, 200) << reload.body;
  EXPECT_EQ(json_of(c.request("GET", "/v2/models/other/config"))["max_batch_size"], 2);
  EXPECT_EQ(c.request("POST", "/v2/models/other/infer", digits_body({1, 2, 3})).status, 400) << "batch 3 > 2";
  EXPECT_EQ(c.request("POST", "/v2/models/other/infer", digits_body({1, 2})).status, 200);

  HttpReply unload = c.request("POST", "/v2/repository/models/other/unload", "");
  ASSERT_EQ(unload.status, 200) << unload.body;
  EXPECT_NE(c.request("GET", "/v2/models/other/ready").status, 200);
  HttpReply after = c.request("POST", "/v2/models/other/infer", digits_body({1}));
  EXPECT_TRUE(after.status == 404 || after.status == 503) << after.status << " " << after.body;
  EXPECT_NE(error_of(after.body).find("other"), std::string::npos);
  EXPECT_EQ(c.request("POST", kInfer, digits_body({1})).status, 200) << "the other model is untouched";

  HttpReply unknown = c.request("POST", "/v2/repository/models/no_such_model/load", "");
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_NE(error_of(unknown.body).find("no_such_model"), std::string::npos);
  HttpReply bad_cfg = c.request("POST", "/v2/repository/models/other/load",
                                R"({"parameters":{"config":"{\"max_batch_size\": \"many\"}"}})");
  EXPECT_EQ(bad_cfg.status, 400) << bad_cfg.body;
  EXPECT_NE(error_of(bad_cfg.body).find("max_batch_size"), std::string::npos);
  HttpReply traversal = c.request("POST", "/v2/repository/models/..%2F..%2Ftmp/load", "");
  EXPECT_EQ(traversal.status, 400) << traversal.body;
  error_of(traversal.body);
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eRepositoryTest, FailedReloadKeepsTheOldVersionServing) {
  TempRepo repo("failed_reload");
  repo.add_digits();
  ServerProcess server({"--model-repository", repo.str(), "--model-control-mode", "explicit", "--load-model",
                        "digits_mlp"});
  HttpConn c(server.port());
  const std::vector<float> want = logits_of(c.request("POST", kInfer, digits_body({5})).body);
  ASSERT_EQ(want.size(), 10u);
  fs::create_directories(repo.dir() / "digits_mlp" / "2");
  std::ofstream(repo.dir() / "digits_mlp" / "2" / "model.json") << R"({"format": "hgraph-model", "trunc)";
  HttpReply load = c.request("POST", "/v2/repository/models/digits_mlp/load", "");
  EXPECT_GE(load.status, 400) << load.body;
  EXPECT_NE(error_of(load.body).find("model.json"), std::string::npos) << "names what failed";
  HttpReply r = c.request("POST", kInfer, digits_body({5}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json_of(r)["model_version"], "1");
  EXPECT_EQ(logits_of(r.body), want);
  EXPECT_EQ(c.request("GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(c.request("GET", "/v2/models/digits_mlp/ready").status, 200);
  EXPECT_EQ(server.terminate(30s), 0);
}

TEST(E2eRepositoryTest, PollModePicksUpNewVersionsAndModels) {
  TempRepo repo("poll");
  repo.add_digits();
  ServerProcess server({"--model-repository", repo.str(), "--model-control-mode", "poll",
                        "--repository-poll-secs", "1"});
  HttpConn c(server.port());
  auto version_served = [&] { return json_of(c.request("POST", kInfer, digits_body({1})))["model_version"]; };
  EXPECT_EQ(version_served(), "1");
  TempRepo::copy_folder(kBundledRepository / "digits_mlp" / "1", repo.dir() / "digits_mlp" / "2");
  EXPECT_TRUE(wait_until([&] { return version_served() == "2"; }, kWaitLimit, "a poll to serve version 2"));
  TempRepo staging("poll_staging");  // built beside the repository, then moved in whole
  staging.add_digits("newcomer");
  fs::rename(staging.dir() / "newcomer", repo.dir() / "newcomer");
  EXPECT_TRUE(wait_until([&] { return c.request("GET", "/v2/models/newcomer/ready").status == 200; }, kWaitLimit,
                         "a poll to load the new model folder 'newcomer'"));
  fs::remove_all(repo.dir() / "newcomer");
  EXPECT_TRUE(wait_until([&] { return c.request("GET", "/v2/models/newcomer/ready").status != 200; }, kWaitLimit,
                         "a poll to unload the removed model folder 'newcomer'"));
  EXPECT_EQ(c.request("POST", kInfer, digits_body({1})).status, 200);
  EXPECT_EQ(server.terminate(30s), 0);
}

}  // namespace
}  // namespace hg::test
