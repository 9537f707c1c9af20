// The HTTP layer (server/http_server.h) inflating compressed bodies, over real sockets on
// 127.0.0.1: the handler sees the plain body without Content-Encoding, inflating counts against
// the bytes in flight (503 beyond them, and the budget is whole again afterwards), and bodies
// are refused with 415 where on_head does not allow them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

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
