// A KServe v2 REST client (cpprestsdk http_client underneath) for every endpoint hgraph-serve
// answers: health, metadata, inference, the repository extension, model config, statistics,
// Prometheus metrics and text generation (plain and streamed).
//
//   hg::server::ClientOptions o;
//   o.token = "s3cret";                                   // Authorization: Bearer s3cret
//   o.request_compression = hg::server::ContentCoding::Gzip;           // infer/generate bodies gzipped
//   o.response_compression = hg::server::ContentCoding::Gzip;          // Accept-Encoding: gzip, decoded
//   hg::server::Client c("http://127.0.0.1:8000", o);
//   if (c.ready()) {
//     auto out = c.infer("digits_mlp", {{"input", {1, 64}, pixels}});   // FP32 tensors
//     out[0].name;  out[0].shape;  out[0].as<float>();                  // "logits", {1, 10}
//   }
//   hg::server::Tensor ids("input_ids", {1, 16}, token_ids);            // std::vector<int64_t>
//   ids.binary = true;                                                  // binary tensor data
//   hg::server::InferOptions io;
//   io.id = "42";  io.priority = 1;  io.timeout_us = 50000;
//   io.outputs = {{"logits", true}};                                    // logits as binary data
//   hg::server::InferResult r = c.infer_result("bert", {ids}, io);
//   r.id;  r.model_version;  r.output("logits").as<float>();
//   for (const auto& m : c.repository_index()) m.name, m.state;         // "bert", "READY"
//   c.load_model("bert", R"({"max_batch_size": 8})");                  // config override
//   nlohmann::json s = c.model_statistics("bert");
//   std::string text = c.metrics();                                     // Prometheus text
//   hg::server::GenerateOptions g;
//   g.parameters = {{"max_tokens", 8}};
//   std::string story = c.generate("gpt", "Once upon", g);
//   c.generate_stream("gpt", "Once upon", g, [](const nlohmann::json& event) {
//     std::cout << event["text_output"].get<std::string>();             // as each event arrives
//     return true;                                                      // false: stop reading
//   });
//   hg::server::RawResponse raw = c.request("POST", "/v2/models/x/infer", "{bad");
//   raw.status;  raw.body;                                               // 404, {"error": ...}
//
// Calls other than request() throw hg::server::ClientError when the server answers with an
// error status (status() and the server's {"error"} message) or cannot be reached
// (status() == 0). A Client may be used from several threads at once.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "server/client_tensor.h"
#include "server/compression.h"
#include "server/infer_codec.h"

namespace hg::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct RawResponse {
  int status = 0;
  std::string body;  // the bytes as received
  std::string header(const std::string& name) const;  // case-insensitive; empty when absent
  Headers headers;
};

class ClientError : public Error {
 public:
  ClientError(int status, const std::string& msg);
  int status() const { return status_; }

 private:
  int status_;
};

struct ClientOptions {
  // Bounds each request: connecting, sending, and each wait for response bytes.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  std::string token;  // set: `Authorization: Bearer <token>` on every request
  Headers headers;    // sent on every request
  // Triton's request_compression_algorithm and response_compression_algorithm, for infer and
  // generate (not generate_stream, whose events are never compressed): request bodies go
  // compressed with Content-Encoding, and Accept-Encoding asks for compressed answers, which
  // are inflated (up to max_response_bytes) before they are decoded.
  ContentCoding request_compression = ContentCoding::Identity;
  ContentCoding response_compression = ContentCoding::Identity;
  size_t max_response_bytes = size_t{1} << 30;
};

// An output to return: "logits", {"logits", true} (as binary data), {"probs", std::nullopt,
// {{"classification", 3}}} (with parameters).
struct InferOutput {
  InferOutput(std::string name_, std::optional<bool> binary_ = std::nullopt,  // NOLINT: implicit from a name
              nlohmann::json parameters_ = nlohmann::json::object())
      : name(std::move(name_)), binary(binary_), parameters(std::move(parameters_)) {}
  InferOutput(const char* name_) : InferOutput(std::string(name_)) {}  // NOLINT
  std::string name;
  std::optional<bool> binary;  // parameters.binary_data; unset: InferOptions::binary_output decides
  nlohmann::json parameters;
};

struct InferOptions {
  std::string version;  // empty: the server's choice
  std::string id;       // echoed back when set
  std::vector<InferOutput> outputs;   // empty: every output
  bool binary_output = false;         // every output as binary data unless the output says otherwise
  std::optional<int64_t> priority;    // 1 = highest; 0 = the model's default
  std::optional<uint64_t> timeout_us; // may only lower the model's default timeout
  nlohmann::json parameters = nlohmann::json::object();  // other request parameters
  // Raw binary mode (Inference-Header-Content-Length: 0): the body is the bytes of the one
  // input (its name is not sent), for a model with exactly one input; outputs come back binary.
  bool raw = false;
};

struct InferResult {
  std::string model_name, model_version;
  std::optional<std::string> id;
  nlohmann::json parameters = nlohmann::json::object();
  std::vector<Tensor> outputs;
  // The output called `name`; throws hg::InvalidArgument listing the outputs there are.
  const Tensor& output(const std::string& name) const;
};

// One entry of POST /v2/repository/index.
struct RepositoryModel {
  std::string name;
  std::string version;  // empty when the server gives none (a model that is not loaded)
  std::string state;    // "READY", "UNAVAILABLE", "LOADING", "UNLOADING"
  std::string reason;   // why it is not READY; empty otherwise
};

struct GenerateOptions {
  std::string version;  // empty: the server's choice
  std::string id;       // echoed back when set
  // max_tokens, temperature, top_k, top_p, seed, stop (see server/generate.h).
  nlohmann::json parameters = nlohmann::json::object();
};

class Client {
 public:
  explicit Client(const std::string& base_url, ClientOptions opt = {});
  Client(const std::string& base_url, std::chrono::milliseconds timeout);
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  // ---- health and metadata (an empty version: the server's choice) ----
  bool live();
  bool ready();
  nlohmann::json server_metadata();
  nlohmann::json model_metadata(const std::string& model, const std::string& version = "");
  bool model_ready(const std::string& model, const std::string& version = "");

  // ---- inference ----
  // Inputs with Tensor::binary go as binary data (the binary tensor extension), the others as
  // JSON; outputs arrive either way and are decoded by server/infer_codec.h.
  std::vector<Tensor> infer(const std::string& model, const std::vector<Tensor>& inputs,
                            const InferOptions& opt = {});
  // The whole response: model name and version, id, parameters, outputs.
  InferResult infer_result(const std::string& model, const std::vector<Tensor>& inputs, const InferOptions& opt = {});

  // ---- repository extension ----
  // Every model in the repository, loaded or not; ready_only: only those ready for inference.
  std::vector<RepositoryModel> repository_index(bool ready_only = false);
  // Loads or reloads a model; config: a model config as a JSON string that replaces
  // config.json for this load (empty: the repository's own).
  void load_model(const std::string& model, const std::string& config = "");
  void unload_model(const std::string& model, bool unload_dependents = false);

  // ---- model configuration, statistics, metrics ----
  nlohmann::json model_config(const std::string& model, const std::string& version = "");
  // Empty model: every model ({"model_stats": [...]}); empty version: every version of the model.
  nlohmann::json model_statistics(const std::string& model = "", const std::string& version = "");
  // GET /metrics: the Prometheus text exposition.
  std::string metrics();

  // ---- generate extension ----
  // The generated text (text_output).
  std::string generate(const std::string& model, const std::string& text_input, const GenerateOptions& opt = {});
  // Called with each server-sent event's JSON as it arrives; returns false to stop reading
  // (the connection is closed).
  using OnEvent = std::function<bool(const nlohmann::json& event)>;
  // Reads the text/event-stream response incrementally and returns the events received. An
  // {"error"} event (a failure after the stream began) throws ClientError with its message,
  // after on_event has seen the events before it.
  std::vector<nlohmann::json> generate_stream(const std::string& model, const std::string& text_input,
                                              const GenerateOptions& opt = {}, const OnEvent& on_event = nullptr);

  // Any request; never throws for an HTTP error status (only when the server is unreachable).
  // The token and ClientOptions::headers are sent too.
  RawResponse request(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& content_type = "application/json", const Headers& headers = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the data of a response output (flat or nested) into floats.
std::vector<float> tensor_data(const nlohmann::json& data);

}  // namespace hg::server
