// End-to-end over real HTTP: the generate extension of an hgraph-serve child on 127.0.0.1,
// serving the GPT zoo model (PyTorch's weights from scripts/testdata_gpt.py saved as a model
// package in a temporary repository): POST /v2/models/gpt[/versions/1]/generate answers the
// whole text, /generate_stream the same text as server-sent events ending with a
// finish_reason; bad requests are 400 naming the field, unknown models 404, GET 405; a client
// that goes away mid-stream leaves the server serving, and clients who left cost no generation.
#include <gtest/gtest.h>

#include <thread>
#include <string>
#include <vector>

#include "tests/server_e2e.h"

namespace hg::test {
namespace {

using namespace std::chrono_literals;

class E2eGenerateTest : public SharedServerTest {
 protected:
  static void SetUpTestSuite() { serve_gpt("generate"); }
};

const std::string kRequest = R"({"id":"g1","text_input":"Hello, ","parameters":{"max_tokens":12}})";

TEST_F(E2eGenerateTest, GenerateWithAndWithoutVersion) {
  HttpReply r = conn_->request("POST", "/v2/models/gpt/generate", kRequest);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["id"], "g1");
  EXPECT_EQ(j["model_name"], "gpt");
  EXPECT_EQ(j["model_version"], "1");
  ASSERT_TRUE(j["text_output"].is_string());
  EXPECT_FALSE(j["text_output"].get<std::string>().empty());
  HttpReply v = conn_->request("POST", "/v2/models/gpt/versions/1/generate", kRequest);
  ASSERT_EQ(v.status, 200) << v.body;
  EXPECT_EQ(json::parse(v.body)["text_output"], j["text_output"]) << "greedy decoding is deterministic";
}

TEST_F(E2eGenerateTest, GenerateStreamSendsTheSameTextAsEvents) {
  const std::string whole = json::parse(conn_->request("POST", "/v2/models/gpt/generate", kRequest).body)["text_output"];
  for (const char* path : {"/v2/models/gpt/generate_stream", "/v2/models/gpt/versions/1/generate_stream"}) {
    HttpReply r = conn_->request("POST", path, kRequest);
    ASSERT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_NE(r.header("Content-Type").find("text/event-stream"), std::string::npos) << r.header("Content-Type");
    const std::vector<json> events = events_of(r.body);
    ASSERT_GE(events.size(), 2u) << r.body;
    std::string text;
    for (const json& e : events) {
      ASSERT_TRUE(e.is_object() && e.contains("text_output")) << e.dump();
      EXPECT_EQ(e["id"], "g1");
      EXPECT_EQ(e["model_name"], "gpt");
      text += e["text_output"].get<std::string>();
    }
    EXPECT_EQ(text, whole) << path;
    EXPECT_TRUE(events.back().contains("finish_reason")) << events.back().dump();
    for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_FALSE(events[i].contains("finish_reason"));
  }
}

TEST_F(E2eGenerateTest, BadGenerateRequestsAre400404Or405) {
  HttpReply missing = conn_->request("POST", "/v2/models/gpt/generate", R"({"parameters":{"max_tokens":4}})");
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(error_of(missing.body).find("text_input"), std::string::npos) << missing.body;
  HttpReply bad_tokens =
      conn_->request("POST", "/v2/models/gpt/generate_stream", R"({"text_input":"a","parameters":{"max_tokens":-1}})");
  EXPECT_EQ(bad_tokens.status, 400) << "a stream refused before its first event is a plain error";
  EXPECT_NE(error_of(bad_tokens.body).find("max_tokens"), std::string::npos) << bad_tokens.body;
  EXPECT_EQ(conn_->request("POST", "/v2/models/gpt/generate", "{not json").status, 400);
  HttpReply not_text = conn_->request("POST", "/v2/models/digits_mlp/generate", kRequest);
  EXPECT_EQ(not_text.status, 400) << not_text.body;
  EXPECT_NE(error_of(not_text.body).find("digits_mlp"), std::string::npos);
  EXPECT_EQ(conn_->request("POST", "/v2/models/no_such_model/generate", kRequest).status, 404);
  EXPECT_EQ(conn_->request("POST", "/v2/models/gpt/versions/7/generate_stream", kRequest).status, 404);
  HttpReply get = conn_->request("GET", "/v2/models/gpt/generate");
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(get.header("Allow"), "POST");
  EXPECT_EQ(conn_->request("POST", "/v2/models/gpt/generate", kRequest).status, 200) << "still serving";
}

// A client that goes away in the middle of a stream (and one that goes away before its
// answer) leaves the server serving: the next generation is answered in full.
TEST_F(E2eGenerateTest, ClientGoneMidStreamLeavesTheServerServing) {
  for (const char* path : {"/v2/models/gpt/generate_stream", "/v2/models/gpt/generate"}) {
    {
      HttpConn gone(server_->port());
      gone.send("POST", path, R"({"text_input":"a long story","parameters":{"max_tokens":100}})");
      std::this_thread::sleep_for(30ms);
    }  // closed
    HttpReply r = conn_->request("POST", "/v2/models/gpt/generate", kRequest);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_EQ(json::parse(r.body, nullptr, false).value("id", ""), "g1");
  }
  EXPECT_EQ(conn_->request("GET", "/v2/health/ready").status, 200);
}

// Clients who left cost nothing: a burst of OpenAI completions with n = 8, each connection closed
// as soon as its request is sent, is dropped from the queue (or refused by its bound) instead of
// being prefilled and generated; a generate sent meanwhile is answered and the probes stay fast.
TEST_F(E2eGenerateTest, DepartedCompletionsAreDroppedNotGenerated) {
  auto metric = [&](const char* name) { return metric_sum(get("/metrics").body, name, "gpt"); };
  const double steps_before = metric("hg_generate_step_tokens_total");
  const double cancelled_before = metric("hg_generate_cancelled_total");
  ASSERT_GE(steps_before, 0) << "no hg_generate_step_tokens_total for gpt in /metrics";
  const std::string prompt = "Once upon a time there was a little model that";  // 46 tokens
  const json body = {{"model", "gpt"}, {"prompt", prompt}, {"n", 8}, {"max_tokens", 100}};
  constexpr int kClients = 120;
  for (int i = 0; i < kClients; ++i) {
    HttpConn gone(server_->port());
    gone.send("POST", "/v1/completions", body.dump());
  }  // each closed at once
  const auto t0 = std::chrono::steady_clock::now();
  HttpReply r = conn_->request("POST", "/v2/models/gpt/generate", kRequest);
  const auto victim = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_LT(victim, 30s) << "the generate sent after the departed burst waited behind it";
  const auto p0 = std::chrono::steady_clock::now();
  EXPECT_EQ(HttpConn(server_->port()).request("GET", "/v2/health/live").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - p0, 10s) << "the live probe after the burst";
  // Generating them all: 120 x 8 x (46 + 100) = 140,160 step tokens; the victim's are 19.
  const double full = kClients * 8.0 * (46 + 100);
  const double spent = metric("hg_generate_step_tokens_total") - steps_before;
  EXPECT_LT(spent, 0.2 * full) << "step tokens spent on clients who left";
  EXPECT_GT(metric("hg_generate_cancelled_total") - cancelled_before, 0) << "no departed sequence was counted";
}

}  // namespace
}  // namespace hg::test
