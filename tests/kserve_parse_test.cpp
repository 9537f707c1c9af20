// KServeHandler's parse pool (a oneTBB arena of parse_threads): large bodies are decoded there,
// a full parse queue answers 503, and shutdown() drops the queued bodies and waits for the ones
// in progress.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/identity_model.h"
#include "server/kserve.h"
#include "server/model_repository.h"
#include "tests/test_env.h"
#include "tests/wait.h"

namespace {

namespace fs = std::filesystem;
using hg::server::HttpResponse;
using hg::server::KServeHandler;
using hg::server::KServeOptions;
using hg::test::kWaitLimit;

std::string body(int first) {
  return R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[)" + std::to_string(first) + ",2,3,4]}]}";
}

// A repository serving "echo": the identity backend on FP32 [-1, 4].
class KServeParseTest : public ::testing::Test {
 protected:
  static hg::server::RepositoryOptions options(const fs::path& dir) {
    fs::create_directories(dir / "echo" / "1");
    hg::server::RepositoryOptions o;
    o.dir = dir;
    o.factory = [](const std::string&, int64_t, const fs::path&, const hg::server::ModelConfig&) {
      hg::models::PackageSpec spec;
      spec.name = "echo";
      spec.inputs = {{"x", "FP32", {-1, 4}}};
      spec.outputs = {{"y", "FP32", {-1, 4}}};
      return hg::server::make_identity_model(spec);
    };
    return o;
  }
  // Every body goes to the parse pool.
  static KServeOptions parse_all(int threads, size_t max_queue) {
    KServeOptions o;
    o.parse_threads = threads;
    o.parse_inline_bytes = 0;
    o.max_parse_queue = max_queue;
    return o;
  }
  ~KServeParseTest() override { fs::remove_all(dir_); }
  hg::server::HttpRequest infer(std::string b) const { return {"POST", "/v2/models/echo/infer", std::move(b), {}}; }

  fs::path dir_ = hg::test::temp_dir("KServeParseTest");
  hg::server::ServerMetrics metrics_;
  hg::server::ModelRepository repo_{options(dir_)};
};

TEST_F(KServeParseTest, LargeBodiesAreDecodedOnTheParseThreads) {
  KServeHandler h(repo_, metrics_, parse_all(2, 64));
  std::vector<std::future<HttpResponse>> answers;
  for (int i = 0; i < 16; ++i)
    answers.push_back(std::async(std::launch::async, [&, i] { return h.handle(infer(body(i))); }));
  for (int i = 0; i < 16; ++i) {
    const HttpResponse r = hg::test::get_within(answers[i], kWaitLimit, "request " + std::to_string(i));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(nlohmann::json::parse(r.body)["outputs"][0]["data"], nlohmann::json({i, 2, 3, 4}));
  }
}

// One parse thread held in the reply to a bad body (400 is answered on the parse thread), one
// body queued: the next is 503. shutdown() then waits for the held one and drops the queued one.
TEST_F(KServeParseTest, AFullParseQueueIs503AndShutdownDropsTheQueuedBodies) {
  hg::test::Event in_reply, release;
  KServeHandler h(repo_, metrics_, parse_all(1, 1));
  hg::test::SetOnExit free_the_parse_thread(release);
  int held_status = 0;
  h(infer("not json"), [&](HttpResponse r) {
    held_status = r.status;
    in_reply.set();
    (void)release.wait(kWaitLimit, "the test to release the parse thread");
  });
  ASSERT_TRUE(in_reply.wait(kWaitLimit, "the bad body's answer on the parse thread"));
  EXPECT_EQ(held_status, 400);

  auto queued = std::make_shared<std::promise<int>>();
  std::future<int> queued_status = queued->get_future();
  h(infer(body(1)), [queued](HttpResponse r) { queued->set_value(r.status); });
  queued.reset();  // the queued task holds the only promise now

  const HttpResponse full = h.handle(infer(body(2)));
  EXPECT_EQ(full.status, 503);
  EXPECT_NE(full.body.find("too many large request bodies waiting to be parsed (1)"), std::string::npos) << full.body;

  auto stopped = std::async(std::launch::async, [&] { h.shutdown(); });
  ASSERT_TRUE(hg::test::wait_until(
      [&] { return h.handle(infer(body(3))).body.find("shutting down") != std::string::npos; }, kWaitLimit,
      "new bodies refused as the server shuts down"));
  EXPECT_EQ(stopped.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "shutdown() returned while a body was still being parsed";
  release.set();
  ASSERT_TRUE(hg::test::ready_within(stopped, kWaitLimit, "shutdown()"));
  ASSERT_TRUE(hg::test::ready_within(queued_status, kWaitLimit, "the queued body's reply to be dropped"));
  EXPECT_THROW(queued_status.get(), std::future_error);  // dropped unanswered: the HTTP layer answers 500
}

}  // namespace
