#include "server/kserve.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <type_traits>

#include "engine/error.h"
#include "server/http_error.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

// Thrown inside request handling; becomes the {"error": ...} response.
struct HttpFailure {
  int status;
  std::string message;
};
[[noreturn]] void fail(int status, std::string message) { throw HttpFailure{status, std::move(message)}; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
// A JSON string literal (escaped, quoted).
std::string quote(std::string_view s) { return dump(json(std::string(s))); }

HttpResponse ok(const json& j) { return {200, dump(j), "application/json", {}}; }

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// ---- routing ----------------------------------------------------------------------------

enum class Endpoint { ServerMetadata, Live, Ready, ModelMetadata, ModelReady, Infer, Unknown };

struct Route {
  Endpoint endpoint = Endpoint::Unknown;
  std::string model;
  std::optional<std::string> version;
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// The path of a request target, without query or fragment.
std::string_view target_path(std::string_view target) {
  size_t q = target.find_first_of("?#");
  return q == std::string_view::npos ? target : target.substr(0, q);
}

Route parse_route(std::string_view target) {
  std::string_view path = target_path(target);
  Route r;
  if (path.empty() || path[0] != '/') return r;
  std::vector<std::string> seg;
  size_t pos = 1;
  while (true) {
    size_t next = path.find('/', pos);
    seg.push_back(percent_decode(path.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos)));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  if (seg.empty() || seg[0] != "v2") return r;
  if (seg.size() == 1) {
    r.endpoint = Endpoint::ServerMetadata;
  } else if (seg.size() == 3 && seg[1] == "health") {
    if (seg[2] == "live") r.endpoint = Endpoint::Live;
    if (seg[2] == "ready") r.endpoint = Endpoint::Ready;
  } else if (seg.size() >= 3 && seg[1] == "models") {
    r.model = seg[2];
    size_t i = 3;
    if (seg.size() >= 5 && seg[3] == "versions") {
      r.version = seg[4];
      i = 5;
    }
    size_t rest = seg.size() - i;
    if (rest == 0) r.endpoint = Endpoint::ModelMetadata;
    else if (rest == 1 && seg[i] == "ready") r.endpoint = Endpoint::ModelReady;
    else if (rest == 1 && seg[i] == "infer") r.endpoint = Endpoint::Infer;
  }
  return r;
}

const char* allowed_method(Endpoint e) { return e == Endpoint::Infer ? "POST" : "GET"; }

// ---- model lookup -----------------------------------------------------------------------

// The served version; resolve() throws 400 (bad name), 404 or 503 (not ready).
const ModelVersion& find_ready_model(const ModelRepository& repo, const Route& r, std::shared_ptr<const ModelVersion>& held) {
  try {
    held = repo.resolve(r.model, r.version ? std::optional<std::string_view>(*r.version) : std::nullopt);
  } catch (const std::exception& e) {
    fail(http_status(e), e.what());
  }
  return *held;
}

json tensor_metadata(const std::vector<models::IOSpec>& ios) {
  json a = json::array();
  for (const auto& io : ios) a.push_back({{"name", io.name}, {"datatype", io.datatype}, {"shape", io.shape}});
  return a;
}

// ---- inference --------------------------------------------------------------------------

constexpr int kMaxNesting = 100;

// Flattens nested `data` arrays row-major into out (up to `limit` values); returns how many
// leaves there are. Throws HttpFailure for a non-number leaf or too deep nesting.
// T: float (FP32: any JSON number) or int64_t (INT64: integers only).
template <class T>
void flatten(const json& j, std::vector<T>& out, size_t limit, size_t& count, int depth, const std::string& input) {
  if (j.is_array()) {
    if (depth >= kMaxNesting) fail(400, "input '" + input + "': 'data' is nested deeper than 100 levels");
    for (const auto& x : j) flatten(x, out, limit, count, depth + 1, input);
    return;
  }
  constexpr bool integer = std::is_same_v<T, int64_t>;
  if (integer ? !(j.is_number_integer() || j.is_number_unsigned()) : !j.is_number())
    fail(400, "input '" + input + "': data element " + std::to_string(count) + " is " +
                  (j.is_number() ? "a non-integer number" : std::string(j.type_name())) +
                  (integer ? ", expected an integer (datatype INT64)" : ", expected a number (datatype FP32)"));
  if (integer && j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(400, "input '" + input + "': data element " + std::to_string(count) + " (" + j.dump() +
                  ") does not fit in INT64");
  if (count < limit) out.push_back(integer ? static_cast<T>(j.get<int64_t>()) : static_cast<T>(j.get<double>()));
  ++count;
}

// Product of dims, saturating instead of overflowing.
uint64_t element_count(const Shape& s) {
  uint64_t n = 1;
  for (int64_t d : s) {
    uint64_t u = static_cast<uint64_t>(d);
    if (u != 0 && n > UINT64_MAX / u) return UINT64_MAX;
    n *= u;
  }
  return n;
}

// Tensor data of a served datatype: FP32 or INT64 (model_repository.cpp checks models for these).
struct TensorData {
  bool int64 = false;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  const void* ptr() const { return int64 ? static_cast<const void*>(i64.data()) : f32.data(); }
  void* ptr() { return int64 ? static_cast<void*>(i64.data()) : f32.data(); }
  size_t size() const { return int64 ? i64.size() : f32.size(); }
};

struct ParsedInput {
  bool present = false;
  Shape shape;
  int64_t batch = 1;
  TensorData data;
};

void parse_input(const json& in, size_t index, const ModelVersion& e, std::vector<ParsedInput>& parsed,
                 size_t body_bytes) {
  const auto& spec = e.model->spec();
  if (!in.is_object()) fail(400, "inputs[" + std::to_string(index) + "] is not an object");
  auto name_it = in.find("name");
  if (name_it == in.end() || !name_it->is_string())
    fail(400, "inputs[" + std::to_string(index) + "] has no string 'name'");
  const std::string name = name_it->get<std::string>();
  size_t k = 0;
  while (k < spec.inputs.size() && spec.inputs[k].name != name) ++k;
  if (k == spec.inputs.size()) {
    std::string names;
    for (const auto& io : spec.inputs) names += (names.empty() ? "'" : ", '") + io.name + "'";
    fail(400, "unknown input '" + name + "' for model '" + e.name + "' (model inputs: " + names + ")");
  }
  const models::IOSpec& io = spec.inputs[k];
  ParsedInput& p = parsed[k];
  if (p.present) fail(400, "input '" + name + "' is given more than once");
  p.present = true;

  auto dt = in.find("datatype");
  if (dt == in.end() || !dt->is_string()) fail(400, "input '" + name + "' has no string 'datatype'");
  if (*dt != io.datatype)
    fail(400, "input '" + name + "' of model '" + e.name + "': expected datatype " + io.datatype + ", got " +
                  dt->get<std::string>());

  auto sh = in.find("shape");
  if (sh == in.end() || !sh->is_array()) fail(400, "input '" + name + "' has no 'shape' array");
  for (const auto& d : *sh) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      fail(400, "input '" + name + "': 'shape' must hold non-negative integers, got " + dump(*sh));
    p.shape.push_back(d.get<int64_t>());
  }
  bool compatible = p.shape.size() == io.shape.size();
  for (size_t i = 0; compatible && i < io.shape.size(); ++i) {
    if (io.shape[i] == -1) p.batch = p.shape[i];
    else if (io.shape[i] != p.shape[i]) compatible = false;
  }
  if (!compatible)
    fail(400, "unexpected shape for input '" + name + "' of model '" + e.name + "': expected " +
                  shape_text(io.shape) + ", got " + shape_text(p.shape));

  auto params = in.find("parameters");
  if (params != in.end() && params->is_object() && params->contains("binary_data_size"))
    fail(400, "input '" + name + "': binary tensor data is not supported; send 'data' as JSON");
  auto data = in.find("data");
  if (data == in.end()) fail(400, "input '" + name + "' has no 'data'");

  const uint64_t want = element_count(p.shape);
  // A JSON number takes at least one byte plus a separator: never reserve more than that.
  const size_t limit = static_cast<size_t>(std::min<uint64_t>(want, body_bytes / 2 + 1));
  size_t got = 0;
  p.data.int64 = io.datatype == "INT64";
  if (p.data.int64) {
    p.data.i64.reserve(limit);
    flatten(*data, p.data.i64, limit, got, 0, name);
  } else {
    p.data.f32.reserve(limit);
    flatten(*data, p.data.f32, limit, got, 0, name);
  }
  if (got != want)
    fail(400, "input '" + name + "': shape " + shape_text(p.shape) + " needs " + std::to_string(want) +
                  " elements, 'data' has " + std::to_string(got));
}

int status_for(const Error& e) {
  switch (e.code()) {
    case ErrorCode::Invalid:
    case ErrorCode::Shape:
    case ErrorCode::DType: return 400;
    case ErrorCode::NotFound: return 404;
    case ErrorCode::OutOfMemory: return 503;
    default: return 500;
  }
}

HttpResponse infer(const ModelRepository& repo, const Route& route, const HttpRequest& req) {
  std::shared_ptr<const ModelVersion> held;
  const ModelVersion& e = find_ready_model(repo, route, held);
  const auto& spec = e.model->spec();
  if (!req.header("Inference-Header-Content-Length").empty())
    fail(400, "binary tensor data (Inference-Header-Content-Length) is not supported; send JSON tensors");

  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& ex) {
    fail(400, std::string("malformed JSON in request body: ") + ex.what());
  } catch (const json::exception& ex) {  // e.g. a number too large for a double
    fail(400, std::string("malformed JSON in request body: ") + ex.what());
  }
  if (!body.is_object()) fail(400, "request body must be a JSON object");

  std::string id_json;
  if (auto id = body.find("id"); id != body.end()) {
    if (!id->is_string()) fail(400, "'id' must be a string");
    id_json = quote(id->get<std::string>());
  }

  auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_array()) fail(400, "request has no 'inputs' array");
  std::vector<ParsedInput> parsed(spec.inputs.size());
  for (size_t i = 0; i < inputs->size(); ++i) parse_input((*inputs)[i], i, e, parsed, req.body.size());
  int64_t batch = -1;
  std::string batch_from;
  for (size_t k = 0; k < parsed.size(); ++k) {
    const std::string& name = spec.inputs[k].name;
    if (!parsed[k].present)
      fail(400, "missing input '" + name + "' for model '" + e.name + "' (expected shape " +
                    shape_text(spec.inputs[k].shape) + ", datatype " + spec.inputs[k].datatype + ")");
    if (batch < 0) {
      batch = parsed[k].batch;
      batch_from = name;
    } else if (parsed[k].batch != batch) {
      fail(400, "inputs disagree on the batch size: '" + batch_from + "' has " + std::to_string(batch) +
                    ", '" + name + "' has " + std::to_string(parsed[k].batch));
    }
  }
  if (batch < 1) fail(400, "batch size must be at least 1, got " + std::to_string(batch));

  // Requested outputs, in request order; all of them when omitted.
  std::vector<size_t> selected;
  if (auto outs = body.find("outputs"); outs != body.end()) {
    if (!outs->is_array()) fail(400, "'outputs' must be an array");
    for (const auto& o : *outs) {
      auto n = o.is_object() ? o.find("name") : o.end();
      if (!o.is_object() || n == o.end() || !n->is_string())
        fail(400, "each entry of 'outputs' needs a string 'name'");
      const std::string name = n->get<std::string>();
      size_t j = 0;
      while (j < spec.outputs.size() && spec.outputs[j].name != name) ++j;
      if (j == spec.outputs.size()) {
        std::string names;
        for (const auto& io : spec.outputs) names += (names.empty() ? "'" : ", '") + io.name + "'";
        fail(400, "unknown output '" + name + "' requested from model '" + e.name + "' (model outputs: " +
                      names + ")");
      }
      if (auto p = o.find("parameters"); p != o.end() && p->is_object() && p->contains("classification"))
        fail(400, "output '" + name + "': the classification extension is not supported");
      if (std::find(selected.begin(), selected.end(), j) == selected.end()) selected.push_back(j);
    }
  } else {
    for (size_t j = 0; j < spec.outputs.size(); ++j) selected.push_back(j);
  }
  body = json();  // free the parsed request before running

  std::vector<const void*> in_ptrs;
  for (auto& p : parsed) in_ptrs.push_back(p.data.ptr());
  std::vector<TensorData> outputs(spec.outputs.size());
  std::vector<void*> out_ptrs;
  for (size_t j = 0; j < spec.outputs.size(); ++j) {
    const auto n = static_cast<size_t>(batch * e.model->output_size(j));
    outputs[j].int64 = spec.outputs[j].datatype == "INT64";
    if (outputs[j].int64) outputs[j].i64.resize(n);
    else outputs[j].f32.resize(n);
    out_ptrs.push_back(outputs[j].ptr());
  }
  try {
    e.model->run(in_ptrs, batch, out_ptrs);
  } catch (const Error& ex) {
    fail(status_for(ex), "inference failed for model '" + e.name + "': " + ex.what());
  } catch (const std::exception& ex) {
    fail(500, "inference failed for model '" + e.name + "': " + ex.what());
  }

  size_t total = 0;
  for (size_t j : selected) total += outputs[j].size();
  std::string out;
  out.reserve(128 + total * 14);
  out += "{\"model_name\":";
  out += quote(e.name);
  out += ",\"model_version\":\"";
  out += std::to_string(e.version);
  out += '"';
  if (!id_json.empty()) {
    out += ",\"id\":";
    out += id_json;
  }
  out += ",\"outputs\":[";
  for (size_t s = 0; s < selected.size(); ++s) {
    const models::IOSpec& io = spec.outputs[selected[s]];
    Shape shape = io.shape;
    for (auto& d : shape)
      if (d == -1) d = batch;
    if (s) out += ',';
    out += "{\"name\":";
    out += quote(io.name);
    out += ",\"datatype\":";
    out += quote(io.datatype);
    out += ",\"shape\":";
    out += shape_text(shape);
    out += ",\"data\":[";
    const TensorData& v = outputs[selected[s]];
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ',';
      if (v.int64) out += std::to_string(v.i64[i]);
      else append_float(out, v.f32[i]);
    }
    out += "]}";
  }
  out += "]}";
  return {200, std::move(out), "application/json", {}};
}

HttpResponse respond(const ModelRepository& repo, const KServeOptions& opt, const Route& route,
                     const HttpRequest& req) {
  switch (route.endpoint) {
    case Endpoint::Live: return ok({{"live", true}});
    case Endpoint::Ready: {
      if (!repo.all_ready()) {
        std::string why;
        for (const IndexEntry& e : repo.index())
          if (e.state != ModelState::Ready && e.reason != "not loaded" && e.reason != "unloaded")
            why += " model '" + e.name + "' is " + model_state_name(e.state) + ": " + e.reason + ";";
        fail(503, "not ready:" + why);
      }
      return ok({{"ready", true}});
    }
    case Endpoint::ServerMetadata:
      return ok({{"name", opt.server_name}, {"version", opt.server_version}, {"extensions", json::array()}});
    case Endpoint::ModelMetadata: {
      std::shared_ptr<const ModelVersion> held;
      const ModelVersion& e = find_ready_model(repo, route, held);
      const auto& spec = e.model->spec();
      return ok({{"name", e.name},
                 {"versions", json::array({std::to_string(e.version)})},
                 {"platform", "hgraph_v1"},
                 {"inputs", tensor_metadata(spec.inputs)},
                 {"outputs", tensor_metadata(spec.outputs)}});
    }
    case Endpoint::ModelReady: {
      std::shared_ptr<const ModelVersion> held;
      const ModelVersion& e = find_ready_model(repo, route, held);
      return ok({{"name", e.name}, {"version", std::to_string(e.version)}, {"ready", true}});
    }
    case Endpoint::Infer: return infer(repo, route, req);
    case Endpoint::Unknown: break;
  }
  fail(404, "no endpoint for " + req.method + " " + std::string(target_path(req.target)));
}

// Routes and checks the method; a failure is thrown as HttpFailure.
Route checked_route(const HttpRequest& req) {
  Route route = parse_route(req.target);
  if (route.endpoint == Endpoint::Unknown)
    fail(404, "no endpoint for " + req.method + " " + std::string(target_path(req.target)));
  const char* allow = allowed_method(route.endpoint);
  if (req.method != allow)
    fail(405, "method " + req.method + " is not allowed for " + std::string(target_path(req.target)) +
                  " (allowed: " + allow + ")");
  return route;
}

HttpResponse failure_response(const HttpFailure& f, const HttpRequest& req) {
  HttpResponse r = json_error(f.status, f.message);
  if (f.status == 405) r.headers.emplace_back("Allow", allowed_method(parse_route(req.target).endpoint));
  if (f.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse guarded(const ModelRepository& repo, const KServeOptions& opt, const HttpRequest& req,
                     const Route* route) {
  try {
    Route r = route ? *route : checked_route(req);
    return respond(repo, opt, r, req);
  } catch (const HttpFailure& f) {
    return failure_response(f, req);
  } catch (const std::exception& ex) {
    return json_error(500, std::string("internal error: ") + ex.what());
  }
}

}  // namespace

void append_float(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

KServeHandler::KServeHandler(const ModelRepository& repo, KServeOptions opt) : repo_(repo), opt_(std::move(opt)) {
  for (int i = 0; i < opt_.infer_threads; ++i) workers_.emplace_back([this] { worker(); });
}

KServeHandler::~KServeHandler() { shutdown(); }

HttpResponse KServeHandler::handle(const HttpRequest& req) { return guarded(repo_, opt_, req, nullptr); }

HttpHandler KServeHandler::http_handler() {
  return [this](HttpRequest&& req, Reply reply) { (*this)(std::move(req), std::move(reply)); };
}

void KServeHandler::operator()(HttpRequest&& req, Reply reply) {
  Route route;
  try {
    route = checked_route(req);
  } catch (const HttpFailure& f) {
    return reply(failure_response(f, req));
  }
  if (route.endpoint != Endpoint::Infer || opt_.infer_threads <= 0) return reply(guarded(repo_, opt_, req, &route));

  // Inference goes to the worker threads: parsing a large body or running the model must
  // not hold an I/O thread that health probes need.
  auto task = [this, route = std::move(route), req = std::move(req), reply]() mutable {
    reply(guarded(repo_, opt_, req, &route));
  };
  std::string refusal;
  {
    std::lock_guard lk(mu_);
    if (stop_) {
      refusal = "server is shutting down";
    } else if (queue_.size() >= opt_.max_queue) {
      refusal = "inference queue is full (" + std::to_string(opt_.max_queue) + " requests waiting); retry later";
    } else {
      queue_.emplace_back(std::move(task));
      cv_.notify_one();
      return;
    }
  }
  HttpResponse busy = json_error(503, refusal);
  busy.headers.emplace_back("Retry-After", "1");
  reply(std::move(busy));
}

void KServeHandler::worker() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // guarded(): never throws
  }
}

void KServeHandler::shutdown() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
  // `dropped` goes out of scope here: each dropped Reply answers 500.
}

}  // namespace hg::server
