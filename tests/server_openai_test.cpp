// End-to-end over real HTTP: the OpenAI-compatible endpoints of an hgraph-serve child on
// 127.0.0.1 serving the GPT zoo model (tests/server_e2e.h's add_gpt) beside digits_mlp, with
// plain JSON (the official client is not a dependency): /v1/models, completions and chat
// completions (greedy text equal to the generate extension's, n, stop, seed, logprobs, usage),
// their streams (the same text, [DONE], include_usage), OpenAI-shaped errors naming the field,
// and a client leaving mid-stream.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/server_e2e.h"

namespace hg::test {
namespace {

using namespace std::chrono_literals;

class E2eOpenAiTest : public SharedServerTest {
 protected:
  static void SetUpTestSuite() { serve_gpt("openai"); }
  json post_ok(const std::string& path, const json& body) {
    HttpReply r = conn_->request("POST", path, body.dump());
    EXPECT_EQ(r.status, 200) << path << " " << body.dump() << ": " << r.body;
    return json::parse(r.body, nullptr, false);
  }
  // The error object of a refused request, after checking its status.
  json refused(const std::string& path, const std::string& body, int status = 400) {
    HttpReply r = conn_->request("POST", path, body);
    EXPECT_EQ(r.status, status) << body << ": " << r.body;
    const json j = json::parse(r.body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object()) << r.body;
    return j.is_object() && j.contains("error") ? j["error"] : json();
  }
};

// What the generate extension answers greedily for the same prompt.
std::string triton_text(HttpConn& c, const std::string& prompt, int max_tokens, const std::vector<std::string>& stop = {}) {
  json params = {{"max_tokens", max_tokens}};
  if (!stop.empty()) params["stop"] = stop;
  HttpReply r = c.request("POST", "/v2/models/gpt/generate", json{{"text_input", prompt}, {"parameters", params}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body).value("text_output", "");
}

TEST_F(E2eOpenAiTest, ModelsListsTheTextGenerationModels) {
  HttpReply r = conn_->request("GET", "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u) << "digits_mlp does not generate text: " << r.body;
  EXPECT_EQ(j["data"][0]["id"], "gpt");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["owned_by"], "hgraph");
  EXPECT_TRUE(j["data"][0]["created"].is_number_integer());
  EXPECT_EQ(j["data"][0]["max_model_len"], 256);
}

TEST_F(E2eOpenAiTest, GreedyCompletionWithLogprobsAndUsage) {
  const json j = post_ok("/v1/completions", {{"model", "gpt"}, {"prompt", "Hello, "}, {"max_tokens", 12},
                                             {"temperature", 0}, {"logprobs", 3}});
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u) << j["id"];
  EXPECT_EQ(j["model"], "gpt");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["text"], triton_text(*conn_, "Hello, ", 12)) << "the same generator, greedy";
  EXPECT_EQ(j["usage"], (json{{"prompt_tokens", 7}, {"completion_tokens", 12}, {"total_tokens", 19}}));
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 12u) << lp.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), 12u);
  ASSERT_EQ(lp["top_logprobs"].size(), 12u);
  ASSERT_EQ(lp["text_offset"].size(), 12u);
  std::string bytes_text;
  bool ascii = true;
  for (size_t i = 0; i < 12; ++i) {
    const std::string token = lp["tokens"][i];
    const double chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.0);
    EXPECT_EQ(lp["text_offset"][i], i) << "one byte per token";
    const json& top = lp["top_logprobs"][i];
    EXPECT_LE(top.size(), 4u) << "3 alternatives and the chosen token";
    std::string best;
    double best_lp = -1e9;
    for (const auto& [t, v] : top.items())
      if (v.get<double>() > best_lp) best = t, best_lp = v.get<double>();
    EXPECT_EQ(best, token) << "greedy: the most likely alternative is the chosen token (token " << i << ")";
    EXPECT_DOUBLE_EQ(best_lp, chosen);
    ascii = ascii && token.rfind("bytes:", 0) != 0;
    bytes_text += token;
  }
  if (ascii) {
    EXPECT_EQ(bytes_text, c["text"]) << "ASCII tokens spell the text";
  }
}

TEST_F(E2eOpenAiTest, ChatCompletionFollowsTheTemplate) {
  const json body = {{"model", "gpt"},
                     {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}}}},
                     {"max_tokens", 10},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", 2}};
  const json j = post_ok("/v1/chat/completions", body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u) << j["id"];
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  const std::string prompt = "System: Be brief.\nUser: Hello\nAssistant:";
  EXPECT_EQ(c["message"]["content"], triton_text(*conn_, prompt, 10, {"\nUser:"}));
  const int64_t completion = j["usage"]["completion_tokens"];
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["total_tokens"], prompt.size() + completion);
  if (c["finish_reason"] == "length") {
    EXPECT_EQ(completion, 10) << j.dump();
  }
  const json& content = c["logprobs"]["content"];
  ASSERT_EQ(content.size(), static_cast<size_t>(completion)) << "every generated token, a stop string's too";
  for (const json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]) << "greedy";
    EXPECT_EQ(t["top_logprobs"][0]["logprob"], t["logprob"]);
    ASSERT_EQ(t["bytes"].size(), 1u);
  }
}

TEST_F(E2eOpenAiTest, SeededChoicesAreReproducibleAndIndependent) {
  const json body = {{"model", "gpt"}, {"prompt", "Once"}, {"max_tokens", 24}, {"temperature", 1.0}, {"seed", 5}, {"n", 2}};
  const json a = post_ok("/v1/completions", body), b = post_ok("/v1/completions", body);
  ASSERT_EQ(a["choices"].size(), 2u);
  EXPECT_EQ(a["choices"], b["choices"]) << "the same seed, the same choices";
  EXPECT_EQ(a["choices"][1]["index"], 1);
  EXPECT_NE(a["choices"][0]["text"], a["choices"][1]["text"]) << "choice i samples with seed + i";
  EXPECT_EQ(a["usage"]["prompt_tokens"], 4) << "the prompt counts once";
  EXPECT_EQ(a["usage"]["completion_tokens"], 48);
  json one = body;
  one["n"] = 1;
  EXPECT_EQ(post_ok("/v1/completions", one)["choices"][0]["text"], a["choices"][0]["text"]);
  json other = body;
  other["seed"] = 6;
  EXPECT_EQ(post_ok("/v1/completions", other)["choices"][0]["text"], a["choices"][1]["text"]);
}

TEST_F(E2eOpenAiTest, StopStringEndsTheChoice) {
  const json greedy = {{"model", "gpt"}, {"prompt", "Hello, "}, {"max_tokens", 24}, {"temperature", 0}};
  const std::string whole = post_ok("/v1/completions", greedy)["choices"][0]["text"];
  // A stop string from the middle of the greedy text: an ASCII character past the first two.
  size_t at = 2;
  while (at < whole.size() && static_cast<unsigned char>(whole[at]) >= 0x80) ++at;
  ASSERT_LT(at, whole.size()) << "no ASCII character in " << whole;
  const std::string stop = whole.substr(at, 1);
  json body = greedy;
  body["stop"] = json::array({stop, "never-generated"});
  const json j = post_ok("/v1/completions", body);
  EXPECT_EQ(j["choices"][0]["text"], whole.substr(0, whole.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST_F(E2eOpenAiTest, CompletionStreamIsTheSameText) {
  json body = {{"model", "gpt"}, {"prompt", "Once"}, {"max_tokens", 20}, {"seed", 3}, {"n", 2}, {"logprobs", 1}};
  const json whole = post_ok("/v1/completions", body);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  HttpReply r = conn_->request("POST", "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.header("Content-Type").find("text/event-stream"), std::string::npos);
  ASSERT_GE(r.body.size(), 14u);
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
  const std::vector<json> events = events_of(r.body);
  ASSERT_GE(events.size(), 4u) << r.body;
  EXPECT_TRUE(events.back().is_discarded()) << "[DONE] is not JSON";
  const json& usage = events[events.size() - 2];
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], whole["usage"]);
  std::string text[2];
  size_t tokens[2] = {0, 0}, finishes[2] = {0, 0};
  for (size_t e = 0; e + 2 < events.size(); ++e) {
    const json& ev = events[e];
    EXPECT_EQ(ev["object"], "text_completion");
    EXPECT_EQ(ev["id"], events[0]["id"]);
    ASSERT_EQ(ev["choices"].size(), 1u) << ev.dump();
    const json& c = ev["choices"][0];
    const size_t i = c["index"];
    ASSERT_LT(i, 2u);
    text[i] += c["text"].get<std::string>();
    tokens[i] += c["logprobs"]["tokens"].size();
    if (!c["finish_reason"].is_null()) {
      ++finishes[i];
      EXPECT_EQ(c["finish_reason"], whole["choices"][i]["finish_reason"]);
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(text[i], whole["choices"][i]["text"]) << "choice " << i;
    EXPECT_EQ(tokens[i], whole["choices"][i]["logprobs"]["tokens"].size()) << "choice " << i;
    EXPECT_EQ(finishes[i], 1u);
  }
}

TEST_F(E2eOpenAiTest, ChatStreamStartsWithTheRole) {
  json body = {{"model", "gpt"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 16}, {"seed", 9}};
  const json whole = post_ok("/v1/chat/completions", body);
  body["stream"] = true;
  HttpReply r = conn_->request("POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<json> events = events_of(r.body);
  ASSERT_GE(events.size(), 3u) << r.body;
  EXPECT_TRUE(events.back().is_discarded()) << "[DONE]; no usage chunk unless asked";
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t e = 1; e + 1 < events.size(); ++e) {
    const json& d = events[e]["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("role"));
    text += d.value("content", "");
  }
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"]);
  const json& last = events[events.size() - 2]["choices"][0];
  EXPECT_EQ(last["delta"], json::object());
  EXPECT_EQ(last["finish_reason"], whole["choices"][0]["finish_reason"]);
}

TEST_F(E2eOpenAiTest, ErrorsTakeOpenAisShapeAndNameTheField) {
  json e = refused("/v1/completions", R"({"model": "gpt", "prompt": "a", "best_of": 2})");
  EXPECT_EQ(e["param"], "best_of");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_NE(e["message"].get<std::string>().find("best_of"), std::string::npos);
  EXPECT_EQ(refused("/v1/chat/completions", R"({"model": "gpt"})")["param"], "messages");
  EXPECT_EQ(refused("/v1/completions", R"({"model": "gpt", "prompt": "a", "n": 9})")["param"], "n");
  EXPECT_EQ(refused("/v1/completions", R"({"model": "gpt", "prompt": "a", "max_tokens": 256})")["param"], "max_tokens");
  EXPECT_EQ(refused("/v1/completions", R"({"model": "gpt", "prompt": ")" + std::string(300, 'x') + R"("})")["param"],
            "prompt");
  EXPECT_EQ(refused("/v1/completions", R"({"model": "gpt", "prompt": "a", "echo": true})")["param"], "echo");
  EXPECT_EQ(refused("/v1/completions", "{not json")["type"], "invalid_request_error");
  e = refused("/v1/completions", R"({"model": "no_such_model", "prompt": "a"})", 404);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(refused("/v1/chat/completions", R"({"model": "digits_mlp", "messages": [{"role": "user", "content": "a"}]})",
                    404)["code"],
            "model_not_found");
  HttpReply get = conn_->request("GET", "/v1/completions");
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(get.header("Allow"), "POST");
  EXPECT_TRUE(json::parse(get.body)["error"].is_object()) << get.body;
  EXPECT_EQ(conn_->request("POST", "/v1/models").status, 405);
  EXPECT_EQ(conn_->request("GET", "/v1/engines").status, 404);
}

// A client that leaves in the middle of a stream stops its generation: the next request is
// answered in full, and the server stays ready.
TEST_F(E2eOpenAiTest, ClientGoneMidStreamFreesTheInstance) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const std::string body = std::string(path) == "/v1/completions"
                                 ? R"({"model": "gpt", "prompt": "a", "max_tokens": 250, "stream": true, "n": 8})"
                                 : R"({"model": "gpt", "messages": [{"role": "user", "content": "a"}], "stream": true, "n": 8})";
    {
      HttpConn gone(server_->port());
      gone.send("POST", path, body);
      std::this_thread::sleep_for(30ms);
    }  // closed
    const json j = post_ok("/v1/completions", {{"model", "gpt"}, {"prompt", "Hello, "}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(j["usage"]["completion_tokens"], 4) << path;
  }
  EXPECT_EQ(conn_->request("GET", "/v2/health/ready").status, 200);
}

}  // namespace
}  // namespace hg::test
