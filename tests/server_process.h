// A running hgraph-serve child process for end-to-end tests: started on 127.0.0.1 port 0
// (the port is read from its "listening on http://HOST:PORT" line), killed with SIGKILL when
// the object is destroyed or when the test process dies (PR_SET_PDEATHSIG).
//
//   hg::test::ServerProcess server({"--model-repository", repo.string()});
//   hg::server::Client c(server.url());              // "http://127.0.0.1:40123"
//   ...
//   EXPECT_EQ(server.terminate(20s), 0);             // SIGTERM; exit status, or -1 if it hung
//
// Create it on the test's main thread: the death signal follows the creating thread.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <optional>
#include <vector>

#include "tests/wait.h"

#ifndef HG_SERVE_BIN
#error "HG_SERVE_BIN must be defined as the path of hgraph-serve"
#endif

namespace hg::test {

class ServerProcess {
 public:
  // Runs `binary --host 127.0.0.1 --port 0 extra_args...` and waits up to `startup` for it to
  // listen (models load and capture every bucket before that). Throws std::runtime_error with
  // what the process printed if it exits or stays silent. With `wait_listening` false it
  // returns at once (the process is still loading; see stdout_after_exit).
  explicit ServerProcess(const std::vector<std::string>& extra_args,
                         std::chrono::milliseconds startup = std::chrono::seconds(180),
                         const std::string& binary = HG_SERVE_BIN, bool wait_listening = true) {
    std::vector<std::string> args = {binary, "--host", "127.0.0.1", "--port", "0"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) {
      close(fds[0]);
      close(fds[1]);
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {  // child: only async-signal-safe calls until exec
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      if (getppid() != parent) _exit(127);  // the parent died before prctl
      dup2(fds[1], STDOUT_FILENO);        // dup2 clears O_CLOEXEC on the copy
      int null = open("/dev/null", O_RDONLY);
      if (null >= 0) dup2(null, STDIN_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_fd_ = fds[0];
    if (!wait_listening) return;
    try {
      read_port(startup);
    } catch (...) {
      kill_now();
      close(out_fd_);
      throw;
    }
  }

  ~ServerProcess() {
    kill_now();
    if (out_fd_ >= 0) close(out_fd_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& url() const { return url_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  // Everything the process wrote to stdout (not yet consumed by the constructor), once it has
  // exited (wait_exit first).
  std::string stdout_after_exit() {
    std::string out;
    char buf[512];
    ssize_t n;
    while (out_fd_ >= 0 && (n = read(out_fd_, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // Waits up to `timeout` for the process to exit by itself. Returns its exit code (128 +
  // signal when killed by one), or -1 if it is still running (it is then left running).
  int wait_exit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return exit_code_;
    const std::optional<int> status = exit_status_within(pid_, timeout);
    if (!status) return -1;
    pid_ = -1;
    exit_code_ = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
    return exit_code_;
  }

  // SIGTERM, then up to `timeout` to exit by itself. Returns its exit code, or -1 if it had to
  // be killed.
  int terminate(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return exit_code_;
    signal(SIGTERM);
    int code = wait_exit(timeout);
    if (code == -1) kill_now();
    return code;
  }

 private:
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  void read_port(std::chrono::milliseconds timeout) {
    const std::string marker = "listening on http://";
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const size_t at = out.find(marker);
      const size_t eol = at == std::string::npos ? std::string::npos : out.find('\n', at);
      if (eol != std::string::npos) {
        const std::string host_port = out.substr(at + marker.size(), eol - at - marker.size());
        url_ = "http://" + host_port;
        port_ = std::stoi(host_port.substr(host_port.rfind(':') + 1));
        return;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw std::runtime_error("hgraph-serve did not print its port in time; stdout: " + out);
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[512];
      const ssize_t n = read(out_fd_, buf, sizeof(buf));
      if (n <= 0) throw std::runtime_error("hgraph-serve exited before listening; stdout: " + out);
      out.append(buf, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int exit_code_ = -1;
  int out_fd_ = -1;
  std::string url_;
  int port_ = 0;
};

}  // namespace hg::test
