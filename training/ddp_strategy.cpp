#include "training/ddp_strategy.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include "engine/error.h"
#include "graphs/lazy.h"
#include "training/ddp_reducer.h"

namespace hg::training {
namespace {

std::atomic<bool> g_failing{false};

// The process's group: made by the first DDP strategy with world > 1, reused by later ones,
// ended at exit (or shutdown_process_group). Rank 0 of a node also holds the launcher of the
// local ranks it started and a watchdog thread that fails the run when one of them dies.
struct Session {
  ClusterEnv env;
  int devices = 1, num_nodes = 1, rank = 0;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<LocalLauncher> launcher;  // rank 0 of a node only
  std::shared_ptr<ProcessGroup> pg;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread watchdog;

  ~Session() { stop_watchdog(); }
  void stop_watchdog() {
    if (!watchdog.joinable()) return;
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    cv.notify_all();
    watchdog.join();
  }
};

std::mutex g_session_mu;             // guards g_session (the watchdog reads it under the lock)
std::unique_ptr<Session> g_session;  // released at exit by end_at_exit, before static destructors

// Prints "hgraph DDP rank R: <what>" to stderr, kills the local ranks this process started and
// exits with status 1 (once, whichever thread gets here first).
[[noreturn]] void fail(int rank, const std::string& what, const std::shared_ptr<LocalLauncher>& launcher) {
  if (!g_failing.exchange(true)) {
    std::fprintf(stderr, "hgraph DDP rank %d: %s\n", rank, what.c_str());
    std::fflush(stderr);
    if (launcher) launcher->kill_all();
  }
  std::_Exit(1);
}

// Ends the session. `error`: this rank is failing with an exception that is on its way to the
// user — kill the local ranks at once (their collectives would otherwise fail and bury the
// error). Otherwise wait for them to finish their program and fail the run if one failed.
void end_session(bool error) {
  std::unique_ptr<Session> s;
  {
    std::lock_guard lk(g_session_mu);
    s = std::move(g_session);
  }
  if (!s) return;
  s->stop_watchdog();
  if (error && s->launcher) s->launcher->kill_all();  // the watchdog that would report it is stopped
  s->pg.reset();  // closes the group unless a strategy still holds it
  if (!s->launcher || error) return;
  const std::vector<std::string> failures = s->launcher->wait_all(static_cast<int>(
      std::min<int64_t>(s->timeout.count(), std::numeric_limits<int>::max())));
  if (failures.empty()) return;
  std::string all;
  for (const auto& f : failures) all += (all.empty() ? "" : "; ") + f;
  fail(s->rank, all, s->launcher);
}

void end_at_exit() { end_session(false); }

// A local rank the launcher started (its parent runs this same program) learns of the parent's
// death by SIGUSR2 instead of the launcher's silent SIGKILL, and says so before exiting.
char g_parent_gone[160];
size_t g_parent_gone_len = 0;

extern "C" void on_parent_gone(int) {
  (void)!::write(2, g_parent_gone, g_parent_gone_len);
  ::_exit(1);
}

void report_parent_death(int rank) {
  const pid_t parent = ::getppid();
  std::error_code e1, e2;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", e1);
  const auto theirs = std::filesystem::read_symlink("/proc/" + std::to_string(parent) + "/exe", e2);
  if (e1 || e2 || self != theirs) return;  // started by something else: leave it alone
  const int n = std::snprintf(g_parent_gone, sizeof(g_parent_gone),
                              "hgraph DDP rank %d: the process that launched this rank (pid %d) is gone; exiting\n",
                              rank, static_cast<int>(parent));
  g_parent_gone_len = n > 0 ? std::min(static_cast<size_t>(n), sizeof(g_parent_gone) - 1) : 0;
  ::signal(SIGUSR2, on_parent_gone);
  ::prctl(PR_SET_PDEATHSIG, SIGUSR2);
  if (::getppid() != parent) on_parent_gone(0);  // it died before the signal was armed
}

// The tensors rank 0 broadcasts at setup, with a signature (names, dtypes, shapes) every rank
// checks.
std::vector<std::pair<std::string, Tensor*>> state_of(models::Module& m) {
  std::vector<std::pair<std::string, Tensor*>> out = m.named_parameters();
  for (auto& b : m.named_buffers()) out.push_back(b);
  return out;
}

std::string signature(const std::vector<std::pair<std::string, Tensor*>>& ts) {
  std::string s;
  for (const auto& [name, t] : ts) s += name + ":" + dtype_name(t->dtype()) + shape_str(t->shape()) + ";";
  return s;
}

std::shared_ptr<LocalLauncher> session_launcher() {
  std::lock_guard lk(g_session_mu);
  return g_session ? g_session->launcher : nullptr;
}

// Rank 0 of a node exported LOCAL_RANK=0 and MASTER_PORT when it launched its local ranks; a
// program (a test harness) that restored its environment since then starts a new job: the old
// group ends first (its local ranks finish, a failed one fails the run).
bool launched_job_is_over() {
  std::lock_guard lk(g_session_mu);
  if (!g_session || !g_session->launcher) return false;
  const char* local = std::getenv("LOCAL_RANK");
  const char* port = std::getenv("MASTER_PORT");
  return !local || !port || std::to_string(g_session->env.master_port) != port;
}

}  // namespace

DDPStrategy::DDPStrategy(DDPOptions opt, std::string name) : opt_(opt), name_(std::move(name)) {
  if (!(opt_.bucket_cap_mb > 0) || !(opt_.first_bucket_mb > 0))
    throw InvalidArgument("DDPOptions: bucket_cap_mb and first_bucket_mb must be positive");
}

DDPStrategy::~DDPStrategy() {
  try {
    teardown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hgraph DDP rank %d: %s\n", rank_, e.what());
  }
}

void DDPStrategy::setup_environment(const StrategyContext& ctx) {
  if (pg_ || world_ > 1) throw InvalidArgument("DDP: setup_environment called twice");
  if (ctx.devices < 1 || ctx.num_nodes < 1)
    throw InvalidArgument("DDP: devices (" + std::to_string(ctx.devices) + ") and num_nodes (" +
                          std::to_string(ctx.num_nodes) + ") must be at least 1");
  device_ = ctx.device;
  const int world = ctx.devices * ctx.num_nodes;
  if (launched_job_is_over()) end_session(false);
  {
    std::lock_guard lk(g_session_mu);
    if (g_session) {  // an earlier DDP strategy of this process made the group: reuse it
      const Session& s = *g_session;
      if (s.devices != ctx.devices || s.num_nodes != ctx.num_nodes)
        throw InvalidArgument("DDP: this process already belongs to a process group of devices " +
                              std::to_string(s.devices) + " x num_nodes " + std::to_string(s.num_nodes) +
                              "; devices " + std::to_string(ctx.devices) + " x num_nodes " +
                              std::to_string(ctx.num_nodes) + " needs DDPStrategy::shutdown_process_group() first");
      env_ = s.env;
      rank_ = s.rank;
      world_ = world;
      pg_ = s.pg;
      return;
    }
  }
  env_ = ClusterEnv::from_environment();
  if (const char* ws = std::getenv("WORLD_SIZE"); ws && env_.creates_processes_externally &&
                                                  std::strtol(ws, nullptr, 10) != world)
    throw InvalidArgument("DDP: WORLD_SIZE=" + std::string(ws) + " but devices * num_nodes = " +
                          std::to_string(world));
  if (env_.local_rank >= ctx.devices)
    throw InvalidArgument("DDP: LOCAL_RANK=" + std::to_string(env_.local_rank) + " is not below devices (" +
                          std::to_string(ctx.devices) + ")");
  if (env_.node_rank >= ctx.num_nodes)
    throw InvalidArgument("DDP: NODE_RANK=" + std::to_string(env_.node_rank) + " is not below num_nodes (" +
                          std::to_string(ctx.num_nodes) + ")");
  if (world == 1) return;  // nothing to talk to: collectives are identities
  auto s = std::make_unique<Session>();
  if (!env_.creates_processes_externally && ctx.devices > 1)
    s->launcher = launch_local_ranks(env_, ctx.devices, ctx.num_nodes);
  const int rank = env_.global_rank(ctx.devices);
  if (env_.creates_processes_externally && env_.local_rank > 0) report_parent_death(rank);
  if (env_.master_port == 0)
    throw InvalidArgument("DDP: MASTER_PORT is not set (node " + std::to_string(env_.node_rank) +
                          " of " + std::to_string(ctx.num_nodes) + " needs rank 0's address and port)");
  s->env = env_;
  s->devices = ctx.devices;
  s->num_nodes = ctx.num_nodes;
  s->rank = rank;
  s->timeout = ctx.timeout;
  if (s->launcher) {  // rank 0 of a node: a local rank that dies ends this process too
    Session* raw = s.get();  // alive until end_session joined this thread
    s->watchdog = std::thread([raw] {
      for (;;) {
        {
          std::unique_lock lk(raw->mu);
          if (raw->cv.wait_for(lk, std::chrono::milliseconds(100), [raw] { return raw->stop; })) return;
        }
        const std::string f = raw->launcher->failure();
        if (!f.empty()) fail(raw->rank, f + "; stopping this run", raw->launcher);
      }
    });
  }
  try {
    ProcessGroupOptions o;
    o.master_addr = env_.master_addr;
    o.master_port = env_.master_port;
    o.rank = rank;
    o.world_size = world;
    o.timeout = ctx.timeout;
    s->pg = std::make_shared<ProcessGroup>(o);
  } catch (...) {  // the ranks this one started would wait for the group until the timeout
    s->stop_watchdog();
    if (s->launcher) s->launcher->kill_all();
    try {
      throw;
    } catch (const DistError& e) {
      throw DistError("hgraph DDP rank " + std::to_string(rank) + ": joining the process group of " +
                      std::to_string(world) + " at " + env_.master_addr + ":" + std::to_string(env_.master_port) +
                      " failed: " + e.what());
    }
  }
  rank_ = rank;
  world_ = world;
  pg_ = s->pg;
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(end_at_exit); });
  std::lock_guard lk(g_session_mu);
  g_session = std::move(s);
}

void DDPStrategy::shutdown_process_group() { end_session(false); }

template <class F>
auto DDPStrategy::collective(const char* what, F&& f) {
  try {
    return f();
  } catch (const DistError& e) {
    fail(rank_, std::string(what) + " failed: " + e.what(), session_launcher());
  }
}

void DDPStrategy::setup_module(models::Module& m) {
  module_ = &m;
  reducer_.reset();
  buffers_.clear();
  if (world_ == 1) return;  // backward is plain loss.backward()
  sync_from_rank0();
  if (opt_.broadcast_buffers) {
    buffers_ = m.named_buffers();
    size_t bytes = 0;
    for (const auto& [name, t] : buffers_) bytes += t->meta().bytes();
    buffer_bytes_.assign((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
  }
  make_reducer(false);
}

void DDPStrategy::make_reducer(bool in_graph) {
  reducer_.reset();  // its queued work runs first
  std::shared_ptr<ProcessGroup> pg = pg_;
  reducer_ = std::make_unique<DDPReducer>(
      module_->named_parameters(),
      [pg](float* d, size_t n, uint32_t tag) { pg->allreduce(d, n, ReduceOp::Sum, tag); }, world_,
      DDPReducerOptions{.bucket_cap_mb = opt_.bucket_cap_mb,
                        .first_bucket_mb = opt_.first_bucket_mb,
                        .find_unused_parameters = opt_.find_unused_parameters,
                        .in_graph = in_graph,
                        .allreduce_inline = pg->shares_memory()});
  in_graph_ = in_graph;
}

bool DDPStrategy::replay_steps(bool on) {
  if (!reducer_) return !on || device_.is_hpu();  // world 1: plain backward
  if (on && (!graphs::lazy_mode_enabled() || opt_.find_unused_parameters || !buffers_.empty())) return false;
  if (on != in_graph_) make_reducer(on);
  return true;
}

void DDPStrategy::before_replayed_step() {
  if (!reducer_) return;
  collective("a gradient bucket all-reduce", [&] {
    reducer_->check_error();
    return 0;
  });
}

// One broadcast of every tensor's bytes, behind the signature: a model that differs between
// ranks is an error naming both signatures' first difference instead of silently wrong data.
void DDPStrategy::sync_from_rank0() {
  auto ts = state_of(*module_);
  if (ts.empty()) return;
  const std::string sig = signature(ts);
  std::string blob;
  if (rank_ == 0) {
    blob = sig;
    blob.push_back('\0');
    for (const auto& [name, t] : ts) {
      Tensor c = t->contiguous();
      blob.append(static_cast<const char*>(c.raw_data()), c.meta().bytes());
    }
  }
  collective("broadcasting rank 0's parameters and buffers", [&] {
    pg_->broadcast(blob, 0);
    return 0;
  });
  if (rank_ == 0) return;
  const size_t end = blob.find('\0');
  if (end == std::string::npos || blob.compare(0, end, sig) != 0) {
    const std::string theirs = blob.substr(0, end);
    size_t k = 0;
    while (k < sig.size() && k < theirs.size() && sig[k] == theirs[k]) ++k;
    const size_t from = sig.rfind(';', k) == std::string::npos ? 0 : sig.rfind(';', k) + 1;
    throw InvalidArgument("DDP rank " + std::to_string(rank_) + ": the module differs from rank 0's (here: '" +
                          sig.substr(from, sig.find(';', from) - from) + "', rank 0: '" +
                          theirs.substr(from, theirs.find(';', from) - from) + "')");
  }
  size_t off = end + 1;
  for (const auto& [name, t] : ts) {
    Tensor src = Tensor::empty(t->shape(), t->dtype(), Device::cpu());
    std::memcpy(src.raw_data(), blob.data() + off, t->meta().bytes());
    off += t->meta().bytes();
    t->copy_from(src);
  }
}

// At the start of a step the buffers are concrete (the previous step ran): reading them here
// does not split the step's lazy graph. Their bytes go as one float message (bit patterns are
// copied, not computed on); the layout was checked by the signature at setup.
void DDPStrategy::before_forward(models::Module& m) {
  if (buffers_.empty()) return;
  if (&m != module_) throw InvalidArgument("DDP: before_forward on another module than setup_module's");
  char* bytes = reinterpret_cast<char*>(buffer_bytes_.data());
  size_t total = 0;
  for (const auto& [name, t] : buffers_) total += t->meta().bytes();
  if ((total + sizeof(float) - 1) / sizeof(float) != buffer_bytes_.size())
    throw InvalidArgument("DDP: the module's buffers changed size after setup_module (" + buffers_[0].first + ", ...)");
  if (rank_ == 0) {
    size_t off = 0;
    for (const auto& [name, t] : buffers_) {
      Tensor c = t->contiguous();
      std::memcpy(bytes + off, c.raw_data(), c.meta().bytes());
      off += c.meta().bytes();
    }
  }
  collective("broadcasting rank 0's buffers", [&] {
    pg_->broadcast(buffer_bytes_.data(), buffer_bytes_.size(), 0);
    return 0;
  });
  if (rank_ == 0) return;
  size_t off = 0;
  for (const auto& [name, t] : buffers_) {
    Tensor src = Tensor::empty(t->shape(), t->dtype(), Device::cpu());
    std::memcpy(src.raw_data(), bytes + off, t->meta().bytes());
    off += t->meta().bytes();
    t->copy_from(src);
  }
}

void DDPStrategy::backward(const Tensor& loss, bool sync_gradients) {
  if (!module_) throw InvalidArgument("DDP: backward before setup_module");
  if (!reducer_) {  // world 1: nothing to reduce
    loss.backward();
    return;
  }
  reducer_->prepare_for_backward(loss, sync_gradients);
  collective("a gradient bucket all-reduce", [&] {
    loss.backward();
    return 0;
  });
}

void DDPStrategy::finish_gradient_sync() {
  if (!reducer_) return;
  collective("a gradient bucket all-reduce", [&] {
    reducer_->finish();
    return 0;
  });
}

double DDPStrategy::reduce(double value, ReduceOp op) {
  if (world_ == 1) return value;
  return collective("reducing a metric", [&] { return pg_->allreduce_scalar(value, op); });
}

void DDPStrategy::barrier(const std::string& name) {
  if (world_ == 1) return;
  collective(("barrier '" + name + "'").c_str(), [&] {
    pg_->barrier(name);
    return 0;
  });
}

void DDPStrategy::broadcast(std::string& bytes) {
  if (world_ == 1) return;
  collective("a broadcast from rank 0", [&] {
    pg_->broadcast(bytes, 0);
    return 0;
  });
}

DataLoader DDPStrategy::distribute(const DataLoader& loader, bool shuffle, uint64_t seed) const {
  return loader.with_sampler(std::make_shared<DistributedSampler>(
      loader.dataset()->size(), world_, rank_,
      DistributedSamplerOptions{.shuffle = shuffle, .seed = seed, .drop_last = false}));
}

void DDPStrategy::teardown() {
  reducer_.reset();
  pg_.reset();
  module_ = nullptr;
  buffers_.clear();
  // An exception is unwinding through here (an error on this rank): the local ranks this process
  // started would fail in their next collective and their exit would be reported instead of
  // the error, so they are killed now and the group ends. A rank without children keeps the
  // group until exit: its error is printed before the others see it go.
  if (world_ > 1 && std::uncaught_exceptions() > 0 && session_launcher()) end_session(true);
}

}  // namespace hg::training
