#include "server/server_metrics.h"

#include <time.h>

#include <cmath>

#include "engine/device.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_cache.h"

namespace hg::server {

namespace {

const std::vector<std::string> kModelLabels = {"model", "version"};

// Microsecond latency buckets: 10 us .. 10 s in 1-2.5-5 steps.
std::vector<double> latency_buckets() {
  std::vector<double> b;
  for (double decade = 10; decade <= 1e6; decade *= 10)
    for (double m : {1.0, 2.5, 5.0}) b.push_back(decade * m);
  b.push_back(1e7);
  return b;
}

uint64_t to_ns(double us) { return us > 0 && std::isfinite(us) ? static_cast<uint64_t>(us * 1000.0 + 0.5) : 0; }

// Milliseconds since the epoch from the coarse clock (a few ns to read; ticks every few ms).
uint64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

// A Triton $duration_stat from a histogram of microseconds.
nlohmann::json duration_stat(const Histogram& h) {
  auto s = h.snapshot();
  return {{"count", s.count}, {"ns", to_ns(s.sum)}};
}

// One callback family per MemoryStats field, over every HPU.
void register_device_memory(MetricsRegistry& reg) {
  struct Field {
    const char* name;
    const char* help;
    MetricType type;
    int64_t MemoryStats::*member;
  };
  static const Field fields[] = {
      {"hg_device_memory_limit_bytes", "Capacity of the device memory pool.", MetricType::Gauge, &MemoryStats::limit},
      {"hg_device_memory_in_use_bytes", "Device memory allocated now.", MetricType::Gauge, &MemoryStats::in_use},
      {"hg_device_memory_max_in_use_bytes", "Peak device memory allocated.", MetricType::Gauge,
       &MemoryStats::max_in_use},
      {"hg_device_memory_max_alloc_bytes", "Largest single device allocation.", MetricType::Gauge,
       &MemoryStats::max_alloc_size},
      {"hg_device_memory_active_allocs", "Device allocations not yet freed.", MetricType::Gauge,
       &MemoryStats::active_allocs},
      {"hg_device_memory_allocs_total", "Device allocations made.", MetricType::Counter, &MemoryStats::num_allocs},
      {"hg_device_memory_frees_total", "Device allocations freed.", MetricType::Counter, &MemoryStats::num_frees},
  };
  for (const Field& f : fields) {
    auto member = f.member;
    reg.callback(f.name, f.help, f.type, {"device"}, [member] {
      std::vector<Sample> out;
      int n = hpu_device_count();
      for (int i = 0; i < n; ++i) {
        Device d = Device::hpu(i);
        out.push_back({{d.str()}, static_cast<double>(memory_stats(d).*member)});
      }
      return out;
    });
  }
}

void register_graph_cache(MetricsRegistry& reg) {
  struct Field {
    const char* name;
    const char* help;
    uint64_t graphs::GraphCacheStats::*memory;
    uint64_t graphs::DiskCacheStats::*disk;
  };
  static const Field fields[] = {
      {"hg_graph_cache_hits_total", "Compiled-graph cache lookups that hit.", &graphs::GraphCacheStats::hits,
       &graphs::DiskCacheStats::hits},
      {"hg_graph_cache_misses_total", "Compiled-graph cache lookups that missed.", &graphs::GraphCacheStats::misses,
       &graphs::DiskCacheStats::misses},
      {"hg_graph_cache_evictions_total", "Compiled-graph cache entries evicted.",
       &graphs::GraphCacheStats::evictions, &graphs::DiskCacheStats::evictions},
  };
  for (const Field& f : fields) {
    auto mem = f.memory;
    auto disk = f.disk;
    reg.callback(f.name, f.help, MetricType::Counter, {"cache"}, [mem, disk] {
      std::vector<Sample> out{{{"memory"}, static_cast<double>(graphs::memory_graph_cache().stats().*mem)}};
      if (auto dc = graphs::disk_cache()) out.push_back({{"disk"}, static_cast<double>(dc->stats().*disk)});
      return out;
    });
  }
  reg.callback("hg_graph_cache_entries", "Executables in the in-memory graph cache.", MetricType::Gauge, {}, [] {
    return std::vector<Sample>{{{}, static_cast<double>(graphs::memory_graph_cache().stats().entries)}};
  });
  reg.callback("hg_graph_cache_bytes", "Bytes held by the in-memory graph cache.", MetricType::Gauge, {}, [] {
    return std::vector<Sample>{{{}, static_cast<double>(graphs::memory_graph_cache().stats().bytes)}};
  });
}

}  // namespace

const char* failure_reason_name(FailureReason r) {
  switch (r) {
    case FailureReason::Rejected: return "REJECTED";
    case FailureReason::Timeout: return "TIMEOUT";
    case FailureReason::BadRequest: return "BAD_REQUEST";
    case FailureReason::Backend: return "BACKEND";
    case FailureReason::Canceled: return "CANCELED";
  }
  return "BACKEND";
}

FailureReason failure_reason_for_status(int status) {
  if (status == 503 || status == 429) return FailureReason::Rejected;
  if (status == 504 || status == 408) return FailureReason::Timeout;
  if (status == 499) return FailureReason::Canceled;
  if (status >= 400 && status < 500) return FailureReason::BadRequest;
  return FailureReason::Backend;
}

void ModelMetrics::Stat::add(double us) {
  count.fetch_add(1, std::memory_order_relaxed);
  ns.fetch_add(to_ns(us), std::memory_order_relaxed);
}

nlohmann::json ModelMetrics::Stat::json() const {
  return {{"count", count.load(std::memory_order_relaxed)}, {"ns", ns.load(std::memory_order_relaxed)}};
}

ModelMetrics::ModelMetrics(MetricsRegistry& reg, const std::string& model, const std::string& version)
    : name_(model), version_(version), batch_slots_(std::make_unique<Stat[]>(kBatchSlots)) {
  const std::vector<std::string> mv = {model, version};
  success_ = &reg.counter("hg_inference_request_success_total", "Inference requests answered successfully.",
                          kModelLabels).with(mv);
  samples_ = &reg.counter("hg_inference_count_total", "Samples inferred (a request of batch n counts n).",
                          kModelLabels).with(mv);
  executions_ = &reg.counter("hg_inference_exec_count_total", "Model runs (one per executed batch).",
                             kModelLabels).with(mv);
  auto& fail = reg.counter("hg_inference_request_failure_total", "Inference requests that failed, by reason.",
                           {"model", "version", "reason"});
  for (int r = 0; r < kFailureReasons; ++r)
    failures_[r] = &fail.with({model, version, failure_reason_name(static_cast<FailureReason>(r))});
  auto hist = [&](const char* name, const char* help, std::vector<double> bounds) {
    return &reg.histogram(name, help, kModelLabels, std::move(bounds)).with(mv);
  };
  request_us_ = hist("hg_request_duration_us", "End-to-end server time of successful requests (us).", latency_buckets());
  queue_us_ = hist("hg_queue_duration_us", "Time requests waited in the batcher queue (us).", latency_buckets());
  compute_us_ = hist("hg_compute_duration_us", "Compute time of the run each request was part of (us).",
                     latency_buckets());
  parse_us_ = hist("hg_parse_duration_us", "Time to decode a request and bind its inputs (us).", latency_buckets());
  respond_us_ = hist("hg_respond_duration_us", "Time to encode a response (us).", latency_buckets());
  batch_size_ = hist("hg_batch_size", "Samples per model run (before padding to a bucket).",
                     exponential_buckets(1, 2, 11));
  first_token_us_ = hist("hg_generate_time_to_first_token_us", "Time from a generate request's arrival to its first token (us).",
                         latency_buckets());
  inter_token_us_ = hist("hg_generate_inter_token_us", "Time between consecutive tokens of a generation (us).",
                         latency_buckets());
}

void ModelMetrics::token(bool first, double us) { (first ? first_token_us_ : inter_token_us_)->observe(us); }

void ModelMetrics::success(int64_t batch, const RequestTimes& t) {
  success_->inc();
  samples_->inc(static_cast<double>(batch));
  request_us_->observe(t.total_us);
  queue_us_->observe(t.queue_us);
  compute_us_->observe(t.compute_us);
  parse_us_->observe(t.parse_us);
  respond_us_->observe(t.respond_us);
  last_inference_ms_.store(now_ms(), std::memory_order_relaxed);
}

void ModelMetrics::failure(FailureReason reason, double total_us) {
  failures_[static_cast<int>(reason)]->inc();
  fail_stat_.add(total_us);
  last_inference_ms_.store(now_ms(), std::memory_order_relaxed);
}

ModelMetrics::Stat& ModelMetrics::batch_stat(int64_t batch) {
  if (batch >= 1 && batch <= kBatchSlots) return batch_slots_[batch - 1];
  std::lock_guard lk(big_mu_);
  auto& s = big_batches_[batch];
  if (!s) s = std::make_unique<Stat>();
  return *s;
}

void ModelMetrics::execution(int64_t batch, double compute_us) {
  executions_->inc();
  batch_size_->observe(static_cast<double>(batch));
  batch_stat(batch).add(compute_us);
}

nlohmann::json ModelMetrics::stats() const {
  nlohmann::json batches = nlohmann::json::array();
  auto batch_json = [](int64_t size, const Stat& s) {
    nlohmann::json none = {{"count", s.count.load(std::memory_order_relaxed)}, {"ns", uint64_t{0}}};
    return nlohmann::json{{"batch_size", size}, {"compute_input", none}, {"compute_infer", s.json()},
                          {"compute_output", none}};
  };
  for (int64_t b = 1; b <= kBatchSlots; ++b)
    if (batch_slots_[b - 1].count.load(std::memory_order_relaxed) > 0) batches.push_back(batch_json(b, batch_slots_[b - 1]));
  {
    std::lock_guard lk(big_mu_);
    for (const auto& [b, s] : big_batches_) batches.push_back(batch_json(b, *s));
  }
  nlohmann::json zero = {{"count", uint64_t{0}}, {"ns", uint64_t{0}}};
  return {{"name", name_},
          {"version", version_},
          {"last_inference", last_inference_ms_.load(std::memory_order_relaxed)},
          {"inference_count", static_cast<uint64_t>(samples_->value())},
          {"execution_count", static_cast<uint64_t>(executions_->value())},
          {"inference_stats",
           {{"success", duration_stat(*request_us_)},
            {"fail", fail_stat_.json()},
            {"queue", duration_stat(*queue_us_)},
            {"compute_input", duration_stat(*parse_us_)},
            {"compute_infer", duration_stat(*compute_us_)},
            {"compute_output", duration_stat(*respond_us_)},
            {"cache_hit", zero},
            {"cache_miss", zero}}},
          {"batch_stats", std::move(batches)}};
}

ServerMetrics::ServerMetrics() {
  auto& http = registry_.counter("hg_http_responses_total", "HTTP responses sent, by status class.", {"code"});
  for (int c = 0; c < 5; ++c) http_[c] = &http.with({std::to_string(c + 1) + "xx"});
  // One family per field of ModelGauges, over the models `which` selects.
  enum Which { kAll, kDynamic, kGenerating };
  auto gauge = [this](const char* name, const char* help, MetricType type, Which which, double (*value)(const ModelGauges&)) {
    registry_.callback(name, help, type, kModelLabels, [this, which, value] {
      std::vector<Sample> out;
      for (const ModelGauges& g : gauges())
        if (which == kAll || (which == kDynamic ? g.dynamic : g.generates)) out.push_back({{g.model, g.version}, value(g)});
      return out;
    });
  };
  gauge("hg_inference_pending_requests", "Requests waiting in a model version's queue.", MetricType::Gauge, kAll,
        [](const ModelGauges& g) { return g.depth; });
  gauge("hg_model_signatures", "Input signatures (sample shapes) kept with their captured graphs.", MetricType::Gauge,
        kDynamic, [](const ModelGauges& g) { return static_cast<double>(g.signatures.live); });
  gauge("hg_model_signature_bytes", "Arena and constant bytes of the kept signatures' graphs.", MetricType::Gauge, kDynamic,
        [](const ModelGauges& g) { return static_cast<double>(g.signatures.bytes); });
  gauge("hg_model_signatures_seen_total", "Input signatures met (each new one, and each one met again after eviction).",
        MetricType::Counter, kDynamic, [](const ModelGauges& g) { return static_cast<double>(g.signatures.seen); });
  gauge("hg_model_signature_captures_total", "Graphs captured for input signatures.", MetricType::Counter, kDynamic,
        [](const ModelGauges& g) { return static_cast<double>(g.signatures.captures); });
  gauge("hg_model_signature_evictions_total", "Input signatures evicted by max_signatures / max_signature_bytes.",
        MetricType::Counter, kDynamic, [](const ModelGauges& g) { return static_cast<double>(g.signatures.evictions); });
  gauge("hg_generate_running_sequences", "Sequences in a text generation model's running batch.", MetricType::Gauge,
        kGenerating, [](const ModelGauges& g) { return static_cast<double>(g.generation.running); });
  gauge("hg_generate_kv_blocks_used", "KV cache blocks held by sequences.", MetricType::Gauge, kGenerating,
        [](const ModelGauges& g) { return static_cast<double>(g.generation.kv_blocks_total - g.generation.kv_blocks_free); });
  gauge("hg_generate_kv_blocks_free", "KV cache blocks free.", MetricType::Gauge, kGenerating,
        [](const ModelGauges& g) { return static_cast<double>(g.generation.kv_blocks_free); });
  gauge("hg_generate_tokens_total", "Tokens generated.", MetricType::Counter, kGenerating,
        [](const ModelGauges& g) { return static_cast<double>(g.generation.tokens); });
  gauge("hg_generate_cancelled_total", "Sequences that ended because their client left (dropped from the queue or between steps).",
        MetricType::Counter, kGenerating, [](const ModelGauges& g) { return static_cast<double>(g.generation.cancelled); });
  gauge("hg_generate_preemptions_total", "Sequences preempted (blocks freed, recomputed later) for lack of KV blocks.",
        MetricType::Counter, kGenerating, [](const ModelGauges& g) { return static_cast<double>(g.generation.preemptions); });
  gauge("hg_generate_steps_total", "Generation steps (each running sequence's next token and prompt chunks).",
        MetricType::Counter, kGenerating, [](const ModelGauges& g) { return static_cast<double>(g.generation.steps); });
  gauge("hg_generate_step_rows_total", "Sequences summed over the steps (mean batch: rows / steps).", MetricType::Counter,
        kGenerating, [](const ModelGauges& g) { return static_cast<double>(g.generation.step_rows); });
  gauge("hg_generate_step_tokens_total", "Tokens summed over the steps (prompt and generated).", MetricType::Counter,
        kGenerating, [](const ModelGauges& g) { return static_cast<double>(g.generation.step_tokens); });
  register_graph_cache(registry_);
  register_device_memory(registry_);
}

ModelMetrics& ServerMetrics::model(const std::string& name, const std::string& version) {
  std::lock_guard lk(mu_);
  auto key = std::make_pair(name, version);
  retired_.erase(key);
  auto& m = models_[key];
  if (!m) m = std::make_unique<ModelMetrics>(registry_, name, version);
  return *m;
}

void ServerMetrics::retire(const std::string& name, const std::string& version) {
  std::lock_guard lk(mu_);
  if (models_.count({name, version})) retired_.insert({name, version});
}

void ServerMetrics::set_model_gauges(std::function<std::vector<ModelGauges>()> fn) {
  std::lock_guard lk(mu_);
  gauges_ = std::move(fn);
}

std::vector<ModelGauges> ServerMetrics::gauges() const {
  std::function<std::vector<ModelGauges>()> fn;
  {
    std::lock_guard lk(mu_);
    fn = gauges_;
  }
  return fn ? fn() : std::vector<ModelGauges>{};
}

void ServerMetrics::http_response(int status) {
  int c = status / 100;
  if (c < 1) c = 1;
  if (c > 5) c = 5;
  http_[c - 1]->inc();
}

nlohmann::json ServerMetrics::stats_json(std::string_view model, std::string_view version) const {
  std::map<std::pair<std::string, std::string>, models::SignatureStats> signatures;
  for (const ModelGauges& g : gauges())  // before mu_: the callback reads the repository
    if (g.dynamic) signatures[{g.model, g.version}] = g.signatures;
  nlohmann::json list = nlohmann::json::array();
  std::lock_guard lk(mu_);
  for (const auto& [key, m] : models_) {
    if (retired_.count(key)) continue;
    if (!model.empty() && key.first != model) continue;
    if (!version.empty() && key.second != version) continue;
    list.push_back(m->stats());
    if (auto s = signatures.find(key); s != signatures.end())
      list.back()["signature_stats"] = {{"live", s->second.live},         {"bytes", s->second.bytes},
                                        {"seen", s->second.seen},         {"captures", s->second.captures},
                                        {"evictions", s->second.evictions}};
  }
  return {{"model_stats", std::move(list)}};
}

}  // namespace hg::server
