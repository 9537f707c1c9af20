// serve_generate's and the OpenAI endpoints' JSON and server-sent-event responses (server/generate.h,
// server/openai.h) from the GPT generator, through an in-process Reply that records what was sent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/autograd.h"
#include "errors.h"
#include "models/gpt.h"
#include "models/package.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "models/tokenizer.h"
#include "server/generate.h"
#include "server/generate_scheduler.h"
#include "server/http_error.h"
#include "server/openai.h"
#include "server/sse_parser.h"
#include "gpt_generator_fixture.h"
#include "test_env.h"
#include "wait.h"

using namespace hg;
using namespace hg::server;
using namespace hg::test;
using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

TEST(ServeGenerate, JsonResponse) {
  auto gen = generator();
  auto rec = serve(gen, R"({"id": "42", "text_input": "Once", "parameters": {"max_tokens": 30}})", false);
  ASSERT_TRUE(rec->wait_closed());
  EXPECT_EQ(rec->status(), 200);
  EXPECT_EQ(rec->response().content_type, "application/json");
  const json j = json::parse(rec->body());
  const std::string want = generate_within(*gen, request("Once", 30)).text;
  EXPECT_EQ(j, (json{{"id", "42"}, {"model_name", "gpt"}, {"model_version", "1"}, {"text_output", want}, {"finish_reason", "length"}}));
}

// The stream's pieces are whole characters and concatenate to /generate's text, with and
// without a stop string (taken from the greedy text itself), whether the sink comes at once
// or only after the generation ended.
TEST(ServeGenerate, StreamPiecesConcatenateToTheJsonText) {
  auto gen = generator();
  const std::string body = R"({"id": "s", "text_input": "Hello", "parameters": {"max_tokens": 60}})";
  auto whole = serve(gen, body, false);
  ASSERT_TRUE(whole->wait_closed());
  const std::string text = json::parse(whole->body())["text_output"];
  for (bool deferred : {false, true}) {
    auto rec = std::make_shared<RecordedReply>();
    if (deferred) rec->defer();
    serve(gen, body, true, rec);
    ASSERT_TRUE(rec->wait_response());
    if (deferred) {
      // The generator has one instance: a generation queued behind this one returns after it ended.
      generate_within(*gen, request("x", 1), any_piece(), "a generation queued behind the deferred one");
      rec->attach(rec);
    }
    ASSERT_TRUE(rec->wait_closed());
    EXPECT_EQ(rec->status(), 200);
    EXPECT_EQ(rec->response().content_type, "text/event-stream; charset=utf-8");
    const auto events = rec->events();
    ASSERT_GE(events.size(), 2u);
    std::string joined_text;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      EXPECT_EQ(events[i]["id"], "s");
      EXPECT_EQ(events[i]["model_name"], "gpt");
      EXPECT_FALSE(events[i].contains("finish_reason"));
      const std::string piece = events[i]["text_output"];
      EXPECT_FALSE(piece.empty());
      EXPECT_TRUE(models::decode_utf8(piece).invalid_offsets.empty()) << "a piece of whole characters";
      joined_text += piece;
    }
    EXPECT_EQ(joined_text, text);
    EXPECT_EQ(events.back(), (json{{"id", "s"}, {"model_name", "gpt"}, {"model_version", "1"}, {"text_output", ""},
                                   {"finish_reason", "length"}}));
  }
  // A stop string: two characters from the middle of the text.
  ASSERT_GT(text.size(), 12u);
  size_t from = 6;
  while ((static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  size_t to = from + 1;
  while (to < text.size() && (static_cast<unsigned char>(text[to]) & 0xC0) == 0x80) ++to;
  const std::string stop = text.substr(from, to - from);
  const std::string other = "\x01\x02";
  const json stop_body = {{"text_input", "Hello"}, {"parameters", {{"max_tokens", 60}, {"stop", {other, stop}}}}};
  auto stopped = serve(gen, stop_body.dump(), false);
  ASSERT_TRUE(stopped->wait_closed());
  const json j = json::parse(stopped->body());
  EXPECT_EQ(j["text_output"], text.substr(0, std::min(text.find(stop), text.find(other))));
  EXPECT_EQ(j["finish_reason"], "stop");
  auto stream = serve(gen, stop_body.dump(), true);
  ASSERT_TRUE(stream->wait_closed());
  std::string streamed;
  for (const auto& e : stream->events()) streamed += e["text_output"].get<std::string>();
  EXPECT_EQ(streamed, j["text_output"]);
  EXPECT_EQ(stream->events().back()["finish_reason"], "stop");
}

TEST(ServeGenerate, BadRequestsAnswer400NamingTheField) {
  auto gen = generator();
  for (bool stream : {false, true}) {
    auto rec = serve(gen, R"({"text_input": "Hi", "parameters": {"max_tokens": 255}})", stream);
    ASSERT_TRUE(rec->wait_closed());
    EXPECT_EQ(rec->status(), 400);
    EXPECT_EQ(rec->response().content_type, "application/json");
    EXPECT_THAT(json::parse(rec->body())["error"].get<std::string>(),
                HasSubstr("field 'parameters.max_tokens' is 255: the prompt's 2 tokens + max_tokens exceed"));
    rec = serve(gen, R"({"text_input": "Hi", "parameters": {"top_k": "many"}})", stream);
    ASSERT_TRUE(rec->wait_closed());
    EXPECT_EQ(rec->status(), 400);
    EXPECT_THAT(rec->body(), HasSubstr("field 'parameters.top_k' must be an integer"));
  }
}

// A generator that fails: before its first piece (the status is the error's) or after it
// (a 200 stream whose last event is {"error"}).
class FailingGenerator : public TextGenerator {
 public:
  explicit FailingGenerator(int pieces) : pieces_(pieces) {}
  void submit_group(std::vector<Submission> group) override {
    worker_ = std::thread([this, on_piece = group.at(0).on_piece, done = group.at(0).done] {
      for (int i = 0; i < pieces_; ++i) on_piece("x");
      done(std::make_exception_ptr(OutOfMemoryError("hpu:0 is out of memory")), {});
    });
  }
  size_t queue_depth() const override { return 0; }
  GenerationStats stats() const override { return {}; }
  int64_t context_length() const override { return 256; }
  ~FailingGenerator() override { worker_.join(); }

 private:
  int pieces_;
  std::thread worker_;
};

TEST(ServeGenerate, ErrorsBeforeAndAfterTheFirstEvent) {
  auto before = serve(std::make_shared<FailingGenerator>(0), R"({"text_input": "a"})", true);
  ASSERT_TRUE(before->wait_closed());
  EXPECT_EQ(before->status(), 503);
  EXPECT_EQ(json::parse(before->body()), (json{{"error", "hpu:0 is out of memory"}}));
  auto after = serve(std::make_shared<FailingGenerator>(2), R"({"text_input": "a"})", true);
  ASSERT_TRUE(after->wait_closed());
  EXPECT_EQ(after->status(), 200);
  const auto events = after->events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1]["text_output"], "x");
  EXPECT_EQ(events[2], (json{{"error", "hpu:0 is out of memory"}}));
  auto plain = serve(std::make_shared<FailingGenerator>(1), R"({"text_input": "a"})", false);
  ASSERT_TRUE(plain->wait_closed());
  EXPECT_EQ(plain->status(), 503);
}

// The OpenAI stream over the same event stream: an error before the first chunk is a status with
// OpenAI's error body; after it, an error event and [DONE].
TEST(ServeOpenAi, ErrorsBeforeAndAfterTheFirstChunk) {
  auto serve_chat = [](std::shared_ptr<TextGenerator> gen) {
    auto rec = std::make_shared<RecordedReply>();
    HttpRequest req;
    req.method = "POST";
    req.target = "/v1/chat/completions";
    serve_openai(std::move(gen),
                 parse_chat_request(R"({"model": "gpt", "messages": [{"role": "user", "content": "a"}], "stream": true})"),
                 std::move(req), RecordedReply::reply_to(rec));
    return rec;
  };
  auto before = serve_chat(std::make_shared<FailingGenerator>(0));
  ASSERT_TRUE(before->wait_closed());
  EXPECT_EQ(before->status(), 503);
  EXPECT_EQ(json::parse(before->body())["error"]["type"], "server_error");
  EXPECT_EQ(json::parse(before->body())["error"]["message"], "hpu:0 is out of memory");
  auto after = serve_chat(std::make_shared<FailingGenerator>(2));
  ASSERT_TRUE(after->wait_closed());
  EXPECT_EQ(after->status(), 200);
  std::vector<std::string> data;
  SseParser p;
  auto on = [&](SseEvent&& e) {
    data.push_back(e.data);
    return true;
  };
  p.feed(after->body(), on);
  p.finish(on);
  ASSERT_EQ(data.size(), 5u) << after->body();  // the role, "x", "x", the error, [DONE]
  EXPECT_EQ(json::parse(data[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(data[2])["choices"][0]["delta"]["content"], "x");
  EXPECT_EQ(json::parse(data[3])["error"]["message"], "hpu:0 is out of memory");
  EXPECT_EQ(data[4], "[DONE]");
}

}  // namespace
