#define _TURN_OFF_PLATFORM_STRING
#include "server/client.h"

#include <cctype>
#include <cmath>
#include <cpprest/http_client.h>
#include <limits>

#include "server/kserve.h"

namespace hg::server {

namespace http = web::http;

namespace {

ErrorCode code_for_status(int status) {
  switch (status) {
    case 0: return ErrorCode::Io;
    case 400: return ErrorCode::Invalid;
    case 404: return ErrorCode::NotFound;
    default: return ErrorCode::Internal;
  }
}

// The server's {"error": ...} message, or the raw body.
std::string error_message(const RawResponse& r) {
  try {
    auto j = nlohmann::json::parse(r.body);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  } catch (const std::exception&) {
  }
  return r.body;
}

std::string model_path(const std::string& model, const std::string& version) {
  std::string p = "/v2/models/" + web::uri::encode_data_string(model);
  if (!version.empty()) p += "/versions/" + web::uri::encode_data_string(version);
  return p;
}

void flatten_into(const nlohmann::json& j, std::vector<float>& out) {
  if (j.is_array()) {
    for (const auto& x : j) flatten_into(x, out);
  } else if (j.is_number()) {
    out.push_back(static_cast<float>(j.get<double>()));
  } else if (j.is_null()) {
    out.push_back(std::numeric_limits<float>::quiet_NaN());
  } else {
    throw ClientError(200, std::string("unexpected ") + j.type_name() + " in tensor data");
  }
}

}  // namespace

ClientError::ClientError(int status, const std::string& msg)
    : Error(code_for_status(status), status ? "HTTP " + std::to_string(status) + ": " + msg : msg),
      status_(status) {}

std::string RawResponse::header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (k.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < k.size() && same; ++i) same = std::tolower((unsigned char)k[i]) == std::tolower((unsigned char)name[i]);
    if (same) return v;
  }
  return {};
}

std::vector<float> tensor_data(const nlohmann::json& data) {
  std::vector<float> out;
  flatten_into(data, out);
  return out;
}

struct Client::Impl {
  std::string base;
  http::client::http_client client;
  Impl(const std::string& url, const http::client::http_client_config& cfg) : base(url), client(web::uri(url), cfg) {}
};

Client::Client(const std::string& base_url, std::chrono::milliseconds timeout) {
  http::client::http_client_config cfg;
  cfg.set_timeout(timeout);
  try {
    impl_ = std::make_unique<Impl>(base_url, cfg);
  } catch (const std::exception& e) {
    throw ClientError(0, "bad server URL '" + base_url + "': " + e.what());
  }
}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

RawResponse Client::request(const std::string& method, const std::string& path, const std::string& body,
                            const std::string& content_type) {
  RawResponse out;
  try {
    http::http_request req{http::method(method)};
    req.set_request_uri(web::uri(path));
    if (!body.empty() || method == "POST" || method == "PUT") req.set_body(body, content_type);
    http::http_response resp = impl_->client.request(req).get();
    out.status = resp.status_code();
    for (const auto& [k, v] : resp.headers()) out.headers.emplace_back(k, v);
    out.body = resp.extract_utf8string(true).get();
  } catch (const ClientError&) {
    throw;
  } catch (const std::exception& e) {
    throw ClientError(0, method + " " + impl_->base + path + " failed: " + e.what());
  }
  return out;
}

namespace {
nlohmann::json json_or_throw(const RawResponse& r) {
  if (r.status != 200) throw ClientError(r.status, error_message(r));
  try {
    return nlohmann::json::parse(r.body);
  } catch (const std::exception& e) {
    throw ClientError(r.status, std::string("response is not JSON: ") + e.what());
  }
}
}  // namespace

bool Client::live() { return request("GET", "/v2/health/live").status == 200; }
bool Client::ready() { return request("GET", "/v2/health/ready").status == 200; }
nlohmann::json Client::server_metadata() { return json_or_throw(request("GET", "/v2")); }

nlohmann::json Client::model_metadata(const std::string& model, const std::string& version) {
  return json_or_throw(request("GET", model_path(model, version)));
}

bool Client::model_ready(const std::string& model, const std::string& version) {
  return request("GET", model_path(model, version) + "/ready").status == 200;
}

nlohmann::json Client::infer_json(const std::string& model, const std::vector<Tensor>& inputs,
                                  const InferOptions& opt) {
  // Built by hand: floats printed shortest-round-trip, no per-element JSON values.
  std::string body = "{";
  if (!opt.id.empty()) body += "\"id\":" + nlohmann::json(opt.id).dump() + ",";
  body += "\"inputs\":[";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (i) body += ',';
    body += "{\"name\":" + nlohmann::json(t.name).dump() + ",\"datatype\":" + nlohmann::json(t.datatype).dump() +
            ",\"shape\":" + nlohmann::json(t.shape).dump() + ",\"data\":[";
    for (size_t k = 0; k < t.data.size(); ++k) {
      if (k) body += ',';
      append_float(body, t.data[k]);
    }
    body += "]}";
  }
  body += "]";
  if (!opt.outputs.empty()) {
    body += ",\"outputs\":[";
    for (size_t j = 0; j < opt.outputs.size(); ++j)
      body += (j ? ",{\"name\":" : "{\"name\":") + nlohmann::json(opt.outputs[j]).dump() + "}";
    body += "]";
  }
  body += "}";
  return json_or_throw(request("POST", model_path(model, opt.version) + "/infer", body));
}

std::vector<Tensor> Client::infer(const std::string& model, const std::vector<Tensor>& inputs,
                                  const InferOptions& opt) {
  nlohmann::json r = infer_json(model, inputs, opt);
  std::vector<Tensor> out;
  try {
    for (const auto& o : r.at("outputs")) {
      Tensor t;
      t.name = o.at("name").get<std::string>();
      t.datatype = o.at("datatype").get<std::string>();
      t.shape = o.at("shape").get<std::vector<int64_t>>();
      t.data = tensor_data(o.at("data"));
      out.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ClientError(200, std::string("unexpected inference response: ") + e.what());
  }
  return out;
}

}  // namespace hg::server
