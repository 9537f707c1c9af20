// Bounded waits for tests: every wait has a limit, and a wait that runs out fails the test with
// a message naming what it waited for ("timed out after 120 s waiting for <what>"). A test never
// hangs on a lost wake-up, a peer that died or a request that expired unseen.
//
//   using namespace std::chrono_literals;
//   T v = hg::test::get_within(future, 120s, "the held generation's result");  // throws WaitTimeout
//   ASSERT_TRUE(hg::test::ready_within(future, 60s, "the unload's answer"));
//   ASSERT_TRUE(hg::test::wait_until([&] { return q.size() == 2; }, 60s, "two queued requests"));
//   hg::test::Event started;  ...  started.set();  ...  ASSERT_TRUE(started.wait(60s, "the generation to start"));
//   ASSERT_TRUE(hg::test::readable_within(fd, 60s, "the child's ready byte"));
//   std::optional<int> st = hg::test::waitpid_within(pid, 120s, "rank 1");  // SIGKILLs it on timeout
//   hg::test::call_within(60s, "HttpServer::wait()", [&] { srv.wait(); });
//   hg::test::CommandRun r = hg::test::run_command(cmd, 300s, "hgraph-convert");   // timeout(1) bounds it
//
// The bool-returning waits add a (non-fatal) test failure on timeout and return false, so
// ASSERT_TRUE ends the test; get_within and call_within throw WaitTimeout (gtest reports an
// exception escaping a test body as a failure with its message).
//
// After a timeout the test may still block while it unwinds: a std::async future's destructor
// waits for its task, a destructor joins a thread or drains a queue, and what the wait timed out
// on is exactly what is stuck. So every timeout also arms a watchdog: if the same test is still
// running kHungGrace later, it prints what it was waiting for and aborts the process (ctest
// reports the test failed with that message, instead of killing a silent process at its
// TIMEOUT).
//
// Limits: kWaitLimit (120 s) is for events that take milliseconds on an idle machine; the tests
// must pass with another process keeping every core busy and under ASan (3-5x slower).
#pragma once
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace hg::test {

// The bound on a wait for something that normally takes milliseconds.
inline constexpr std::chrono::seconds kWaitLimit{120};
// How long a test may still run after one of its waits timed out before the process is aborted.
inline constexpr std::chrono::seconds kHungGrace{60};

class WaitTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

inline std::string seconds_text(std::chrono::milliseconds limit) {
  const long long ms = limit.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

inline std::string timeout_message(std::chrono::milliseconds limit, std::string_view what) {
  return "timed out after " + seconds_text(limit) + " waiting for " + std::string(what);
}

// The watchdog described above. Compares gtest's current test (gtest guards it with a mutex):
// a later test of the same process is not affected.
inline void abort_if_still_running(const std::string& message) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::thread([test, message] {
    std::this_thread::sleep_for(kHungGrace);
    if (::testing::UnitTest::GetInstance()->current_test_info() != test) return;
    std::fprintf(stderr, "\n[hg::test] %s.%s is still running %lld s after it %s: aborting the test process\n",
                 test ? test->test_suite_name() : "?", test ? test->name() : "?",
                 static_cast<long long>(kHungGrace.count()), message.c_str());
    std::fflush(stderr);
    std::abort();
  }).detach();
}

// A timed-out wait: a test failure naming `what`, and the watchdog. Returns the message.
inline std::string timed_out(std::chrono::milliseconds limit, std::string_view what) {
  std::string m = timeout_message(limit, what);
  ADD_FAILURE() << m;
  abort_if_still_running(m);
  return m;
}

}  // namespace detail

// Waits for a future (or shared_future) to be ready; false (and a test failure) on timeout.
template <class Future>
[[nodiscard]] bool ready_within(const Future& f, std::chrono::milliseconds limit, std::string_view what) {
  if (f.wait_for(limit) == std::future_status::ready) return true;
  detail::timed_out(limit, what);
  return false;
}

// The future's value (or its exception); WaitTimeout naming `what` if it is not ready in time.
template <class T>
T get_within(std::future<T>& f, std::chrono::milliseconds limit, std::string_view what) {
  if (f.wait_for(limit) != std::future_status::ready) {
    const std::string m = detail::timeout_message(limit, what);
    detail::abort_if_still_running(m);
    throw WaitTimeout(m);
  }
  return f.get();
}
template <class T>
decltype(auto) get_within(const std::shared_future<T>& f, std::chrono::milliseconds limit, std::string_view what) {
  if (f.wait_for(limit) != std::future_status::ready) {
    const std::string m = detail::timeout_message(limit, what);
    detail::abort_if_still_running(m);
    throw WaitTimeout(m);
  }
  return f.get();
}

// Polls `pred` (every 1 ms at first, backing off to 10 ms) until it holds; false (and a test
// failure) if it still does not after `limit`.
template <class Pred>
[[nodiscard]] bool wait_until(Pred&& pred, std::chrono::milliseconds limit, std::string_view what) {
  const auto end = std::chrono::steady_clock::now() + limit;
  auto pause = std::chrono::milliseconds(1);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) {
      if (pred()) return true;
      detail::timed_out(limit, what);
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(10));
  }
  return true;
}

// cv.wait_for with a predicate, on a lock the caller holds; false (and a test failure) on timeout.
template <class Lock, class Pred>
[[nodiscard]] bool wait_for(std::condition_variable& cv, Lock& lock, std::chrono::milliseconds limit,
                            std::string_view what, Pred&& pred) {
  if (cv.wait_for(lock, limit, std::forward<Pred>(pred))) return true;
  detail::timed_out(limit, what);
  return false;
}

// A one-shot signal between threads: set() (any number of times, from any thread) releases
// every wait(). Waiters are bounded; a test that may leave early (a failed ASSERT) while
// another thread waits on an Event should set() it on the way out (see SetOnExit).
class Event {
 public:
  void set() {
    std::lock_guard lk(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool is_set() const {
    std::lock_guard lk(mu_);
    return set_;
  }
  [[nodiscard]] bool wait(std::chrono::milliseconds limit, std::string_view what) const {
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, limit, [&] { return set_; })) return true;
    lk.unlock();
    detail::timed_out(limit, what);
    return false;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool set_ = false;
};

// Sets an Event when it goes out of scope: declared after what waits on the event (a future of
// std::async whose destructor joins its task, say), it releases the waiter before that joins.
class SetOnExit {
 public:
  explicit SetOnExit(Event& e) : e_(e) {}
  ~SetOnExit() { e_.set(); }
  SetOnExit(const SetOnExit&) = delete;
  SetOnExit& operator=(const SetOnExit&) = delete;

 private:
  Event& e_;
};

// Runs `fn` (a call that blocks until something happens: HttpServer::wait, a drain) on its
// own thread and waits for it; its result, its exception, or WaitTimeout naming `what`.
template <class F>
auto call_within(std::chrono::milliseconds limit, std::string_view what, F&& fn) {
  auto f = std::async(std::launch::async, std::forward<F>(fn));
  return get_within(f, limit, what);
}

// Waits until `fd` has something to read (or its end: EOF counts); false (and a test failure)
// on timeout or a poll error.
[[nodiscard]] inline bool readable_within(int fd, std::chrono::milliseconds limit, std::string_view what) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (n > 0) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ADD_FAILURE() << "poll failed (" << std::strerror(errno) << ") waiting for " << what;
      return false;
    }
    detail::timed_out(limit, what);
    return false;
  }
}

// The wait status of child `pid` once it exited, or nullopt if it is still running after
// `limit` (it is left running, and this is no test failure: for callers that report it
// themselves, with the child's output, say). A waitpid error is a test failure (and nullopt).
inline std::optional<int> exit_status_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) {
      ADD_FAILURE() << "waitpid(" << pid << ") failed: " << std::strerror(errno);
      return std::nullopt;
    }
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The wait status of child `pid`; on timeout a test failure naming `what`, the child is
// SIGKILLed and reaped, and the result is nullopt.
inline std::optional<int> waitpid_within(pid_t pid, std::chrono::milliseconds limit, std::string_view what) {
  if (auto st = exit_status_within(pid, limit)) return st;
  ADD_FAILURE() << detail::timeout_message(limit, std::string(what) + " (pid " + std::to_string(pid) +
                                                      ") to exit; killed it");
  if (::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
  return std::nullopt;
}

struct CommandRun {
  int exit_code = -1;  // the command's exit code; -1 when it was killed by a signal or timed out
  bool timed_out = false;
  std::string output;  // what it wrote to stdout (redirect 2>&1 in the command to have stderr too)
};

// Runs `command` with /bin/sh under timeout(1): SIGTERM after `limit`, SIGKILL 10 s later. On
// timeout a test failure naming `what`.
inline CommandRun run_command(const std::string& command, std::chrono::seconds limit, std::string_view what) {
  std::string quoted = "'";
  for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string cmd = "timeout -k 10 " + std::to_string(limit.count()) + " /bin/sh -c " + quoted;
  CommandRun r;
  const auto start = std::chrono::steady_clock::now();
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "popen failed for " << what << ": " << command;
    return r;
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  // timeout(1) exits 124 after SIGTERM ended the command, 128 + 9 after SIGKILL (a command
  // may exit with those itself: only after the limit do they mean the timeout).
  if ((r.exit_code == 124 || r.exit_code == 137) && std::chrono::steady_clock::now() - start >= limit) {
    r.timed_out = true;
    r.exit_code = -1;
    ADD_FAILURE() << detail::timeout_message(limit, std::string(what) + " to finish; killed it") << "\ncommand: "
                  << command;
  }
  return r;
}

}  // namespace hg::test
