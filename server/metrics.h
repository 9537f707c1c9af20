// A small Prometheus registry: counter, gauge and histogram families with label sets,
// rendered in the text exposition format 0.0.4 (what `GET /metrics` answers).
//
//   hg::server::MetricsRegistry reg;
//   auto& req = reg.counter("hg_requests_total", "Requests answered.", {"model", "code"});
//   hg::server::Counter& ok = req.with({"mlp", "200"});   // registration locks; keep the reference
//   ok.inc();                                             // updates are lock-free atomics
//   auto& lat = reg.histogram("hg_latency_us", "Latency.", {"model"}, {10, 100, 1000});
//   lat.with({"mlp"}).observe(42.0);
//   reg.callback("hg_queue_depth", "Jobs waiting.", MetricType::Gauge, {"model"},
//                [] { return std::vector<Sample>{{{"mlp"}, 3}}; });   // computed at scrape time
//   std::string text = reg.render();   // Content-Type: kPrometheusContentType
//
// Families render in registration order, children sorted by label values. A histogram renders
// cumulative `_bucket{le="..."}` lines ending with le="+Inf" (equal to `_count`), then `_sum`
// and `_count`. Label values and HELP text are escaped (\\, \" and \n). Names are checked
// against the Prometheus grammar (hg::InvalidArgument naming the bad one). Registering a name
// again with the same type and labels returns the existing family; anything else throws.
// Children live as long as the registry (or until remove()); references stay valid.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hg::server {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { Counter, Gauge, Histogram };

// Monotonic; inc() with a negative amount is ignored.
class Counter {
 public:
  void inc(double v = 1.0);
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0.0};
};

class Gauge {
 public:
  void set(double v) { v_.store(v, std::memory_order_relaxed); }
  void add(double v);
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // strictly increasing, finite
  void observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // bounds.size() + 1 entries; the last is the +Inf bucket
    double sum = 0;
    uint64_t count = 0;  // == cumulative.back()
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

// Bucket bounds: start, start*factor, ... (count of them).
std::vector<double> exponential_buckets(double start, double factor, int count);

// One family: the same metric name and label names, one child per label-value set.
template <class T>
class Family {
 public:
  // The child for these label values (one per label name), created on first use. Locks.
  T& with(const std::vector<std::string>& label_values);
  // Drops a child (e.g. an unloaded model). References to it must no longer be used.
  void remove(const std::vector<std::string>& label_values);

 private:
  friend class MetricsRegistry;
  Family(std::string name, std::vector<std::string> labels, std::vector<double> bounds = {})
      : name_(std::move(name)), labels_(std::move(labels)), bounds_(std::move(bounds)) {}
  std::string name_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

// A value a callback family reports at scrape time.
struct Sample {
  std::vector<std::string> label_values;
  double value = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Family<Counter>& counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                               std::vector<double> bounds);
  // A counter or gauge family whose samples `fn` computes at each render (called without the
  // registry's lock held; it must be thread-safe and must not throw).
  void callback(const std::string& name, const std::string& help, MetricType type, std::vector<std::string> labels,
                std::function<std::vector<Sample>()> fn);

  // The text exposition of every family.
  std::string render() const;

 private:
  struct Entry;
  Entry& add(const std::string& name, const std::string& help, MetricType type, std::vector<std::string> labels,
             const std::vector<double>& bounds, bool is_callback);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// Exposition helpers (also used by the tests): a value as Prometheus prints it ("1", "0.25",
// "+Inf", "NaN") and a label value escaped for the inside of the double quotes.
std::string format_metric_value(double v);
std::string escape_label_value(std::string_view v);

}  // namespace hg::server
