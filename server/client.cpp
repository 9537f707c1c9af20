#define _TURN_OFF_PLATFORM_STRING
#include "server/client.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <limits>

#include "server/infer_codec.h"
#include "server/sse_parser.h"

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

std::string encode(const std::string& segment) { return web::uri::encode_data_string(segment); }

std::string model_path(const std::string& model, const std::string& version) {
  std::string p = "/v2/models/" + encode(model);
  if (!version.empty()) p += "/versions/" + encode(version);
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

nlohmann::json json_or_throw(const RawResponse& r) {
  if (r.status != 200) throw ClientError(r.status, error_message(r));
  try {
    return nlohmann::json::parse(r.body);
  } catch (const std::exception& e) {
    throw ClientError(r.status, std::string("response is not JSON: ") + e.what());
  }
}

void ok_or_throw(const RawResponse& r) {
  if (r.status != 200) throw ClientError(r.status, error_message(r));
}

// A string field of an object; "" when absent or null, numbers as their decimal text.
std::string string_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return it->dump();
  throw ClientError(200, std::string("field '") + key + "' is " + it->type_name() + ", expected a string");
}

nlohmann::json generate_body(const std::string& text_input, const GenerateOptions& opt) {
  nlohmann::json body = {{"text_input", text_input}};
  if (!opt.id.empty()) body["id"] = opt.id;
  if (!opt.parameters.empty()) body["parameters"] = opt.parameters;
  return body;
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
  ClientOptions opt;
  http::client::http_client client;
  Impl(const std::string& url, ClientOptions o, const http::client::http_client_config& cfg)
      : base(url), opt(std::move(o)), client(web::uri(url), cfg) {}

  http::http_request make(const std::string& method, const std::string& path, std::string body,
                          const std::string& content_type, const Headers& headers) const {
    http::http_request req{http::method(method)};
    req.set_request_uri(web::uri(path));
    if (!body.empty() || method == "POST" || method == "PUT") req.set_body(std::move(body), content_type);
    if (!opt.token.empty()) req.headers().add("Authorization", "Bearer " + opt.token);
    for (const auto& [k, v] : opt.headers) req.headers().add(k, v);
    for (const auto& [k, v] : headers) req.headers().add(k, v);
    return req;
  }

  RawResponse send(const std::string& method, const std::string& path, std::string body,
                   const std::string& content_type, const Headers& headers);
  // send() with ClientOptions' compression: the body compressed, the answer inflated.
  RawResponse send_compressed(const std::string& path, std::string body, const std::string& content_type,
                              Headers headers);
  // The body in ClientOptions::request_compression, with its Content-Encoding added to `headers`.
  std::string compress_body(std::string body, Headers& headers) const;

  [[noreturn]] void unreachable(const std::string& method, const std::string& path, const std::exception& e) const {
    throw ClientError(0, method + " " + base + path + " failed: " + e.what());
  }
};

namespace {

RawResponse head_of(const http::http_response& resp) {
  RawResponse out;
  out.status = resp.status_code();
  for (const auto& [k, v] : resp.headers()) out.headers.emplace_back(k, v);
  return out;
}

std::string read_all(const http::http_response& resp) {
  concurrency::streams::container_buffer<std::string> buf;
  resp.body().read_to_end(buf).get();
  return std::move(buf.collection());
}

}  // namespace

Client::Client(const std::string& base_url, ClientOptions opt) {
  http::client::http_client_config cfg;
  cfg.set_timeout(opt.timeout);
  try {
    impl_ = std::make_unique<Impl>(base_url, std::move(opt), cfg);
  } catch (const std::exception& e) {
    throw ClientError(0, "bad server URL '" + base_url + "': " + e.what());
  }
}

namespace {
ClientOptions with_timeout(std::chrono::milliseconds timeout) {
  ClientOptions o;
  o.timeout = timeout;
  return o;
}
}  // namespace

Client::Client(const std::string& base_url, std::chrono::milliseconds timeout)
    : Client(base_url, with_timeout(timeout)) {}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

RawResponse Client::Impl::send(const std::string& method, const std::string& path, std::string body,
                               const std::string& content_type, const Headers& headers) {
  try {
    http::http_response resp = client.request(make(method, path, std::move(body), content_type, headers)).get();
    RawResponse out = head_of(resp);
    out.body = read_all(resp);
    return out;
  } catch (const std::exception& e) {
    unreachable(method, path, e);
  }
}

std::string Client::Impl::compress_body(std::string body, Headers& headers) const {
  if (opt.request_compression == ContentCoding::Identity) return body;
  headers.emplace_back("Content-Encoding", coding_name(opt.request_compression));
  return compress(body, opt.request_compression);
}

RawResponse Client::Impl::send_compressed(const std::string& path, std::string body, const std::string& content_type,
                                          Headers headers) {
  body = compress_body(std::move(body), headers);
  if (opt.response_compression != ContentCoding::Identity)
    headers.emplace_back("Accept-Encoding", coding_name(opt.response_compression));
  RawResponse r = send("POST", path, std::move(body), content_type, headers);
  const std::string encoding = r.header("Content-Encoding");
  const std::optional<ContentCoding> coding = parse_content_encoding(encoding);
  if (!coding) throw ClientError(r.status, "the answer to POST " + path + " has an unknown Content-Encoding '" + encoding + "'");
  if (*coding == ContentCoding::Identity) return r;
  try {
    r.body = inflate(r.body, *coding, opt.max_response_bytes);
  } catch (const Error& e) {
    throw ClientError(r.status, "cannot inflate the answer to POST " + path + ": " + e.what());
  }
  return r;
}

RawResponse Client::request(const std::string& method, const std::string& path, const std::string& body,
                            const std::string& content_type, const Headers& headers) {
  return impl_->send(method, path, body, content_type, headers);
}

bool Client::live() { return request("GET", "/v2/health/live").status == 200; }
bool Client::ready() { return request("GET", "/v2/health/ready").status == 200; }
nlohmann::json Client::server_metadata() { return json_or_throw(request("GET", "/v2")); }

nlohmann::json Client::model_metadata(const std::string& model, const std::string& version) {
  return json_or_throw(request("GET", model_path(model, version)));
}

bool Client::model_ready(const std::string& model, const std::string& version) {
  return request("GET", model_path(model, version) + "/ready").status == 200;
}

const Tensor& InferResult::output(const std::string& name) const {
  std::string names;
  for (const Tensor& t : outputs) {
    if (t.name == name) return t;
    names += (names.empty() ? "'" : ", '") + t.name + "'";
  }
  throw InvalidArgument("the response of '" + model_name + "' has no output '" + name + "' (it has " +
                        (names.empty() ? "none" : names) + ")");
}

InferResult Client::infer_result(const std::string& model, const std::vector<Tensor>& inputs, const InferOptions& opt) {
  InferRequest req;
  if (!opt.id.empty()) req.id = opt.id;
  req.parameters = opt.parameters;
  req.inputs.assign(inputs.begin(), inputs.end());
  for (const InferOutput& o : opt.outputs) req.outputs.push_back({o.name, o.binary, o.parameters});
  req.binary_data_output = opt.binary_output;
  req.priority = opt.priority;
  req.timeout_us = opt.timeout_us;
  req.raw = opt.raw;
  EncodedBody b = encode_infer_request(req);
  Headers headers;
  if (b.header_length) headers.emplace_back("Inference-Header-Content-Length", std::to_string(*b.header_length));
  RawResponse r = impl_->send_compressed(model_path(model, opt.version) + "/infer", std::move(b.body), b.content_type,
                                         std::move(headers));
  ok_or_throw(r);
  std::optional<size_t> header_length;
  if (std::string h = r.header("Inference-Header-Content-Length"); !h.empty()) {
    size_t n = 0;
    auto [end, ec] = std::from_chars(h.data(), h.data() + h.size(), n);
    if (ec != std::errc() || end != h.data() + h.size())
      throw ClientError(200, "bad Inference-Header-Content-Length '" + h + "' in the response");
    header_length = n;
  }
  InferResponse resp;
  try {
    resp = decode_infer_response(r.body, header_length);
  } catch (const Error& e) {
    throw ClientError(200, std::string("bad inference response: ") + e.what());
  }
  InferResult out{std::move(resp.model_name), std::move(resp.model_version), std::move(resp.id),
                  std::move(resp.parameters), {}};
  out.outputs.reserve(resp.outputs.size());
  for (WireTensor& t : resp.outputs) out.outputs.emplace_back(std::move(t));
  return out;
}

std::vector<Tensor> Client::infer(const std::string& model, const std::vector<Tensor>& inputs,
                                  const InferOptions& opt) {
  return infer_result(model, inputs, opt).outputs;
}

// ---- repository extension ---------------------------------------------------------------

std::vector<RepositoryModel> Client::repository_index(bool ready_only) {
  nlohmann::json j = json_or_throw(request("POST", "/v2/repository/index", nlohmann::json{{"ready", ready_only}}.dump()));
  if (!j.is_array()) throw ClientError(200, "repository index is " + std::string(j.type_name()) + ", expected an array");
  std::vector<RepositoryModel> out;
  for (const auto& m : j) {
    if (!m.is_object() || !m.contains("name"))
      throw ClientError(200, "repository index entry " + std::to_string(out.size()) + " has no name: " + m.dump());
    out.push_back({string_field(m, "name"), string_field(m, "version"), string_field(m, "state"),
                   string_field(m, "reason")});
  }
  return out;
}

void Client::load_model(const std::string& model, const std::string& config) {
  nlohmann::json body = nlohmann::json::object();
  if (!config.empty()) body["parameters"] = {{"config", config}};
  ok_or_throw(request("POST", "/v2/repository/models/" + encode(model) + "/load", body.dump()));
}

void Client::unload_model(const std::string& model, bool unload_dependents) {
  nlohmann::json body = nlohmann::json::object();
  if (unload_dependents) body["parameters"] = {{"unload_dependents", true}};
  ok_or_throw(request("POST", "/v2/repository/models/" + encode(model) + "/unload", body.dump()));
}

// ---- configuration, statistics, metrics -------------------------------------------------

nlohmann::json Client::model_config(const std::string& model, const std::string& version) {
  return json_or_throw(request("GET", model_path(model, version) + "/config"));
}

nlohmann::json Client::model_statistics(const std::string& model, const std::string& version) {
  if (model.empty() && !version.empty())
    throw InvalidArgument("model_statistics: version '" + version + "' given without a model");
  return json_or_throw(request("GET", model.empty() ? "/v2/models/stats" : model_path(model, version) + "/stats"));
}

std::string Client::metrics() {
  RawResponse r = request("GET", "/metrics");
  ok_or_throw(r);
  return std::move(r.body);
}

// ---- generate extension -----------------------------------------------------------------

std::string Client::generate(const std::string& model, const std::string& text_input, const GenerateOptions& opt) {
  nlohmann::json r = json_or_throw(impl_->send_compressed(model_path(model, opt.version) + "/generate",
                                                          generate_body(text_input, opt).dump(), "application/json", {}));
  if (!r.is_object() || !r.contains("text_output") || !r["text_output"].is_string())
    throw ClientError(200, "generate response has no text_output string: " + r.dump());
  return r["text_output"].get<std::string>();
}

std::vector<nlohmann::json> Client::generate_stream(const std::string& model, const std::string& text_input,
                                                    const GenerateOptions& opt, const OnEvent& on_event) {
  const std::string path = model_path(model, opt.version) + "/generate_stream";
  // Cancelling closes the connection: on an early stop or an exception (also one from
  // on_event) nothing reads the rest of the stream. A no-op once the response is complete.
  pplx::cancellation_token_source cancel;
  struct CancelOnExit {
    pplx::cancellation_token_source& c;
    ~CancelOnExit() { c.cancel(); }
  } cancel_on_exit{cancel};
  auto io = [&](auto&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const std::exception& e) {
      impl_->unreachable("POST", path, e);
    }
  };
  Headers headers = {{"Accept", "text/event-stream"}};
  std::string request_body = impl_->compress_body(generate_body(text_input, opt).dump(), headers);
  http::http_response resp = io([&] {
    return impl_->client
        .request(impl_->make("POST", path, std::move(request_body), "application/json", headers), cancel.get_token())
        .get();
  });
  if (resp.status_code() != 200) {
    RawResponse r = head_of(resp);
    r.body = io([&] { return read_all(resp); });
    throw ClientError(r.status, error_message(r));
  }
  std::vector<nlohmann::json> events;
  std::optional<std::string> error;  // an {"error"} event
  auto dispatch = [&](SseEvent&& e) {
    nlohmann::json j = nlohmann::json::parse(e.data, nullptr, false);
    if (j.is_discarded())
      throw ClientError(200, "event " + std::to_string(events.size()) + " of the stream is not JSON: " + e.data);
    if (j.is_object() && j.contains("error")) {
      error = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
      return false;
    }
    events.push_back(std::move(j));
    return !on_event || on_event(events.back());
  };
  // Take what has arrived: wait for one byte, then whatever else is buffered.
  concurrency::streams::streambuf<uint8_t> body = resp.body().streambuf();
  std::string chunk(16 * 1024, '\0');
  auto* data = reinterpret_cast<uint8_t*>(chunk.data());
  SseParser parser;
  for (bool go = true; go;) {
    size_t n = io([&] { return body.getn(data, 1).get(); });
    if (n == 0) {
      parser.finish(dispatch);
      break;
    }
    const size_t more = std::min(static_cast<size_t>(body.in_avail()), chunk.size() - 1);
    if (more) n += io([&] { return body.getn(data + 1, more).get(); });
    go = parser.feed(std::string_view(chunk.data(), n), dispatch);
  }
  if (error) throw ClientError(200, "error event in the stream of '" + model + "': " + *error);
  return events;
}

}  // namespace hg::server
