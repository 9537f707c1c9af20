// The HTTP layer (server/http_server.h) against hostile clients, over real sockets on
// 127.0.0.1: RFC 9112's framing cases, HEAD, 204 and 304 framing, on_head answering before a
// body is read, the body budget, the connection limit with its probe reserve, header and body
// deadlines, cancellation of a request whose client left, and the response records.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/http_server.h"
#include "tests/http_conn.h"

using namespace hg::server;
using namespace std::chrono_literals;
using hg::test::HttpConn;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

namespace {

// A server whose handler echoes "METHOD TARGET BODY", holds /hold requests until released,
// answers /304, /204 and /100 with that status (and a body), and records every ResponseRecord
// and every handled request.
struct Server {
  std::mutex mu;
  std::vector<ResponseRecord> records;
  std::vector<std::string> targets;  // copies: a record's views die with its response
  std::vector<std::pair<std::shared_ptr<const std::atomic<bool>>, Reply>> held;
  std::unique_ptr<HttpServer> srv;
  uint16_t port = 0;

  explicit Server(HttpServerOptions opt = {}) {
    opt.host = "127.0.0.1";
    opt.port = 0;
    opt.handle_signals = false;
    opt.on_response = [this](const ResponseRecord& r) {
      std::lock_guard lk(mu);
      targets.emplace_back(r.target);
      records.push_back(r);
      records.back().method = {};
      records.back().target = {};
      records.back().request_id = {};
    };
    srv = std::make_unique<HttpServer>(opt, [this](HttpRequest&& req, Reply reply) {
      if (req.target == "/304" || req.target == "/204" || req.target == "/100") {
        reply({std::stoi(req.target.substr(1)), "a body the status does not allow", "text/plain", {}});
        return;
      }
      if (req.target == "/hold") {
        std::lock_guard lk(mu);
        held.emplace_back(req.cancelled, std::move(reply));
        return;
      }
      reply({200, req.method + " " + req.target + " " + req.body, "text/plain", {}});
    });
    port = srv->listen();
    srv->start();
  }
  ~Server() {
    {
      std::lock_guard lk(mu);
      for (auto& [c, r] : held) r({200, "released", "text/plain", {}});
      held.clear();
    }
    srv.reset();
  }
  size_t held_count() {
    std::lock_guard lk(mu);
    return held.size();
  }
};

// Polls `f` every 5 ms for up to `limit`; the failure names what was awaited.
template <class F>
void wait_for(F&& f, const char* what, std::chrono::milliseconds limit = 60s) {
  const auto end = Clock::now() + limit;
  while (!f()) {
    ASSERT_LT(Clock::now(), end) << "timed out after " << limit.count() << " ms waiting for " << what;
    std::this_thread::sleep_for(5ms);
  }
}

TEST(HttpLimits, HeadIsGetWithoutABodyAndKeepsTheConnectionFramed) {
  Server s;
  HttpConn c(s.port);
  const auto get = c.request("GET", "/x");
  const auto head = c.request("HEAD", "/x");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(get.body, "GET /x ");
  EXPECT_EQ(head.header("Content-Length"), std::to_string(std::string("HEAD /x ").size()));  // what GET would send
  // The next answer on the same connection starts where it should: no stray body bytes.
  const auto after = c.request("GET", "/y");
  EXPECT_EQ(after.status, 200);
  EXPECT_EQ(after.body, "GET /y ");
}

TEST(HttpLimits, OnHeadAnswersWithoutReadingTheBody) {
  HttpServerOptions opt;
  std::atomic<int> heads{0};
  opt.on_head = [&](const HttpRequest& h) {
    ++heads;
    HeadCheck c;
    if (h.header("Authorization") != "Bearer ok") c.answer = json_error(401, "no token");
    if (h.target == "/small") c.max_body_bytes = 10;
    return c;
  };
  Server s(opt);
  {
    // Declares 1 GB and sends none of it: the answer comes at once, and the connection closes.
    HttpConn c(s.port, 60s);
    c.send_raw("POST /load HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n");
    const auto r = c.read();
    EXPECT_EQ(r.status, 401);
    EXPECT_THAT(r.body, HasSubstr("no token"));
    EXPECT_EQ(r.header("Connection"), "close");
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    HttpConn c(s.port, 60s);
    const auto r = c.request("POST", "/small", std::string(11, 'x'), {{"Authorization", "Bearer ok"}});
    EXPECT_EQ(r.status, 413);
    EXPECT_THAT(r.body, HasSubstr("request body of 11 bytes exceeds the limit of 10 bytes for POST /small"));
  }
  HttpConn c(s.port, 60s);
  EXPECT_EQ(c.request("POST", "/small", "0123456789", {{"Authorization", "Bearer ok"}}).body, "POST /small 0123456789");
  EXPECT_EQ(heads.load(), 3);
}

TEST(HttpLimits, BodiesInFlightAreBoundedInBytes) {
  HttpServerOptions opt;
  opt.max_inflight_body_bytes = 1000;
  Server s(opt);
  HttpConn a(s.port, 60s);
  a.send_raw("POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 600\r\n\r\n" + std::string(600, 'a'));
  wait_for([&] { return s.held_count() == 1; }, "the first request to reach the handler");
  HttpConn b(s.port, 60s);
  const auto r = b.request("POST", "/x", std::string(600, 'b'));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.header("Retry-After"), "1");
  EXPECT_THAT(r.body, HasSubstr("too many request bytes in flight (limit 1000 bytes)"));
  HttpConn small(s.port, 60s);
  EXPECT_EQ(small.request("POST", "/x", std::string(300, 'c')).status, 200);  // what is left still serves
}

TEST(HttpLimits, ConnectionsBeyondTheLimitGetTheProbeReserveThenAreClosed) {
  HttpServerOptions opt;
  opt.max_connections = 3;
  opt.reserve_connections = 2;
  opt.reserve_paths = {"/live"};
  Server s(opt);
  std::vector<std::unique_ptr<HttpConn>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<HttpConn>(s.port, 60s));
    EXPECT_EQ(idle.back()->request("GET", "/x").status, 200);  // served, kept open
  }
  {
    HttpConn probe(s.port, 60s);  // the fourth: a reserve connection
    const auto r = probe.request("GET", "/live");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("Connection"), "close");
  }
  {
    HttpConn other(s.port, 60s);
    const auto r = other.request("GET", "/x");
    EXPECT_EQ(r.status, 503);
    EXPECT_THAT(r.body, HasSubstr("connection limit (3)"));
  }
  {
    // Both reserve slots held by clients that never finish a head: a sixth connection takes the
    // place of the one waiting longest (which is closed) and gets its probe answered.
    HttpConn r1(s.port, 60s);
    r1.send_raw("G");
    HttpConn r2(s.port, 60s);
    r2.send_raw("G");
    HttpConn extra(s.port, 60s);
    EXPECT_TRUE(r1.closed_by_peer());
    EXPECT_EQ(extra.request("GET", "/live").status, 200);
  }
  // A slot that frees up serves again.
  idle.pop_back();
  wait_for(
      [&] {
        try {
          HttpConn again(s.port, 60s);
          return again.request("GET", "/x").status == 200;
        } catch (const hg::test::HttpConnError&) {
          return false;
        }
      },
      "a freed connection slot to serve a request");
}

TEST(HttpLimits, HeaderAndIdleDeadlinesCloseSilentClients) {
  HttpServerOptions opt;
  opt.idle_timeout = 200ms;
  opt.header_timeout = 200ms;
  Server s(opt);
  HttpConn idle(s.port, 60s);
  const auto t0 = Clock::now();
  EXPECT_TRUE(idle.closed_by_peer());
  HttpConn partial(s.port, 60s);
  partial.send_raw("GET /x HTTP/1.1\r\nHost:");  // a header that never ends
  EXPECT_TRUE(partial.closed_by_peer());
  EXPECT_LT(Clock::now() - t0, 30s);
  HttpConn ok(s.port, 60s);
  EXPECT_EQ(ok.request("GET", "/x").status, 200);  // the server still answers
}

TEST(HttpLimits, TricklingABodyIsCutOffAtTheMinimumRate) {
  HttpServerOptions opt;
  opt.min_body_bytes_per_sec = 1000;
  opt.body_grace = 200ms;
  Server s(opt);
  HttpConn slow(s.port, 60s);
  slow.send_raw("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nab");
  const auto t0 = Clock::now();
  EXPECT_TRUE(slow.closed_by_peer());  // 2 bytes in, 1 s + 0.2 s allowed for the next 1000
  EXPECT_LT(Clock::now() - t0, 30s);
  EXPECT_EQ(s.held_count(), 0u);
  HttpConn fast(s.port, 60s);
  EXPECT_EQ(fast.request("POST", "/x", std::string(5000, 'z')).status, 200);
}

TEST(HttpLimits, AClientThatLeavesCancelsItsRequest) {
  Server s;
  {
    HttpConn c(s.port, 60s);
    c.send("POST", "/hold", "work");
    wait_for([&] { return s.held_count() == 1; }, "the request to reach the handler");
    EXPECT_FALSE(s.held[0].first->load());
  }  // the client closes its connection
  wait_for([&] { return s.held[0].first->load(); }, "HttpRequest::cancelled after the client closed");
}

TEST(HttpLimits, EveryResponseIsRecorded) {
  Server s;
  HttpConn c(s.port, 60s);
  c.request("POST", "/rec?q=1", "12345");
  c.request("HEAD", "/h");
  wait_for(
      [&] {
        std::lock_guard lk(s.mu);
        return s.records.size() == 2;
      },
      "two response records");
  std::lock_guard lk(s.mu);
  EXPECT_EQ(s.targets[0], "/rec?q=1");
  EXPECT_EQ(s.records[0].status, 200);
  EXPECT_EQ(s.records[0].request_bytes, 5u);
  EXPECT_EQ(s.records[0].response_bytes, std::string("POST /rec?q=1 12345").size());
  EXPECT_EQ(s.records[1].response_bytes, 0u);  // HEAD sends no body
}

}  // namespace

// HTTP/1.1 framing is bounded as nginx bounds it: a chunk-size line with endless extensions,
// or a flood of trailer fields, is refused with 400 after a bounded buffer, on any route.
TEST(HttpLimits, ChunkHeadersAndTrailersAreBounded) {
  Server s;
  HttpConn ext(s.port, 60s);
  ext.send_raw("POST /v2/health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
               std::string(100 << 10, 'e'));
  const auto r1 = ext.read();
  EXPECT_EQ(r1.status, 400);
  EXPECT_THAT(r1.body, HasSubstr("chunk header, chunk extension or trailer part exceeds 1024 bytes"));
  HttpConn trailers(s.port, 60s);
  std::string flood = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n";
  for (int i = 0; i < 20000; ++i) flood += "a:b\r\n";
  trailers.send_raw(flood);
  const auto r2 = trailers.read();
  EXPECT_EQ(r2.status, 400);
  EXPECT_THAT(r2.body, HasSubstr("exceeds 1024 bytes"));
  HttpConn ok(s.port, 60s);  // small trailers and extensions still pass
  ok.send_raw("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;name=v\r\nabc\r\n0\r\nT: 1\r\n\r\n");
  const auto r3 = ok.read();
  EXPECT_EQ(r3.status, 200);
  EXPECT_EQ(r3.body, "POST /x abc");
}

// Chunk extensions are not body progress: a client that sends only extension bytes (in short
// lines) is cut off by the body-rate floor.
TEST(HttpLimits, ChunkExtensionsDoNotCountAsBodyProgress) {
  HttpServerOptions opt;
  opt.min_body_bytes_per_sec = 1000;
  opt.body_grace = 200ms;
  Server s(opt);
  HttpConn slow(s.port, 60s);
  slow.send_raw("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const auto t0 = Clock::now();
  bool cut = false;
  for (int i = 0; i < 400 && !cut; ++i) {  // 1.5 KB/s of framing, no data, for at most 40 s
    cut = !slow.try_send("0000000001;" + std::string(100, 'e') + "\r\nz\r\n");
    std::this_thread::sleep_for(100ms);
    if (Clock::now() - t0 > 4s) break;
  }
  EXPECT_TRUE(cut || slow.closed_by_peer()) << "the framing-only sender was not cut";
  EXPECT_LT(Clock::now() - t0, 30s);
}

// A body counts in flight with the bytes it has received, not its declared length: a large
// slow upload does not hold small requests off.
TEST(HttpLimits, ADeclaredLengthIsNotReservedUpFront) {
  HttpServerOptions opt;
  opt.max_inflight_body_bytes = size_t{4} << 20;
  Server s(opt);
  HttpConn big(s.port, 60s);
  big.send_raw("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n" + std::string(1000, 'a'));
  HttpConn big2(s.port, 60s);
  big2.send_raw("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n" + std::string(1000, 'a'));
  std::this_thread::sleep_for(200ms);
  HttpConn small(s.port, 60s);
  const auto r = small.request("POST", "/x", std::string(300, 'c'));
  EXPECT_EQ(r.status, 200) << r.body;
}

// RFC 9112's framing cases, each sent as raw bytes on a fresh connection: a message whose
// framing is faulty or ambiguous gets 400 (501 for a transfer coding other than chunked) and
// the connection closes, so nothing after it can be read as another request; a sound one is
// answered and the connection stays framed for the next request.
TEST(HttpLimits, Rfc9112FramingCasesAreAnsweredAsTheRfcSays) {
  struct Case {
    const char* name;
    std::string bytes;
    int status;
    std::string body;  // of the answer: a substring
  };
  const std::string h = "Host: x\r\n";
  const std::vector<Case> cases = {
      // Section 5.2: obs-fold is replaced with a space.
      {"obs-fold", "GET /x HTTP/1.1\r\n" + h + "X-A: a\r\n b\r\n\r\n", 200, "GET /x "},
      // Section 2.2: a bare CR is invalid; a bare LF line end is refused (a MAY the RFC allows).
      {"bare CR in a field value", "GET /x HTTP/1.1\r\n" + h + "X-A: a\rb\r\n\r\n", 400, "malformed HTTP request"},
      {"bare LF line ends", "GET /x HTTP/1.1\nHost: x\n\n", 400, "malformed HTTP request"},
      // Section 2.2: an empty line before the request line is ignored.
      {"empty line before the request line", "\r\nGET /x HTTP/1.1\r\n" + h + "\r\n", 200, "GET /x "},
      // Section 5.1: no whitespace between a field name and its colon.
      {"space before the colon", "GET /x HTTP/1.1\r\nHost : x\r\n\r\n", 400, "malformed HTTP request"},
      {"whitespace before the first field", "GET /x HTTP/1.1\r\n Host: x\r\n\r\n", 400, "malformed HTTP request"},
      // Section 3.2: exactly one Host in HTTP/1.1, at most one in any request.
      {"no Host in HTTP/1.1", "GET /x HTTP/1.1\r\n\r\n", 400, "without a Host header field"},
      {"two Host fields", "GET /x HTTP/1.1\r\n" + h + "Host: y\r\n\r\n", 400, "2 Host header fields"},
      {"no Host in HTTP/1.0", "GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 200, "GET /x "},
      // Section 6.3 and RFC 9110 section 8.6: Content-Length.
      {"duplicate equal Content-Length", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
       200, "POST /x abc"},
      {"conflicting Content-Length", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
       400, "bad Content-Length"},
      {"signed Content-Length", "POST /x HTTP/1.1\r\n" + h + "Content-Length: +3\r\n\r\nabc", 400, "bad Content-Length"},
      {"Content-Length past 2^64", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 99999999999999999999999\r\n\r\nabc",
       400, "bad Content-Length"},
      {"Content-Length with Transfer-Encoding",
       "POST /x HTTP/1.1\r\n" + h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400,
       "malformed HTTP request"},
      {"Transfer-Encoding with Content-Length",
       "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400,
       "malformed HTTP request"},
      // Section 6.1 and 6.3: Transfer-Encoding.
      {"chunked not the final coding", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, gzip\r\n\r\nGET /s HTTP/1.1\r\n" + h + "\r\n",
       400, "without chunked as its final coding"},
      {"a coding without chunked", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip\r\n\r\nGET /s HTTP/1.1\r\n" + h + "\r\n",
       400, "without chunked as its final coding"},
      {"a coding before chunked", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
       501, "transfer coding 'gzip' is not implemented"},
      {"chunked twice", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       400, "malformed HTTP request"},
      {"Transfer-Encoding in HTTP/1.0", "POST /x HTTP/1.0\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
       400, "Transfer-Encoding in an HTTP/1.0 request"},
      // Section 7.1: chunk sizes.
      {"a chunk size that is not hex", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
       400, "bad chunk"},
      {"a negative chunk size", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n", 400,
       "bad chunk"},
      {"a chunk size past 2^64", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n0\r\n\r\n",
       400, "bad chunk"},
      {"a chunk over the body limit", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFF\r\nabc", 413,
       "exceeds the limit"},
      {"chunk data without its CRLF", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcX0\r\n\r\n", 400,
       "bad chunk"},
  };
  Server s;
  for (const Case& c : cases) {
    HttpConn conn(s.port, 60s);
    conn.send_raw(c.bytes);
    const auto r = conn.read();
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    EXPECT_THAT(r.body, HasSubstr(c.body)) << c.name;
    if (c.status == 200) {
      EXPECT_EQ(conn.request("GET", "/next").body, "GET /next ") << c.name << ": the connection stays framed";
    } else {
      if (c.bytes.find("HTTP/1.0") == std::string::npos) EXPECT_EQ(r.header("Connection"), "close") << c.name;
      EXPECT_TRUE(conn.closed_by_peer()) << c.name << ": the connection closes after a framing error";
    }
  }
  std::lock_guard lk(s.mu);
  EXPECT_EQ(std::count(s.targets.begin(), s.targets.end(), "/s"), 0) << "a body was read as a request";
}

// Requests pipelined after a chunked body (in one write) are answered in order, each once.
TEST(HttpLimits, RequestsPipelinedAfterAChunkedBodyAreAnsweredInOrder) {
  Server s;
  HttpConn c(s.port, 60s);
  c.send_raw("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;e=1\r\nde\r\n0\r\nT: v\r\n\r\n"
             "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
             "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nfg");
  EXPECT_EQ(c.read().body, "POST /a abcde");
  EXPECT_EQ(c.read().body, "GET /b ");
  EXPECT_EQ(c.read().body, "POST /c fg");
  EXPECT_EQ(c.request("GET", "/d").body, "GET /d ");
}

// 204 and 304 answers carry no body and no Content-Length, whatever the handler gave, and the
// connection stays framed; a handler's 1xx (never a final answer) becomes a 500.
TEST(HttpLimits, NoContentAndNotModifiedHaveNoBody) {
  Server s;
  HttpConn c(s.port, 60s);
  for (const char* path : {"/304", "/204"}) {
    const auto r = c.request("GET", path);
    EXPECT_EQ(r.status, std::stoi(path + 1));
    EXPECT_EQ(r.header("Content-Length"), "") << path;
    EXPECT_EQ(r.header("Transfer-Encoding"), "") << path;
    EXPECT_EQ(r.body, "") << path;
    EXPECT_EQ(c.request("GET", "/y").body, "GET /y ") << path << ": no stray body bytes before the next answer";
  }
  const auto r = c.request("GET", "/100");
  EXPECT_EQ(r.status, 500);
  EXPECT_THAT(r.body, HasSubstr("answered with status 100"));
  EXPECT_EQ(c.request("GET", "/y").body, "GET /y ");
}

// on_quiet runs once after a burst, when nothing has been busy for quiet_after; requests that
// keep coming postpone it, and the next burst's end calls it again.
TEST(HttpLimits, OnQuietRunsOnceABurstHasEnded) {
  HttpServerOptions opt;
  std::atomic<int> quiet{0};
  opt.quiet_after = 100ms;
  opt.on_quiet = [&] { ++quiet; };
  Server s(opt);
  HttpConn c(s.port, 60s);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(c.request("GET", "/x").status, 200);
  wait_for([&] { return quiet.load() >= 1; }, "on_quiet after the first burst");
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(quiet.load(), 1) << "on_quiet ran again with no request in between";
  EXPECT_EQ(c.request("GET", "/x").status, 200);
  wait_for([&] { return quiet.load() >= 2; }, "on_quiet after the second burst");
}
