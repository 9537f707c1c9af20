// KServe v2 inference bodies (server/infer_codec.h): JSON, the binary tensor extension and raw
// mode in both directions, binding a request to a model's inputs and outputs, the spec's
// example bodies, hostile bodies.
#include "server/infer_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tests/errors.h"

namespace {

using hg::server::EncodedBody;
using hg::server::InferRequest;
using hg::server::InferResponse;
using hg::server::ModelInputs;
using hg::server::WireLimits;
using hg::server::WireTensor;
using hg::server::WireType;
using hg::test::error_of;
using json = nlohmann::json;
using ::testing::HasSubstr;

InferRequest decode(std::string_view body, std::optional<size_t> header = std::nullopt) {
  return hg::server::decode_infer_request(body, header, WireLimits{});
}

std::string decode_error(std::string_view body, std::optional<size_t> header = std::nullopt) {
  return error_of<hg::InvalidArgument>([&] { decode(body, header); });
}

hg::models::PackageSpec spec_of(std::vector<hg::models::IOSpec> inputs, std::vector<hg::models::IOSpec> outputs,
                                std::string name = "m") {
  hg::models::PackageSpec s;
  s.name = std::move(name);
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  return s;
}

// {"name":"x","datatype":"FP32","shape":[-1,4]} -> {"y","FP32",[-1,2]}, {"z","INT64",[-1]}
hg::models::PackageSpec mlp_spec() {
  return spec_of({{"x", "FP32", {-1, 4}}}, {{"y", "FP32", {-1, 2}}, {"z", "INT64", {-1}}});
}

template <class T>
std::string raw_bytes(std::initializer_list<T> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(T));
}

std::string bind_error(std::string_view body, const hg::models::PackageSpec& spec, int64_t max_batch = 0,
                       std::optional<size_t> header = std::nullopt) {
  return error_of<hg::InvalidArgument>([&] {
    InferRequest r = decode(body, header);
    hg::server::bind_inputs(r, spec, max_batch);
  });
}

// ---- the spec's examples (kserve-v2.md section 10) ---------------------------------------

TEST(InferCodec, SpecJsonExampleDecodes) {
  const InferRequest r = decode(
      R"({"id":"42","inputs":[{"name":"input0","shape":[2,2],"datatype":"UINT32","data":[1,2,3,4]},
                              {"name":"input1","shape":[3],"datatype":"BOOL","data":[true,false,true]}],
          "outputs":[{"name":"output0"}]})");
  ASSERT_EQ(r.id, "42");
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].name, "input0");
  EXPECT_EQ(r.inputs[0].datatype, WireType::UINT32);
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.inputs[0].data, raw_bytes<uint32_t>({1, 2, 3, 4}));
  EXPECT_EQ(r.inputs[1].data, std::string("\1\0\1", 3));
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].name, "output0");
  EXPECT_FALSE(r.outputs[0].binary);
  EXPECT_FALSE(r.raw);

  const InferResponse resp = hg::server::decode_infer_response(
      R"({"model_name":"mymodel","model_version":"1","id":"42",
          "outputs":[{"name":"output0","shape":[3,2],"datatype":"FP32","data":[1.0,1.1,2.0,2.1,3.0,3.1]}]})",
      std::nullopt);
  EXPECT_EQ(resp.model_name, "mymodel");
  EXPECT_EQ(resp.model_version, "1");
  EXPECT_EQ(resp.id, "42");
  ASSERT_EQ(resp.outputs.size(), 1u);
  EXPECT_EQ(resp.outputs[0].data, raw_bytes<float>({1.0f, 1.1f, 2.0f, 2.1f, 3.0f, 3.1f}));
}

TEST(InferCodec, SpecBinaryExampleDecodes) {
  const std::string header =
      R"({"inputs":[{"name":"input0","shape":[2,2],"datatype":"UINT32","parameters":{"binary_data_size":16}},
                    {"name":"input1","shape":[3],"datatype":"BOOL","parameters":{"binary_data_size":3}}],
          "outputs":[{"name":"output0","parameters":{"binary_data":true}}]})";
  const std::string body = header + raw_bytes<uint32_t>({1, 2, 3, 4}) + std::string("\1\0\1", 3);
  const InferRequest r = decode(body, header.size());
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].data, raw_bytes<uint32_t>({1, 2, 3, 4}));
  EXPECT_TRUE(r.inputs[0].binary);
  EXPECT_TRUE(r.inputs[0].parameters.empty());  // binary_data_size is transport, not kept
  EXPECT_EQ(r.inputs[1].data, std::string("\1\0\1", 3));
  EXPECT_EQ(r.outputs[0].binary, true);

  const std::string rh =
      R"({"model_name":"mymodel","outputs":[{"name":"output0","shape":[3,2],"datatype":"FP32","parameters":{"binary_data_size":24}}]})";
  const std::string out = raw_bytes<float>({1, 2, 3, 4, 5, 6});
  const InferResponse resp = hg::server::decode_infer_response(rh + out, rh.size());
  EXPECT_EQ(resp.model_version, "");
  ASSERT_EQ(resp.outputs.size(), 1u);
  EXPECT_EQ(resp.outputs[0].data, out);
  EXPECT_TRUE(resp.outputs[0].binary);
}

// ---- binary extension and raw mode --------------------------------------------------------

TEST(InferCodec, BinarySizesMustAddUpToTheBody) {
  const std::string header =
      R"({"inputs":[{"name":"a","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}},
                    {"name":"b","shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4}}]})";
  const std::string data = raw_bytes<int32_t>({1, 2, 3});
  EXPECT_EQ(decode(header + data, header.size()).inputs[1].data, raw_bytes<int32_t>({3}));
  EXPECT_EQ(decode_error(header + data, header.size() + 13),
            "Inference-Header-Content-Length is " + std::to_string(header.size() + 13) + " but the body has only " +
                std::to_string(header.size() + 12) + " bytes");
  EXPECT_EQ(decode_error(header + data.substr(0, 10), header.size()),
            "input 'b': binary_data_size 4 at body byte offset " + std::to_string(header.size() + 8) +
                " runs past the end of the " + std::to_string(header.size() + 10) + "-byte body");
  EXPECT_THAT(decode_error(header + data + "xy", header.size()),
              HasSubstr("the body has 2 bytes after the binary inputs (at byte offset " +
                        std::to_string(header.size() + 12) + ")"));
  EXPECT_THAT(decode_error(header, std::nullopt),
              HasSubstr("input 'a' has parameters.binary_data_size, but the body came without an "
                        "Inference-Header-Content-Length header"));
  EXPECT_THAT(decode_error(R"({"inputs":[{"name":"a","shape":[1],"datatype":"INT32","data":[1],
                               "parameters":{"binary_data_size":4}}]})" + raw_bytes<int32_t>({1}),
                           std::string_view(R"({"inputs":[{"name":"a","shape":[1],"datatype":"INT32","data":[1],
                               "parameters":{"binary_data_size":4}}]})").size()),
              HasSubstr("input 'a' has both 'data' and parameters.binary_data_size"));
  // a wrong size for the shape names the input and where its data starts
  const std::string h2 = R"({"inputs":[{"name":"a","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":4}}]})";
  EXPECT_EQ(decode_error(h2 + raw_bytes<int32_t>({1}), h2.size()),
            "input 'a': binary data has 4 bytes, shape [2] of INT32 needs 8 (its data starts at body byte offset " +
                std::to_string(h2.size()) + ")");
}

TEST(InferCodec, BinaryBytesTensorsAreCheckedWithByteOffsets) {
  const std::string data = hg::server::bytes_encode({"hello", "w"});
  const std::string header = R"({"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":)" +
                             std::to_string(data.size()) + "}}]}";
  EXPECT_EQ(hg::server::bytes_elements(decode(header + data, header.size()).inputs[0].data),
            (std::vector<std::string>{"hello", "w"}));
  std::string bad = data;
  bad[9] = 9;  // second length prefix 9: past the end
  EXPECT_EQ(decode_error(header + bad, header.size()),
            "input 's': BYTES element 1 at byte offset 9 has length 9, which runs past the end of the 14-byte data "
            "(its data starts at body byte offset " +
                std::to_string(header.size()) + ")");
}

TEST(InferCodec, RawModeBindsToTheOnlyInputAtBatchOne) {
  const std::string body = raw_bytes<float>({1, 2, 3, 4});
  InferRequest r = decode(body, size_t{0});
  EXPECT_TRUE(r.raw);
  ASSERT_EQ(r.inputs.size(), 1u);
  const ModelInputs in = hg::server::bind_inputs(r, mlp_spec(), 8);
  EXPECT_EQ(r.inputs[0].name, "x");
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(in.batch, 1);
  EXPECT_EQ(in.data[0], body);
  EXPECT_EQ(in.outputs, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(in.binary, (std::vector<bool>{true, true}));  // raw requests get binary outputs

  EXPECT_EQ(bind_error(body.substr(0, 12), mlp_spec(), 0, size_t{0}),
            "input 'x': binary data has 12 bytes, shape [1,4] of FP32 needs 16");
  const auto two = spec_of({{"a", "FP32", {-1, 1}}, {"b", "FP32", {-1, 1}}}, {{"y", "FP32", {-1}}});
  EXPECT_EQ(bind_error(body, two, 0, size_t{0}),
            "a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly one input; model "
            "'m' has 2");
  // the client side writes the input's bytes as the whole body
  InferRequest raw;
  raw.raw = true;
  raw.inputs.push_back(WireTensor{"x", WireType::FP32, {1, 4}, body, json::object(), true});
  const EncodedBody e = hg::server::encode_infer_request(raw);
  EXPECT_EQ(e.body, body);
  EXPECT_EQ(e.header_length, size_t{0});
  EXPECT_EQ(e.content_type, "application/octet-stream");
}

// ---- hostile and malformed bodies --------------------------------------------------------

TEST(InferCodec, MalformedJsonIsInvalidArgument) {
  EXPECT_THAT(decode_error("{\"inputs\":["), HasSubstr("malformed JSON in the request body"));
  EXPECT_THAT(decode_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP64","data":[1e999]}]})"),
              HasSubstr("malformed JSON in the request body"));  // out_of_range inside nlohmann
  EXPECT_EQ(decode_error("[1]"), "the request body must be a JSON object, got array");
  EXPECT_EQ(decode_error("{}"), "request has no 'inputs' array");
  EXPECT_EQ(decode_error(R"({"id":42,"inputs":[]})"), "request: 'id' must be a string, got number");
  EXPECT_EQ(decode_error(R"({"inputs":[],"parameters":[]})"), "request: 'parameters' must be an object, got array");
  EXPECT_EQ(decode_error(R"({"inputs":[5]})"), "inputs[0] must be an object, got number");
  EXPECT_EQ(decode_error(R"({"inputs":[{"shape":[1]}]})"), "inputs[0] has no string 'name'");
  EXPECT_EQ(decode_error(R"({"inputs":[{"name":"x","shape":[1],"data":[1]}]})"), "input 'x' has no string 'datatype'");
  EXPECT_THAT(decode_error(R"({"inputs":[{"name":"x","datatype":"FP8","shape":[1],"data":[1]}]})"),
              HasSubstr("input 'x': unknown datatype 'FP8' (expected one of BOOL, UINT8,"));
  EXPECT_EQ(decode_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[-1],"data":[1]}]})"),
            "input 'x': 'shape' must hold non-negative integers, got [-1]");
  EXPECT_EQ(decode_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1]}]})"),
            "input 'x' has no 'data' (and no parameters.binary_data_size)");
  EXPECT_EQ(decode_error(R"({"inputs":[{"name":"x","datatype":"UINT8","shape":[8],"data":[0,1,2,3,4,5,6,300]}]})"),
            "input 'x': data element 7 (300) is out of range for UINT8");
  EXPECT_EQ(decode_error(R"({"inputs":[],"outputs":[{"name":"y"},{"name":"y"}]})"),
            "output 'y' is requested more than once");
  EXPECT_EQ(decode_error(R"({"inputs":[],"outputs":[{"name":"y","parameters":{"binary_data":1}}]})"),
            "output 'y': parameter 'binary_data' must be a bool, got 1");
  EXPECT_EQ(decode_error(R"({"inputs":[],"parameters":{"timeout":-5}})"),
            "request: parameter 'timeout' must be a non-negative integer, got -5");
  EXPECT_EQ(decode_error(R"({"inputs":[],"parameters":{"binary_data_output":"yes"}})"),
            "request: parameter 'binary_data_output' must be a bool, got \"yes\"");
  EXPECT_EQ(decode_error(R"({"inputs":[],"outputs":[{"name":"y","parameters":{"classification":-1}}]})"),
            "output 'y': parameter 'classification' must be a non-negative integer, got -1");
}

std::string nested_data(size_t levels) { return std::string(levels, '[') + "1" + std::string(levels, ']'); }

TEST(InferCodec, DeepNestingIsRejectedWithoutCrashing) {
  auto body = [](const std::string& data) {
    return R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":)" + data + "}]}";
  };
  EXPECT_EQ(decode(body(nested_data(100))).inputs[0].data, raw_bytes<float>({1}));
  EXPECT_EQ(decode_error(body(nested_data(101))), "input 'x': 'data' is nested deeper than 100 levels");
  // far deeper than any stack would survive if parsed recursively: rejected by the pre-scan
  EXPECT_THAT(decode_error(body(nested_data(100000))), HasSubstr("the request body is nested deeper than 108 levels"));
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += R"({"a":)";
  EXPECT_THAT(decode_error(objects), HasSubstr("the request body is nested deeper than 108 levels"));
  // brackets inside strings do not count
  EXPECT_EQ(decode(R"({"id":")" + std::string(500, '[') + R"(","inputs":[]})").id, std::string(500, '['));
  EXPECT_THAT(error_of<hg::InvalidArgument>(
                  [&] { hg::server::decode_infer_response(std::string(100000, '['), std::nullopt); }),
              HasSubstr("the response body is nested deeper than"));
}

TEST(InferCodec, ElementLimitApplies) {
  WireLimits limits;
  limits.max_elements = 16;
  const std::string h =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[17],"parameters":{"binary_data_size":68}}]})";
  EXPECT_EQ(error_of<hg::InvalidArgument>(
                [&] { hg::server::decode_infer_request(h + std::string(68, '\0'), h.size(), limits); }),
            "input 'x': shape [17] has 17 elements, more than the limit of 16");
  EXPECT_THAT(decode_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[100000,100000,100000],"data":[]}]})"),
              HasSubstr("more than the limit of 67108864"));
}

// ---- binding to a model ------------------------------------------------------------------

TEST(InferCodec, BindChecksNamesTypesShapesAndBatch) {
  const auto spec = spec_of({{"a", "FP32", {-1, 2}}, {"b", "INT64", {-1}}}, {{"y", "FP32", {-1, 2}}});
  auto in = [](const char* name, const char* type, const char* shape, const char* data) {
    return std::string(R"({"name":")") + name + R"(","datatype":")" + type + R"(","shape":)" + shape +
           R"(,"data":)" + data + "}";
  };
  const std::string a2 = in("a", "FP32", "[2,2]", "[1,2,3,4]"), b2 = in("b", "INT64", "[2]", "[5,6]");
  InferRequest r = decode(R"({"inputs":[)" + b2 + "," + a2 + "]}");
  const ModelInputs ok = hg::server::bind_inputs(r, spec, 4);
  EXPECT_EQ(ok.batch, 2);
  EXPECT_EQ(ok.data[0], raw_bytes<float>({1, 2, 3, 4}));  // model order, not request order
  EXPECT_EQ(ok.data[1], raw_bytes<int64_t>({5, 6}));

  EXPECT_EQ(bind_error(R"({"inputs":[)" + in("a", "FP32", "[1,3]", "[1,2,3]") + "," + b2 + "]}", spec),
            "unexpected shape for input 'a' of model 'm': expected [-1,2], got [1,3] (dimension 1 must be 2)");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + a2 + "]}", spec),
            "missing input 'b' for model 'm' (expected shape [-1], datatype INT64)");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + a2 + "," + b2 + "," + in("c", "FP32", "[1]", "[1]") + "]}", spec),
            "unknown input 'c' for model 'm' (model inputs: 'a', 'b')");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + a2 + "," + a2 + "," + b2 + "]}", spec), "input 'a' is given more than once");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + in("a", "FP64", "[2,2]", "[1,2,3,4]") + "," + b2 + "]}", spec),
            "input 'a' of model 'm': expected datatype FP32, got FP64");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + a2 + "," + in("b", "INT64", "[3]", "[1,2,3]") + "]}", spec),
            "inputs disagree on the batch size: 'a' has 2, 'b' has 3");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + in("a", "FP32", "[0,2]", "[]") + "," + in("b", "INT64", "[0]", "[]") + "]}",
                       spec),
            "batch size must be at least 1, got 0");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + a2 + "," + b2 + "]}", spec, 1),
            "batch size 2 exceeds the max_batch_size 1 of model 'm'");
  EXPECT_EQ(bind_error(R"({"inputs":[)" + a2 + "," + b2 + R"(],"outputs":[{"name":"q"}]})", spec),
            "unknown output 'q' requested from model 'm' (model outputs: 'y')");
  InferRequest named = decode(R"({"inputs":[)" + a2 + "]}");
  EXPECT_THAT(error_of<hg::InvalidArgument>([&] { hg::server::bind_inputs(named, spec, 0, "served"); }),
              HasSubstr("missing input 'b' for model 'served'"));
}

TEST(InferCodec, OutputSelectionAndBinaryFlags) {
  const std::string x = R"({"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]})";
  InferRequest all = decode(R"({"inputs":[)" + x + R"(],"parameters":{"binary_data_output":true}})");
  ModelInputs in = hg::server::bind_inputs(all, mlp_spec(), 0);
  EXPECT_EQ(in.outputs, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(in.binary, (std::vector<bool>{true, true}));
  // per-output setting wins over the request-level one; request order is kept
  InferRequest some = decode(R"({"inputs":[)" + x +
                             R"(],"parameters":{"binary_data_output":true},
                                 "outputs":[{"name":"z"},{"name":"y","parameters":{"binary_data":false}}]})");
  in = hg::server::bind_inputs(some, mlp_spec(), 0);
  EXPECT_EQ(in.outputs, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(in.binary, (std::vector<bool>{true, false}));
}

TEST(InferCodec, NullMembersCountAsAbsent) {
  const InferRequest r = decode(R"({"id":null,"parameters":null,"outputs":null,
      "inputs":[{"name":"x","datatype":"INT8","shape":[1],"parameters":null,"data":[-3]}]})");
  EXPECT_FALSE(r.id);
  EXPECT_TRUE(r.parameters.empty());
  EXPECT_TRUE(r.outputs.empty());
  EXPECT_EQ(r.inputs[0].data, "\xfd");
}

TEST(InferCodec, RequestParametersAreKept) {
  const InferRequest r = decode(
      R"({"inputs":[],"parameters":{"priority":2,"timeout":1500,"binary_data_output":false,"custom":"v","n":1.5}})");
  EXPECT_EQ(r.priority, 2);
  EXPECT_EQ(r.timeout_us, 1500u);
  EXPECT_FALSE(r.binary_data_output);
  EXPECT_EQ(r.parameters["custom"], "v");
  EXPECT_EQ(r.parameters["n"], 1.5);
}

// ---- responses ---------------------------------------------------------------------------

TEST(InferCodec, ResponseEncodesJsonAndBinaryOutputsAndDecodesBack) {
  const auto spec = mlp_spec();
  InferRequest req = decode(R"({"id":"r1","inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8]}],
                                "outputs":[{"name":"y"},{"name":"z","parameters":{"binary_data":true}}]})");
  const ModelInputs in = hg::server::bind_inputs(req, spec, 0);
  std::vector<std::string> outputs = {raw_bytes<float>({0.5f, -1, 2, 0.1f}), raw_bytes<int64_t>({7, -9})};
  const InferResponse resp = hg::server::make_response(req, spec, in, "mlp", "3", std::move(outputs));
  const EncodedBody e = hg::server::encode_infer_response(resp);
  ASSERT_TRUE(e.header_length);
  EXPECT_EQ(e.content_type, "application/octet-stream");
  EXPECT_EQ(e.body.substr(0, *e.header_length),
            R"({"model_name":"mlp","model_version":"3","id":"r1","outputs":[)"
            R"({"name":"y","datatype":"FP32","shape":[2,2],"data":[0.5,-1,2,0.1]},)"
            R"({"name":"z","datatype":"INT64","shape":[2],"parameters":{"binary_data_size":16}}]})");
  EXPECT_EQ(e.body.substr(*e.header_length), raw_bytes<int64_t>({7, -9}));

  const InferResponse back = hg::server::decode_infer_response(e.body, e.header_length);
  EXPECT_EQ(back.model_name, "mlp");
  EXPECT_EQ(back.model_version, "3");
  EXPECT_EQ(back.id, "r1");
  ASSERT_EQ(back.outputs.size(), 2u);
  EXPECT_EQ(back.outputs[0].data, raw_bytes<float>({0.5f, -1, 2, 0.1f}));
  EXPECT_EQ(back.outputs[1].data, raw_bytes<int64_t>({7, -9}));
  EXPECT_EQ(back.outputs[1].shape, (std::vector<int64_t>{2}));

  // all JSON: no header length, JSON content type, and it parses
  InferResponse plain = resp;
  for (auto& t : plain.outputs) t.binary = false;
  const EncodedBody j = hg::server::encode_infer_response(plain);
  EXPECT_FALSE(j.header_length);
  EXPECT_EQ(j.content_type, "application/json");
  EXPECT_EQ(json::parse(j.body)["outputs"][1]["data"], json::parse("[7,-9]"));
}

TEST(InferCodec, MakeResponseChecksBackendSizes) {
  const auto spec = mlp_spec();
  InferRequest req = decode(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})");
  const ModelInputs in = hg::server::bind_inputs(req, spec, 0);
  EXPECT_EQ(error_of<hg::InternalError>([&] {
              hg::server::make_response(req, spec, in, "m", "1", {std::string(4, '\0'), std::string(8, '\0')});
            }),
            "output 'y' of model 'm' has 4 bytes, shape [1,2] of FP32 needs 8");
}

TEST(InferCodec, ClassificationReturnsTopNValueIndexStrings) {
  const auto spec = spec_of({{"x", "FP32", {-1, 1}}}, {{"p", "FP32", {-1, 4}}});
  InferRequest req = decode(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,1],"data":[0,0]}],
                                "outputs":[{"name":"p","parameters":{"classification":2}}]})");
  const ModelInputs in = hg::server::bind_inputs(req, spec, 0);
  const InferResponse resp =
      hg::server::make_response(req, spec, in, "m", "1", {raw_bytes<float>({0.1f, 0.7f, 0.2f, 0.7f, 3, 1, 2, 0})});
  ASSERT_EQ(resp.outputs.size(), 1u);
  const WireTensor& c = resp.outputs[0];
  EXPECT_EQ(c.datatype, WireType::BYTES);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(hg::server::bytes_elements(c.data), (std::vector<std::string>{"0.7:1", "0.7:3", "3:0", "2:2"}));
  const EncodedBody e = hg::server::encode_infer_response(resp);
  EXPECT_EQ(json::parse(e.body)["outputs"][0]["data"], json::parse(R"(["0.7:1","0.7:3","3:0","2:2"])"));
  // more classes than the output has: all of them
  InferRequest many = decode(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[0]}],
                                 "outputs":[{"name":"p","parameters":{"classification":10}}]})");
  const ModelInputs in2 = hg::server::bind_inputs(many, spec, 0);
  const InferResponse r2 = hg::server::make_response(many, spec, in2, "m", "1", {raw_bytes<float>({1, 4, 2, 3})});
  EXPECT_EQ(hg::server::bytes_elements(r2.outputs[0].data), (std::vector<std::string>{"4:1", "3:3", "2:2", "1:0"}));
  const auto text = spec_of({{"x", "FP32", {-1, 1}}}, {{"s", "BYTES", {-1}}});
  EXPECT_EQ(bind_error(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[0]}],
                           "outputs":[{"name":"s","parameters":{"classification":1}}]})",
                       text),
            "output 's' of model 'm' is BYTES: classification needs a numeric output");
}

// ---- client direction: encode a request, the server decodes the same thing ---------------

WireTensor sample(WireType t) {
  const std::pair<WireType, const char*> data[] = {
      {WireType::BOOL, "[true,false]"},     {WireType::UINT8, "[0,255]"},
      {WireType::UINT16, "[1,65535]"},      {WireType::UINT32, "[2,4294967295]"},
      {WireType::UINT64, "[3,18446744073709551615]"}, {WireType::INT8, "[-128,127]"},
      {WireType::INT16, "[-32768,32767]"},  {WireType::INT32, "[-2147483648,2147483647]"},
      {WireType::INT64, "[-9223372036854775808,9223372036854775807]"},
      {WireType::FP16, "[0.5,-65504]"},     {WireType::FP32, "[0.1,-3.25e+38]"},
      {WireType::FP64, "[0.1,1e+300]"},     {WireType::BF16, "[1.0078125,-2]"},
      {WireType::BYTES, R"(["a\u0000b","\u00e9"])"},
  };
  WireTensor w;
  w.name = std::string("in_") + hg::server::wire_type_name(t);
  w.datatype = t;
  w.shape = {2};
  for (const auto& [type, text] : data)
    if (type == t) w.data = hg::server::json_to_bytes(json::parse(text), w, WireLimits{});
  return w;
}

TEST(InferCodec, EveryDatatypeRoundTripsThroughRequestsAsJsonAndBinary) {
  for (bool binary : {false, true}) {
    InferRequest req;
    req.id = "abc\"\n";
    req.priority = 1;
    req.timeout_us = 250;
    req.binary_data_output = true;
    req.parameters = {{"custom", "v"}};
    for (WireType t : hg::server::kAllWireTypes) {
      req.inputs.push_back(sample(t));
      req.inputs.back().binary = binary;
    }
    req.outputs.push_back({"o1", true, json::object()});
    req.outputs.push_back({"o2", std::nullopt, {{"classification", 3}}});
    const EncodedBody e = hg::server::encode_infer_request(req);
    EXPECT_EQ(e.header_length.has_value(), binary);
    const InferRequest back = decode(e.body, e.header_length);
    EXPECT_EQ(back.id, req.id);
    EXPECT_EQ(back.priority, 1);
    EXPECT_EQ(back.timeout_us, 250u);
    EXPECT_TRUE(back.binary_data_output);
    EXPECT_EQ(back.parameters["custom"], "v");
    ASSERT_EQ(back.inputs.size(), req.inputs.size());
    for (size_t i = 0; i < req.inputs.size(); ++i) {
      SCOPED_TRACE(req.inputs[i].name);
      EXPECT_EQ(back.inputs[i].name, req.inputs[i].name);
      EXPECT_EQ(back.inputs[i].datatype, req.inputs[i].datatype);
      EXPECT_EQ(back.inputs[i].shape, req.inputs[i].shape);
      EXPECT_EQ(back.inputs[i].data, req.inputs[i].data);
      EXPECT_EQ(back.inputs[i].binary, binary);
    }
    ASSERT_EQ(back.outputs.size(), 2u);
    EXPECT_EQ(back.outputs[0].binary, true);
    EXPECT_FALSE(back.outputs[1].binary);
    EXPECT_EQ(back.outputs[1].parameters["classification"], 3);
  }
}

TEST(InferCodec, EveryDatatypeRoundTripsThroughResponses) {
  InferResponse resp;
  resp.model_name = "m";
  resp.model_version = "2";
  resp.parameters = {{"k", 1}};
  bool binary = false;
  for (WireType t : hg::server::kAllWireTypes) {
    resp.outputs.push_back(sample(t));
    resp.outputs.back().binary = binary;
    binary = !binary;  // alternate JSON and binary outputs
  }
  const EncodedBody e = hg::server::encode_infer_response(resp);
  const InferResponse back = hg::server::decode_infer_response(e.body, e.header_length);
  EXPECT_EQ(back.parameters, resp.parameters);
  ASSERT_EQ(back.outputs.size(), resp.outputs.size());
  for (size_t i = 0; i < resp.outputs.size(); ++i) {
    SCOPED_TRACE(resp.outputs[i].name);
    EXPECT_EQ(back.outputs[i].data, resp.outputs[i].data);
    EXPECT_EQ(back.outputs[i].datatype, resp.outputs[i].datatype);
    EXPECT_EQ(back.outputs[i].binary, resp.outputs[i].binary);
  }
}

// Random byte edits of a binary request: every outcome is a decoded request or an
// InvalidArgument, never another exception or a crash (the sanitizer build checks the rest).
TEST(InferCodec, MutatedBinaryRequestsDecodeOrRaiseInvalidArgument) {
  InferRequest req;
  for (WireType t : hg::server::kAllWireTypes) {
    req.inputs.push_back(sample(t));
    req.inputs.back().binary = t != WireType::FP32;
  }
  req.outputs.push_back({"o", true, {{"classification", 2}}});
  const EncodedBody e = hg::server::encode_infer_request(req);
  std::mt19937 rng(11);
  size_t decoded = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string body = e.body;
    size_t header = *e.header_length;
    for (int k = 0; k < 2; ++k) {
      const size_t at = rng() % body.size();
      if (rng() % 4 == 0) {
        body.erase(at, 1);
        if (at < header) --header;
      } else {
        body[at] = static_cast<char>(rng());
      }
    }
    try {
      decode(body, header);
      ++decoded;
    } catch (const hg::InvalidArgument&) {
    }
  }
  EXPECT_GT(decoded, 20u);  // edits inside tensor bytes or string values still decode
}

}  // namespace
