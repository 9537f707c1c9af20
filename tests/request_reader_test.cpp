// RequestReader, the connection's sans-I/O request reader: the same requests and verdicts
// however reads split the bytes, framing bounds that hold across reads, and deadlines from the
// options on a clock the test drives.
#include "server/request_reader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace hg::server {
namespace {

using Event = RequestReader::Event;
using Time = RequestReader::Time;
using std::chrono::milliseconds;

// Feeds `bytes` in reads of `step` bytes (all at once for 0) at time `now` and takes each head's
// body; "GET /x|body" per request, then "<status> <message>" or "end".
std::vector<std::string> read_all(const HttpServerOptions& opt, const std::string& bytes, size_t step) {
  RequestReader r(opt);
  std::vector<std::string> out;
  size_t pos = 0;
  r.next_request(Time{});
  Event e = r.parse();
  for (;;) {
    if (e == Event::NeedMore) {
      if (pos == bytes.size()) {
        out.push_back("end");
        return out;
      }
      const auto room = r.prepare();
      const size_t n = std::min({step ? step : bytes.size(), room.size(), bytes.size() - pos});
      std::memcpy(room.data(), bytes.data() + pos, n);
      pos += n;
      e = r.commit(n, Time{});
    } else if (e == Event::Head) {
      r.read_body(opt.max_body_bytes, Time{});
      e = r.parse();
    } else if (e == Event::Body) {
      auto msg = r.release();
      out.push_back(std::string(msg.method_string()) + " " + std::string(msg.target()) + "|" + msg.body());
      r.next_request(Time{});
      e = r.parse();
    } else if (e == Event::Failed) {
      out.push_back(std::to_string(r.status()) + " " + r.message());
      return out;
    } else {
      out.push_back("closed");
      return out;
    }
  }
}

const std::string kChunkedHead = "POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";

TEST(RequestReader, PipelinedAndChunkedRequestsReadTheSameInOneReadOrByteByByte) {
  const std::string bytes = "\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n" + kChunkedHead +
                            "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-t: 1\r\n\r\n"
                            "POST /c HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nwxyz";
  const HttpServerOptions opt;
  const std::vector<std::string> whole = read_all(opt, bytes, 0);
  ASSERT_EQ(whole, (std::vector<std::string>{"GET /a|", "POST /v2/models/m/infer|abcde", "POST /c|wxyz", "end"}));
  for (size_t step : {1, 2, 3, 7, 100}) EXPECT_EQ(read_all(opt, bytes, step), whole) << "reads of " << step << " bytes";
}

TEST(RequestReader, ChunkHeadersAndTrailersOverTheirBoundAreRefusedWhereverTheReadsSplitThem) {
  const HttpServerOptions opt;
  const std::string limit = std::to_string(RequestReader::kMaxChunkHeaderBytes);
  const std::string long_ext = kChunkedHead + "2;" + std::string(1100, 'e') + "\r\nab\r\n0\r\n\r\n";
  const std::string long_trailer = kChunkedHead + "2\r\nab\r\n0\r\n" + std::string(300, 'x') + ": " +
                                   std::string(800, 'y') + "\r\n\r\n";
  const std::string fits = kChunkedHead + "2;" + std::string(900, 'e') + "\r\nab\r\n0\r\n\r\n";
  for (size_t step : {0, 1, 64, 1000}) {
    for (const std::string* bytes : {&long_ext, &long_trailer}) {
      const auto out = read_all(opt, *bytes, step);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0], "400 malformed HTTP request: a chunk header, chunk extension or trailer part exceeds " +
                            limit + " bytes")
          << "reads of " << step;
    }
    EXPECT_EQ(read_all(opt, fits, step), (std::vector<std::string>{"POST /v2/models/m/infer|ab", "end"}));
  }
}

TEST(RequestReader, ChunkExtensionsAndTrailersAreReadAsRfc9112SaysWhereverReadsEnd) {
  const HttpServerOptions opt;
  const std::string ok = kChunkedHead + "5 ;name=val; q = \"a \\\"b\\\" c\"\r\nhello\r\n0;last\r\nX-T: v\r\n\r\n";
  const std::vector<std::string> bad = {
      kChunkedHead + "5;=x\r\nhello\r\n0\r\n\r\n",              // an extension without a name
      kChunkedHead + "5;a=\"open\r\nhello\r\n0\r\n\r\n",       // a quoted string that does not end
      kChunkedHead + "5\nhello\r\n0\r\n\r\n",                   // a bare LF
      kChunkedHead + "5\r\nhello\r\n0\r\nno colon\r\n\r\n",  // a trailer that is not a field
  };
  for (size_t step : {0, 1, 2, 5, 9}) {
    EXPECT_EQ(read_all(opt, ok, step), (std::vector<std::string>{"POST /v2/models/m/infer|hello", "end"})) << step;
    for (const auto& b : bad) {
      const auto out = read_all(opt, b, step);
      ASSERT_EQ(out.size(), 1u) << b;
      EXPECT_EQ(out[0].rfind("400 malformed HTTP request: bad ", 0), 0u) << out[0];
      EXPECT_EQ(out, read_all(opt, b, 0)) << "reads of " << step << ": " << b;
    }
  }
  RequestReader r(opt);  // trailer fields are checked and dropped, not merged into the head
  r.next_request(Time{});
  const auto room = r.prepare();
  std::memcpy(room.data(), ok.data(), ok.size());
  ASSERT_EQ(r.commit(ok.size(), Time{}), Event::Head);
  r.read_body(1 << 20, Time{});
  ASSERT_EQ(r.parse(), Event::Body);
  const auto msg = r.release();
  EXPECT_EQ(msg.count("X-T"), 0u);
  EXPECT_EQ(msg.body(), "hello");
}

TEST(RequestReader, ChunkedFramingThatOutweighsItsDataIsRefused) {
  const HttpServerOptions opt;
  std::string bytes = kChunkedHead;
  for (int i = 0; i < 20000; ++i) bytes += "1;abcd\r\nz\r\n";  // 11 bytes of framing for each byte of data
  bytes += "0\r\n\r\n";
  const auto out = read_all(opt, bytes, 4096);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rfind("400 malformed HTTP request: chunked framing of ", 0), 0u) << out[0];
  EXPECT_EQ(read_all(opt, bytes, 0), out);
}

TEST(RequestReader, AHeadOrBodyOverItsLimitIsNamed) {
  HttpServerOptions opt;
  opt.max_header_bytes = 512;
  opt.max_body_bytes = 8;
  EXPECT_EQ(read_all(opt, "GET /a HTTP/1.1\r\nHost: h\r\nX: " + std::string(600, 'a') + "\r\n\r\n", 5),
            (std::vector<std::string>{"431 request header exceeds the limit of 512 bytes"}));
  EXPECT_EQ(read_all(opt, kChunkedHead + "5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n", 3),
            (std::vector<std::string>{"413 request body exceeds the limit of 8 bytes"}));
  EXPECT_EQ(read_all(opt, "GET /a HTTP/1.1\r\n\r\n", 1),
            (std::vector<std::string>{"400 malformed HTTP request: an HTTP/1.1 request without a Host header field"}));
}

TEST(RequestReader, DeadlinesFollowTheOptionsAndOnlyBodyDataIsProgress) {
  HttpServerOptions opt;
  opt.idle_timeout = milliseconds(60000);
  opt.header_timeout = milliseconds(10000);
  opt.min_body_bytes_per_sec = 1000;
  opt.body_grace = milliseconds(1000);
  RequestReader r(opt);
  const Time t0{};
  r.next_request(t0);
  EXPECT_EQ(r.parse(), Event::NeedMore);
  EXPECT_EQ(r.deadline(), t0 + opt.idle_timeout);
  auto feed = [&](const std::string& s, Time now) {
    const auto room = r.prepare();
    EXPECT_GE(room.size(), s.size());
    std::memcpy(room.data(), s.data(), s.size());
    return r.commit(s.size(), now);
  };
  const Time t1 = t0 + milliseconds(5000);
  EXPECT_EQ(feed("POST /v2/models/m/infer HTTP/1.1\r\n", t1), Event::NeedMore);
  EXPECT_EQ(r.deadline(), t1 + opt.header_timeout);  // from the first byte, not from the last
  EXPECT_EQ(feed("Host: h\r\nTransfer-Encoding: chunked\r\n\r\n", t1 + milliseconds(9000)), Event::Head);
  EXPECT_EQ(r.deadline(), Time::max());  // the head is the connection's to route
  const Time tb = t1 + milliseconds(9500);
  r.read_body(1 << 20, tb);
  EXPECT_EQ(r.parse(), Event::NeedMore);
  EXPECT_EQ(r.deadline(), tb + milliseconds(2000));  // grace + (0 + rate) / rate
  EXPECT_EQ(feed("400;" + std::string(900, 'e'), tb + milliseconds(100)), Event::NeedMore);
  EXPECT_EQ(r.deadline(), tb + milliseconds(2000)) << "chunk extension bytes moved the deadline";
  EXPECT_EQ(feed("\r\n" + std::string(1000, 'd'), tb + milliseconds(200)), Event::NeedMore);
  EXPECT_EQ(r.deadline(), tb + milliseconds(3000));  // 1000 bytes of data: one second more
}

}  // namespace
}  // namespace hg::server
