#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "engine/error.h"

namespace hg::server {

namespace {

void atomic_add(std::atomic<double>& a, double v) { a.fetch_add(v, std::memory_order_relaxed); }

bool valid_metric_name(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool valid_label_name(std::string_view s) {
  if (s.empty() || s.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escape_help(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::Counter: return "counter";
    case MetricType::Gauge: return "gauge";
    case MetricType::Histogram: return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"` plus an optional extra pair, then `}`; nothing when there are no labels.
void append_labels(std::string& out, const std::vector<std::string>& names, const std::vector<std::string>& values,
                   std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return;
  out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

void append_sample(std::string& out, const std::string& name, std::string_view suffix,
                   const std::vector<std::string>& names, const std::vector<std::string>& values, double v,
                   std::string_view extra_name = {}, std::string_view extra_value = {}) {
  out += name;
  out += suffix;
  append_labels(out, names, values, extra_name, extra_value);
  out += ' ';
  out += format_metric_value(v);
  out += '\n';
}

}  // namespace

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest form that reads back exactly
  return std::string(buf, r.ptr);
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void Counter::inc(double v) {
  if (v > 0) atomic_add(v_, v);
}

void Gauge::add(double v) { atomic_add(v_, v); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1]))
      throw InvalidArgument("histogram bucket bounds must be finite and strictly increasing (bound " +
                            std::to_string(i) + " is " + format_metric_value(bounds_[i]) + ")");
  }
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  // The first bucket whose upper bound is >= v (le is inclusive); NaN goes to +Inf.
  size_t i = std::isnan(v) ? bounds_.size() : size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, v);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = acc;
  }
  s.count = acc;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1)
    throw InvalidArgument("exponential_buckets needs start > 0, factor > 1 and count >= 1");
  std::vector<double> b(static_cast<size_t>(count));
  double v = start;
  for (auto& x : b) {
    x = v;
    v *= factor;
  }
  return b;
}

template <class T>
T& Family<T>::with(const std::vector<std::string>& label_values) {
  if (label_values.size() != labels_.size())
    throw InvalidArgument("metric '" + name_ + "' takes " + std::to_string(labels_.size()) + " label values, got " +
                          std::to_string(label_values.size()));
  std::lock_guard lk(mu_);
  auto it = children_.find(label_values);
  if (it != children_.end()) return *it->second;
  std::unique_ptr<T> child;
  if constexpr (std::is_same_v<T, Histogram>) child = std::make_unique<Histogram>(bounds_);
  else child = std::make_unique<T>();
  return *children_.emplace(label_values, std::move(child)).first->second;
}

template <class T>
void Family<T>::remove(const std::vector<std::string>& label_values) {
  std::lock_guard lk(mu_);
  children_.erase(label_values);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

struct MetricsRegistry::Entry {
  std::string name, help;
  MetricType type;
  std::vector<std::string> labels;
  std::unique_ptr<Family<Counter>> counters;
  std::unique_ptr<Family<Gauge>> gauges;
  std::unique_ptr<Family<Histogram>> histograms;
  std::function<std::vector<Sample>()> fn;  // callback families
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Entry& MetricsRegistry::add(const std::string& name, const std::string& help, MetricType type,
                                             std::vector<std::string> labels, const std::vector<double>& bounds,
                                             bool is_callback) {
  if (!valid_metric_name(name)) throw InvalidArgument("invalid metric name '" + name + "'");
  for (const auto& l : labels) {
    if (!valid_label_name(l)) throw InvalidArgument("metric '" + name + "': invalid label name '" + l + "'");
    if (type == MetricType::Histogram && l == "le")
      throw InvalidArgument("metric '" + name + "': a histogram cannot have a label named 'le'");
  }
  for (auto& e : entries_) {
    if (e->name != name) continue;
    if (e->type != type || e->labels != labels || is_callback || e->fn ||
        (e->histograms && e->histograms->bounds_ != bounds))
      throw InvalidArgument("metric '" + name + "' is already registered with another type, labels or buckets");
    return *e;
  }
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->help = help;
  e->type = type;
  e->labels = std::move(labels);
  if (!is_callback) {
    if (type == MetricType::Counter) e->counters.reset(new Family<Counter>(name, e->labels));
    if (type == MetricType::Gauge) e->gauges.reset(new Family<Gauge>(name, e->labels));
    if (type == MetricType::Histogram) {
      Histogram check(bounds);  // validates the bounds before anything is registered
      e->histograms.reset(new Family<Histogram>(name, e->labels, bounds));
    }
  }
  entries_.push_back(std::move(e));
  return *entries_.back();
}

Family<Counter>& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                          std::vector<std::string> labels) {
  std::lock_guard lk(mu_);
  return *add(name, help, MetricType::Counter, std::move(labels), {}, false).counters;
}

Family<Gauge>& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                                      std::vector<std::string> labels) {
  std::lock_guard lk(mu_);
  return *add(name, help, MetricType::Gauge, std::move(labels), {}, false).gauges;
}

Family<Histogram>& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                              std::vector<std::string> labels, std::vector<double> bounds) {
  std::lock_guard lk(mu_);
  return *add(name, help, MetricType::Histogram, std::move(labels), bounds, false).histograms;
}

void MetricsRegistry::callback(const std::string& name, const std::string& help, MetricType type,
                               std::vector<std::string> labels, std::function<std::vector<Sample>()> fn) {
  if (type == MetricType::Histogram) throw InvalidArgument("metric '" + name + "': a callback family cannot be a histogram");
  if (!fn) throw InvalidArgument("metric '" + name + "': the callback is empty");
  std::lock_guard lk(mu_);
  add(name, help, type, std::move(labels), {}, true).fn = std::move(fn);
}

std::string MetricsRegistry::render() const {
  std::vector<const Entry*> entries;
  {
    std::lock_guard lk(mu_);
    for (auto& e : entries_) entries.push_back(e.get());  // entries are never removed
  }
  std::string out;
  out.reserve(4096);
  for (const Entry* e : entries) {
    out += "# HELP " + e->name + " " + escape_help(e->help) + "\n";
    out += "# TYPE " + e->name + " " + type_name(e->type) + "\n";
    if (e->fn) {
      auto samples = e->fn();
      std::sort(samples.begin(), samples.end(),
                [](const Sample& a, const Sample& b) { return a.label_values < b.label_values; });
      for (const auto& s : samples) {
        if (s.label_values.size() != e->labels.size()) continue;  // a malformed sample is skipped
        append_sample(out, e->name, "", e->labels, s.label_values, s.value);
      }
    } else if (e->counters || e->gauges) {
      auto emit = [&](auto& fam) {
        std::lock_guard lk(fam.mu_);
        for (const auto& [values, child] : fam.children_) append_sample(out, e->name, "", e->labels, values, child->value());
      };
      if (e->counters) emit(*e->counters);
      else emit(*e->gauges);
    } else {
      std::lock_guard lk(e->histograms->mu_);
      for (const auto& [values, child] : e->histograms->children_) {
        auto snap = child->snapshot();
        for (size_t i = 0; i <= snap.bounds.size(); ++i) {
          std::string le = i < snap.bounds.size() ? format_metric_value(snap.bounds[i]) : "+Inf";
          append_sample(out, e->name, "_bucket", e->labels, values, double(snap.cumulative[i]), "le", le);
        }
        append_sample(out, e->name, "_sum", e->labels, values, snap.sum);
        append_sample(out, e->name, "_count", e->labels, values, double(snap.count));
      }
    }
  }
  return out;
}

}  // namespace hg::server
