// Inference through hg::server::Client against the in-process fake server: the request body
// byte for byte (JSON, the binary tensor extension as in the spec's example, raw mode), every
// datatype there and back in JSON and binary, request parameters, the response parsed, error
// statuses; and the client Tensor on its own (typed construction and accessors, checks).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/client.h"
#include "server/infer_codec.h"
#include "tests/client_fake_server.h"

namespace {

using hg::server::Client;
using hg::server::HttpRequest;
using hg::server::HttpResponse;
using hg::server::InferOptions;
using hg::server::Tensor;
using hg::server::WireType;
using hg::test::always;
using hg::test::answer;
using hg::test::client_error;
using hg::test::FakeServer;
using json = nlohmann::json;

template <class T>
std::string le_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// Echoes the inputs back as outputs with the server's codec, binary where the request asked.
// A raw request's input (no name or type on the wire) comes back as UINT8 "raw".
HttpResponse echo(const HttpRequest& r) {
  std::optional<size_t> header_length;
  if (!r.header("Inference-Header-Content-Length").empty())
    header_length = std::stoull(std::string(r.header("Inference-Header-Content-Length")));
  hg::server::InferRequest req = hg::server::decode_infer_request(r.body, header_length, {});
  hg::server::InferResponse resp;
  resp.model_name = "echo";
  resp.model_version = "3";
  resp.id = req.id;
  resp.parameters = req.parameters;
  for (auto& t : req.inputs) {
    if (req.raw) {
      t.name = "raw";
      t.datatype = WireType::UINT8;
      t.shape = {static_cast<int64_t>(t.data.size())};
    }
    t.binary = req.binary_data_output || req.raw;
    for (const auto& o : req.outputs)
      if (o.name == t.name && o.binary) t.binary = *o.binary;
    t.parameters = json::object();
    resp.outputs.push_back(std::move(t));
  }
  hg::server::EncodedBody e = hg::server::encode_infer_response(resp);
  HttpResponse out = answer(200, std::move(e.body), e.content_type);
  if (e.header_length) out.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*e.header_length));
  return out;
}

// ---- the spec's examples ----------------------------------------------------------------

TEST(ClientInferTest, JsonRequestAndResponseOfTheSpecExample) {
  FakeServer srv(always(200, R"({"model_name":"mymodel","model_version":"1","id":"42",
      "outputs":[{"name":"output0","shape":[3,2],"datatype":"FP32","data":[1.0,1.1,2.0,2.1,3.0,3.1]}]})"));
  Client c(srv.url());
  InferOptions opt;
  opt.id = "42";
  opt.outputs = {"output0"};
  auto r = c.infer_result("mymodel",
                          {Tensor("input0", {2, 2}, std::vector<uint32_t>{1, 2, 3, 4}),
                           Tensor("input1", {3}, std::vector<bool>{true, false, true})},
                          opt);
  const HttpRequest sent = srv.last();
  EXPECT_EQ(sent.method, "POST");
  EXPECT_EQ(sent.target, "/v2/models/mymodel/infer");
  EXPECT_EQ(sent.header("Content-Type"), "application/json");
  EXPECT_EQ(sent.header("Inference-Header-Content-Length"), "");
  EXPECT_EQ(json::parse(sent.body), json::parse(R"({"id":"42",
      "inputs":[{"name":"input0","shape":[2,2],"datatype":"UINT32","data":[1,2,3,4]},
                {"name":"input1","shape":[3],"datatype":"BOOL","data":[true,false,true]}],
      "outputs":[{"name":"output0"}]})"));
  EXPECT_EQ(r.model_name, "mymodel");
  EXPECT_EQ(r.model_version, "1");
  EXPECT_EQ(r.id, "42");
  ASSERT_EQ(r.outputs.size(), 1u);
  const Tensor& o = r.output("output0");
  EXPECT_EQ(o.datatype, WireType::FP32);
  EXPECT_EQ(o.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_FALSE(o.binary);
  EXPECT_EQ(o.as<float>(), (std::vector<float>{1.0f, 1.1f, 2.0f, 2.1f, 3.0f, 3.1f}));
}

TEST(ClientInferTest, BinaryRequestAndResponseOfTheSpecExample) {
  const std::vector<float> out_values = {1.0f, 1.1f, 2.0f, 2.1f, 3.0f, 3.1f};
  const std::string out_header =
      R"({"model_name":"mymodel","outputs":[{"name":"output0","shape":[3,2],"datatype":"FP32","parameters":{"binary_data_size":24}}]})";
  FakeServer srv([&](const HttpRequest&) {
    HttpResponse r = answer(200, out_header + le_bytes(out_values), "application/octet-stream");
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(out_header.size()));
    return r;
  });
  Client c(srv.url());
  Tensor in0("input0", {2, 2}, std::vector<uint32_t>{1, 2, 3, 4});
  Tensor in1("input1", {3}, std::vector<bool>{true, false, true});
  in0.binary = in1.binary = true;
  InferOptions opt;
  opt.outputs = {{"output0", true}};
  auto r = c.infer_result("mymodel", {in0, in1}, opt);

  // The request: the JSON header (the spec's, in our key order), then 16 + 3 bytes.
  const std::string header =
      R"({"inputs":[{"name":"input0","datatype":"UINT32","shape":[2,2],"parameters":{"binary_data_size":16}},)"
      R"({"name":"input1","datatype":"BOOL","shape":[3],"parameters":{"binary_data_size":3}}],)"
      R"("outputs":[{"name":"output0","parameters":{"binary_data":true}}]})";
  const std::string payload = std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0\x04\0\0\0", 16) + std::string("\x01\x00\x01", 3);
  const HttpRequest sent = srv.last();
  EXPECT_EQ(sent.header("Content-Type"), "application/octet-stream");
  EXPECT_EQ(sent.header("Inference-Header-Content-Length"), std::to_string(header.size()));
  EXPECT_EQ(sent.header("Content-Length"), std::to_string(header.size() + 19));
  EXPECT_EQ(sent.body, header + payload);
  EXPECT_EQ(json::parse(sent.body.substr(0, header.size())), json::parse(R"(
      {"inputs":[{"name":"input0","shape":[2,2],"datatype":"UINT32","parameters":{"binary_data_size":16}},
                 {"name":"input1","shape":[3],"datatype":"BOOL","parameters":{"binary_data_size":3}}],
       "outputs":[{"name":"output0","parameters":{"binary_data":true}}]})"));

  EXPECT_EQ(r.model_name, "mymodel");
  EXPECT_EQ(r.model_version, "");
  EXPECT_FALSE(r.id);
  const Tensor& o = r.output("output0");
  EXPECT_TRUE(o.binary);
  EXPECT_EQ(o.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(o.as<float>(), out_values);
}

TEST(ClientInferTest, RawModeSendsOnlyTheInputBytes) {
  FakeServer srv(echo);
  Client c(srv.url());
  const std::vector<int32_t> values = {7, -8, 9};
  InferOptions opt;
  opt.raw = true;
  opt.version = "3";
  auto r = c.infer_result("m", {Tensor("x", {1, 3}, values)}, opt);
  const HttpRequest sent = srv.last();
  EXPECT_EQ(sent.target, "/v2/models/m/versions/3/infer");
  EXPECT_EQ(sent.header("Inference-Header-Content-Length"), "0");
  EXPECT_EQ(sent.header("Content-Type"), "application/octet-stream");
  EXPECT_EQ(sent.body, le_bytes(values));
  // Outputs of a raw request come back binary.
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.outputs[0].binary);
  EXPECT_EQ(r.outputs[0].data, le_bytes(values));
  const size_t before = srv.requests().size();
  EXPECT_THROW(c.infer("m", {Tensor("a", {1}, std::vector<float>{1}), Tensor("b", {1}, std::vector<float>{2})}, opt),
               hg::InvalidArgument);
  EXPECT_EQ(srv.requests().size(), before);  // refused before sending
}

// ---- every datatype, JSON and binary ----------------------------------------------------

std::vector<Tensor> one_of_each() {
  return {
      Tensor("bool", {2, 2}, std::vector<bool>{true, false, false, true}),
      Tensor("u8", {3}, std::vector<uint8_t>{0, 1, 255}),
      Tensor("u16", {2}, std::vector<uint16_t>{0, 65535}),
      Tensor("u32", {2}, std::vector<uint32_t>{1, 4294967295u}),
      Tensor("u64", {2}, std::vector<uint64_t>{0, std::numeric_limits<uint64_t>::max()}),
      Tensor("i8", {2}, std::vector<int8_t>{-128, 127}),
      Tensor("i16", {2}, std::vector<int16_t>{-32768, 32767}),
      Tensor("i32", {1, 2}, std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 5}),
      Tensor("i64", {2}, std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}),
      Tensor("f16", {2}, std::vector<hg::f16>{hg::f16::from_float(1.5f), hg::f16::from_float(-65504.0f)}),
      Tensor("f32", {3}, std::vector<float>{0.1f, -3.4028235e38f, 1e-45f}),
      Tensor("f64", {2}, std::vector<double>{0.1, -1e308}),
      Tensor("bf16", {2}, std::vector<hg::bf16>{hg::bf16::from_float(3.0f), hg::bf16::from_float(-0.5f)}),
      Tensor("bytes", {3}, std::vector<std::string>{"hello", std::string("a\0b", 3), "\xc3\xa9t\xc3\xa9"}),
  };
}

void expect_same(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.datatype, want.datatype) << want.name;
  EXPECT_EQ(got.shape, want.shape) << want.name;
  EXPECT_EQ(got.data, want.data) << want.name;
}

TEST(ClientInferTest, EveryDatatypeThereAndBackAsJson) {
  FakeServer srv(echo);
  Client c(srv.url());
  const auto in = one_of_each();
  auto out = c.infer("echo", in);
  EXPECT_EQ(srv.last().header("Inference-Header-Content-Length"), "");
  const json body = json::parse(srv.last().body);
  EXPECT_EQ(body["inputs"][13]["data"], json({"hello", std::string("a\0b", 3), "\xc3\xa9t\xc3\xa9"}));
  EXPECT_EQ(body["inputs"][4]["data"][1], std::numeric_limits<uint64_t>::max());
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    expect_same(out[i], in[i]);
    EXPECT_FALSE(out[i].binary);
  }
  EXPECT_EQ(out[0].as<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(out[4].as<uint64_t>()[1], std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(out[8].as<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(out[9].as<hg::f16>()[1].to_float(), -65504.0f);
  EXPECT_EQ(out[10].as<float>()[0], 0.1f);
  EXPECT_EQ(out[11].as<double>()[0], 0.1);
  EXPECT_EQ(out[12].as<hg::bf16>()[1].to_float(), -0.5f);
  EXPECT_EQ(out[13].as<std::string>(), (std::vector<std::string>{"hello", std::string("a\0b", 3), "\xc3\xa9t\xc3\xa9"}));
}

TEST(ClientInferTest, EveryDatatypeThereAndBackAsBinary) {
  FakeServer srv(echo);
  Client c(srv.url());
  auto in = one_of_each();
  for (auto& t : in) t.binary = true;
  InferOptions opt;
  opt.binary_output = true;
  auto out = c.infer("echo", in, opt);
  const HttpRequest sent = srv.last();
  const size_t header = std::stoull(std::string(sent.header("Inference-Header-Content-Length")));
  std::string tail;
  for (const auto& t : in) tail += t.data;
  EXPECT_EQ(sent.body.substr(header), tail);
  // BYTES: a 4-byte little-endian length before each element.
  EXPECT_EQ(in[13].data, std::string("\x05\0\0\0hello\x03\0\0\0a\0b\x05\0\0\0\xc3\xa9t\xc3\xa9", 25));
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    expect_same(out[i], in[i]);
    EXPECT_TRUE(out[i].binary);
  }
}

TEST(ClientInferTest, MixedJsonAndBinaryInputsAndPerOutputBinary) {
  FakeServer srv(echo);
  Client c(srv.url());
  Tensor a("a", {2}, std::vector<float>{1, 2});
  Tensor b("b", {2}, std::vector<int64_t>{3, 4});
  Tensor s("s", {1}, std::vector<std::string>{"x"});
  b.binary = true;
  InferOptions opt;
  opt.binary_output = true;
  opt.outputs = {{"a", false}, "b", {"s", true}};  // a: JSON despite binary_output
  auto out = c.infer("echo", {a, b, s}, opt);
  const HttpRequest sent = srv.last();
  const size_t header = std::stoull(std::string(sent.header("Inference-Header-Content-Length")));
  const json j = json::parse(sent.body.substr(0, header));
  EXPECT_EQ(j["inputs"][0]["data"], json({1.0, 2.0}));
  EXPECT_EQ(j["inputs"][1]["parameters"], json({{"binary_data_size", 16}}));
  EXPECT_FALSE(j["inputs"][1].contains("data"));
  EXPECT_EQ(j["parameters"], json({{"binary_data_output", true}}));
  EXPECT_EQ(j["outputs"], json::parse(R"([{"name":"a","parameters":{"binary_data":false}},{"name":"b"},
                                          {"name":"s","parameters":{"binary_data":true}}])"));
  EXPECT_EQ(sent.body.substr(header), b.data);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_FALSE(out[0].binary);
  EXPECT_TRUE(out[1].binary);
  EXPECT_TRUE(out[2].binary);
  EXPECT_EQ(out[1].as<int64_t>(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(out[2].as<std::string>(), std::vector<std::string>{"x"});
}

// ---- request options, the FP32 convenience ---------------------------------------------

TEST(ClientInferTest, IdPriorityTimeoutAndParameters) {
  FakeServer srv(echo);
  Client c(srv.url());
  InferOptions opt;
  opt.id = "req-9";
  opt.priority = 2;
  opt.timeout_us = 50000;
  opt.parameters = {{"sequence_id", 17}, {"sequence_start", true}};
  opt.outputs = {{"x", std::nullopt, {{"classification", 3}}}};
  auto r = c.infer_result("echo", {Tensor("x", {1}, std::vector<float>{1})}, opt);
  const json j = json::parse(srv.last().body);
  EXPECT_EQ(j["id"], "req-9");
  EXPECT_EQ(j["parameters"],
            json({{"sequence_id", 17}, {"sequence_start", true}, {"priority", 2}, {"timeout", 50000}}));
  EXPECT_EQ(j["outputs"], json::parse(R"([{"name":"x","parameters":{"classification":3}}])"));
  EXPECT_EQ(r.id, "req-9");
  EXPECT_EQ(r.model_version, "3");
  EXPECT_EQ(r.parameters["sequence_id"], 17);
}

TEST(ClientInferTest, Fp32ConvenienceSendsShortestDecimals) {
  FakeServer srv(echo);
  Client c(srv.url());
  const std::vector<float> x = {0.1f, 1.0f / 3.0f, -2.5f, 16.0f};
  auto out = c.infer("echo", {{"input", {1, 4}, x}});
  const json j = json::parse(srv.last().body);
  EXPECT_EQ(j["inputs"][0]["datatype"], "FP32");
  EXPECT_NE(srv.last().body.find("[0.1,0.33333334,-2.5,16]"), std::string::npos) << srv.last().body;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].as<float>(), x);
}

// ---- errors -----------------------------------------------------------------------------

TEST(ClientInferTest, ErrorStatusesAndBadResponses) {
  HttpResponse canned = answer(400, R"({"error":"unexpected shape for input 'input0' for model 'mymodel': expected [-1,4], got [2,2]"})");
  FakeServer srv([&](const HttpRequest&) { return canned; });
  Client c(srv.url());
  const std::vector<Tensor> in = {Tensor("input0", {2, 2}, std::vector<float>{1, 2, 3, 4})};
  auto [status, msg] = client_error([&] { c.infer("mymodel", in); });
  EXPECT_EQ(status, 400);
  EXPECT_EQ(msg, "HTTP 400: unexpected shape for input 'input0' for model 'mymodel': expected [-1,4], got [2,2]");
  canned = answer(503, R"({"error":"Exceeds maximum queue size"})");
  canned.headers.emplace_back("Retry-After", "1");
  EXPECT_EQ(client_error([&] { c.infer("mymodel", in); }).first, 503);
  canned = answer(504, R"({"error":"Request timeout expired"})");
  EXPECT_EQ(client_error([&] { c.infer("mymodel", in); }).first, 504);

  // 200s the client cannot read are ClientErrors with status 200 that say what was wrong.
  auto bad = [&](HttpResponse r) {
    canned = std::move(r);
    auto [st, m] = client_error([&] { c.infer("mymodel", in); });
    EXPECT_EQ(st, 200);
    return m;
  };
  EXPECT_NE(bad(answer(200, "not json")).find("bad inference response"), std::string::npos);
  EXPECT_NE(bad(answer(200, R"({"outputs":[]})")).find("model_name"), std::string::npos);
  HttpResponse lying = answer(200, R"({"model_name":"m","outputs":[]})");
  lying.headers.emplace_back("Inference-Header-Content-Length", "x1");
  EXPECT_NE(bad(lying).find("bad Inference-Header-Content-Length 'x1'"), std::string::npos);
  lying.headers.back().second = "999";
  EXPECT_NE(bad(lying).find("bad inference response"), std::string::npos);
  HttpResponse short_binary = answer(200,
      R"({"model_name":"m","outputs":[{"name":"o","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]})" +
      std::string(4, '\0'));
  short_binary.headers.emplace_back("Inference-Header-Content-Length", std::to_string(short_binary.body.size() - 4));
  EXPECT_NE(bad(short_binary).find("'o'"), std::string::npos);
}

TEST(ClientInferTest, MissingOutputNamesTheOnesThereAre) {
  FakeServer srv(echo);
  Client c(srv.url());
  auto r = c.infer_result("echo", {Tensor("a", {1}, std::vector<float>{1}), Tensor("b", {1}, std::vector<float>{2})});
  EXPECT_EQ(r.output("b").as<float>(), std::vector<float>{2});
  try {
    r.output("logits");
    FAIL() << "no throw";
  } catch (const hg::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "the response of 'echo' has no output 'logits' (it has 'a', 'b')");
  }
}

// ---- the client tensor ------------------------------------------------------------------

TEST(ClientTensorTest, TypedConstructionAndAccessors) {
  Tensor t("ids", {2, 3}, std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.datatype, WireType::INT64);
  EXPECT_EQ(t.size(), 6u);
  EXPECT_EQ(t.data.size(), 48u);
  EXPECT_EQ(t.as<int64_t>()[5], 6);
  Tensor empty("e", {0, 4}, std::vector<float>{});
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.as<float>().empty());
  Tensor raw = Tensor::from_bytes("h", WireType::FP16, {2}, std::string("\x00\x3c\x00\xc0", 4));
  EXPECT_EQ(raw.as<hg::f16>()[0].to_float(), 1.0f);
  EXPECT_EQ(raw.as<hg::f16>()[1].to_float(), -2.0f);
  Tensor s = Tensor::from_bytes("s", WireType::BYTES, {1}, std::string("\x02\0\0\0hi", 6));
  EXPECT_EQ(s.as<std::string>(), std::vector<std::string>{"hi"});
}

TEST(ClientTensorTest, MistakesNameTheTensor) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const hg::InvalidArgument& e) {
      return e.what();
    }
    return "no throw";
  };
  EXPECT_EQ(message([] { Tensor("x", {1, 64}, std::vector<float>(63)); }),
            "tensor 'x': shape [1,64] holds 64 elements, got 63 values");
  EXPECT_EQ(message([] { Tensor("x", {-1, 4}, std::vector<float>(4)); }),
            "tensor 'x': shape [-1,4] has a negative dimension");
  Tensor f("logits", {2}, std::vector<float>{1, 2});
  EXPECT_EQ(message([&] { f.as<int64_t>(); }), "tensor 'logits' is FP32, not INT64");
  EXPECT_EQ(message([&] { f.as<double>(); }), "tensor 'logits' is FP32, not FP64");
  EXPECT_NE(message([] { Tensor::from_bytes("b", WireType::INT32, {2}, std::string(7, '\0')); }).find("'b'"),
            std::string::npos);
  EXPECT_NE(message([] { Tensor::from_bytes("s", WireType::BYTES, {1}, std::string("\x09\0\0\0hi", 6)); }).find("'s'"),
            std::string::npos);
  f.data.pop_back();  // a tensor edited by hand is checked when read
  EXPECT_NE(message([&] { f.as<float>(); }).find("'logits'"), std::string::npos);
}

}  // namespace
