// The HTTP layer (server/http_server.h) over real sockets on 127.0.0.1: streamed (chunked)
// responses, on_stop and the graceful drain, pipelining, the errors it answers itself (400,
// 413, 431, 500), slow clients, and a slow upload not holding up a probe.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"
#include "tests/wait.h"

using namespace hg::server;
using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

namespace {

// A raw client connection that reads responses byte-exactly, chunk by chunk; every read is
// bounded by `timeout` (SO_RCVTIMEO).
class Conn {
 public:
  explicit Conn(uint16_t port, std::chrono::milliseconds timeout = hg::test::kWaitLimit) : timeout_(timeout) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
      throw std::runtime_error("connection refused");
    }
  }
  ~Conn() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      data.remove_prefix(static_cast<size_t>(n));
    }
  }
  // Reads more; false when the peer closed (or reset). Throws on the timeout.
  bool fill() {
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n > 0) {
      buf_.append(tmp, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      throw std::runtime_error("timed out after " + std::to_string(timeout_.count()) + " ms waiting for the server to send (or close)");
    return false;
  }
  // True when the peer closed the connection (nothing more to read).
  bool peer_closed() {
    while (fill()) {
    }
    return true;
  }

  struct Head {
    int status = 0;
    std::string text;  // status line and headers
    std::string header(const std::string& name) const {
      std::string lower = text;
      for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
      std::string key = "\r\n" + name + ": ";
      for (auto& c : key) c = char(std::tolower(static_cast<unsigned char>(c)));
      auto p = lower.find(key);
      if (p == std::string::npos) return {};
      auto b = p + key.size();
      return text.substr(b, text.find("\r\n", b) - b);
    }
  };
  Head read_head() {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) throw std::runtime_error("closed before the response header");
    Head h;
    h.text = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    h.status = std::stoi(h.text.substr(9, 3));
    return h;
  }
  std::string read_exact(size_t n) {
    while (buf_.size() < n)
      if (!fill()) throw std::runtime_error("closed in the middle of a body");
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }
  // One chunk of a chunked body; "" for the last one.
  std::string read_chunk() {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos)
      if (!fill()) throw std::runtime_error("closed before a chunk");
    size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
    buf_.erase(0, eol + 2);
    std::string data = read_exact(size + 2);
    if (data.substr(size) != "\r\n") throw std::runtime_error("chunk not followed by CRLF");
    data.resize(size);
    return data;
  }
  struct Response {
    Head head;
    std::string body;
  };
  Response read_response() {
    Response r;
    r.head = read_head();
    if (r.head.header("Transfer-Encoding") == "chunked") {
      for (std::string c; !(c = read_chunk()).empty();) r.body += c;
    } else {
      r.body = read_exact(std::stoul(r.head.header("Content-Length")));
    }
    return r;
  }
  Response request(const std::string& method, const std::string& target, const std::string& body = {}) {
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n" + body;
    send(req);
    return read_response();
  }
  size_t buffered() const { return buf_.size(); }

 private:
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  std::string buf_;
};

std::string get(const std::string& target) { return "GET " + target + " HTTP/1.1\r\nHost: t\r\n\r\n"; }

// Collects the sinks of streamed responses as the server hands them over.
struct Sinks {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<ResponseStream>> got;
  void add(std::shared_ptr<ResponseStream> s) {
    std::lock_guard lk(mu);
    got.push_back(std::move(s));
    cv.notify_all();
  }
  std::shared_ptr<ResponseStream> wait(size_t i = 0) {
    std::unique_lock lk(mu);
    if (!hg::test::wait_for(cv, lk, hg::test::kWaitLimit, "streamed response " + std::to_string(i) + " to start",
                            [&] { return got.size() > i; }))
      throw hg::test::WaitTimeout("no stream started");
    return got[i];
  }
  void clear() {
    std::lock_guard lk(mu);
    got.clear();
  }
};

// A server whose /stream answers a streamed response (first chunk "first") and whose other
// paths echo the target; counts on_stop calls and records every status on_response sees.
struct TestServer {
  Sinks sinks;
  std::atomic<int> stops{0};
  std::mutex mu;
  std::vector<int> statuses;
  std::unique_ptr<HttpServer> srv;
  uint16_t port = 0;

  explicit TestServer(HttpServerOptions opt = {}, HttpHandler custom = nullptr) {
    opt.host = "127.0.0.1";
    opt.port = 0;
    opt.handle_signals = false;
    opt.on_stop = [this] { ++stops; };
    opt.on_response = [this](const ResponseRecord& r) {
      std::lock_guard lk(mu);
      statuses.push_back(r.status);
    };
    HttpHandler h = custom ? std::move(custom) : [this](HttpRequest&& req, Reply reply) {
      if (req.target == "/stream") {
        HttpResponse r;
        r.content_type = "text/event-stream";
        r.body = "first";
        r.headers = {{"Cache-Control", "no-cache"}};
        r.stream = [this](std::shared_ptr<ResponseStream> s) { sinks.add(std::move(s)); };
        reply(std::move(r));
      } else {
        reply({200, req.method + " " + req.target + " " + req.body, "text/plain", {}});
      }
    };
    srv = std::make_unique<HttpServer>(opt, std::move(h));
    port = srv->listen();
    srv->start();
  }
  ~TestServer() {
    sinks.clear();  // the sinks keep the server state; drop them before it goes
    srv.reset();
  }
  std::vector<int> seen() {
    std::lock_guard lk(mu);
    return statuses;
  }
};

}  // namespace

TEST(HttpServerStreamTest, ChunksArriveInOrderAndSeparatelyThenKeepAlive) {
  TestServer ts;
  Conn c(ts.port);
  c.send(get("/stream"));
  auto head = c.read_head();
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("Transfer-Encoding"), "chunked");
  EXPECT_EQ(head.header("Content-Type"), "text/event-stream");
  EXPECT_EQ(head.header("Cache-Control"), "no-cache");
  EXPECT_EQ(head.header("Content-Length"), "");
  auto sink = ts.sinks.wait();
  EXPECT_EQ(c.read_chunk(), "first");  // the body, if any, is the first chunk
  // Each write arrives on its own before the next is produced.
  for (const std::string& piece : std::vector<std::string>{"data: one\n\n", "data: two\n\n", std::string(100000, 'x')}) {
    ASSERT_TRUE(sink->write(piece));
    EXPECT_EQ(c.read_chunk(), piece);
  }
  ASSERT_TRUE(sink->write("a"));
  ASSERT_TRUE(sink->write(""));  // nothing is sent for an empty write (it would end the body)
  ASSERT_TRUE(sink->write("b"));
  EXPECT_EQ(c.read_chunk(), "a");
  EXPECT_EQ(c.read_chunk(), "b");
  sink->close();
  sink->close();  // idempotent
  EXPECT_EQ(c.read_chunk(), "");
  EXPECT_FALSE(sink->write("late"));
  EXPECT_EQ(c.buffered(), 0u);
  // The connection stays open for the next request.
  auto r = c.request("GET", "/after");
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(r.body, "GET /after ");
  EXPECT_EQ(ts.seen(), (std::vector<int>{200, 200}));
}

TEST(HttpServerStreamTest, ChunksWrittenFromManyThreadsAllArrive) {
  TestServer ts;
  Conn c(ts.port);
  c.send(get("/stream"));
  c.read_head();
  auto sink = ts.sinks.wait();
  EXPECT_EQ(c.read_chunk(), "first");
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) EXPECT_TRUE(sink->write(std::to_string(t) + ":" + std::to_string(i) + ";"));
    });
  for (auto& th : threads) th.join();
  sink.reset();
  ts.sinks.clear();  // dropping the last reference ends the body
  std::string body;
  for (std::string ch; !(ch = c.read_chunk()).empty();) body += ch;
  // Every piece arrives once, and each thread's pieces in the order it wrote them.
  std::vector<int> next(kThreads, 0);
  size_t start = 0;
  for (size_t end; (end = body.find(';', start)) != std::string::npos; start = end + 1) {
    std::string piece = body.substr(start, end - start);
    int t = std::stoi(piece.substr(0, piece.find(':')));
    int i = std::stoi(piece.substr(piece.find(':') + 1));
    ASSERT_TRUE(t >= 0 && t < kThreads) << piece;
    EXPECT_EQ(i, next[t]++) << "thread " << t << " out of order";
  }
  EXPECT_EQ(start, body.size());
  EXPECT_EQ(next, std::vector<int>(kThreads, kEach));
}

TEST(HttpServerStreamTest, ClientDisconnectMakesWriteReturnFalse) {
  TestServer ts;
  {
    Conn c(ts.port);
    c.send(get("/stream"));
    c.read_head();
  }  // gone mid-stream
  auto sink = ts.sinks.wait();
  EXPECT_TRUE(hg::test::wait_until([&] { return !sink->write("tick\n"); }, hg::test::kWaitLimit,
                                   "write() to fail after the client left"));
  sink->close();
  // The server carries on.
  Conn c2(ts.port);
  EXPECT_EQ(c2.request("GET", "/ok").head.status, 200);
}

// A client that does not read its streamed answer holds at most max_unsent_bytes of it: past
// half, ready() says wait; a producer that writes on regardless is refused and the connection
// closed, and the server serves on. A producer that waits for ready() delivers every byte to a
// client that reads.
TEST(HttpServerStreamTest, UnsentBytesPerConnectionAreBounded) {
  HttpServerOptions opt;
  opt.max_unsent_bytes = 64 << 10;
  TestServer ts(opt);
  const std::string piece(4096, 'x');
  constexpr size_t kCap = 20000;  // 80 MB: far past any socket buffer
  {
    Conn c(ts.port);
    c.send(get("/stream"));
    c.read_head();
    auto sink = ts.sinks.wait();
    size_t accepted = 0;
    bool saw_wait = false;
    while (accepted < kCap && sink->write(piece)) {
      ++accepted;
      saw_wait = saw_wait || !sink->ready();
    }
    EXPECT_LT(accepted, kCap) << "a client that reads nothing was sent 80 MB";
    EXPECT_TRUE(saw_wait) << "ready() never asked the producer to wait";
    EXPECT_FALSE(sink->write(piece)) << "the refused stream took another chunk";
    sink->close();
  }
  ts.sinks.clear();
  {
    Conn c(ts.port);
    c.send(get("/stream"));
    c.read_head();
    auto sink = ts.sinks.wait();
    constexpr size_t kPieces = 2000;  // 8 MB through a 64 KiB bound
    std::thread producer([&] {
      for (size_t i = 0; i < kPieces; ++i) {
        if (!hg::test::wait_until([&] { return sink->ready(); }, hg::test::kWaitLimit,
                                  "the sink to take more after the client read"))
          break;
        if (!sink->write(piece)) {
          ADD_FAILURE() << "a producer that waited was refused at piece " << i;
          break;
        }
      }
      sink->close();  // ends the body, so the reader below stops either way
    });
    size_t got = 0;
    EXPECT_EQ(c.read_chunk(), "first");
    for (std::string ch; !(ch = c.read_chunk()).empty();) got += ch.size();
    producer.join();
    EXPECT_EQ(got, kPieces * piece.size());
  }
  Conn after(ts.port);
  EXPECT_EQ(after.request("GET", "/ok").head.status, 200);
}

TEST(HttpServerStreamTest, DrainWaitsForAnOpenStreamAndOnStopRunsOnce) {
  HttpServerOptions opt;
  opt.drain_timeout = 30s;
  TestServer ts(opt);
  Conn c(ts.port);
  c.send(get("/stream"));
  c.read_head();
  auto sink = ts.sinks.wait();
  EXPECT_EQ(c.read_chunk(), "first");
  Conn idle(ts.port);  // keep-alive, no request: closed by the drain
  EXPECT_EQ(idle.request("GET", "/x").head.status, 200);

  ts.srv->stop();
  ts.srv->stop();
  EXPECT_EQ(ts.stops.load(), 1);
  EXPECT_TRUE(ts.srv->stopping());
  auto waited = std::async(std::launch::async, [&] { ts.srv->wait(); });
  EXPECT_TRUE(idle.peer_closed());
  // While a request is in flight the listener stays open: a new connection gets one answer
  // (the handler decides what, e.g. 503 for readiness) and Connection: close.
  {
    Conn late(ts.port);
    auto r = late.request("GET", "/v2/health/ready");
    EXPECT_EQ(r.head.status, 200);
    EXPECT_EQ(r.head.header("Connection"), "close");
    EXPECT_TRUE(late.peer_closed());
  }
  // The stream is still in flight: writes go through and the server has not finished.
  EXPECT_EQ(waited.wait_for(200ms), std::future_status::timeout);
  ASSERT_TRUE(sink->write("during drain"));
  EXPECT_EQ(c.read_chunk(), "during drain");
  sink->close();
  EXPECT_EQ(c.read_chunk(), "");
  EXPECT_TRUE(c.peer_closed());  // then the connection closes
  EXPECT_TRUE(hg::test::ready_within(waited, hg::test::kWaitLimit, "HttpServer::wait() to return after the last stream closed"));
  EXPECT_THROW(Conn refused(ts.port, 1s), std::runtime_error);  // the listener is closed now
  EXPECT_EQ(ts.stops.load(), 1);
}

TEST(HttpServerTest, StopWithNothingInFlightClosesTheListenerAtOnce) {
  TestServer ts;
  Conn idle(ts.port);
  EXPECT_EQ(idle.request("GET", "/x").head.status, 200);
  ts.srv->stop();
  hg::test::call_within(hg::test::kWaitLimit, "HttpServer::wait() after stop() with nothing in flight", [&] { ts.srv->wait(); });
  EXPECT_TRUE(idle.peer_closed());
  EXPECT_THROW(Conn refused(ts.port, 1s), std::runtime_error);
  EXPECT_EQ(ts.stops.load(), 1);
}

TEST(HttpServerStreamTest, DrainTimeoutCutsAStreamThatNeverEnds) {
  HttpServerOptions opt;
  opt.drain_timeout = 300ms;
  TestServer ts(opt);
  Conn c(ts.port);
  c.send(get("/stream"));
  c.read_head();
  auto sink = ts.sinks.wait();
  auto t0 = Clock::now();
  ts.srv->stop();
  hg::test::call_within(hg::test::kWaitLimit, "HttpServer::wait() to cut the stream after the drain timeout",
                        [&] { ts.srv->wait(); });
  EXPECT_LT(Clock::now() - t0, 10s);
  EXPECT_FALSE(sink->write("after the cut"));
  EXPECT_EQ(c.read_chunk(), "first");
  EXPECT_TRUE(c.peer_closed());
  EXPECT_EQ(ts.stops.load(), 1);
}

TEST(HttpServerTest, InFlightRequestFinishesWithConnectionCloseAfterOnStop) {
  std::promise<Reply> held;
  std::atomic<bool> stop_seen{false};
  HttpServerOptions opt;
  opt.host = "127.0.0.1";
  opt.port = 0;
  opt.handle_signals = false;
  int on_stop_calls = 0;
  opt.on_stop = [&] {
    ++on_stop_calls;
    stop_seen = true;
  };
  HttpServer srv(opt, [&](HttpRequest&&, Reply reply) { held.set_value(std::move(reply)); });
  srv.listen();
  srv.start();
  Conn c(srv.port());
  c.send(get("/slow"));
  auto handed = held.get_future();
  Reply reply = hg::test::get_within(handed, hg::test::kWaitLimit, "the handler to get the request");
  srv.stop();
  EXPECT_TRUE(stop_seen.load());  // before the drain, synchronously in stop()
  reply({200, R"({"done":true})"});
  auto r = c.read_response();
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(r.body, R"({"done":true})");
  EXPECT_EQ(r.head.header("Connection"), "close");
  EXPECT_TRUE(c.peer_closed());
  c.close();  // the server waits (briefly) for the client's end of a connection it announced closing
  hg::test::call_within(hg::test::kWaitLimit, "HttpServer::wait() after the in-flight request", [&] { srv.wait(); });
  EXPECT_EQ(on_stop_calls, 1);
}

TEST(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  // Replies come from other threads with the first one slowest.
  std::vector<std::thread> workers;
  std::mutex mu;
  HttpServerOptions opt;
  auto ts = std::make_unique<TestServer>(opt, [&](HttpRequest&& req, Reply reply) {
    int delay = req.target == "/1" ? 100 : req.target == "/2" ? 50 : 0;
    std::lock_guard lk(mu);
    workers.emplace_back([delay, t = req.target, b = req.body, reply] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      reply({200, t + b, "text/plain", {}});
    });
  });
  Conn c(ts->port);
  c.send(get("/1") + "POST /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nbody" + get("/3"));
  EXPECT_EQ(c.read_response().body, "/1");
  EXPECT_EQ(c.read_response().body, "/2body");
  EXPECT_EQ(c.read_response().body, "/3");
  for (auto& w : workers) w.join();
  ts.reset();
}

TEST(HttpServerTest, AnswersItsOwnErrorsWithJsonAndCloses) {
  HttpServerOptions opt;
  opt.max_body_bytes = 1024;
  opt.max_header_bytes = 2048;
  TestServer ts(opt);
  auto error_of = [](const Conn::Response& r) { return nlohmann::json::parse(r.body).at("error").get<std::string>(); };
  {
    Conn c(ts.port);
    auto r = c.request("POST", "/big", std::string(2000, 'b'));
    EXPECT_EQ(r.head.status, 413);
    EXPECT_EQ(r.head.header("Content-Type"), "application/json");
    EXPECT_THAT(error_of(r), HasSubstr("limit of 1024 bytes"));
    EXPECT_TRUE(c.peer_closed());
  }
  {
    Conn c(ts.port);  // refused from the header alone: no 100 Continue, no body read
    c.send("POST /big HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n");
    EXPECT_EQ(c.read_response().head.status, 413);
  }
  {
    Conn c(ts.port);  // chunked upload over the limit
    c.send("POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(2048, 'c') +
           "\r\n0\r\n\r\n");
    EXPECT_EQ(c.read_response().head.status, 413);
  }
  {
    Conn c(ts.port);
    c.send("GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(4000, 'h') + "\r\n\r\n");
    auto r = c.read_response();
    EXPECT_EQ(r.head.status, 431);
    EXPECT_THAT(error_of(r), HasSubstr("header"));
  }
  for (std::string garbage : {std::string("HELLO\r\n\r\n"), std::string("GET / HTTP/9.9\r\n\r\n"),
                              std::string("POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
                              std::string("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")}) {
    Conn c(ts.port);
    c.send(garbage);
    auto r = c.read_response();
    EXPECT_EQ(r.head.status, 400) << garbage;
    EXPECT_THAT(error_of(r), HasSubstr("malformed HTTP request")) << garbage;
    EXPECT_TRUE(c.peer_closed());
  }
  auto seen = ts.seen();
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 413), 3);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 431), 1);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 400), 4);
  Conn ok(ts.port);
  EXPECT_EQ(ok.request("GET", "/fine").head.status, 200);
}

TEST(HttpServerTest, HandlerThatThrowsOrDropsItsReplyGets500) {
  HttpServerOptions opt;
  TestServer ts(opt, [](HttpRequest&& req, Reply reply) {
    if (req.target == "/throw") throw std::runtime_error("boom");
    if (req.target == "/drop") return;
    reply({200, "ok", "text/plain", {}});
  });
  Conn c(ts.port);
  auto r = c.request("GET", "/throw");
  EXPECT_EQ(r.head.status, 500);
  EXPECT_THAT(r.body, HasSubstr("boom"));
  r = c.request("GET", "/drop");
  EXPECT_EQ(r.head.status, 500);
  EXPECT_THAT(r.body, HasSubstr("did not answer"));
  EXPECT_EQ(c.request("GET", "/fine").body, "ok");  // same connection, still in order
}

TEST(HttpServerTest, SlowClientsAreDisconnected) {
  HttpServerOptions opt;
  opt.idle_timeout = 300ms;
  opt.header_timeout = 300ms;
  opt.body_grace = 300ms;  // then 16 KiB/s on average: 3 bytes of 100 are cut off after about 1.3 s
  opt.request_timeout = 300ms;
  TestServer ts(opt);
  auto t0 = Clock::now();
  Conn header(ts.port);  // slowloris: a header byte at a time, never finished
  header.send("GET / HTTP/1.1\r\nHost: t\r\n");
  Conn body(ts.port);  // a body that never comes
  body.send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc");
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(25ms);
    try {
      header.send("X");
    } catch (const std::runtime_error&) {
      break;  // already cut
    }
  }
  EXPECT_TRUE(header.peer_closed());
  EXPECT_TRUE(body.peer_closed());
  EXPECT_LT(Clock::now() - t0, 5s);
  Conn ok(ts.port);
  EXPECT_EQ(ok.request("GET", "/fine").head.status, 200);
}

TEST(HttpServerTest, SlowUploadDoesNotHoldUpAProbeOnAnotherConnection) {
  HttpServerOptions opt;
  opt.threads = 1;  // one I/O thread for everything
  TestServer ts(opt);
  Conn upload(ts.port);
  upload.send("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 20\r\n\r\n0123456789");
  std::this_thread::sleep_for(50ms);
  Conn probe(ts.port);
  auto t0 = Clock::now();
  auto r = probe.request("GET", "/v2/health/live");
  auto took = Clock::now() - t0;
  EXPECT_EQ(r.head.status, 200);
  EXPECT_LT(took, 1s) << "the probe waited behind the upload";
  upload.send("abcdefghij");
  auto u = upload.read_response();
  EXPECT_EQ(u.body, "POST /upload 0123456789abcdefghij");
}

TEST(HttpServerTest, Http10StreamEndsWithTheConnection) {
  TestServer ts;
  Conn c(ts.port);
  c.send("GET /stream HTTP/1.0\r\n\r\n");
  auto head = c.read_head();
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("Transfer-Encoding"), "");  // HTTP/1.0 has no chunked encoding
  auto sink = ts.sinks.wait();
  ASSERT_TRUE(sink->write("-rest"));
  sink->close();
  EXPECT_TRUE(c.peer_closed());
  EXPECT_EQ(c.read_exact(c.buffered()), "first-rest");
}

TEST(HttpServerTest, ClientGoneMidResponseLeavesTheServerServing) {
  std::promise<Reply> held;
  HttpServerOptions opt;
  TestServer ts(opt, [&](HttpRequest&& req, Reply reply) {
    if (req.target == "/huge") return reply({200, std::string(32 << 20, 'z'), "text/plain", {}});
    if (req.target == "/later") return held.set_value(std::move(reply));
    reply({200, "ok", "text/plain", {}});
  });
  {
    Conn c(ts.port);  // leaves while a 32 MiB answer is being written
    c.send(get("/huge"));
    c.read_head();
  }
  {
    Conn c(ts.port);  // leaves before its answer exists
    c.send(get("/later"));
    auto handed = held.get_future();
    Reply r = hg::test::get_within(handed, hg::test::kWaitLimit, "the handler to get /later");
    c.close();
    r({200, "too late", "text/plain", {}});
  }
  Conn ok(ts.port);
  EXPECT_EQ(ok.request("GET", "/fine").body, "ok");
  EXPECT_TRUE(hg::test::wait_until([&] { return ts.seen().size() == 3; }, hg::test::kWaitLimit, "on_response for all 3 requests"));
}
