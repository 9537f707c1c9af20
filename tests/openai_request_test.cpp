// The OpenAI-compatible request bodies (server/openai.h): every field, defaults, the chat
// template, token texts, and errors that name the field (an OpenAI error's "param"); and the
// per-token logprobs the generator reports (models::token_logprobs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "models/sampling.h"
#include "server/openai.h"
#include "server/request_fields.h"

using namespace hg;
using namespace hg::server;
using ::testing::HasSubstr;

namespace {

// The field a refused body names, and its message.
std::pair<std::string, std::string> refusal(const std::string& body, bool chat = false) {
  try {
    chat ? parse_chat_request(body) : parse_completion_request(body);
  } catch (const FieldError& e) {
    return {e.field(), e.what()};
  } catch (const InvalidArgument& e) {
    return {"", e.what()};
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

TEST(OpenAiRequest, CompletionFields) {
  OpenAiRequest r = parse_completion_request(
      R"({"model": "gpt", "prompt": "Once", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 11,
          "stop": ["a", "bc"], "n": 2, "logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
          "echo": false, "presence_penalty": 0, "user": "u1", "frequency_penalty": null})");
  EXPECT_FALSE(r.chat);
  EXPECT_EQ(r.model, "gpt");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_FALSE(r.sampling.greedy);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.seed, 11u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiRequest, CompletionDefaultsFollowOpenAi) {
  OpenAiRequest r = parse_completion_request(R"({"model": "gpt", "prompt": ["Once"]})");
  EXPECT_EQ(r.prompt, "Once") << "an array of one string is that string";
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_FALSE(r.sampling.greedy) << "temperature 1 by default";
  EXPECT_EQ(r.sampling.temperature, 1.0);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.logprobs);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(parse_completion_request(R"({"model": "gpt", "prompt": "a", "temperature": 0})").sampling.greedy);
  EXPECT_EQ(parse_completion_request(R"({"model": "gpt", "prompt": "a", "stop": "\n"})").stop,
            (std::vector<std::string>{"\n"}));
}

TEST(OpenAiRequest, ChatFieldsAndTemplate) {
  OpenAiRequest r = parse_chat_request(
      R"({"model": "gpt", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}],
          "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 2, "temperature": 0})");
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.prompt, "System: Be brief.\nUser: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(r.sampling.greedy);
  r = parse_chat_request(R"({"model": "gpt", "messages": [{"role": "user", "content": "Hi"}], "logprobs": true})");
  EXPECT_EQ(r.logprobs, 0) << "logprobs alone: the chosen token's only";
  EXPECT_FALSE(r.max_tokens) << "unset: what the context leaves (known once the model is)";
  EXPECT_FALSE(parse_chat_request(R"({"model": "gpt", "messages": [{"role": "user", "content": "Hi"}]})").logprobs);
}

TEST(OpenAiRequest, ErrorsNameTheField) {
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "best_of": 2})").first, "best_of");
  EXPECT_THAT(refusal(R"({"model": "gpt", "prompt": "a", "best_of": 2})").second, HasSubstr("is not a completions request field"));
  EXPECT_EQ(refusal(R"({"prompt": "a"})").first, "model");
  EXPECT_EQ(refusal(R"({"model": "gpt"})").first, "prompt");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": [1, 2]})").first, "prompt");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": ["a", "b"]})").first, "prompt");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "max_tokens": 0})").first, "max_tokens");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "temperature": 2.5})").first, "temperature");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "top_p": 0})").first, "top_p");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "n": 9})").first, "n");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "n": 0})").first, "n");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "logprobs": 6})").first, "logprobs");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "stop": ["a", "b", "c", "d", "e"]})").first, "stop");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "stop": ["a", ""]})").first, "stop[1]");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "stop": ")" + std::string(300, 'x') + R"("})").first, "stop");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "echo": true})").first, "echo");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "frequency_penalty": 0.5})").first, "frequency_penalty");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "stream_options": {"include_usage": true}})").first,
            "stream_options");
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "stream": true, "stream_options": {"x": 1}})").first,
            "stream_options.x");
  EXPECT_THAT(refusal(R"({"model": "gpt", "prompt": "a",)").second, HasSubstr("malformed JSON"));
  EXPECT_THAT(refusal("[1]").second, HasSubstr("must be a JSON object"));
  EXPECT_EQ(refusal(R"({"model": "gpt", "prompt": "a", "suffix": null})").first, "suffix") << "null: still unknown";

  const std::string user = R"([{"role": "user", "content": "Hi"}])";
  EXPECT_EQ(refusal(R"({"model": "gpt"})", true).first, "messages");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": []})", true).first, "messages");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": [{"role": "tool", "content": "x"}]})", true).first, "messages[0].role");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": [{"role": "user"}]})", true).first, "messages[0].content");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": [{"role": "user", "content": [1]}]})", true).first,
            "messages[0].content");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": [{"role": "user", "content": "x", "tool_calls": []}]})", true).first,
            "messages[0].tool_calls");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": )" + user + R"(, "top_logprobs": 2})", true).first, "top_logprobs");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": )" + user + R"(, "logprobs": true, "top_logprobs": 6})", true).first,
            "top_logprobs");
  EXPECT_EQ(refusal(R"({"model": "gpt", "messages": )" + user + R"(, "tools": []})", true).first, "tools");
  std::string many = R"({"model": "gpt", "messages": [)";
  for (size_t i = 0; i <= kMaxChatMessages; ++i) many += std::string(i ? "," : "") + R"({"role": "user", "content": "x"})";
  EXPECT_EQ(refusal(many + "]}", true).first, "messages");
}

TEST(OpenAiRequest, TokenTexts) {
  EXPECT_EQ(token_text('A'), "A");
  EXPECT_EQ(token_text('\n'), "\n");
  EXPECT_EQ(token_text(0xE2), "bytes:\\xe2");
  EXPECT_EQ(token_text(0x80), "bytes:\\x80");
}

TEST(OpenAiRequest, ErrorBodies) {
  const HttpResponse field = openai_error(FieldError("completions request", "n", "is 9, at most 8"));
  EXPECT_EQ(field.status, 400);
  const auto j = nlohmann::json::parse(field.body);
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["message"], "completions request: field 'n' is 9, at most 8");
  EXPECT_TRUE(j["error"]["code"].is_null());
  const auto missing = nlohmann::json::parse(openai_error(NotFoundError("unknown model 'x'")).body);
  EXPECT_EQ(missing["error"]["code"], "model_not_found");
  EXPECT_TRUE(missing["error"]["param"].is_null());
}

TEST(TokenLogprobs, TheModelsOwnDistribution) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -INFINITY, 0.5f};
  const models::TokenLogprobs t = models::token_logprobs(logits, 4, 3);
  double total = 0;
  for (float l : logits) total += std::exp(double(l) - 3.0);
  EXPECT_NEAR(t.chosen.logprob, 0.5 - 3.0 - std::log(total), 1e-12);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].token, 1) << "ties: the lower index first, as argmax_token picks";
  EXPECT_EQ(t.top[0].token, models::argmax_token(logits));
  EXPECT_EQ(t.top[1].token, 2);
  EXPECT_EQ(t.top[2].token, 0);
  EXPECT_EQ(models::token_logprobs(logits, 3, 0).chosen.logprob, -INFINITY);
  EXPECT_TRUE(models::token_logprobs(logits, 0, 0).top.empty());
  EXPECT_EQ(models::token_logprobs(logits, 0, 99).top.size(), logits.size());
  EXPECT_THROW(models::token_logprobs(logits, 5, 1), InvalidArgument);
  const models::TokenLogprobs certain = models::token_logprobs({INFINITY, 0.0f, INFINITY}, 2, 1);
  EXPECT_NEAR(certain.chosen.logprob, std::log(0.5), 1e-12);
  EXPECT_EQ(certain.top[0].token, 0);
}

}  // namespace
