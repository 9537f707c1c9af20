// The content-coding codec (server/compression.h over models/deflate.h): gzip and deflate round trips, raw deflate and
// multi-member gzip, a decompression bomb stopped at the limit, truncated and corrupt streams
// named with their byte offset, Content-Encoding parsing and Accept-Encoding negotiation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

#include "server/compression.h"
#include "server/http_error.h"

using namespace hg::server;
using ::testing::HasSubstr;

namespace {

// Text with some redundancy and every byte value, `n` bytes.
std::string sample(size_t n) {
  std::string s;
  s.reserve(n);
  uint32_t x = 12345;
  while (s.size() < n) {
    x = x * 1664525u + 1013904223u;
    s += (x >> 28) < 4 ? std::string("tensor ") : std::string(1, static_cast<char>(x >> 24));
  }
  s.resize(n);
  return s;
}

// A raw deflate stream (RFC 1951: no zlib header), as some clients send for "deflate".
std::string raw_deflate(const std::string& data) {
  const std::string z = hg::server::compress(data, hg::server::ContentCoding::Deflate);
  return z.substr(2, z.size() - 6);  // a zlib stream less its 2-byte header and 4-byte Adler-32
}

// The status and message of what inflate() throws; {0, ""} when it does not throw.
std::pair<int, std::string> inflate_error(const std::string& data, ContentCoding c, size_t max_output) {
  try {
    inflate(data, c, max_output);
  } catch (const std::exception& e) {
    return {http_status(e), e.what()};
  }
  return {0, ""};
}

TEST(Compression, GzipAndDeflateRoundTrip) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
    const std::string data = sample(n);
    for (ContentCoding c : {ContentCoding::Gzip, ContentCoding::Deflate}) {
      const std::string packed = compress(data, c);
      EXPECT_EQ(inflate(packed, c, n), data) << coding_name(c) << " of " << n << " bytes";
    }
  }
  EXPECT_EQ(compress("plain", ContentCoding::Identity), "plain");
  // The formats are the standard ones: zlib itself reads them back.
  const std::string data = sample(5000);
  std::string out(data.size(), '\0');
  uLongf out_len = out.size();
  const std::string zlib_stream = compress(data, ContentCoding::Deflate);
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(out.data()), &out_len,
                       reinterpret_cast<const Bytef*>(zlib_stream.data()), zlib_stream.size()), Z_OK);
  EXPECT_EQ(out, data);
  const std::string gz = compress(data, ContentCoding::Gzip);
  ASSERT_GE(gz.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);  // the gzip magic number
  EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
}

TEST(Compression, RawDeflateAndGzipMembersAreAccepted) {
  const std::string a = sample(70000), b = sample(1234);
  EXPECT_EQ(inflate(raw_deflate(a), ContentCoding::Deflate, a.size()), a);
  const std::string two = compress(a, ContentCoding::Gzip) + compress(b, ContentCoding::Gzip);
  EXPECT_EQ(inflate(two, ContentCoding::Gzip, a.size() + b.size()), a + b);
}

TEST(Compression, BombStopsAtTheLimit) {
  const std::string zeros(size_t{64} << 20, '\0');
  const std::string bomb = compress(zeros, ContentCoding::Gzip);
  ASSERT_LT(bomb.size(), size_t{1} << 20) << "64 MiB of zeros packs into well under 1 MiB";
  constexpr size_t kLimit = size_t{1} << 20;
  hg::Inflater in(hg::Deflated::Gzip, bomb, kLimit, "gzip body");
  int status = 0;
  std::string message;
  try {
    while (!in.step(size_t{256} << 10)) {
      ASSERT_LE(in.capacity(), 2 * (kLimit + 1)) << "output grows no further than the limit allows";
    }
  } catch (const hg::TooLargeError& e) {
    status = http_status(e);
    message = e.what();
  }
  EXPECT_EQ(status, 413);
  EXPECT_THAT(message, HasSubstr("exceeds the limit of 1048576 bytes"));
  EXPECT_LE(in.capacity(), 2 * (kLimit + 1));
  EXPECT_LT(in.input_offset(), bomb.size()) << "inflation stopped before reading the whole bomb";
  // Exactly at the limit is fine.
  EXPECT_EQ(inflate(compress(std::string(kLimit, 'x'), ContentCoding::Deflate), ContentCoding::Deflate, kLimit).size(),
            kLimit);
  EXPECT_EQ(inflate_error(compress(std::string(kLimit + 1, 'x'), ContentCoding::Deflate), ContentCoding::Deflate, kLimit)
                .first,
            413);
}

// A body of many empty gzip members makes no output: each step is bounded by the input it reads,
// so inflating it takes many short steps, not one long one.
TEST(Compression, EmptyMembersAreBoundedByInputPerStep) {
  const std::string member = compress("", ContentCoding::Gzip);
  std::string body;
  for (int i = 0; i < 20000; ++i) body += member;
  constexpr size_t kInput = 4096;
  hg::Inflater in(hg::Deflated::Gzip, body, 1 << 20, "gzip body");
  size_t steps = 0, offset = 0;
  for (bool done = false; !done; ++steps) {
    done = in.step(size_t{1} << 20, kInput);
    EXPECT_LE(in.input_offset() - offset, kInput) << "step " << steps << " read past its input bound";
    offset = in.input_offset();
    ASSERT_LT(steps, body.size()) << "no progress";
  }
  EXPECT_EQ(offset, body.size());
  EXPECT_GE(steps, body.size() / kInput);
  EXPECT_TRUE(in.take_output().empty());
  // A stream with data in it comes out whole through steps bounded by input alone.
  const std::string data = sample(300000), packed = compress(data, ContentCoding::Deflate);
  hg::Inflater d(hg::Deflated::Zlib, packed, data.size(), "deflate body");
  while (!d.step(size_t{1} << 20, 1000)) {
  }
  EXPECT_EQ(d.take_output(), data);
}

TEST(Compression, CapacityAfterStepBoundsTheGrowth) {
  const std::string data = sample(size_t{5} << 20);
  const std::string packed = compress(data, ContentCoding::Gzip);
  hg::Inflater in(hg::Deflated::Gzip, packed, data.size(), "gzip body");
  for (bool done = false; !done;) {
    const size_t bound = in.capacity_after_step(size_t{1} << 20);
    done = in.step(size_t{1} << 20);
    EXPECT_LE(in.capacity(), bound);
  }
  EXPECT_EQ(in.take_output(), data);
}

TEST(Compression, TruncatedStreamNamesTheOffset) {
  const std::string data = sample(200000);
  for (ContentCoding c : {ContentCoding::Gzip, ContentCoding::Deflate}) {
    const std::string packed = compress(data, c);
    const size_t cut = packed.size() / 2;
    auto [status, message] = inflate_error(packed.substr(0, cut), c, data.size());
    EXPECT_EQ(status, 400) << coding_name(c);
    EXPECT_THAT(message, HasSubstr(std::string(coding_name(c)) + " body is truncated"));
    EXPECT_THAT(message, HasSubstr("byte offset " + std::to_string(cut)));
  }
  EXPECT_EQ(inflate_error("", ContentCoding::Gzip, 100).first, 400);
}

TEST(Compression, CorruptStreamNamesTheOffset) {
  const std::string data = sample(100000);
  std::string packed = compress(data, ContentCoding::Gzip);
  std::string bad_magic = packed;
  bad_magic[0] = 'X';
  auto [status, message] = inflate_error(bad_magic, ContentCoding::Gzip, data.size());
  EXPECT_EQ(status, 400);
  EXPECT_THAT(message, HasSubstr("gzip body is corrupt at byte offset"));
  EXPECT_THAT(message, HasSubstr("incorrect header check"));
  // A wrong CRC-32 in the trailer: the data is read in full, the check fails near the end.
  std::string bad_crc = packed;
  bad_crc[bad_crc.size() - 8] ^= 0x55;
  std::tie(status, message) = inflate_error(bad_crc, ContentCoding::Gzip, data.size());
  EXPECT_EQ(status, 400);
  EXPECT_THAT(message, HasSubstr("incorrect data check"));
  EXPECT_THAT(message, HasSubstr("of " + std::to_string(packed.size())));
  // Trailing bytes after a zlib stream.
  std::tie(status, message) = inflate_error(compress(data, ContentCoding::Deflate) + "junk", ContentCoding::Deflate,
                                            data.size());
  EXPECT_EQ(status, 400);
  EXPECT_THAT(message, HasSubstr("4 trailing bytes"));
}

TEST(Compression, ContentEncodingValues) {
  EXPECT_EQ(parse_content_encoding(""), ContentCoding::Identity);
  EXPECT_EQ(parse_content_encoding("identity"), ContentCoding::Identity);
  EXPECT_EQ(parse_content_encoding(" GZip "), ContentCoding::Gzip);
  EXPECT_EQ(parse_content_encoding("x-gzip"), ContentCoding::Gzip);
  EXPECT_EQ(parse_content_encoding("deflate"), ContentCoding::Deflate);
  for (const char* bad : {"br", "gzip, br", "gzip,deflate", "compress", "zstd", "gzip;q=1"})
    EXPECT_FALSE(parse_content_encoding(bad).has_value()) << bad;
}

TEST(Compression, AcceptEncodingNegotiation) {
  const std::pair<const char*, ContentCoding> cases[] = {
      {"", ContentCoding::Identity},
      {"gzip", ContentCoding::Gzip},
      {"deflate", ContentCoding::Deflate},
      {"gzip, deflate", ContentCoding::Gzip},
      {"deflate, gzip", ContentCoding::Gzip},  // equal q: gzip first
      {"gzip;q=0.5, deflate;q=0.8", ContentCoding::Deflate},
      {"gzip;q=0", ContentCoding::Identity},
      {"gzip; q=0, deflate;q=0", ContentCoding::Identity},
      {"identity", ContentCoding::Identity},
      {"identity;q=1, gzip;q=0.5", ContentCoding::Identity},
      {"identity;q=0, gzip;q=0.1", ContentCoding::Gzip},
      {"*", ContentCoding::Gzip},
      {"*;q=0", ContentCoding::Identity},  // everything refused: identity all the same
      {"*;q=0, deflate", ContentCoding::Deflate},
      {"br, zstd", ContentCoding::Identity},
      {"br;q=1, gzip;q=0.3", ContentCoding::Gzip},
      {"gzip;q=bogus, deflate", ContentCoding::Deflate},  // a malformed entry is ignored
      {"gzip;q=2", ContentCoding::Identity},
      {"GZIP;Q=0.9", ContentCoding::Gzip},
      {" , ,gzip", ContentCoding::Gzip},
  };
  for (const auto& [header, want] : cases)
    EXPECT_EQ(coding_name(negotiate_encoding(header)), std::string(coding_name(want))) << "'" << header << "'";
}

TEST(Compression, EncodeResponseSetsTheHeaders) {
  HttpResponse r;
  r.body = sample(4000);
  const std::string plain = r.body;
  encode_response(r, ContentCoding::Gzip);
  EXPECT_EQ(inflate(r.body, ContentCoding::Gzip, plain.size()), plain);
  EXPECT_THAT(r.headers, ::testing::Contains(std::pair<std::string, std::string>("Content-Encoding", "gzip")));
  EXPECT_THAT(r.headers, ::testing::Contains(std::pair<std::string, std::string>("Vary", "Accept-Encoding")));
  HttpResponse id;
  id.body = plain;
  encode_response(id, ContentCoding::Identity);
  EXPECT_EQ(id.body, plain);
  EXPECT_EQ(id.headers.size(), 1u) << "only Vary";
}

}  // namespace
