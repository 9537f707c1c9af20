// Compressed requests and responses end to end: hgraph-serve as a child process on 127.0.0.1
// (ephemeral port, a 2 MiB body limit) over digits_mlp and an identity model "echo" (FP32
// [1, 65536]). gzip and deflate (zlib and raw) request bodies, JSON and binary tensors
// (Inference-Header-Content-Length counts the decompressed body), a decompression bomb (413,
// the server still answers), corrupt and truncated streams (400), unknown codings (415),
// Accept-Encoding negotiation and the C++ client compressing both ways.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "server/client.h"
#include "server/compression.h"
#include "tests/server_e2e.h"

namespace hg::test {
namespace {

using ::testing::HasSubstr;
using server::ContentCoding;

constexpr size_t kMaxBody = size_t{2} << 20;
constexpr size_t kEchoElements = 65536;
const std::string kInfer = "/v2/models/digits_mlp/infer";
const std::string kEcho = "/v2/models/echo/infer";

std::string gzip(std::string_view s) { return server::compress(s, ContentCoding::Gzip); }
std::string zlib(std::string_view s) { return server::compress(s, ContentCoding::Deflate); }

std::string raw_deflate(const std::string& data) {
  const std::string z = hg::server::compress(data, hg::server::ContentCoding::Deflate);
  return z.substr(2, z.size() - 6);  // a zlib stream less its 2-byte header and 4-byte Adler-32
}

// Floats that vary smoothly (they compress a little, as real activations do).
std::vector<float> wave(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 0.01f) * 3.0f;
  return v;
}

std::string bytes_of(const std::vector<float>& v) {
  std::string b(v.size() * sizeof(float), '\0');
  std::memcpy(b.data(), v.data(), b.size());  // the test hosts are little-endian
  return b;
}

// Element-wise |got - want| <= tol; a NaN or infinity on either side fails.
void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i]) && std::isfinite(want[i])) << what << " [" << i << "]: " << got[i] << " vs " << want[i];
    EXPECT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
  }
}

// A binary-tensor request for "echo": the JSON header, then the tensor's bytes.
struct BinaryRequest {
  std::string header, body;
};
BinaryRequest echo_request(const std::vector<float>& x, bool binary_output) {
  json j = {{"inputs", {{{"name", "IN"}, {"shape", {1, x.size()}}, {"datatype", "FP32"},
                         {"parameters", {{"binary_data_size", x.size() * sizeof(float)}}}}}}};
  if (binary_output) j["outputs"] = {{{"name", "OUT"}, {"parameters", {{"binary_data", true}}}}};
  BinaryRequest r;
  r.header = j.dump();
  r.body = r.header + bytes_of(x);
  return r;
}

class ServerCompressionTest : public SharedServerTest {
 protected:
  static void SetUpTestSuite() {
    repo_ = std::make_unique<TempRepo>("compression");
    repo_->add_digits("digits_mlp", 1);
    repo_->write_config("digits_mlp", {{"max_batch_size", 8}});
    repo_->write_config("echo", {{"platform", "identity"},
                                 {"max_batch_size", 1},
                                 {"input", {{{"name", "IN"}, {"datatype", "FP32"}, {"dims", {kEchoElements}}}}},
                                 {"output", {{{"name", "OUT"}, {"datatype", "FP32"}, {"dims", {kEchoElements}}}}}});
    fs::create_directories(repo_->dir() / "echo" / "1");
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model-repository", repo_->str(), "--max-body-bytes", std::to_string(kMaxBody), "--http-threads", "2"});
  }
};

TEST_F(ServerCompressionTest, GzipJsonInferGivesTheSameLogits) {
  const std::string body = digits_body({5, 6});
  const std::vector<float> want = logits_of(post(kInfer, body).body);
  ASSERT_EQ(want.size(), 20u);
  for (const char* coding : {"gzip", "x-gzip", "deflate", "GZIP"}) {
    const std::string packed = std::string(coding) == "deflate" ? zlib(body) : gzip(body);
    HttpReply r = post(kInfer, packed, {{"Content-Encoding", coding}});
    ASSERT_EQ(r.status, 200) << coding << ": " << r.body;
    EXPECT_TRUE(r.header("Content-Encoding").empty()) << "not asked for";
    expect_near_all(logits_of(r.body), want, 1e-4f, coding);
  }
}

TEST_F(ServerCompressionTest, DeflateBinaryTensorRequestCountsTheDecompressedBody) {
  const std::vector<float> x = wave(kEchoElements);
  const BinaryRequest req = echo_request(x, true);
  ASSERT_GT(req.body.size(), size_t{256} << 10);
  for (const bool raw : {false, true}) {
    const std::string packed = raw ? raw_deflate(req.body) : zlib(req.body);
    ASSERT_LT(packed.size(), req.body.size());
    // Inference-Header-Content-Length is the JSON header's length in the decompressed body.
    HttpReply r = post(kEcho, packed,
                       {{"Content-Type", "application/octet-stream"},
                        {"Content-Encoding", "deflate"},
                        {"Inference-Header-Content-Length", std::to_string(req.header.size())}});
    ASSERT_EQ(r.status, 200) << (raw ? "raw deflate: " : "zlib: ") << r.body.substr(0, 300);
    const size_t n = std::stoul(r.header("Inference-Header-Content-Length"));
    ASSERT_EQ(r.body.size(), n + x.size() * sizeof(float));
    EXPECT_EQ(json::parse(r.body.substr(0, n))["outputs"][0]["shape"], json::array({1, kEchoElements}));
    EXPECT_TRUE(r.body.compare(n, std::string::npos, bytes_of(x)) == 0) << "the echo differs from the input";
  }
  // The compressed size as Inference-Header-Content-Length would cut the JSON header: a 400.
  const std::string packed = zlib(req.body);
  HttpReply bad = post(kEcho, packed,
                       {{"Content-Encoding", "deflate"}, {"Inference-Header-Content-Length", "5"}});
  EXPECT_EQ(bad.status, 400) << bad.body;
}

TEST_F(ServerCompressionTest, BombGets413AndTheServerStillAnswers) {
  const std::string bomb = gzip(std::string(size_t{64} << 20, '\0'));  // 64 MiB of zeros in ~64 KiB
  ASSERT_LT(bomb.size(), kMaxBody);
  HttpReply r = post(kInfer, bomb, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_THAT(error_of(r.body), HasSubstr("decompressed gzip body exceeds the limit of " + std::to_string(kMaxBody)));
  EXPECT_THAT(error_of(r.body), HasSubstr("POST " + kInfer));
  // The body was read whole: the connection stays usable, and other connections were served.
  EXPECT_EQ(conn_->request("GET", "/v2/health/ready").status, 200);
  HttpConn probe(server_->port(), std::chrono::seconds(10));
  EXPECT_EQ(probe.request("GET", "/v2/health/live").status, 200);
  EXPECT_EQ(logits_of(post(kInfer, digits_body({1})).body).size(), 10u);
}

TEST_F(ServerCompressionTest, CorruptOrTruncatedBodyGets400NamingTheOffset) {
  const std::string packed = gzip(digits_body({7}));
  HttpReply cut = post(kInfer, packed.substr(0, packed.size() / 2), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(cut.status, 400) << cut.body;
  EXPECT_THAT(error_of(cut.body), HasSubstr("gzip body is truncated: its stream ends at byte offset " +
                                            std::to_string(packed.size() / 2)));
  std::string corrupt = packed;
  corrupt[0] = 'x';
  HttpReply bad = post(kInfer, corrupt, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_THAT(error_of(bad.body), HasSubstr("gzip body is corrupt at byte offset"));
  // A gzip body sent as deflate is not a zlib stream either.
  HttpReply wrong = post(kInfer, packed, {{"Content-Encoding", "deflate"}});
  EXPECT_EQ(wrong.status, 400) << wrong.body;
  EXPECT_THAT(error_of(wrong.body), HasSubstr("deflate body"));
  EXPECT_EQ(conn_->request("GET", "/v2/health/live").status, 200) << "the connection stays open";
}

TEST_F(ServerCompressionTest, UnknownEncodingGets415) {
  const std::string body = digits_body({1});
  for (const char* coding : {"br", "gzip, br", "zstd"}) {
    HttpConn c(server_->port());
    HttpReply r = c.request("POST", kInfer, body, {{"Content-Encoding", coding}});
    EXPECT_EQ(r.status, 415) << coding << ": " << r.body;
    EXPECT_THAT(error_of(r.body), HasSubstr("is not supported")) << coding;
    EXPECT_EQ(r.header("Accept-Encoding"), "gzip, deflate") << coding;
  }
  HttpConn c(server_->port());
  HttpReply two = c.request("POST", kInfer, gzip(body), {{"Content-Encoding", "gzip"}, {"Content-Encoding", "gzip"}});
  EXPECT_EQ(two.status, 415) << "two codings stacked in two fields: " << two.body;
  // Only inference and generate bodies may be compressed.
  HttpConn c2(server_->port());
  HttpReply index = c2.request("POST", "/v2/repository/index", gzip("{}"), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(index.status, 415) << index.body;
  EXPECT_THAT(error_of(index.body), HasSubstr("takes no compressed body"));
  // identity is no coding at all.
  EXPECT_EQ(post(kInfer, body, {{"Content-Encoding", "identity"}}).status, 200);
}

TEST_F(ServerCompressionTest, GenerateAcceptsCompressedBodies) {
  // digits_mlp does not generate: the 400 says so, after the body was inflated and parsed.
  HttpReply r = post("/v2/models/digits_mlp/generate", gzip(R"({"text_input":"hi"})"), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(error_of(r.body), HasSubstr("does not generate text"));
  HttpReply cut = post("/v2/models/digits_mlp/generate_stream", "\x1f\x8b", {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(cut.status, 400) << cut.body;
  EXPECT_THAT(error_of(cut.body), HasSubstr("gzip body is truncated"));
}

TEST_F(ServerCompressionTest, AcceptEncodingCompressesTheAnswer) {
  const std::string body = digits_body({8, 9});
  HttpReply plain = post(kInfer, body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.header("Vary"), "Accept-Encoding");
  for (const auto& [accept, coding] : std::vector<std::pair<std::string, ContentCoding>>{
           {"gzip", ContentCoding::Gzip}, {"deflate", ContentCoding::Deflate},
           {"br;q=1, deflate;q=0.5, gzip;q=0.4", ContentCoding::Deflate}, {"*", ContentCoding::Gzip}}) {
    HttpReply r = post(kInfer, body, {{"Accept-Encoding", accept}});
    ASSERT_EQ(r.status, 200) << accept << ": " << r.body;
    EXPECT_EQ(r.header("Content-Encoding"), server::coding_name(coding)) << accept;
    EXPECT_EQ(r.header("Vary"), "Accept-Encoding") << accept;
    const std::string decoded = server::inflate(r.body, coding, 1 << 20);
    EXPECT_EQ(json::parse(decoded)["model_name"], "digits_mlp");
    expect_near_all(logits_of(decoded), logits_of(plain.body), 1e-4f, accept.c_str());
  }
  // A binary answer: Inference-Header-Content-Length counts the JSON in the decompressed body.
  const std::vector<float> x = wave(kEchoElements);
  const BinaryRequest req = echo_request(x, true);
  HttpReply r = post(kEcho, req.body,
                     {{"Inference-Header-Content-Length", std::to_string(req.header.size())},
                      {"Accept-Encoding", "gzip"}});
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
  ASSERT_EQ(r.header("Content-Encoding"), "gzip");
  const std::string decoded = server::inflate(r.body, ContentCoding::Gzip, kMaxBody);
  const size_t n = std::stoul(r.header("Inference-Header-Content-Length"));
  ASSERT_EQ(decoded.size(), n + x.size() * sizeof(float));
  EXPECT_NO_THROW(json::parse(decoded.substr(0, n)));
  EXPECT_TRUE(decoded.compare(n, std::string::npos, bytes_of(x)) == 0);
  // Errors are not compressed.
  HttpReply err = post("/v2/models/nope/infer", body, {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(err.status, 404);
  EXPECT_TRUE(err.header("Content-Encoding").empty());
}

TEST_F(ServerCompressionTest, IdentityOrQZeroIsNotCompressed) {
  const std::string body = digits_body({4});
  for (const char* accept : {"gzip;q=0", "identity", "*;q=0", "identity;q=1, gzip;q=0.5", "br", ""}) {
    HttpReply r = post(kInfer, body, {{"Accept-Encoding", accept}});
    ASSERT_EQ(r.status, 200) << accept << ": " << r.body;
    EXPECT_TRUE(r.header("Content-Encoding").empty()) << "'" << accept << "' got " << r.header("Content-Encoding");
    EXPECT_EQ(logits_of(r.body).size(), 10u) << accept;
  }
  // Endpoints other than infer and generate answer uncompressed whatever is asked.
  HttpReply meta = conn_->request("GET", "/v2/models/digits_mlp", {}, {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(meta.status, 200);
  EXPECT_TRUE(meta.header("Content-Encoding").empty());
}

TEST_F(ServerCompressionTest, ClientCompressesBothWays) {
  server::Client plain(server_->url());
  const std::vector<float> x = digits_sample(3);
  const auto want = plain.infer("digits_mlp", {{"input", {1, 64}, x}});
  ASSERT_EQ(want.size(), 1u);
  for (const auto& [req, resp] : std::vector<std::pair<ContentCoding, ContentCoding>>{
           {ContentCoding::Gzip, ContentCoding::Gzip}, {ContentCoding::Deflate, ContentCoding::Deflate},
           {ContentCoding::Gzip, ContentCoding::Identity}, {ContentCoding::Identity, ContentCoding::Deflate}}) {
    server::ClientOptions o;
    o.request_compression = req;
    o.response_compression = resp;
    server::Client c(server_->url(), o);
    const std::string what = std::string(server::coding_name(req)) + " / " + server::coding_name(resp);
    const auto got = c.infer("digits_mlp", {{"input", {1, 64}, x}});
    ASSERT_EQ(got.size(), 1u) << what;
    expect_near_all(got[0].as<float>(), want[0].as<float>(), 1e-4f, what.c_str());
    // A binary tensor both ways, through the identity model.
    const std::vector<float> w = wave(kEchoElements);
    server::Tensor in("IN", {1, static_cast<int64_t>(kEchoElements)}, w);
    in.binary = true;
    server::InferOptions io;
    io.binary_output = true;
    const server::InferResult r = c.infer_result("echo", {in}, io);
    EXPECT_EQ(r.output("OUT").as<float>(), w) << what;
  }
}

}  // namespace
}  // namespace hg::test
