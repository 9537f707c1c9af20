// Inference requests and responses of the KServe v2 protocol, in both directions (the server
// decodes requests and encodes responses, the client the reverse): JSON bodies, the binary
// tensor data extension (JSON header of `Inference-Header-Content-Length` bytes, then the
// tensors' bytes in order) and raw mode (header length 0: the body is the only input's bytes).
//
//   // server
//   InferRequest req = decode_infer_request(body, header_length, limits);   // throws InvalidArgument
//   ModelInputs in = bind_inputs(req, spec, max_batch_size, "digits_mlp");  // checks names/types/shapes
//   InferResponse resp = make_response(req, spec, "digits_mlp", "1", batch, outputs_bytes);
//   EncodedBody e = encode_infer_response(resp);   // e.body, e.header_length (nullopt: plain JSON)
//   // client
//   EncodedBody b = encode_infer_request(req);     // binary inputs where WireTensor::binary
//   InferResponse r = decode_infer_response(body, header_length);
//
// Every error is hg::InvalidArgument naming the input or output, the element or the byte
// offset, and what was expected.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/package.h"
#include "server/wire.h"

namespace hg::server {

struct RequestedOutput {
  std::string name;
  std::optional<bool> binary;  // parameters.binary_data
  nlohmann::json parameters = nlohmann::json::object();
};

struct InferRequest {
  std::optional<std::string> id;
  nlohmann::json parameters = nlohmann::json::object();  // request level, flat
  std::vector<WireTensor> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output
  bool binary_data_output = false;       // parameters.binary_data_output
  std::optional<int64_t> priority;       // parameters.priority (0 = the model's default)
  std::optional<uint64_t> timeout_us;    // parameters.timeout
  bool raw = false;                      // raw binary mode (header length 0)
};

struct InferResponse {
  std::string model_name, model_version;
  std::optional<std::string> id;
  nlohmann::json parameters = nlohmann::json::object();
  std::vector<WireTensor> outputs;  // WireTensor::binary: sent as binary data
};

struct EncodedBody {
  std::string body;
  std::optional<size_t> header_length;  // set: send `Inference-Header-Content-Length`
  std::string content_type;             // "application/json" or "application/octet-stream"
};

// header_length: the value of Inference-Header-Content-Length (nullopt: plain JSON). A raw
// request (0) has one input with no name yet: bind_inputs names it after the model's only input.
InferRequest decode_infer_request(std::string_view body, std::optional<size_t> header_length,
                                  const WireLimits& limits);
EncodedBody encode_infer_request(const InferRequest& req);

EncodedBody encode_infer_response(const InferResponse& resp);
InferResponse decode_infer_response(std::string_view body, std::optional<size_t> header_length,
                                    const WireLimits& limits = {});

// A request's inputs in the model's input order, checked against the model: every input
// present once, datatypes equal, shapes equal except the batch dimension (-1), one batch size
// across inputs, 1 <= batch <= max_batch_size (when > 0), requested outputs known.
struct ModelInputs {
  int64_t batch = 1;
  std::vector<std::string> data;  // per model input: batch * per-sample bytes
  // Per model input, one sample's shape: only for a model with dynamic dimensions besides the
  // batch (a spec shape -1 after the leading batch -1), whose requests may differ in them.
  std::vector<Shape> shapes;
  std::vector<size_t> outputs;    // model output indices to return, in request order
  std::vector<bool> binary;       // per returned output: send as binary
  std::vector<uint32_t> classification;  // per returned output: top-N classes (0: the tensor itself)
};
// `model_name` names the model in errors (empty: spec.name).
ModelInputs bind_inputs(InferRequest& req, const models::PackageSpec& spec, int64_t max_batch_size,
                        std::string_view model_name = {});

// The response to `req`: outputs[j] holds the bytes of model output j for `batch` samples;
// only in.outputs are returned (moved out of `outputs`). output_shapes: per model output, one
// sample's shape when the run gave them (dynamic dimensions); else the spec's.
InferResponse make_response(const InferRequest& req, const models::PackageSpec& spec, const ModelInputs& in,
                            std::string model_name, std::string model_version,
                            std::vector<std::string>&& outputs, const std::vector<Shape>& output_shapes = {});

}  // namespace hg::server
