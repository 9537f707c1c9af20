// The server's metrics: per model version request counters and latency histograms (Prometheus,
// `GET /metrics`) and the same numbers in Triton's statistics extension format
// (`GET /v2/models[/{m}[/versions/{v}]]/stats`), plus queue depths, graph-cache counters,
// device memory and HTTP responses by status class.
//
//   ServerMetrics metrics;                                   // registers every family
//   ModelMetrics& mm = metrics.model("digits_mlp", "1");     // locks once; keep the reference
//   mm.success(batch, {.parse_us = 12, .queue_us = 80, .compute_us = 300, .respond_us = 9, .total_us = 405});
//   mm.failure(failure_reason_for_status(504), total_us);    // REJECTED|TIMEOUT|BAD_REQUEST|BACKEND|CANCELED
//   batcher_cfg.on_batch = [&mm](int64_t b, Clock::duration d) { mm.execution(b, us(d)); };
//   metrics.set_model_gauges([&repo] { return std::vector<ModelGauges>{{.model = "digits_mlp", .version = "1", .depth = 3}}; });
//   http_opt.on_response = [&metrics](int status) { metrics.http_response(status); };
//   reply({200, metrics.render(), kPrometheusContentType});               // GET /metrics
//   reply({200, metrics.stats_json("digits_mlp", "").dump()});            // GET .../stats
//
// Hot-path calls (success, failure, execution, http_response) are lock-free atomics.
// Families (labels model, version unless noted):
//   hg_inference_request_success_total, hg_inference_request_failure_total{reason},
//   hg_inference_count_total (samples), hg_inference_exec_count_total (batch runs),
//   histograms hg_request_duration_us, hg_queue_duration_us, hg_compute_duration_us,
//   hg_parse_duration_us, hg_respond_duration_us (per successful request) and hg_batch_size
//   (per run), gauge hg_inference_pending_requests (from set_queue_depths, at scrape time),
//   models with dynamic dimensions besides the batch (from set_model_gauges): hg_model_signatures
//   and hg_model_signature_bytes (gauges: live signatures and their captured bytes),
//   hg_model_signatures_seen_total, hg_model_signature_captures_total,
//   hg_model_signature_evictions_total; their stats_json entries hold "signature_stats",
//   hg_graph_cache_{hits,misses,evictions}_total{cache="memory"|"disk"},
//   hg_graph_cache_entries, hg_graph_cache_bytes (memory cache),
//   hg_device_memory_{limit,in_use,max_in_use,max_alloc}_bytes{device}, hg_device_memory_active_allocs{device},
//   hg_device_memory_{allocs,frees}_total{device} (every HPU, from hg::memory_stats),
//   text generation models: histograms hg_generate_time_to_first_token_us and
//   hg_generate_inter_token_us (per token), their steps in hg_batch_size and the exec counts;
//   from set_model_gauges: hg_generate_running_sequences, hg_generate_kv_blocks_used,
//   hg_generate_kv_blocks_free (gauges), hg_generate_tokens_total, hg_generate_preemptions_total,
//   hg_generate_steps_total, hg_generate_step_rows_total, hg_generate_step_tokens_total (means:
//   rows or tokens / steps);
//   hg_http_responses_total{code="1xx".."5xx"}.
// Triton statistics mapping: success/fail = whole requests (count, total time);
// queue = waiting in the batcher; compute_input = parse_us (decode and bind the inputs);
// compute_infer = compute_us; compute_output = respond_us (encode the response);
// batch_stats = one entry per executed batch size with its runs and compute time.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/predictor.h"
#include "server/generate.h"
#include "server/metrics.h"

namespace hg::server {

// Server-side time split of one request, in microseconds.
struct RequestTimes {
  double parse_us = 0;    // HTTP body -> bound input bytes
  double queue_us = 0;    // waiting in the batcher
  double compute_us = 0;  // the run this request was part of
  double respond_us = 0;  // outputs -> response body
  double total_us = 0;    // handler entry -> reply
};

enum class FailureReason { Rejected, Timeout, BadRequest, Backend, Canceled };
inline constexpr int kFailureReasons = 5;
const char* failure_reason_name(FailureReason r);  // "REJECTED", "TIMEOUT", ...
// 503 and 429: Rejected; 504 and 408: Timeout; 499: Canceled; other 4xx: BadRequest; else Backend.
FailureReason failure_reason_for_status(int status);

class ModelMetrics {
 public:
  ModelMetrics(MetricsRegistry& reg, const std::string& model, const std::string& version);
  ModelMetrics(const ModelMetrics&) = delete;
  ModelMetrics& operator=(const ModelMetrics&) = delete;

  // A request answered successfully with `batch` samples.
  void success(int64_t batch, const RequestTimes& t);
  // A request that failed after `total_us`.
  void failure(FailureReason reason, double total_us = 0);
  // One model run of `batch` samples (before padding) taking `compute_us` (a generation step:
  // its sequences).
  void execution(int64_t batch, double compute_us);
  // A generated token: the first of a request (time to first token, from submit) or a later one
  // (inter-token latency).
  void token(bool first, double us);

  // This version's Triton $model_stat object.
  nlohmann::json stats() const;
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }

 private:
  struct Stat {
    std::atomic<uint64_t> count{0}, ns{0};
    void add(double us);
    nlohmann::json json() const;
  };
  static constexpr int64_t kBatchSlots = 256;  // batch sizes 1..256 lock-free, larger ones under a lock
  Stat& batch_stat(int64_t batch);

  // The Triton statistics of successes come from the histograms' counts and sums.
  std::string name_, version_;
  Counter *success_, *samples_, *executions_;
  Counter* failures_[kFailureReasons];
  Histogram *request_us_, *queue_us_, *compute_us_, *parse_us_, *respond_us_, *batch_size_;
  Histogram *first_token_us_, *inter_token_us_;
  Stat fail_stat_;
  std::atomic<uint64_t> last_inference_ms_{0};
  std::unique_ptr<Stat[]> batch_slots_;  // index batch - 1
  mutable std::mutex big_mu_;
  std::map<int64_t, std::unique_ptr<Stat>> big_batches_;
};

// What a model version reports at scrape time.
struct ModelGauges {
  std::string model, version;
  double depth = 0;        // requests waiting in its queue (and its generate queue)
  bool generates = false;  // a text generation model: `generation` applies
  GenerationStats generation;
  bool dynamic = false;    // dynamic dimensions besides the batch: `signatures` applies
  models::SignatureStats signatures;
};

class ServerMetrics {
 public:
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // The metrics of one model version, created on first use (and listed by stats_json again
  // after retire). Locks; the reference stays valid as long as this object.
  ModelMetrics& model(const std::string& name, const std::string& version);
  // Hides an unloaded version from stats_json; its Prometheus series keep their values.
  void retire(const std::string& name, const std::string& version);

  // Where hg_inference_pending_requests and the signature families come from; called at each
  // scrape (and by stats_json), must be thread-safe and must not throw.
  void set_model_gauges(std::function<std::vector<ModelGauges>()> fn);

  // Counts one HTTP response (HttpServerOptions::on_response).
  void http_response(int status);

  // {"model_stats": [...]} for the listed model versions matching the filters (empty: any),
  // sorted by name then version.
  nlohmann::json stats_json(std::string_view model = {}, std::string_view version = {}) const;

  std::string render() const { return registry_.render(); }  // Prometheus text, kPrometheusContentType
  MetricsRegistry& registry() { return registry_; }

 private:
  MetricsRegistry registry_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<ModelMetrics>> models_;
  std::set<std::pair<std::string, std::string>> retired_;
  std::function<std::vector<ModelGauges>()> gauges_;
  std::vector<ModelGauges> gauges() const;
  Counter* http_[5];  // 1xx .. 5xx
};

}  // namespace hg::server
