// The Prometheus registry (server/metrics.h) and the server's families and Triton statistics
// (server/server_metrics.h). Every rendering is checked line by line against the text
// exposition grammar by a small parser below.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/device.h"
#include "server/metrics.h"
#include "server/server_metrics.h"
#include "tests/errors.h"

using namespace hg::server;
using ::testing::HasSubstr;

namespace {

struct ParsedSample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct Parsed {
  std::map<std::string, std::string> types;  // family -> type
  std::map<std::string, std::string> help;   // family -> unescaped help
  std::vector<ParsedSample> samples;
  std::vector<std::string> errors;  // lines that broke the grammar
};

std::string unescape(const std::string& s, bool quotes) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    char n = s[++i];
    if (n == 'n') out += '\n';
    else if (n == '\\') out += '\\';
    else if (n == '"' && quotes) out += '"';
    else out += std::string("\\") + n;
  }
  return out;
}

std::optional<double> parse_value(const std::string& v) {
  if (v == "+Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  static const std::regex num(R"([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)");
  if (!std::regex_match(v, num)) return std::nullopt;
  return std::stod(v);
}

// Parses the text exposition format 0.0.4; every line must be a HELP, a TYPE or a sample of
// a declared family (histogram samples with _bucket/_sum/_count), and the text ends in '\n'.
Parsed parse_exposition(const std::string& text) {
  static const std::regex help_re(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*))");
  static const std::regex type_re(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex sample_re(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+))");
  static const std::regex label_re(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)\"(,|$))");
  Parsed p;
  if (!text.empty() && text.back() != '\n') p.errors.push_back("no final newline");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    std::smatch m;
    if (std::regex_match(line, m, help_re)) {
      p.help[m[1]] = unescape(m[2], false);
    } else if (std::regex_match(line, m, type_re)) {
      if (p.types.count(m[1])) p.errors.push_back("TYPE twice: " + line);
      p.types[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample_re)) {
      ParsedSample s;
      s.name = m[1];
      std::string labels = m[3];
      while (!labels.empty()) {
        std::smatch lm;
        if (!std::regex_search(labels, lm, label_re, std::regex_constants::match_continuous)) {
          p.errors.push_back("bad labels: " + line);
          break;
        }
        s.labels[lm[1]] = unescape(lm[2], true);
        labels = lm.suffix();
      }
      auto v = parse_value(m[4]);
      if (!v) p.errors.push_back("bad value: " + line);
      s.value = v.value_or(0);
      std::string family = s.name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        std::string sfx = suffix;
        if (!p.types.count(family) && family.size() > sfx.size() &&
            family.compare(family.size() - sfx.size(), sfx.size(), sfx) == 0) {
          std::string base = family.substr(0, family.size() - sfx.size());
          if (p.types.count(base) && p.types[base] == "histogram") family = base;
        }
      }
      if (!p.types.count(family)) p.errors.push_back("sample before its TYPE: " + line);
      p.samples.push_back(std::move(s));
    } else {
      p.errors.push_back("not in the grammar: '" + line + "'");
    }
  }
  return p;
}

// The samples named `name` whose labels include every pair of `match`.
std::vector<ParsedSample> find(const Parsed& p, const std::string& name, const std::map<std::string, std::string>& match = {}) {
  std::vector<ParsedSample> out;
  for (const auto& s : p.samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match)
      if (!s.labels.count(k) || s.labels.at(k) != v) ok = false;
    if (ok) out.push_back(s);
  }
  return out;
}

double value_of(const Parsed& p, const std::string& name, const std::map<std::string, std::string>& match = {}) {
  auto v = find(p, name, match);
  EXPECT_EQ(v.size(), 1u) << name;
  return v.empty() ? NAN : v[0].value;
}

// Every histogram series: buckets non-decreasing in le order, last le "+Inf" equal to _count.
void expect_histograms_consistent(const Parsed& p) {
  for (const auto& [family, type] : p.types) {
    if (type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> series;
    for (const auto& s : find(p, family + "_bucket")) {
      auto labels = s.labels;
      ASSERT_TRUE(labels.count("le")) << family;
      double le = *parse_value(labels["le"]);
      labels.erase("le");
      series[labels].push_back({le, s.value});
    }
    for (const auto& [labels, buckets] : series) {
      ASSERT_FALSE(buckets.empty());
      for (size_t i = 1; i < buckets.size(); ++i) {
        EXPECT_LT(buckets[i - 1].first, buckets[i].first) << family;
        EXPECT_LE(buckets[i - 1].second, buckets[i].second) << family << " not cumulative";
      }
      EXPECT_TRUE(std::isinf(buckets.back().first)) << family << " has no +Inf bucket";
      EXPECT_EQ(buckets.back().second, value_of(p, family + "_count", labels)) << family;
      EXPECT_EQ(find(p, family + "_sum", labels).size(), 1u) << family;
    }
  }
}

}  // namespace

TEST(MetricsRegistryTest, RendersEveryTypeInTheExpositionGrammar) {
  MetricsRegistry reg;
  auto& c = reg.counter("t_requests_total", "Requests.", {"model", "code"});
  c.with({"a", "200"}).inc();
  c.with({"a", "200"}).inc(2.5);
  c.with({"b", "500"}).inc();
  c.with({"b", "500"}).inc(-4);  // ignored: counters only go up
  reg.gauge("t_temperature", "A gauge without labels.").with({}).set(-1.5);
  auto& h = reg.histogram("t_latency_us", "Latency.", {"model"}, {10, 100, 1000});
  for (double v : {5.0, 10.0, 50.0, 500.0, 5000.0, 7000.0}) h.with({"a"}).observe(v);
  reg.callback("t_depth", "Computed at scrape time.", MetricType::Gauge, {"q"},
               [] { return std::vector<Sample>{{{"z"}, 2}, {{"y"}, 1}}; });

  std::string text = reg.render();
  Parsed p = parse_exposition(text);
  EXPECT_TRUE(p.errors.empty()) << ::testing::PrintToString(p.errors) << "\n" << text;
  EXPECT_EQ(p.types["t_requests_total"], "counter");
  EXPECT_EQ(p.types["t_temperature"], "gauge");
  EXPECT_EQ(p.types["t_latency_us"], "histogram");
  EXPECT_EQ(p.types["t_depth"], "gauge");
  EXPECT_EQ(p.help["t_requests_total"], "Requests.");
  EXPECT_EQ(value_of(p, "t_requests_total", {{"model", "a"}, {"code", "200"}}), 3.5);
  EXPECT_EQ(value_of(p, "t_requests_total", {{"model", "b"}}), 1);
  EXPECT_EQ(value_of(p, "t_temperature"), -1.5);
  EXPECT_THAT(text, HasSubstr("t_temperature -1.5\n"));  // no braces without labels
  EXPECT_EQ(value_of(p, "t_depth", {{"q", "y"}}), 1);
  EXPECT_LT(text.find("t_depth{q=\"y\"}"), text.find("t_depth{q=\"z\"}"));  // children sorted
  // le is inclusive: 10 falls in le="10".
  EXPECT_EQ(value_of(p, "t_latency_us_bucket", {{"le", "10"}}), 2);
  EXPECT_EQ(value_of(p, "t_latency_us_bucket", {{"le", "100"}}), 3);
  EXPECT_EQ(value_of(p, "t_latency_us_bucket", {{"le", "1000"}}), 4);
  EXPECT_EQ(value_of(p, "t_latency_us_bucket", {{"le", "+Inf"}}), 6);
  EXPECT_EQ(value_of(p, "t_latency_us_count"), 6);
  EXPECT_EQ(value_of(p, "t_latency_us_sum"), 12565);
  expect_histograms_consistent(p);
}

TEST(MetricsRegistryTest, EscapesLabelValuesAndHelpText) {
  MetricsRegistry reg;
  const std::string nasty = "a\"b\\c\nd}{,=x";
  reg.counter("t_escape_total", "Help with a \\ backslash\nand a newline.", {"name"}).with({nasty}).inc();
  std::string text = reg.render();
  EXPECT_THAT(text, HasSubstr(R"(t_escape_total{name="a\"b\\c\nd}{,=x"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(# HELP t_escape_total Help with a \\ backslash\nand a newline.)"));
  Parsed p = parse_exposition(text);
  EXPECT_TRUE(p.errors.empty()) << ::testing::PrintToString(p.errors);
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_EQ(p.samples[0].labels["name"], nasty);
  EXPECT_EQ(p.help["t_escape_total"], "Help with a \\ backslash\nand a newline.");
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(format_metric_value(1), "1");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
  EXPECT_EQ(format_metric_value(INFINITY), "+Inf");
  EXPECT_EQ(format_metric_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_metric_value(NAN), "NaN");
  EXPECT_EQ(format_metric_value(1e20), "1e+20");
}

TEST(MetricsRegistryTest, ConcurrentUpdatesFromEightThreadsSumExactly) {
  MetricsRegistry reg;
  auto& counters = reg.counter("t_hits_total", "Hits.", {"t"});
  auto& gauge = reg.gauge("t_level", "Level.").with({});
  auto& hist = reg.histogram("t_obs", "Observations.", {}, {1, 2, 3}).with({});
  constexpr int kThreads = 8, kIters = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter& shared = counters.with({"shared"});  // every thread registers the same child
      Counter& own = counters.with({std::to_string(t)});
      for (int i = 0; i < kIters; ++i) {
        shared.inc();
        own.inc(2);
        gauge.add(i % 2 ? 1 : -1);
        hist.observe(double(i % 4) + 0.5);  // one in each of the 4 buckets
      }
    });
  }
  std::atomic<bool> done{false};
  std::thread scraper([&] {  // renders while the updates run: always parses, always consistent
    while (!done) {
      Parsed p = parse_exposition(reg.render());
      EXPECT_TRUE(p.errors.empty());
      expect_histograms_consistent(p);
    }
  });
  for (auto& th : threads) th.join();
  done = true;
  scraper.join();
  EXPECT_EQ(counters.with({"shared"}).value(), double(kThreads) * kIters);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(counters.with({std::to_string(t)}).value(), 2.0 * kIters);
  EXPECT_EQ(gauge.value(), 0);
  auto snap = hist.snapshot();
  EXPECT_EQ(snap.count, uint64_t(kThreads) * kIters);
  EXPECT_EQ(snap.cumulative, (std::vector<uint64_t>{40000, 80000, 120000, 160000}));
  EXPECT_EQ(snap.sum, double(kThreads) * (kIters / 4) * (0.5 + 1.5 + 2.5 + 3.5));
}

TEST(MetricsRegistryTest, ChecksNamesLabelsAndReRegistration) {
  MetricsRegistry reg;
  auto& a = reg.counter("t_same_total", "Same.", {"x"});
  EXPECT_EQ(&a, &reg.counter("t_same_total", "Same.", {"x"}));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { reg.gauge("t_same_total", "Other type.", {"x"}); }),
              HasSubstr("'t_same_total' is already registered"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { reg.counter("t_same_total", "Other labels.", {"y"}); }),
              HasSubstr("already registered"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { reg.counter("9bad", "x"); }),
              HasSubstr("invalid metric name '9bad'"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { reg.counter("t_ok", "x", {"bad-label"}); }),
              HasSubstr("invalid label name 'bad-label'"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { reg.counter("t_ok2", "x", {"__reserved"}); }),
              HasSubstr("invalid label name"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { reg.histogram("t_h", "x", {"le"}, {1}); }),
              HasSubstr("label named 'le'"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { reg.histogram("t_h2", "x", {}, {2, 1}); }),
              HasSubstr("strictly increasing"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([&] { a.with({"1", "2"}); }),
              HasSubstr("takes 1 label values, got 2"));
  a.with({"gone"}).inc();
  a.remove({"gone"});
  EXPECT_THAT(reg.render(), ::testing::Not(HasSubstr("gone")));
  EXPECT_EQ(exponential_buckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

TEST(ServerMetricsTest, FailureReasonsFollowTheStatus) {
  EXPECT_STREQ(failure_reason_name(failure_reason_for_status(503)), "REJECTED");
  EXPECT_STREQ(failure_reason_name(failure_reason_for_status(429)), "REJECTED");
  EXPECT_STREQ(failure_reason_name(failure_reason_for_status(504)), "TIMEOUT");
  EXPECT_STREQ(failure_reason_name(failure_reason_for_status(400)), "BAD_REQUEST");
  EXPECT_STREQ(failure_reason_name(failure_reason_for_status(404)), "BAD_REQUEST");
  EXPECT_STREQ(failure_reason_name(failure_reason_for_status(499)), "CANCELED");
  EXPECT_STREQ(failure_reason_name(failure_reason_for_status(500)), "BACKEND");
}

TEST(ServerMetricsTest, RendersEveryServerFamily) {
  ServerMetrics m;
  ModelMetrics& mm = m.model("digits_mlp", "1");
  EXPECT_EQ(&mm, &m.model("digits_mlp", "1"));
  mm.success(4, {.parse_us = 10, .queue_us = 100, .compute_us = 300, .respond_us = 5, .total_us = 420});
  mm.success(1, {.parse_us = 20, .queue_us = 50, .compute_us = 300, .respond_us = 5, .total_us = 380});
  mm.failure(FailureReason::Timeout, 1000);
  mm.execution(5, 300);
  m.set_model_gauges([] {
    ModelGauges g;
    g.model = "digits_mlp", g.version = "1", g.depth = 7;
    return std::vector<ModelGauges>{g};
  });
  m.http_response(200);
  m.http_response(200);
  m.http_response(413);
  m.http_response(503);

  std::string text = m.render();
  Parsed p = parse_exposition(text);
  EXPECT_TRUE(p.errors.empty()) << ::testing::PrintToString(p.errors) << "\n" << text;
  expect_histograms_consistent(p);
  const std::map<std::string, std::string> mv = {{"model", "digits_mlp"}, {"version", "1"}};
  EXPECT_EQ(value_of(p, "hg_inference_request_success_total", mv), 2);
  EXPECT_EQ(value_of(p, "hg_inference_count_total", mv), 5);
  EXPECT_EQ(value_of(p, "hg_inference_exec_count_total", mv), 1);
  EXPECT_EQ(value_of(p, "hg_inference_request_failure_total", {{"model", "digits_mlp"}, {"reason", "TIMEOUT"}}), 1);
  EXPECT_EQ(value_of(p, "hg_inference_request_failure_total", {{"model", "digits_mlp"}, {"reason", "REJECTED"}}), 0);
  EXPECT_EQ(find(p, "hg_inference_request_failure_total").size(), 5u);  // every reason, zeros too
  EXPECT_EQ(value_of(p, "hg_request_duration_us_count", mv), 2);
  EXPECT_EQ(value_of(p, "hg_request_duration_us_sum", mv), 800);
  EXPECT_EQ(value_of(p, "hg_queue_duration_us_sum", mv), 150);
  EXPECT_EQ(value_of(p, "hg_parse_duration_us_sum", mv), 30);
  EXPECT_EQ(value_of(p, "hg_respond_duration_us_sum", mv), 10);
  EXPECT_EQ(value_of(p, "hg_compute_duration_us_count", mv), 2);
  EXPECT_EQ(value_of(p, "hg_batch_size_bucket", {{"model", "digits_mlp"}, {"le", "4"}}), 0);
  EXPECT_EQ(value_of(p, "hg_batch_size_bucket", {{"model", "digits_mlp"}, {"le", "8"}}), 1);
  EXPECT_EQ(value_of(p, "hg_inference_pending_requests", mv), 7);
  EXPECT_EQ(value_of(p, "hg_http_responses_total", {{"code", "2xx"}}), 2);
  EXPECT_EQ(value_of(p, "hg_http_responses_total", {{"code", "4xx"}}), 1);
  EXPECT_EQ(value_of(p, "hg_http_responses_total", {{"code", "5xx"}}), 1);
  EXPECT_EQ(p.types["hg_graph_cache_hits_total"], "counter");
  EXPECT_EQ(find(p, "hg_graph_cache_misses_total", {{"cache", "memory"}}).size(), 1u);
  EXPECT_EQ(find(p, "hg_graph_cache_entries").size(), 1u);
  const int hpus = hg::hpu_device_count();
  ASSERT_GE(hpus, 1);
  EXPECT_EQ(find(p, "hg_device_memory_in_use_bytes").size(), size_t(hpus));
  auto stats = hg::memory_stats(hg::Device::hpu(0));
  EXPECT_EQ(value_of(p, "hg_device_memory_limit_bytes", {{"device", "hpu:0"}}), double(stats.limit));
  EXPECT_GE(value_of(p, "hg_device_memory_allocs_total", {{"device", "hpu:0"}}), 0);
  EXPECT_EQ(p.types["hg_device_memory_allocs_total"], "counter");
}

TEST(ServerMetricsTest, StatsJsonHasTritonsShape) {
  ServerMetrics m;
  ModelMetrics& a = m.model("mlp", "1");
  m.model("mlp", "2");
  m.model("bert", "1");
  a.success(2, {.parse_us = 1, .queue_us = 2, .compute_us = 3, .respond_us = 4, .total_us = 10});
  a.success(3, {.parse_us = 1, .queue_us = 2, .compute_us = 3, .respond_us = 4, .total_us = 10});
  a.failure(FailureReason::BadRequest, 0.5);
  a.execution(5, 3);
  a.execution(5, 4);
  a.execution(300, 7);  // beyond the lock-free slots

  auto all = m.stats_json();
  ASSERT_TRUE(all.contains("model_stats"));
  ASSERT_EQ(all["model_stats"].size(), 3u);
  EXPECT_EQ(all["model_stats"][0]["name"], "bert");  // sorted by name, then version
  EXPECT_EQ(m.stats_json("mlp")["model_stats"].size(), 2u);
  auto one = m.stats_json("mlp", "1")["model_stats"];
  ASSERT_EQ(one.size(), 1u);
  const auto& s = one[0];
  EXPECT_EQ(s["name"], "mlp");
  EXPECT_EQ(s["version"], "1");
  EXPECT_EQ(s["inference_count"], 5);
  EXPECT_EQ(s["execution_count"], 3);
  EXPECT_GT(s["last_inference"].get<uint64_t>(), uint64_t{1600000000000});  // ms since the epoch
  const auto& is = s["inference_stats"];
  for (const char* k : {"success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit"}) {
    ASSERT_TRUE(is.contains(k)) << k;
    EXPECT_TRUE(is[k]["count"].is_number_unsigned()) << k;
    EXPECT_TRUE(is[k]["ns"].is_number_unsigned()) << k;
  }
  EXPECT_EQ(is["success"]["count"], 2);
  EXPECT_EQ(is["success"]["ns"], 20000);
  EXPECT_EQ(is["fail"]["count"], 1);
  EXPECT_EQ(is["fail"]["ns"], 500);
  EXPECT_EQ(is["queue"]["ns"], 4000);
  EXPECT_EQ(is["compute_input"]["ns"], 2000);
  EXPECT_EQ(is["compute_infer"]["ns"], 6000);
  EXPECT_EQ(is["compute_output"]["ns"], 8000);
  const auto& bs = s["batch_stats"];
  ASSERT_EQ(bs.size(), 2u);
  EXPECT_EQ(bs[0]["batch_size"], 5);
  EXPECT_EQ(bs[0]["compute_infer"]["count"], 2);
  EXPECT_EQ(bs[0]["compute_infer"]["ns"], 7000);
  EXPECT_TRUE(bs[0].contains("compute_input") && bs[0].contains("compute_output"));
  EXPECT_EQ(bs[1]["batch_size"], 300);
  EXPECT_EQ(bs[1]["compute_infer"]["count"], 1);
  EXPECT_EQ(m.stats_json("mlp", "9")["model_stats"].size(), 0u);
  EXPECT_EQ(m.stats_json("nope")["model_stats"].size(), 0u);

  m.retire("mlp", "2");
  EXPECT_EQ(m.stats_json("mlp")["model_stats"].size(), 1u);
  m.model("mlp", "2");  // loaded again
  EXPECT_EQ(m.stats_json("mlp")["model_stats"].size(), 2u);
}

TEST(ServerMetricsTest, ConcurrentRequestsOnOneModelSumExactly) {
  ServerMetrics m;
  ModelMetrics& mm = m.model("mlp", "1");
  constexpr int kThreads = 8, kIters = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        mm.success(2, {.parse_us = 1, .queue_us = 1, .compute_us = 1, .respond_us = 1, .total_us = 4});
        mm.execution(1 + i % 8, 1);
        m.http_response(200);
      }
    });
  for (auto& th : threads) th.join();
  auto s = m.stats_json("mlp")["model_stats"][0];
  EXPECT_EQ(s["inference_count"], 2 * kThreads * kIters);
  EXPECT_EQ(s["execution_count"], kThreads * kIters);
  EXPECT_EQ(s["inference_stats"]["success"]["ns"], uint64_t(4000) * kThreads * kIters);
  uint64_t runs = 0;
  for (const auto& b : s["batch_stats"]) runs += b["compute_infer"]["count"].get<uint64_t>();
  EXPECT_EQ(runs, uint64_t(kThreads) * kIters);
  Parsed p = parse_exposition(m.render());
  EXPECT_EQ(value_of(p, "hg_http_responses_total", {{"code", "2xx"}}), double(kThreads) * kIters);
  EXPECT_EQ(value_of(p, "hg_inference_count_total", {{"model", "mlp"}}), 2.0 * kThreads * kIters);
}
