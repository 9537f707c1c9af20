// The KServe v2 / Open Inference Protocol REST front end over a ModelRepository.
//
//   hg::server::KServeHandler kserve(repo, {});               // repo outlives kserve
//   hg::server::HttpServer srv(http_opt, kserve.http_handler());
//   srv.start(); srv.wait();
//   kserve.shutdown();                                        // before srv is destroyed
//
//   // or without a socket (tests): every request answered inline
//   hg::server::HttpResponse r = kserve.handle({"GET", "/v2/health/ready", "", {}});
//
// Endpoints: GET /v2, GET /v2/health/{live,ready}, GET /v2/models/{m}[/versions/{v}],
// GET /v2/models/{m}[/versions/{v}]/ready, POST /v2/models/{m}[/versions/{v}]/infer (JSON
// tensors, FP32). Errors are {"error": "..."}: 400 bad request (names the input, expected vs
// got), 404 unknown path/model/version, 405 wrong method (with Allow), 503 not ready or
// inference queue full (with Retry-After), 500 backend failure.
// Health and metadata are answered on the I/O thread; inference (parse, validate, run,
// serialize) runs on `infer_threads` worker threads so that probes never wait behind it.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"
#include "server/model_repository.h"

namespace hg::server {

struct KServeOptions {
  int infer_threads = 2;      // 0: run inference on the I/O thread
  size_t max_queue = 1024;    // inference requests waiting for a thread; beyond: 503
  std::string server_name = "hgraph";
  std::string server_version = "0.1.0";
};

class KServeHandler {
 public:
  KServeHandler(const ModelRepository& repo, KServeOptions opt);
  ~KServeHandler();  // shutdown()
  KServeHandler(const KServeHandler&) = delete;
  KServeHandler& operator=(const KServeHandler&) = delete;

  // Answers a request: inline, or later from an inference thread.
  void operator()(HttpRequest&& req, Reply reply);
  // An HttpHandler that forwards to *this.
  HttpHandler http_handler();
  // Answers a request synchronously on the calling thread.
  HttpResponse handle(const HttpRequest& req);

  // Stops the inference threads after their current request; queued requests are dropped
  // (their connections get a 500). Idempotent.
  void shutdown();

 private:
  void worker();
  const ModelRepository& repo_;
  KServeOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// FP32 as the shortest decimal that reads back to the same float; "null" for NaN/inf.
void append_float(std::string& out, float v);

}  // namespace hg::server
