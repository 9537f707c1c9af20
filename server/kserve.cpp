#include "server/kserve.h"

#include <charconv>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <oneapi/tbb/task_group.h>
#include <optional>
#include <string_view>

#include "engine/error.h"
#include "engine/host_arena.h"
#include "server/compression.h"
#include "server/generate.h"
#include "server/http_error.h"
#include "server/infer_codec.h"
#include "server/openai.h"
#include "server/padding.h"
#include "engine/json_reader.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
HttpResponse ok(const json& j) {
  HttpResponse r;
  r.body = dump(j);
  return r;
}

HttpResponse with_error_headers(HttpResponse r, Endpoint e) {
  if (r.status == 405) r.headers.emplace_back("Allow", allowed_methods(e));
  if (r.status == 503) r.headers.emplace_back("Retry-After", "1");
  if (r.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"hgraph\"");
  return r;
}

HttpResponse error_response(int status, std::string_view message, Endpoint e = Endpoint::Unknown) {
  return with_error_headers(json_error(status, message), e);
}

// The OpenAI endpoints answer every error in OpenAI's shape, the others {"error": "..."}.
HttpResponse error_response(const std::exception& e, Endpoint ep = Endpoint::Unknown) {
  if (is_openai(ep)) return with_error_headers(openai_error(e), ep);
  return error_response(http_status(e), e.what(), ep);
}

std::optional<std::string_view> version_of(const Route& r) {
  return r.version ? std::optional<std::string_view>(*r.version) : std::nullopt;
}

// Compares without an early exit, so the time taken does not reveal a matching prefix.
bool same_secret(std::string_view a, std::string_view b) {
  if (b.empty()) return false;
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i % b.size()]);
  return diff == 0;
}

void check_auth(const KServeOptions& opt, Endpoint e, const HttpRequest& req) {
  if (opt.auth_token.empty()) return;
  const bool probe = e == Endpoint::Live || e == Endpoint::Ready;
  if (!(is_management(e) || (opt.auth_all && !probe))) return;
  std::string_view h = req.header("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (h.empty()) throw HttpError(401, "this endpoint needs 'Authorization: Bearer <token>'");
  if (h.substr(0, kBearer.size()) != kBearer || !same_secret(h.substr(kBearer.size()), opt.auth_token))
    throw HttpError(401, "the bearer token is not valid");
}

// Inference-Header-Content-Length, when present: digits only, within the body.
std::optional<size_t> header_length(const HttpRequest& req) {
  std::string_view h = req.header("Inference-Header-Content-Length");
  if (h.empty()) return std::nullopt;
  size_t n = 0;
  auto [end, ec] = std::from_chars(h.data(), h.data() + h.size(), n);
  if (ec != std::errc() || end != h.data() + h.size())
    throw HttpError(400, "Inference-Header-Content-Length must be a non-negative integer, got '" + std::string(h) + "'");
  if (n > req.body.size())
    throw HttpError(400, "Inference-Header-Content-Length " + std::to_string(n) + " exceeds the body size " +
                             std::to_string(req.body.size()));
  return n;
}

json tensor_metadata(const std::vector<models::IOSpec>& ios) {
  json a = json::array();
  for (const auto& io : ios) a.push_back({{"name", io.name}, {"datatype", io.datatype}, {"shape", io.shape}});
  return a;
}

// The metadata's "properties" (strings, as the protocol says): the precision served and, when it
// is reduced, its agreement with FP32 measured at load.
json model_properties(const ModelVersion& v) {
  json p = {{"precision", graphs::precision_name(v.config.precision)}};
  const models::PrecisionReport& r = v.precision;
  if (v.config.precision != graphs::Precision::Fp32) {
    p["precision_check_samples"] = std::to_string(r.samples);
    if (r.samples) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4f", r.top1_agreement);
      p["precision_top1_agreement"] = buf;
      std::snprintf(buf, sizeof buf, "%.3g", r.max_relative_error);
      p["precision_max_relative_error"] = buf;
    }
  }
  return p;
}

// An optional JSON object body (repository requests may have none).
json object_body(const HttpRequest& req, const WireLimits& limits) {
  if (req.body.find_first_not_of(" \t\r\n") == std::string::npos) return json::object();
  json j = read_json(req.body, {.max_depth = limits.max_json_depth, .max_values = 65536, .max_bytes = size_t{1} << 20},
                     "the request body");
  if (!j.is_object()) throw HttpError(400, "request body must be a JSON object");
  return j;
}

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

// Large bodies are decoded as tasks of a TBB arena of parse_threads. `waiting` counts the bodies
// queued and not yet started (max_parse_queue bounds it; a task takes itself off when it starts,
// without the lock); `mu` orders a submission against shutdown(), so that no task joins the group
// once shutdown() waits for it.
struct KServeHandler::ParsePool {
  explicit ParsePool(int threads) : arena(threads) {}
  HostArena arena;
  tbb::task_group group;
  std::atomic<size_t> waiting{0};
  std::mutex mu;
  std::atomic<bool> stopped{false};  // set under mu; queued tasks see it and drop their body

  enum class Queued { Yes, Stopped, Full };
  // Queues `task` unless the pool stopped or max_queue tasks wait.
  template <class F>
  Queued submit(F&& task, size_t max_queue) {
    std::lock_guard lk(mu);
    if (stopped) return Queued::Stopped;
    if (waiting >= max_queue) return Queued::Full;
    ++waiting;
    // TBB calls a task as const: what a task moves from is behind a pointer.
    arena->enqueue(group.defer([this, task = std::forward<F>(task)] {
      --waiting;
      task();
    }));
    return Queued::Yes;
  }
};

KServeHandler::KServeHandler(ModelRepository& repo, ServerMetrics& metrics, KServeOptions opt)
    : repo_(repo), opt_(std::move(opt)), metrics_(metrics) {
  metrics_.set_model_gauges([this] {
    std::vector<ModelGauges> out;
    for (const IndexEntry& e : repo_.index(true)) {
      try {
        auto v = repo_.resolve(e.name, e.version);
        ModelGauges g;
        g.model = v->name;
        g.version = std::to_string(v->version);
        g.depth = static_cast<double>(v->batcher ? v->batcher->queue_depth() : 0);
        if (v->generator) {
          g.generates = true;
          g.generation = v->generator->stats();
          g.depth += static_cast<double>(g.generation.waiting);
        }
        if (v->model) {
          for (size_t i = 0; i < v->model->spec().inputs.size(); ++i) g.dynamic |= v->model->input_size(i) < 0;
          g.signatures = v->model->signature_stats();
        }
        out.push_back(std::move(g));
      } catch (const std::exception&) {  // unloaded since index(): not pending anything
      }
    }
    return out;
  });
  if (opt_.parse_threads > 0) parse_ = std::make_unique<ParsePool>(opt_.parse_threads);
}

KServeHandler::~KServeHandler() {
  shutdown();
  metrics_.set_model_gauges({});  // the metrics may be scraped after this handler is gone
}

HttpHandler KServeHandler::http_handler() {
  return [this](HttpRequest&& req, Reply reply) { (*this)(std::move(req), std::move(reply)); };
}

HttpResponse KServeHandler::handle(HttpRequest req) {
  auto answer = std::make_shared<std::promise<HttpResponse>>();
  auto once = std::make_shared<std::once_flag>();
  (*this)(std::move(req), [answer, once](HttpResponse r) {
    std::call_once(*once, [&] {
      if (!r.stream) return answer->set_value(std::move(r));
      // Collect the streamed body; the producer closes the stream when it is done.
      struct Collect : ResponseStream {
        std::shared_ptr<std::promise<HttpResponse>> done;
        HttpResponse head;
        std::mutex mu;
        bool closed = false;
        bool write(std::string chunk) override {
          std::lock_guard lk(mu);
          if (closed) return false;
          head.body += chunk;
          return true;
        }
        void close() override {
          std::lock_guard lk(mu);
          if (closed) return;
          closed = true;
          head.stream = nullptr;
          done->set_value(std::move(head));
        }
        ~Collect() override { close(); }
      };
      auto sink = std::make_shared<Collect>();
      sink->done = answer;
      auto stream = std::move(r.stream);
      sink->head = std::move(r);
      stream(sink);
    });
  });
  try {
    return answer->get_future().get();
  } catch (const std::future_error&) {  // dropped unanswered (shutdown): what the HTTP layer would send
    return json_error(500, "the request was dropped: the server is shutting down");
  }
}

void KServeHandler::begin_drain() {
  draining_ = true;
  for (const IndexEntry& e : repo_.index(true)) {
    try {
      if (auto v = repo_.resolve(e.name, e.version); v->batcher) v->batcher->hurry();
    } catch (const std::exception&) {  // unloaded meanwhile: nothing queued to hurry
    }
  }
}

void KServeHandler::shutdown() {
  if (!parse_) return;
  {
    std::lock_guard lk(parse_->mu);
    parse_->stopped = true;
  }
  // The queued tasks see `stopped` and return at once: each dropped Reply answers 500.
  parse_->arena->execute([this] { parse_->group.wait(); });
}

// Route, method, token and model name: everything about a request that its head tells.
void KServeHandler::check_head(const Route& route, const HttpRequest& req) const {
  if (route.endpoint == Endpoint::Unknown)
    throw HttpError(404, "no endpoint for " + printable(req.method, 16) + " " + printable(target_path(req.target)));
  const char* allow = allowed_methods(route.endpoint);
  const bool as_get = req.method == "HEAD" && std::string_view(allow) == "GET";  // HEAD: a GET without the body
  if (req.method != allow && !as_get)
    throw HttpError(405, "method " + printable(req.method, 16) + " is not allowed for " +
                             printable(target_path(req.target)) + " (allowed: " + allow + ")");
  check_auth(opt_, route.endpoint, req);
  if (!route.model.empty()) check_model_name(route.model);
}

std::function<HeadCheck(const HttpRequest&)> KServeHandler::http_head_check() {
  return [this](const HttpRequest& head) {
    HeadCheck c;
    const Route route = parse_route(head.target);
    try {
      check_head(route, head);
      const Endpoint e = route.endpoint;
      const bool tensors = e == Endpoint::Infer || e == Endpoint::Generate || e == Endpoint::GenerateStream;
      if (!tensors) c.max_body_bytes = opt_.max_control_body_bytes;
      c.compressed_body = tensors;
    } catch (const std::exception& ex) {
      c.answer = error_response(ex, route.endpoint);
    }
    return c;
  };
}

void KServeHandler::operator()(HttpRequest&& req, Reply reply) {
  const Clock::time_point received = Clock::now();
  const Route route = parse_route(req.target);
  try {
    check_head(route, req);
    if (route.endpoint == Endpoint::Infer) return infer(route, std::move(req), reply, received);  // a copy: `reply` answers what infer() throws
    dispatch(route, std::move(req), reply);
  } catch (const std::exception& e) {
    reply(error_response(e, route.endpoint));
  }
}

void KServeHandler::dispatch(const Route& route, HttpRequest&& req, Reply reply) {
  switch (route.endpoint) {
    case Endpoint::Generate:
    case Endpoint::GenerateStream: {
      if (draining_) throw HttpError(503, "server is shutting down");
      auto v = repo_.resolve(route.model, version_of(route));
      if (!v->generator)
        throw HttpError(400, "model '" + v->name + "' does not generate text (the generate extension serves GPT models)");
      serve_generate(v->generator, v->name, std::to_string(v->version), std::move(req), std::move(reply),
                     route.endpoint == Endpoint::GenerateStream);
      return;
    }
    case Endpoint::Completions:
    case Endpoint::ChatCompletions: {
      if (draining_) throw HttpError(503, "server is shutting down");
      OpenAiRequest r = route.endpoint == Endpoint::Completions ? parse_completion_request(req.body)
                                                                 : parse_chat_request(req.body);
      auto v = repo_.resolve(r.model, std::nullopt);
      if (!v->generator)
        throw HttpError(404, "model '" + v->name + "' does not generate text (GET /v1/models lists the models that do)");
      serve_openai(v->generator, std::move(r), std::move(req), std::move(reply));
      return;
    }
    case Endpoint::RepositoryIndex:
    case Endpoint::RepositoryLoad:
    case Endpoint::RepositoryUnload: return repository(route, std::move(req), std::move(reply));
    default: reply(answer(route, req));
  }
}

HttpResponse KServeHandler::answer(const Route& route, const HttpRequest& req) {
  switch (route.endpoint) {
    case Endpoint::Live: return ok({{"live", true}});
    case Endpoint::Ready: {
      if (draining_) throw HttpError(503, "not ready: the server is shutting down");
      if (std::string why = repo_.not_ready_reason(); !why.empty()) throw HttpError(503, "not ready: " + why);
      return ok({{"ready", true}});
    }
    case Endpoint::ServerMetadata:
      return ok({{"name", opt_.server_name},
                 {"version", opt_.server_version},
                 {"extensions", {"binary_tensor_data", "model_repository", "model_configuration", "statistics",
                                 "parameters", "schedule_policy", "generate"}}});
    case Endpoint::ModelMetadata: {
      auto v = repo_.resolve(route.model, version_of(route));
      json versions = json::array();
      for (const IndexEntry& e : repo_.index(true))
        if (e.name == v->name && !e.version.empty()) versions.push_back(e.version);
      if (versions.empty()) versions.push_back(std::to_string(v->version));
      const auto& spec = v->model->spec();
      return ok({{"name", v->name},
                 {"versions", versions},
                 {"platform", v->config.platform == "identity" ? "hgraph_identity" : "hgraph_v1"},
                 {"inputs", tensor_metadata(spec.inputs)},
                 {"outputs", tensor_metadata(spec.outputs)},
                 {"properties", model_properties(*v)}});
    }
    case Endpoint::ModelReady: {
      auto v = repo_.resolve(route.model, version_of(route));
      if (draining_) throw HttpError(503, "model '" + v->name + "' is not ready: the server is shutting down");
      return ok({{"name", v->name}, {"version", std::to_string(v->version)}, {"ready", true}});
    }
    case Endpoint::ModelConfig: return ok(repo_.resolve(route.model, version_of(route))->config.to_json());
    case Endpoint::Stats: {
      if (!route.model.empty()) repo_.resolve(route.model, version_of(route));  // 404 for unknown ones
      for (const IndexEntry& e : repo_.index(true))  // every served version is listed, used or not
        if (!e.version.empty() && (route.model.empty() || e.name == route.model)) metrics_.model(e.name, e.version);
      return ok(metrics_.stats_json(route.model, route.version.value_or("")));
    }
    case Endpoint::OpenAiModels: {
      std::vector<OpenAiModel> models;
      for (const IndexEntry& e : repo_.index(true)) {
        if (!models.empty() && models.back().id == e.name) continue;  // one entry per model, not per version
        try {
          if (auto v = repo_.resolve(e.name, std::nullopt); v->generator)
            models.push_back({v->name, v->generator->context_length()});
        } catch (const std::exception&) {  // unloaded since index(): not served any more
        }
      }
      return ok(openai_model_list(models));
    }
    case Endpoint::Metrics: {
      HttpResponse r;
      r.body = metrics_.render();
      r.content_type = kPrometheusContentType;
      return r;
    }
    default: break;
  }
  throw HttpError(404, "no endpoint for " + req.method + " " + std::string(target_path(req.target)));
}

void KServeHandler::repository(const Route& route, HttpRequest&& req, Reply reply) {
  json body = object_body(req, opt_.limits);
  if (route.endpoint == Endpoint::RepositoryIndex) {
    bool ready_only = false;
    if (auto r = body.find("ready"); r != body.end()) {
      if (!r->is_boolean()) throw HttpError(400, "'ready' must be a boolean");
      ready_only = r->get<bool>();
    }
    json out = json::array();
    for (const IndexEntry& e : repo_.index(ready_only)) {
      json j = {{"name", e.name}, {"state", model_state_name(e.state)}};
      if (!e.version.empty()) j["version"] = e.version;
      if (!e.reason.empty()) j["reason"] = e.reason;
      out.push_back(std::move(j));
    }
    return reply(ok(out));
  }
  if (draining_) throw HttpError(503, "server is shutting down");
  auto done = [reply](int status, std::string message) {
    if (status == 200) {
      HttpResponse r;
      r.body = "{}";
      return reply(std::move(r));
    }
    reply(error_response(status, message));
  };
  if (route.endpoint == Endpoint::RepositoryUnload) {
    std::vector<std::string> versions;
    for (const IndexEntry& e : repo_.index())
      if (e.name == route.model && !e.version.empty()) versions.push_back(e.version);
    // The metrics outlive the repository (its loader runs this), not necessarily this handler.
    return repo_.unload(route.model, [&metrics = metrics_, done, model = route.model, versions](int status,
                                                                                               std::string message) {
      if (status == 200)
        for (const std::string& v : versions) metrics.retire(model, v);  // gone from the statistics
      done(status, std::move(message));
    });
  }

  std::optional<std::string> config;
  if (auto p = body.find("parameters"); p != body.end()) {
    if (!p->is_object()) throw HttpError(400, "'parameters' must be an object");
    for (const auto& [key, value] : p->items()) {
      if (key == "config") {
        if (!value.is_string()) throw HttpError(400, "parameters.config must be a string holding the model config JSON");
        config = value.get<std::string>();
      } else if (key.rfind("file:", 0) == 0) {
        throw HttpError(400, "parameters." + key + ": loading model files through the request is not supported; "
                             "put them in the repository");
      } else {
        throw HttpError(400, "unknown load parameter '" + key + "' (known: config)");
      }
    }
  }
  repo_.load(route.model, std::move(config), done);
}

void KServeHandler::infer(const Route& route, HttpRequest&& req, Reply reply, Clock::time_point received) {
  if (draining_) throw HttpError(503, "server is shutting down");
  std::shared_ptr<const ModelVersion> v = repo_.resolve(route.model, version_of(route));
  if (req.body.size() <= opt_.parse_inline_bytes || !parse_)
    return decode_and_submit(std::move(v), std::move(req), std::move(reply), received);
  struct Body {
    std::shared_ptr<const ModelVersion> v;
    HttpRequest req;
    Reply reply;
  };
  auto task = [this, body = std::make_unique<Body>(Body{std::move(v), std::move(req), reply}), received] {
    if (parse_->stopped) return;
    try {
      decode_and_submit(std::move(body->v), std::move(body->req), std::move(body->reply), received);  // answers its own errors
    } catch (const std::exception&) {  // e.g. bad_alloc before its own handler: the dropped Reply answers 500
    }
  };
  switch (parse_->submit(std::move(task), opt_.max_parse_queue)) {
    case ParsePool::Queued::Yes: return;
    case ParsePool::Queued::Stopped: throw HttpError(503, "server is shutting down");
    case ParsePool::Queued::Full:
      throw HttpError(503, "too many large request bodies waiting to be parsed (" +
                               std::to_string(opt_.max_parse_queue) + "); retry later");
  }
}

std::function<bool(std::function<void()>)> KServeHandler::http_offload() {
  if (!parse_) return nullptr;
  // A queued step runs even once stopped: it is bounded, and its connection then answers.
  return [this](std::function<void()> work) {
    return parse_->submit(std::move(work), opt_.max_parse_queue) == ParsePool::Queued::Yes;
  };
}

void KServeHandler::decode_and_submit(std::shared_ptr<const ModelVersion> v, HttpRequest&& req, Reply reply,
                                      Clock::time_point received) {
  const std::string version = std::to_string(v->version);
  ModelMetrics& mm = metrics_.model(v->name, version);
  try {
    WireLimits limits = opt_.limits;
    limits.max_inputs = v->model->spec().inputs.size();
    limits.max_outputs = v->model->spec().outputs.size();
    auto ir = std::make_shared<InferRequest>(decode_infer_request(req.body, header_length(req), limits));
    req.body = std::string();  // the tensors hold their own copies now
    auto in = std::make_shared<ModelInputs>(bind_inputs(*ir, v->model->spec(), v->config.max_batch_size, v->name));
    const int64_t length = v->config.padding ? pad_request(*in, v->model->spec(), *v->config.padding) : 0;
    auto job = std::make_shared<BatchJob>();
    job->batch = in->batch;
    job->inputs = std::move(in->data);
    job->shapes = std::move(in->shapes);
    if (ir->priority) {
      if (*ir->priority < 0 || *ir->priority > v->config.priority_levels)
        throw HttpError(400, "parameter 'priority' must be in [0, " + std::to_string(v->config.priority_levels) +
                                 "] for model '" + v->name + "', got " + std::to_string(*ir->priority));
      job->priority = static_cast<int>(*ir->priority);
    }
    // A request's `timeout` may only lower the model's default (0: none).
    uint64_t timeout_us = v->config.default_timeout_us;
    if (ir->timeout_us && *ir->timeout_us > 0 && v->config.allow_timeout_override)
      timeout_us = timeout_us == 0 ? *ir->timeout_us : std::min(timeout_us, *ir->timeout_us);
    constexpr uint64_t kLongest = uint64_t{1} << 50;  // about 35 years: the deadline cannot overflow
    if (timeout_us > 0) job->deadline = received + std::chrono::microseconds(std::min(timeout_us, kLongest));
    job->cancelled = req.cancelled;
    const ContentCoding coding = negotiate_encoding(req.header("Accept-Encoding"));
    const Clock::time_point parsed = Clock::now();
    job->done = [v, ir, in, reply, received, parsed, &mm, version, coding, length](BatchJob& j) {
      if (j.status != 200) {
        mm.failure(failure_reason_for_status(j.status), us_between(received, Clock::now()));
        return reply(error_response(j.status, j.error));
      }
      try {
        if (v->config.padding)
          strip_outputs(j.outputs, j.output_shapes, v->model->spec(), *v->config.padding, length, in->batch);
        InferResponse resp =
            make_response(*ir, v->model->spec(), *in, v->name, version, std::move(j.outputs), j.output_shapes);
        EncodedBody e = encode_infer_response(resp);
        HttpResponse r;
        r.body = std::move(e.body);
        r.content_type = std::move(e.content_type);
        r.request_id = ir->id.value_or("");
        // As Triton: the length of the JSON header in the body before it is compressed.
        if (e.header_length) r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*e.header_length));
        encode_response(r, coding);
        const Clock::time_point end = Clock::now();
        RequestTimes t;
        t.parse_us = us_between(received, parsed);
        t.queue_us = us_between(j.enqueued, j.compute_start);
        t.compute_us = us_between(j.compute_start, j.compute_end);
        t.respond_us = us_between(j.compute_end, end);
        t.total_us = us_between(received, end);
        mm.success(j.batch, t);
        reply(std::move(r));
      } catch (const std::exception& ex) {
        mm.failure(FailureReason::Backend, us_between(received, Clock::now()));
        reply(error_response(500, std::string("cannot encode the response of model '") + v->name + "': " + ex.what()));
      }
    };
    switch (v->batcher->submit(job)) {
      case DynamicBatcher::Submit::Queued: return;
      case DynamicBatcher::Submit::QueueFull:
        throw HttpError(503, "the queue of model '" + v->name + "' is full (max_queue_size " +
                                 std::to_string(v->config.max_queue_size) + "); retry later");
      case DynamicBatcher::Submit::Stopped:
        throw HttpError(503, "model '" + v->name + "' version " + version + " is being unloaded; retry");
    }
  } catch (const std::exception& e) {
    const int status = http_status(e);
    mm.failure(failure_reason_for_status(status), us_between(received, Clock::now()));
    reply(error_response(status, e.what()));
  }
}

}  // namespace hg::server
