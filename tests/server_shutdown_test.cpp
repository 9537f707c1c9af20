// End-to-end graceful shutdown of an hgraph-serve child on 127.0.0.1: SIGTERM while requests
// are in flight. Every request the server had received gets its complete, correct answer,
// readiness fails from the moment draining starts (never 200 again), and the process exits 0
// by itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "tests/server_e2e.h"
#include "tests/wait.h"

namespace hg::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
const std::string kInfer = "/v2/models/digits_mlp/infer";

// Readiness as a probe sees it, polled every 5 ms on fresh connections from construction until
// the server process is gone: each probe's time and status (0: refused or cut).
class ReadinessWatch {
 public:
  explicit ReadinessWatch(int port)
      : thread_([this, port] {
          while (!stop_) {
            const auto t = Clock::now();
            int status = 0;
            try {
              HttpConn c(port, 5s);
              status = c.request("GET", "/v2/health/ready").status;
            } catch (const HttpConnError&) {
            }
            {
              std::lock_guard lk(mu_);
              probes_.emplace_back(t, status);
            }
            std::this_thread::sleep_for(5ms);
          }
        }) {}
  ~ReadinessWatch() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<std::pair<Clock::time_point, int>> probes() {
    std::lock_guard lk(mu_);
    return probes_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<Clock::time_point, int>> probes_;
  std::thread thread_;
};

// Once readiness failed after `since`, it never answered 200 again; returns the time of the
// first failure after `since` (max() if none).
Clock::time_point first_not_ready(const std::vector<std::pair<Clock::time_point, int>>& probes, Clock::time_point since) {
  Clock::time_point first = Clock::time_point::max();
  for (const auto& [t, status] : probes) {
    if (t < since) continue;
    if (status != 200 && first == Clock::time_point::max()) first = t;
    if (first != Clock::time_point::max()) {
      EXPECT_NE(status, 200) << "readiness came back during the drain";
    }
  }
  return first;
}

TEST(E2eShutdownTest, SigtermAnswersEveryQueuedRequestThenExits0) {
  constexpr int kClients = 16;
  TempRepo repo("sigterm_queued");
  repo.add_digits();
  // Requests wait up to 3 s in the queue for a fuller batch: at SIGTERM they are all in there.
  repo.write_config("digits_mlp", {{"max_batch_size", 64}, {"dynamic_batching", {{"max_queue_delay_microseconds", 3000000}}}});
  ServerProcess server({"--model-repository", repo.str(), "--drain-timeout", "30"});
  std::vector<int> seeds(kClients);
  for (int t = 0; t < kClients; ++t) seeds[t] = 200 + t;
  std::vector<std::vector<float>> ref(kClients);
  {
    HttpConn c(server.port());
    const std::vector<float> rows = logits_of(c.request("POST", kInfer, digits_body(seeds)).body);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kClients * 10));
    for (int t = 0; t < kClients; ++t) ref[t].assign(rows.begin() + t * 10, rows.begin() + t * 10 + 10);
  }
  std::vector<std::unique_ptr<HttpConn>> conns;
  for (int t = 0; t < kClients; ++t) {
    conns.push_back(std::make_unique<HttpConn>(server.port()));
    conns.back()->send("POST", kInfer, digits_body({seeds[t]}));
  }
  {
    HttpConn c(server.port());
    double pending = 0;
    ASSERT_TRUE(wait_until(
        [&] {
          pending = metric_sum(c.request("GET", "/metrics").body, "hg_inference_pending_requests", "digits_mlp");
          return pending >= kClients;
        },
        kWaitLimit, "all " + std::to_string(kClients) + " requests to reach the queue (hg_inference_pending_requests)"));
    ASSERT_EQ(pending, kClients);
  }
  ReadinessWatch watch(server.port());
  ASSERT_TRUE(wait_until([&] { return watch.probes().size() >= 3; }, kWaitLimit, "3 readiness probes before SIGTERM"));
  const auto sigterm = Clock::now();
  server.signal(SIGTERM);
  for (int t = 0; t < kClients; ++t) {
    HttpReply r;
    try {
      r = conns[t]->read();
    } catch (const HttpConnError& e) {
      ADD_FAILURE() << "request " << t << " in flight at SIGTERM got no answer: " << e.what();
      continue;
    }
    EXPECT_EQ(r.status, 200) << r.body;
    const std::vector<float> got = logits_of(r.body);
    ASSERT_EQ(got.size(), 10u) << r.body;
    for (int k = 0; k < 10; ++k) EXPECT_NEAR(got[k], ref[t][k], 1e-4f * (1 + std::fabs(ref[t][k]))) << t;
    EXPECT_EQ(r.header("Connection"), "close") << "a draining server closes the connections it answers";
  }
  RecordProperty("answered_all_after_ms",
                 std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - sigterm).count()));
  EXPECT_EQ(server.wait_exit(40s), 0) << "exit code after SIGTERM";
  watch.stop();
  const auto probes = watch.probes();
  ASSERT_FALSE(probes.empty());
  EXPECT_EQ(probes.front().second, 200) << "ready before SIGTERM";
  EXPECT_NE(first_not_ready(probes, sigterm), Clock::time_point::max());
}

TEST(E2eShutdownTest, SigtermUnderLoadCompletesAnswersAndReadinessFailsAtOnce) {
  TempRepo repo("sigterm_load");
  repo.add_onnx("resnet18", "resnet18_op17.onnx");
  repo.write_config("resnet18", {{"max_batch_size", 8},
                                 {"batch_buckets", {1, 2, 4, 8}},
                                 {"dynamic_batching", {{"max_queue_delay_microseconds", 1000}}}});
  ServerProcess server({"--model-repository", repo.str(), "--drain-timeout", "60"});
  const int clients = 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int> ok{0}, draining{0}, not_sent{0}, ok_after{0};
  std::atomic<bool> signalled{false};
  std::mutex mu;
  std::vector<std::string> bad;
  Clock::time_point last_ok{};
  // Each client sends requests back to back on a kept-alive connection until SIGTERM; then it
  // stops after its next answer that closes the connection, or its next failed connection (at
  // most 3 more requests).
  Background load([&](const std::atomic<bool>& stop) {
    run_threads(clients, [&](int t) {
      const std::string body = resnet_body(2, t);
      std::unique_ptr<HttpConn> conn;
      for (int after = 0; !stop && after < 3; after += signalled ? 1 : 0) {
        try {
          if (!conn) conn = std::make_unique<HttpConn>(server.port(), 120s);
          HttpReply r = conn->request("POST", "/v2/models/resnet18/infer", body);
          json j = json::parse(r.body, nullptr, false);
          std::lock_guard lk(mu);
          if (r.status == 200 && j.is_object() && j["outputs"][0]["shape"] == json::array({2, 1000})) {
            ++ok;
            if (signalled) ++ok_after;
            last_ok = std::max(last_ok, Clock::now());
          } else if (r.status == 503 && signalled) {
            ++draining;  // arrived after draining began: refused, and said so
          } else {
            bad.push_back(std::to_string(r.status) + " " + r.body.substr(0, 200));
          }
          if (r.header("Connection") == "close") {
            conn.reset();
            if (signalled) return;
          }
        } catch (const HttpConnError& e) {
          if (e.kind() == HttpConnError::Kind::Truncated || e.kind() == HttpConnError::Kind::Timeout) {
            std::lock_guard lk(mu);
            bad.push_back(std::string("cut answer: ") + e.what());
          } else if (!signalled) {
            std::lock_guard lk(mu);
            bad.push_back(std::string("connection failed before SIGTERM: ") + e.what());
          }
          ++not_sent;  // refused, or closed before any byte: the server never took it
          if (signalled) return;
          conn.reset();
        }
      }
    });
  });
  ASSERT_TRUE(wait_until([&] { return ok.load() >= clients; }, kWaitLimit,
                         std::to_string(clients) + " answered requests (the load getting going)"));
  ReadinessWatch watch(server.port());
  ASSERT_TRUE(wait_until([&] { return watch.probes().size() >= 3; }, kWaitLimit, "3 readiness probes before SIGTERM"));
  const auto sigterm = Clock::now();
  signalled = true;
  server.signal(SIGTERM);
  load.wait();
  EXPECT_EQ(server.wait_exit(90s), 0) << "exit code after SIGTERM";
  watch.stop();
  EXPECT_TRUE(bad.empty()) << bad.size() << " bad answers, first: " << bad.front();
  EXPECT_GT(ok_after.load(), 0) << "requests in flight at SIGTERM were answered";
  const auto not_ready = first_not_ready(watch.probes(), sigterm);
  ASSERT_NE(not_ready, Clock::time_point::max()) << "readiness never failed";
  EXPECT_LT(not_ready, last_ok) << "readiness failed only after the last in-flight answer, not when draining began";
  RecordProperty("answered_after_sigterm", std::to_string(ok_after.load()));
  RecordProperty("refused_while_draining", std::to_string(draining.load()));
  RecordProperty("not_ready_after_ms",
                 std::to_string(std::chrono::duration<double, std::milli>(not_ready - sigterm).count()));
}

}  // namespace
}  // namespace hg::test
