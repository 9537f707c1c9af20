// A small KServe v2 REST client (cpprestsdk http_client underneath).
//
//   hg::server::Client c("http://127.0.0.1:8000");
//   if (c.ready()) {
//     auto out = c.infer("digits_mlp", {{"input", {1, 64}, pixels}});   // FP32 tensors
//     out[0].name;  out[0].shape;  out[0].data;                         // "logits", {1, 10}
//   }
//   hg::server::RawResponse r = c.request("POST", "/v2/models/x/infer", "{bad");
//   r.status;  r.body;                                                   // 404, {"error": ...}
//
// Calls other than request() throw hg::server::ClientError when the server answers with an
// error status (status() and the server's message) or cannot be reached (status() == 0).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"

namespace hg::server {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::string datatype = "FP32";
};

struct RawResponse {
  int status = 0;
  std::string body;
  std::string header(const std::string& name) const;  // empty when absent
  std::vector<std::pair<std::string, std::string>> headers;
};

class ClientError : public Error {
 public:
  ClientError(int status, const std::string& msg);
  int status() const { return status_; }

 private:
  int status_;
};

struct InferOptions {
  std::string version;               // empty: the server's choice
  std::string id;                    // echoed back when set
  std::vector<std::string> outputs;  // empty: all outputs
};

class Client {
 public:
  explicit Client(const std::string& base_url, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  bool live();
  bool ready();
  nlohmann::json server_metadata();
  nlohmann::json model_metadata(const std::string& model, const std::string& version = "");
  bool model_ready(const std::string& model, const std::string& version = "");
  std::vector<Tensor> infer(const std::string& model, const std::vector<Tensor>& inputs,
                            const InferOptions& opt = {});
  // The full response of an inference request (model_name, id, outputs, ...).
  nlohmann::json infer_json(const std::string& model, const std::vector<Tensor>& inputs,
                            const InferOptions& opt = {});

  // Any request; never throws for an HTTP error status (only when the server is unreachable).
  RawResponse request(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& content_type = "application/json");

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the data of a response output (flat or nested) into floats.
std::vector<float> tensor_data(const nlohmann::json& data);

}  // namespace hg::server
