// The KServe v2 / Open Inference Protocol REST front end over a ModelRepository: the core
// endpoints, the binary tensor data, model repository, model configuration, statistics and
// generate extensions, Prometheus metrics, bearer-token auth and graceful draining.
//
//   hg::server::ServerMetrics metrics;                   // outlives repo and kserve
//   repo_opt.on_batch = [&](auto& m, int64_t v, int64_t n, auto t) { metrics.model(m, std::to_string(v)).execution(n, t); };
//   hg::server::ModelRepository repo(repo_opt);
//   hg::server::KServeHandler kserve(repo, metrics, {});  // repo outlives kserve
//   hg::server::HttpServerOptions http_opt;
//   http_opt.on_stop = [&] { kserve.begin_drain(); };    // SIGTERM: not ready, refuse new work
//   hg::server::HttpServer srv(http_opt, kserve.http_handler());
//   srv.start(); srv.wait();                              // in-flight requests finish
//   kserve.shutdown();
//
//   HttpResponse r = kserve.handle({"GET", "/v2/health/ready", "", {}});   // in process, no socket
//
// Threads: health, metadata, config, statistics and metrics are answered on the HTTP I/O
// thread (they never wait for a model); an inference body up to parse_inline_bytes is decoded
// there too, a larger one on one of parse_threads (a oneTBB arena); the model runs on its version's batcher
// instances, which also encode and send the response. Loads run on the repository's loader.
// Errors are {"error": "..."} with 400 (bad request, naming the input), 401 (token), 404
// (unknown model, version or path), 405 (with Allow), 413 (HTTP layer), 503 (not ready,
// queue full or draining, with Retry-After), 504 (request timeout expired in the queue),
// 500 (backend failure).
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/http_server.h"
#include "server/model_repository.h"
#include "server/router.h"
#include "server/server_metrics.h"
#include "server/wire.h"

namespace hg::server {

struct KServeOptions {
  int parse_threads = 2;                   // decode large inference bodies off the I/O threads
  size_t parse_inline_bytes = 64 << 10;    // bodies up to this are decoded on the I/O thread
  size_t max_parse_queue = 4096;           // large bodies waiting for a parse thread; beyond: 503
  WireLimits limits;                       // JSON nesting and elements per tensor
  size_t max_control_body_bytes = 1 << 20;  // bodies of every endpoint but infer and generate (more: 413)
  std::string auth_token;                  // non-empty: required for repository load/unload
  bool auth_all = false;                   // ... and for every endpoint but the health probes
  std::string server_name = "hgraph";
  std::string server_version = "0.1.0";
};

class KServeHandler {
 public:
  KServeHandler(ModelRepository& repo, ServerMetrics& metrics, KServeOptions opt);
  ~KServeHandler();  // shutdown()
  KServeHandler(const KServeHandler&) = delete;
  KServeHandler& operator=(const KServeHandler&) = delete;

  // Answers a request now or later, from any thread.
  void operator()(HttpRequest&& req, Reply reply);
  HttpHandler http_handler();
  // HttpServerOptions::on_head: route, method, token and model name are checked (and
  // answered) before a body is read; non-tensor endpoints get max_control_body_bytes.
  std::function<HeadCheck(const HttpRequest&)> http_head_check();
  // HttpServerOptions::offload: work (inflating request bodies) runs on the parse threads, queued
  // within max_parse_queue; null without parse threads.
  std::function<bool(std::function<void()>)> http_offload();
  // Answers a request and waits for the answer (tests and tools without a socket). A
  // streamed response comes back with its `stream` callback unset and `body` holding the
  // whole event stream.
  HttpResponse handle(HttpRequest req);

  // Readiness off; new inference, generate and load requests get 503. Idempotent.
  void begin_drain();
  bool draining() const { return draining_.load(); }
  // Refuses new large bodies (503), drops the queued ones (their replies answer 500) and waits
  // for the parse threads' bodies in progress. Idempotent.
  void shutdown();

 private:
  void check_head(const Route& route, const HttpRequest& req) const;
  void dispatch(const Route& route, HttpRequest&& req, Reply reply);
  void infer(const Route& route, HttpRequest&& req, Reply reply, Clock::time_point received);
  void decode_and_submit(std::shared_ptr<const ModelVersion> v, HttpRequest&& req, Reply reply,
                         Clock::time_point received);
  void repository(const Route& route, HttpRequest&& req, Reply reply);
  HttpResponse answer(const Route& route, const HttpRequest& req);

  ModelRepository& repo_;
  KServeOptions opt_;
  ServerMetrics& metrics_;
  std::atomic<bool> draining_{false};
  struct ParsePool;  // kserve.cpp: a TBB arena of parse_threads
  std::unique_ptr<ParsePool> parse_;
};

}  // namespace hg::server
