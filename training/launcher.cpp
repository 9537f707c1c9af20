// launch_local_ranks and the LocalLauncher it returns (training/cluster_env.h).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "engine/error.h"
#include "training/cluster_env.h"

extern char** environ;

namespace hg::training {
namespace {

// A port nobody listens on right now (bind port 0, as Lightning's find_free_network_port).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw InvalidArgument(std::string("cannot pick a free MASTER_PORT: socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int e = errno;
  ::close(fd);
  if (rc != 0) throw InvalidArgument(std::string("cannot pick a free MASTER_PORT: ") + std::strerror(e));
  return ntohs(a.sin_port);
}

std::vector<std::string> self_argv() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.empty()) throw InvalidArgument("cannot re-execute this program: /proc/self/cmdline is empty or unreadable");
  std::vector<std::string> out;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\0', at);
    if (end == std::string::npos) end = all.size();
    out.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

void set_env(const char* name, const std::string& value) {
  if (::setenv(name, value.c_str(), 1) != 0) throw InvalidArgument(std::string("cannot set ") + name);
}

std::string describe(int local_rank, pid_t pid, int status) {
  std::string who = "local rank " + std::to_string(local_rank) + " (pid " + std::to_string(pid) + ")";
  if (WIFSIGNALED(status)) return who + " was killed by signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status)) return who + " exited with code " + std::to_string(WEXITSTATUS(status));
  return who + " ended with status " + std::to_string(status);
}

class ForkLauncher : public LocalLauncher {
 public:
  struct Child {
    int local_rank;
    pid_t pid;
    bool done = false;
    int status = 0;
    std::string note;  // set when we killed it
  };
  explicit ForkLauncher(std::vector<Child> children) : children_(std::move(children)) {}
  ~ForkLauncher() override { wait_all(10000); }

  std::string failure() override {
    std::lock_guard<std::mutex> lock(mu_);
    reap(false);
    for (auto& c : children_)
      if (c.done && c.status != 0) return c.note.empty() ? describe(c.local_rank, c.pid, c.status) : c.note;
    return {};
  }

  std::vector<std::string> wait_all(int timeout_ms) override {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {  // the lock is not held while sleeping: failure() from a watchdog thread stays quick
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (reap(false) || std::chrono::steady_clock::now() >= deadline) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : children_) {
      if (c.done) continue;
      ::kill(c.pid, SIGKILL);
      c.note = "local rank " + std::to_string(c.local_rank) + " (pid " + std::to_string(c.pid) +
               ") did not exit within " + std::to_string(timeout_ms) + " ms and was killed";
    }
    reap(true);
    std::vector<std::string> out;
    for (auto& c : children_)
      if (c.status != 0) out.push_back(c.note.empty() ? describe(c.local_rank, c.pid, c.status) : c.note);
    return out;
  }

  void kill_all() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : children_) {
      if (c.done) continue;
      ::kill(c.pid, SIGKILL);
      c.note = "local rank " + std::to_string(c.local_rank) + " (pid " + std::to_string(c.pid) + ") was killed by the launcher";
    }
    reap(true);
  }

 private:
  // Collects exited children; true when all have exited. Called with mu_ held.
  bool reap(bool block) {
    bool all = true;
    for (auto& c : children_) {
      if (c.done) continue;
      int st = 0;
      pid_t r;
      do r = ::waitpid(c.pid, &st, block ? 0 : WNOHANG);
      while (r < 0 && errno == EINTR);
      if (r == c.pid || (r < 0 && errno == ECHILD)) {
        c.done = true;
        c.status = r == c.pid ? st : 0;
      } else {
        all = false;
      }
    }
    return all;
  }

  std::mutex mu_;
  std::vector<Child> children_;
};

}  // namespace

std::unique_ptr<LocalLauncher> launch_local_ranks(ClusterEnv& env, int devices, int num_nodes) {
  if (env.creates_processes_externally || std::getenv("LOCAL_RANK"))
    throw InvalidArgument("launch_local_ranks: LOCAL_RANK is already set (this process is local rank " +
                          std::to_string(env.local_rank) + " of a launched job): refusing to launch again");
  if (devices < 1) throw InvalidArgument("launch_local_ranks: devices " + std::to_string(devices) + " < 1");
  if (num_nodes < 1) throw InvalidArgument("launch_local_ranks: num_nodes " + std::to_string(num_nodes) + " < 1");
  if (env.node_rank >= num_nodes)
    throw InvalidArgument("NODE_RANK " + std::to_string(env.node_rank) + " is not below num_nodes " + std::to_string(num_nodes));
  if (env.master_port == 0) {
    if (num_nodes > 1)
      throw InvalidArgument("MASTER_PORT is not set: with num_nodes " + std::to_string(num_nodes) +
                            " every node needs the same MASTER_PORT (a free port on node 0, MASTER_ADDR)");
    env.master_port = free_port();
  }
  set_env("MASTER_ADDR", env.master_addr);
  set_env("MASTER_PORT", std::to_string(env.master_port));
  set_env("NODE_RANK", std::to_string(env.node_rank));
  set_env("WORLD_SIZE", std::to_string(devices * num_nodes));
  std::vector<ForkLauncher::Child> children;
  if (devices > 1) {
    std::vector<std::string> args = self_argv();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> base;  // the environment without LOCAL_RANK
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "LOCAL_RANK=", 11) != 0) base.push_back(*e);
    pid_t parent = ::getpid();
    for (int i = 1; i < devices; ++i) {
      std::vector<std::string> vars = base;
      vars.push_back("LOCAL_RANK=" + std::to_string(i));
      std::vector<char*> envp;
      for (auto& v : vars) envp.push_back(v.data());
      envp.push_back(nullptr);
      pid_t pid = ::fork();
      if (pid < 0) {
        int e = errno;
        ForkLauncher reap(std::move(children));
        reap.kill_all();
        throw InvalidArgument("cannot start local rank " + std::to_string(i) + ": fork: " + std::strerror(e));
      }
      if (pid == 0) {  // only async-signal-safe calls until exec
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
        ::execve("/proc/self/exe", argv.data(), envp.data());
        const char msg[] = "hgraph launcher: execve(/proc/self/exe) failed\n";
        (void)!::write(2, msg, sizeof(msg) - 1);
        ::_exit(127);
      }
      children.push_back({i, pid, false, 0, {}});
    }
  }
  set_env("LOCAL_RANK", "0");
  env.local_rank = 0;
  return std::make_unique<ForkLauncher>(std::move(children));
}

}  // namespace hg::training
