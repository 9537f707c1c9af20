// hg::server::Client against an in-process fake server (hg::server::HttpServer on 127.0.0.1,
// port 0) whose handler answers canned KServe v2 responses and records what the client sent:
// method, path, headers and body bytes of every endpoint; responses parsed; error statuses
// and unreachable servers as ClientError; the bearer token; server-sent events. Also the
// SSE parser on its own.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/client.h"
#include "server/http_server.h"
#include "server/sse_parser.h"
#include "tests/client_fake_server.h"
#include "tests/wait.h"

namespace {

using hg::server::Client;
using hg::server::ClientError;
using hg::server::ClientOptions;
using hg::server::HttpRequest;
using hg::server::HttpResponse;
using hg::test::always;
using hg::test::answer;
using hg::test::client_error;
using hg::test::FakeServer;
using json = nlohmann::json;
using namespace std::chrono_literals;

// ---- health and metadata ----------------------------------------------------------------

TEST(ClientTest, HealthProbesAnswerByStatus) {
  int status = 200;
  FakeServer srv([&](const HttpRequest&) { return answer(status, status == 200 ? R"({"live":true})" : R"({"error":"no"})"); });
  Client c(srv.url());
  EXPECT_TRUE(c.live());
  EXPECT_EQ(srv.last().method, "GET");
  EXPECT_EQ(srv.last().target, "/v2/health/live");
  EXPECT_TRUE(srv.last().body.empty());
  EXPECT_TRUE(c.ready());
  EXPECT_EQ(srv.last().target, "/v2/health/ready");
  EXPECT_TRUE(c.model_ready("bert"));
  EXPECT_EQ(srv.last().target, "/v2/models/bert/ready");
  EXPECT_TRUE(c.model_ready("bert", "2"));
  EXPECT_EQ(srv.last().target, "/v2/models/bert/versions/2/ready");
  status = 503;
  EXPECT_FALSE(c.live());
  EXPECT_FALSE(c.ready());
  EXPECT_FALSE(c.model_ready("bert", "2"));
}

TEST(ClientTest, ServerAndModelMetadata) {
  const json server_meta = {{"name", "hgraph"}, {"version", "0.1.0"}, {"extensions", {"binary_tensor_data"}}};
  const json model_meta = json::parse(
      R"({"name":"my model","versions":["1","2"],"platform":"hgraph","inputs":[{"name":"x","datatype":"FP32","shape":[-1,4]}],"outputs":[]})");
  FakeServer srv([&](const HttpRequest& r) { return answer(200, (r.target == "/v2" ? server_meta : model_meta).dump()); });
  Client c(srv.url());
  EXPECT_EQ(c.server_metadata(), server_meta);
  EXPECT_EQ(srv.last().method, "GET");
  EXPECT_EQ(srv.last().target, "/v2");
  EXPECT_EQ(c.model_metadata("my model"), model_meta);
  EXPECT_EQ(srv.last().target, "/v2/models/my%20model");  // a name is one escaped path segment
  EXPECT_EQ(c.model_metadata("my model", "2"), model_meta);
  EXPECT_EQ(srv.last().target, "/v2/models/my%20model/versions/2");
  EXPECT_EQ(c.model_metadata("a/b"), model_meta);
  EXPECT_EQ(srv.last().target, "/v2/models/a%2Fb");
}

// ---- repository extension ---------------------------------------------------------------

TEST(ClientTest, RepositoryIndexSendsReadyAndParsesEntries) {
  FakeServer srv(always(200, R"([{"name":"bert","version":"1","state":"READY"},
                                 {"name":"gpt","state":"UNAVAILABLE","reason":"unloaded"},
                                 {"name":"mlp","version":3,"state":"LOADING","reason":null}])"));
  Client c(srv.url());
  auto all = c.repository_index();
  EXPECT_EQ(srv.last().method, "POST");
  EXPECT_EQ(srv.last().target, "/v2/repository/index");
  EXPECT_EQ(json::parse(srv.last().body), json({{"ready", false}}));
  EXPECT_NE(std::string(srv.last().header("Content-Type")).find("application/json"), std::string::npos);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].name, "bert");
  EXPECT_EQ(all[0].version, "1");
  EXPECT_EQ(all[0].state, "READY");
  EXPECT_EQ(all[0].reason, "");
  EXPECT_EQ(all[1].name, "gpt");
  EXPECT_EQ(all[1].version, "");
  EXPECT_EQ(all[1].state, "UNAVAILABLE");
  EXPECT_EQ(all[1].reason, "unloaded");
  EXPECT_EQ(all[2].version, "3");
  EXPECT_EQ(all[2].reason, "");
  c.repository_index(true);
  EXPECT_EQ(json::parse(srv.last().body), json({{"ready", true}}));
}

TEST(ClientTest, RepositoryIndexRejectsMalformedAnswers) {
  std::string body = R"({"models":[]})";
  FakeServer srv([&](const HttpRequest&) { return answer(200, body); });
  Client c(srv.url());
  EXPECT_NE(client_error([&] { c.repository_index(); }).second.find("expected an array"), std::string::npos);
  body = R"([{"state":"READY"}])";
  EXPECT_NE(client_error([&] { c.repository_index(); }).second.find("entry 0 has no name"), std::string::npos);
  body = R"([{"name":"m","state":["READY"]}])";
  EXPECT_NE(client_error([&] { c.repository_index(); }).second.find("'state' is array"), std::string::npos);
}

TEST(ClientTest, LoadAndUnloadBodies) {
  FakeServer srv(always(200, ""));
  Client c(srv.url());
  c.load_model("bert");
  EXPECT_EQ(srv.last().method, "POST");
  EXPECT_EQ(srv.last().target, "/v2/repository/models/bert/load");
  EXPECT_EQ(json::parse(srv.last().body), json::object());
  const std::string config = R"({"max_batch_size": 8, "dynamic_batching": {}})";
  c.load_model("bert", config);
  EXPECT_EQ(json::parse(srv.last().body), json({{"parameters", {{"config", config}}}}));
  c.unload_model("bert");
  EXPECT_EQ(srv.last().target, "/v2/repository/models/bert/unload");
  EXPECT_EQ(json::parse(srv.last().body), json::object());
  c.unload_model("bert", true);
  EXPECT_EQ(json::parse(srv.last().body), json({{"parameters", {{"unload_dependents", true}}}}));
}

TEST(ClientTest, LoadFailureCarriesStatusAndMessage) {
  FakeServer srv(always(400, R"({"error":"failed to load 'bert': config.json: max_batch_size must be >= 0"})"));
  Client c(srv.url());
  auto [status, msg] = client_error([&] { c.load_model("bert", R"({"max_batch_size": -1})"); });
  EXPECT_EQ(status, 400);
  EXPECT_EQ(msg, "HTTP 400: failed to load 'bert': config.json: max_batch_size must be >= 0");
  EXPECT_EQ(client_error([&] { c.unload_model("bert"); }).first, 400);
}

// ---- config, statistics, metrics --------------------------------------------------------

TEST(ClientTest, ModelConfigAndStatisticsPaths) {
  FakeServer srv([](const HttpRequest& r) { return answer(200, json({{"path", r.target}}).dump()); });
  Client c(srv.url());
  EXPECT_EQ(c.model_config("bert")["path"], "/v2/models/bert/config");
  EXPECT_EQ(srv.last().method, "GET");
  EXPECT_EQ(c.model_config("bert", "3")["path"], "/v2/models/bert/versions/3/config");
  EXPECT_EQ(c.model_statistics()["path"], "/v2/models/stats");
  EXPECT_EQ(c.model_statistics("bert")["path"], "/v2/models/bert/stats");
  EXPECT_EQ(c.model_statistics("bert", "1")["path"], "/v2/models/bert/versions/1/stats");
  EXPECT_EQ(srv.last().method, "GET");
  const size_t sent = srv.requests().size();
  EXPECT_THROW(c.model_statistics("", "1"), hg::InvalidArgument);
  EXPECT_EQ(srv.requests().size(), sent);  // refused before sending
}

TEST(ClientTest, MetricsTextComesBackByteForByte) {
  const std::string text =
      "# HELP nv_inference_request_success Number of successful inference requests\n"
      "# TYPE nv_inference_request_success counter\n"
      "nv_inference_request_success{model=\"bert\",version=\"1\"} 42\n";
  FakeServer srv(always(200, text, "text/plain; version=0.0.4; charset=utf-8"));
  Client c(srv.url());
  EXPECT_EQ(c.metrics(), text);
  EXPECT_EQ(srv.last().method, "GET");
  EXPECT_EQ(srv.last().target, "/metrics");
}

// ---- errors, token, headers -------------------------------------------------------------

TEST(ClientTest, ErrorStatusesBecomeClientErrors) {
  for (int status : {400, 401, 404, 500, 503, 504}) {
    FakeServer srv(always(status, R"({"error":"model 'x' says )" + std::to_string(status) + "\"}"));
    Client c(srv.url());
    auto [got, msg] = client_error([&] { c.model_metadata("x"); });
    EXPECT_EQ(got, status);
    EXPECT_EQ(msg, "HTTP " + std::to_string(status) + ": model 'x' says " + std::to_string(status));
    EXPECT_EQ(client_error([&] { c.model_config("x"); }).first, status);
    EXPECT_EQ(client_error([&] { c.metrics(); }).first, status);
  }
  // A body that is not {"error"} is the message as it is; a 200 that is not JSON is an error too.
  FakeServer plain([](const HttpRequest& r) {
    return r.target == "/v2" ? answer(200, "<html>") : answer(502, "bad gateway", "text/plain");
  });
  Client c(plain.url());
  EXPECT_EQ(client_error([&] { c.model_config("x"); }), std::make_pair(502, std::string("HTTP 502: bad gateway")));
  auto [status, msg] = client_error([&] { c.server_metadata(); });
  EXPECT_EQ(status, 200);
  EXPECT_NE(msg.find("response is not JSON"), std::string::npos);
  // request() never throws for a status.
  auto r = c.request("GET", "/v2/models/x/config");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.body, "bad gateway");
  EXPECT_EQ(r.header("content-type"), "text/plain");
}

TEST(ClientTest, UnreachableServerIsStatusZero) {
  std::string url;
  {
    FakeServer gone(always(200, "{}"));
    url = gone.url();
  }
  Client c(url, 5s);
  auto [status, msg] = client_error([&] { c.live(); });
  EXPECT_EQ(status, 0);
  EXPECT_NE(msg.find("GET " + url + "/v2/health/live failed"), std::string::npos) << msg;
  EXPECT_EQ(client_error([&] { c.repository_index(); }).first, 0);
  EXPECT_EQ(client_error([&] { c.generate_stream("gpt", "hi"); }).first, 0);
  EXPECT_EQ(client_error([&] { Client bad("not a url at all"); }).first, 0);
}

TEST(ClientTest, BearerTokenAndHeadersOnEveryRequest) {
  FakeServer srv([](const HttpRequest& r) {
    if (r.target.ends_with("/generate_stream")) return answer(200, "data: {\"text_output\":\"a\"}\n\n", "text/event-stream");
    if (r.target.ends_with("/generate")) return answer(200, R"({"text_output":"a"})");
    if (r.target == "/v2/repository/index") return answer(200, "[]");
    if (r.target == "/metrics") return answer(200, "", "text/plain");
    return answer(200, "{}");
  });
  ClientOptions opt;
  opt.token = "s3cret";
  opt.headers = {{"X-Tenant", "blue"}};
  Client c(srv.url(), opt);
  c.live();
  c.ready();
  c.server_metadata();
  c.model_metadata("m");
  c.model_ready("m");
  c.repository_index();
  c.load_model("m");
  c.unload_model("m");
  c.model_config("m");
  c.model_statistics();
  c.metrics();
  c.generate("m", "hi");
  c.generate_stream("m", "hi");
  c.request("GET", "/anything", "", "application/json", {{"X-Once", "1"}});
  const auto seen = srv.requests();
  ASSERT_EQ(seen.size(), 14u);
  for (const auto& r : seen) {
    EXPECT_EQ(r.header("Authorization"), "Bearer s3cret") << r.target;
    EXPECT_EQ(r.header("X-Tenant"), "blue") << r.target;
  }
  EXPECT_EQ(seen.back().header("X-Once"), "1");
  EXPECT_EQ(seen.front().header("X-Once"), "");
  // Without a token there is no Authorization header.
  Client anonymous(srv.url());
  anonymous.live();
  EXPECT_EQ(srv.last().header("Authorization"), "");
}

TEST(ClientTest, OneClientSharedByThreads) {
  FakeServer srv([](const HttpRequest& r) { return answer(200, json({{"path", r.target}}).dump()); });
  Client c(srv.url());
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::string m = "m" + std::to_string(t) + "_" + std::to_string(i);
        if (c.model_config(m)["path"] == "/v2/models/" + m + "/config") ++right;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(right.load(), 80);
}

// ---- generate ---------------------------------------------------------------------------

TEST(ClientTest, GenerateSendsTheRequestAndReturnsText) {
  FakeServer srv(always(200, R"({"id":"7","model_name":"gpt","model_version":"1","text_output":" upon a time"})"));
  Client c(srv.url());
  hg::server::GenerateOptions g;
  g.id = "7";
  g.version = "1";
  g.parameters = {{"max_tokens", 4}, {"temperature", 0.5}, {"stop", {"\n"}}};
  EXPECT_EQ(c.generate("gpt", "Once", g), " upon a time");
  EXPECT_EQ(srv.last().method, "POST");
  EXPECT_EQ(srv.last().target, "/v2/models/gpt/versions/1/generate");
  EXPECT_EQ(json::parse(srv.last().body),
            json({{"id", "7"}, {"text_input", "Once"}, {"parameters", {{"max_tokens", 4}, {"temperature", 0.5}, {"stop", {"\n"}}}}}));
  c.generate("gpt", "Once");
  EXPECT_EQ(srv.last().target, "/v2/models/gpt/generate");
  EXPECT_EQ(json::parse(srv.last().body), json({{"text_input", "Once"}}));
}

TEST(ClientTest, GenerateErrors) {
  std::string body = R"({"model_name":"gpt"})";
  int status = 200;
  FakeServer srv([&](const HttpRequest&) { return answer(status, body); });
  Client c(srv.url());
  EXPECT_NE(client_error([&] { c.generate("gpt", "x"); }).second.find("no text_output"), std::string::npos);
  status = 400;
  body = R"({"error":"parameters.max_tokens must be positive"})";
  EXPECT_EQ(client_error([&] { c.generate("gpt", "x"); }),
            std::make_pair(400, std::string("HTTP 400: parameters.max_tokens must be positive")));
  EXPECT_EQ(client_error([&] { c.generate_stream("gpt", "x"); }),
            std::make_pair(400, std::string("HTTP 400: parameters.max_tokens must be positive")));
}

const char* kStream =
    ": keep-alive comment\r\n"
    "data: {\"text_output\":\"Once\"}\r\n\r\n"
    "event: message\n"
    "data: {\"text_output\":\" upon\",\n"
    "data:  \"n\":2}\n\n"
    "data: {\"text_output\":\" a time\",\"finish_reason\":\"length\"}\n\n";

TEST(ClientTest, GenerateStreamParsesEveryEvent) {
  FakeServer srv(always(200, kStream, "text/event-stream"));
  Client c(srv.url());
  hg::server::GenerateOptions g;
  g.parameters = {{"max_tokens", 3}};
  std::vector<std::string> pieces;
  auto events = c.generate_stream("gpt", "hi", g, [&](const json& e) {
    pieces.push_back(e["text_output"]);
    return true;
  });
  EXPECT_EQ(srv.last().method, "POST");
  EXPECT_EQ(srv.last().target, "/v2/models/gpt/generate_stream");
  EXPECT_EQ(srv.last().header("Accept"), "text/event-stream");
  EXPECT_EQ(json::parse(srv.last().body), json({{"text_input", "hi"}, {"parameters", {{"max_tokens", 3}}}}));
  EXPECT_EQ(pieces, (std::vector<std::string>{"Once", " upon", " a time"}));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1], json({{"text_output", " upon"}, {"n", 2}}));
  EXPECT_EQ(events[2]["finish_reason"], "length");
}

TEST(ClientTest, GenerateStreamStopsWhenTheCallbackSaysSo) {
  FakeServer srv(always(200, kStream, "text/event-stream"));
  Client c(srv.url());
  int calls = 0;
  auto events = c.generate_stream("gpt", "hi", {}, [&](const json&) { return ++calls < 2; });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(events.size(), 2u);
  EXPECT_TRUE(c.live());  // the client carries on
}

TEST(ClientTest, GenerateStreamErrorEventThrowsAfterTheEventsBeforeIt) {
  FakeServer srv(always(200,
                        "data: {\"text_output\":\"a\"}\n\n"
                        "data: {\"error\":\"generation failed at token 2: out of memory\"}\n\n"
                        "data: {\"text_output\":\"never\"}\n\n",
                        "text/event-stream"));
  Client c(srv.url());
  std::vector<json> seen;
  auto [status, msg] = client_error([&] {
    c.generate_stream("gpt", "hi", {}, [&](const json& e) {
      seen.push_back(e);
      return true;
    });
  });
  EXPECT_EQ(status, 200);
  EXPECT_NE(msg.find("generation failed at token 2: out of memory"), std::string::npos) << msg;
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["text_output"], "a");
}

TEST(ClientTest, GenerateStreamEventThatIsNotJson) {
  FakeServer srv(always(200, "data: {\"text_output\":\"a\"}\n\ndata: oops\n\n", "text/event-stream"));
  Client c(srv.url());
  auto [status, msg] = client_error([&] { c.generate_stream("gpt", "hi"); });
  EXPECT_EQ(status, 200);
  EXPECT_NE(msg.find("event 1 of the stream is not JSON: oops"), std::string::npos) << msg;
}

// The thread a streamed response is written from: started by the server's stream callback,
// joined by the test (or at the latest when it ends). Its waits are bounded, so joining it is.
class StreamWriter {
 public:
  void start(std::function<void()> write) { thread_.set_value(std::thread(std::move(write))); }
  // True once the thread has been started (a bounded wait; a test failure if it never is) and
  // has finished.
  bool join() {
    if (!started_.valid() || !hg::test::ready_within(started_, hg::test::kWaitLimit, "the server to start the stream writer"))
      return false;
    started_.get().join();
    return true;
  }
  // Joins a writer that was started (the FakeServer, declared after this, is gone: none starts later).
  ~StreamWriter() {
    if (started_.valid() && started_.wait_for(0s) == std::future_status::ready) started_.get().join();
  }

 private:
  std::promise<std::thread> thread_;
  std::future<std::thread> started_ = thread_.get_future();
};

// A streamed server (chunked text/event-stream, written by a thread of the test): the client
// hands each event to the callback as it arrives, before the server has written the next.
TEST(ClientTest, GenerateStreamDeliversEachEventAsItArrives) {
  std::mutex mu;
  std::condition_variable cv;
  int seen = 0;
  std::vector<bool> client_had_it;  // per event after the first: the previous one was already seen
  StreamWriter writer;
  FakeServer srv([&](const HttpRequest&) {
    HttpResponse r = answer(200, "", "text/event-stream");
    r.stream = [&](std::shared_ptr<hg::server::ResponseStream> out) {
      writer.start([&, out] {
        for (int i = 0; i < 3; ++i) {
          if (i > 0) {
            std::unique_lock<std::mutex> lock(mu);
            client_had_it.push_back(hg::test::wait_for(cv, lock, hg::test::kWaitLimit,
                                                       "the client to receive event " + std::to_string(i - 1),
                                                       [&] { return seen == i; }));
          }
          out->write("data: {\"text_output\":\"" + std::to_string(i) + "\"}\n\n");
        }
        out->close();
      });
    };
    return r;
  });
  Client c(srv.url());
  auto events = c.generate_stream("gpt", "hi", {}, [&](const json& e) {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(e["text_output"], std::to_string(seen));
    ++seen;
    cv.notify_all();
    return true;
  });
  ASSERT_TRUE(writer.join());
  EXPECT_EQ(events.size(), 3u);
  EXPECT_EQ(client_had_it, (std::vector<bool>{true, true}));
}

// Stopping early closes the connection: the server's next writes fail and it stops producing.
TEST(ClientTest, GenerateStreamEarlyStopClosesTheConnection) {
  std::atomic<bool> refused{false};
  StreamWriter writer;
  FakeServer srv([&](const HttpRequest& req) {
    if (req.target == "/v2/health/live") return answer(200, "{}");
    HttpResponse r = answer(200, "", "text/event-stream");
    r.stream = [&](std::shared_ptr<hg::server::ResponseStream> out) {
      writer.start([&, out] {
        const auto give_up = std::chrono::steady_clock::now() + hg::test::kWaitLimit;
        while (!refused && std::chrono::steady_clock::now() < give_up) {
          refused = !out->write("data: {\"text_output\":\"x\"}\n\n");
          std::this_thread::sleep_for(1ms);
        }
        out->close();
      });
    };
    return r;
  });
  Client c(srv.url());
  int calls = 0;
  auto events = c.generate_stream("gpt", "hi", {}, [&](const json&) { return ++calls < 3; });
  EXPECT_EQ(events.size(), 3u);
  ASSERT_TRUE(writer.join());
  EXPECT_TRUE(refused) << "the server kept streaming to a client that stopped";
  EXPECT_TRUE(c.live());
}

// ---- SSE parser -------------------------------------------------------------------------

std::vector<hg::server::SseEvent> parse_in_chunks(std::string_view body, size_t chunk) {
  std::vector<hg::server::SseEvent> out;
  auto keep = [&](hg::server::SseEvent&& e) {
    out.push_back(std::move(e));
    return true;
  };
  hg::server::SseParser p;
  for (size_t i = 0; i < body.size(); i += chunk) EXPECT_TRUE(p.feed(body.substr(i, chunk), keep));
  EXPECT_TRUE(p.finish(keep));
  return out;
}

TEST(SseParserTest, SameEventsWhereverTheBodyIsCut) {
  const std::string body = std::string(kStream) + "id: 9\rdata: cr\r\rdata:x\r\ndata\r\n\r\nevent: ping\n\n";
  const auto whole = parse_in_chunks(body, body.size());
  ASSERT_EQ(whole.size(), 5u);
  EXPECT_EQ(whole[0].data, "{\"text_output\":\"Once\"}");
  EXPECT_EQ(whole[1].event, "message");
  EXPECT_EQ(whole[1].data, "{\"text_output\":\" upon\",\n \"n\":2}");
  EXPECT_EQ(whole[2].event, "");
  EXPECT_EQ(whole[3].data, "cr");
  EXPECT_EQ(whole[3].id, "9");
  EXPECT_EQ(whole[4].data, "x\n");  // a bare "data" line adds an empty line; "event: ping" alone is no event
  for (size_t chunk = 1; chunk < 8; ++chunk) {
    const auto cut = parse_in_chunks(body, chunk);
    ASSERT_EQ(cut.size(), whole.size()) << "chunk " << chunk;
    for (size_t i = 0; i < cut.size(); ++i) {
      EXPECT_EQ(cut[i].data, whole[i].data) << "chunk " << chunk << " event " << i;
      EXPECT_EQ(cut[i].event, whole[i].event) << "chunk " << chunk << " event " << i;
    }
  }
}

TEST(SseParserTest, LastEventWithoutBlankLineAndEarlyStop) {
  EXPECT_EQ(parse_in_chunks("data: a\n\ndata: b", 3).back().data, "b");
  hg::server::SseParser p;
  int n = 0;
  EXPECT_FALSE(p.feed("data: 1\n\ndata: 2\n\n", [&](hg::server::SseEvent&&) { return ++n < 1; }));
  EXPECT_EQ(n, 1);
}

}  // namespace
