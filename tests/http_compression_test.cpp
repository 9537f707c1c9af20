// The HTTP layer (server/http_server.h) inflating compressed bodies, over real sockets on
// 127.0.0.1: the handler sees the plain body without Content-Encoding, inflating counts against
// the bytes in flight (503 beyond them, and the budget is whole again afterwards), and bodies
// are refused with 415 where on_head does not allow them; with an offload pool, inflation runs
// there in steps bounded by input as well as output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/compression.h"
#include "server/http_server.h"
#include "tests/http_conn.h"

using namespace hg::server;
using namespace std::chrono_literals;
using hg::test::HttpConn;
using ::testing::HasSubstr;

namespace {

// Answers "<size> <Content-Encoding header> <first 16 bytes>" for every request; /plain/...
// refuses compressed bodies in on_head.
struct Server {
  std::unique_ptr<HttpServer> srv;
  uint16_t port = 0;

  explicit Server(HttpServerOptions opt) {
    opt.host = "127.0.0.1";
    opt.port = 0;
    opt.handle_signals = false;
    opt.on_head = [](const HttpRequest& head) {
      HeadCheck c;
      c.compressed_body = head.target.rfind("/plain", 0) != 0;
      return c;
    };
    srv = std::make_unique<HttpServer>(opt, [](HttpRequest&& req, Reply reply) {
      reply({200, std::to_string(req.body.size()) + " [" + std::string(req.header("Content-Encoding")) + "] " +
                      req.body.substr(0, 16),
             "text/plain", {}});
    });
    port = srv->listen();
    srv->start();
  }
};

TEST(HttpCompression, TheHandlerGetsThePlainBody) {
  HttpServerOptions opt;
  opt.max_body_bytes = size_t{16} << 20;
  Server s(opt);
  HttpConn c(s.port, 60s);
  std::string text(size_t{5} << 20, 'a');  // five 1 MiB steps of inflation
  text.replace(0, 16, "0123456789abcdef");
  for (ContentCoding coding : {ContentCoding::Gzip, ContentCoding::Deflate}) {
    const auto r = c.request("POST", "/x", compress(text, coding), {{"Content-Encoding", coding_name(coding)}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, std::to_string(text.size()) + " [] 0123456789abcdef") << coding_name(coding);
  }
  const auto r = c.request("POST", "/x", "hello", {{"Content-Encoding", "identity"}});
  EXPECT_EQ(r.body, "5 [identity] hello");
}

// Runs offloaded work on its own thread, in order; refuses it while `refuse` is set.
class Worker {
 public:
  ~Worker() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool submit(std::function<void()> f) {
    if (refuse) return false;
    {
      std::lock_guard lk(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
    return true;
  }
  std::atomic<bool> refuse{false};
  std::atomic<int> ran{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_{[this] {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });  // the destructor ends it
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      ++ran;  // before the task: its answer may reach the test before f() returns
      f();
    }
  }};
};

// With an offload pool, every inflation step runs there, not on an I/O thread; a body of empty
// gzip members takes many steps bounded by input; a refused step answers 503.
TEST(HttpCompression, InflationRunsOffTheIoThreadsInStepsBoundedByInput) {
  Worker worker;  // outlives the server
  HttpServerOptions opt;
  opt.max_body_bytes = size_t{16} << 20;
  opt.offload = [&worker](std::function<void()> work) { return worker.submit(std::move(work)); };
  Server s(opt);
  HttpConn c(s.port, 60s);
  const std::string text(size_t{5} << 20, 'a');
  auto r = c.request("POST", "/x", compress(text, ContentCoding::Gzip), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr("5242880 []"));
  EXPECT_GE(worker.ran.load(), 5) << "five 1 MiB steps of output, each on the offload thread";
  const std::string member = compress("", ContentCoding::Gzip);
  std::string empties;
  while (empties.size() < (size_t{1} << 20)) empties += member;
  const int before = worker.ran.load();
  r = c.request("POST", "/x", empties, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr("0 []"));
  EXPECT_GE(worker.ran.load() - before, 16) << "1 MiB of empty members, in steps of at most 64 KiB of input";
  worker.refuse = true;
  r = c.request("POST", "/x", compress("refused", ContentCoding::Gzip), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.header("Retry-After"), "1");
  EXPECT_THAT(r.body, HasSubstr("too many request bodies waiting to be inflated"));
  worker.refuse = false;
  r = c.request("POST", "/x", compress("again", ContentCoding::Gzip), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(HttpCompression, InflatingCountsAgainstTheBytesInFlight) {
  HttpServerOptions opt;
  opt.max_body_bytes = size_t{64} << 20;
  opt.max_inflight_body_bytes = size_t{4} << 20;
  Server s(opt);
  const std::string packed = compress(std::string(size_t{16} << 20, 'z'), ContentCoding::Gzip);
  ASSERT_LT(packed.size(), size_t{1} << 20);
  HttpConn c(s.port, 60s);
  const auto r = c.request("POST", "/x", packed, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.header("Retry-After"), "1");
  EXPECT_THAT(r.body, HasSubstr("too many request bytes in flight (limit 4194304 bytes) to inflate this gzip body"));
  // The reservation went back: the same budget takes a body that fits, again and again.
  const std::string fits = compress(std::string(size_t{1} << 20, 'y'), ContentCoding::Gzip);
  for (int i = 0; i < 3; ++i) {
    const auto ok = c.request("POST", "/x", fits, {{"Content-Encoding", "gzip"}});
    EXPECT_EQ(ok.status, 200) << ok.body;
    EXPECT_THAT(ok.body, HasSubstr("1048576 []"));
  }
}

TEST(HttpCompression, RefusedWhereOnHeadDoesNotAllowIt) {
  Server s(HttpServerOptions{});
  HttpConn c(s.port, 60s);
  const auto r = c.request("POST", "/plain/x", compress("{}", ContentCoding::Gzip), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 415) << r.body;
  EXPECT_THAT(r.body, HasSubstr("POST /plain/x takes no compressed body (Content-Encoding: gzip)"));
  EXPECT_EQ(r.header("Accept-Encoding"), "identity");
  // A small refused body is read and dropped: the connection stays open.
  EXPECT_EQ(c.request("POST", "/plain/y", "ok").body, "2 [] ok");
}

}  // namespace
