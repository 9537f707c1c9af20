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
#include <filesystem>
#include <mutex>
#include <thread>

#include "engine/error.h"
#include "training/ddp_reducer.h"

namespace hg::training {

// Rank 0 of a node watches the local ranks it started: one that dies ends this process too.
struct DDPStrategy::Watchdog {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::mutex launcher_mu;  // the launcher is polled here and may be killed from another thread
  std::thread thread;
};

namespace {

std::atomic<bool> g_failing{false};

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

// The tensors rank 0 broadcasts, with a signature (names, dtypes, shapes) every rank checks.
std::vector<std::pair<std::string, Tensor*>> state_of(models::Module& m, bool buffers_only) {
  std::vector<std::pair<std::string, Tensor*>> out;
  if (!buffers_only) out = m.named_parameters();
  for (auto& b : m.named_buffers()) out.push_back(b);
  return out;
}

std::string signature(const std::vector<std::pair<std::string, Tensor*>>& ts) {
  std::string s;
  for (const auto& [name, t] : ts) s += name + ":" + dtype_name(t->dtype()) + shape_str(t->shape()) + ";";
  return s;
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

void DDPStrategy::fail(const std::string& what) {
  if (!g_failing.exchange(true)) {
    std::fprintf(stderr, "hgraph DDP rank %d: %s\n", rank_, what.c_str());
    std::fflush(stderr);
    if (launcher_) {
      std::unique_lock<std::mutex> lk;
      if (watchdog_) lk = std::unique_lock(watchdog_->launcher_mu);
      launcher_->kill_all();
    }
  }
  std::_Exit(1);
}

void DDPStrategy::setup_environment(const StrategyContext& ctx) {
  if (pg_ || world_ > 1 || launcher_) throw InvalidArgument("DDP: setup_environment called twice");
  if (ctx.devices < 1 || ctx.num_nodes < 1)
    throw InvalidArgument("DDP: devices (" + std::to_string(ctx.devices) + ") and num_nodes (" +
                          std::to_string(ctx.num_nodes) + ") must be at least 1");
  device_ = ctx.device;
  env_ = ClusterEnv::from_environment();
  world_ = ctx.devices * ctx.num_nodes;
  if (const char* ws = std::getenv("WORLD_SIZE"); ws && env_.creates_processes_externally &&
                                                  std::strtol(ws, nullptr, 10) != world_)
    throw InvalidArgument("DDP: WORLD_SIZE=" + std::string(ws) + " but devices * num_nodes = " +
                          std::to_string(world_));
  if (env_.local_rank >= ctx.devices)
    throw InvalidArgument("DDP: LOCAL_RANK=" + std::to_string(env_.local_rank) + " is not below devices (" +
                          std::to_string(ctx.devices) + ")");
  if (env_.node_rank >= ctx.num_nodes)
    throw InvalidArgument("DDP: NODE_RANK=" + std::to_string(env_.node_rank) + " is not below num_nodes (" +
                          std::to_string(ctx.num_nodes) + ")");
  if (world_ == 1) return;  // nothing to talk to: collectives are identities
  if (!env_.creates_processes_externally && ctx.devices > 1)
    launcher_ = launch_local_ranks(env_, ctx.devices, ctx.num_nodes);
  rank_ = env_.global_rank(ctx.devices);
  if (env_.creates_processes_externally && env_.local_rank > 0) report_parent_death(rank_);
  if (env_.master_port == 0)
    throw InvalidArgument("DDP: MASTER_PORT is not set (node " + std::to_string(env_.node_rank) +
                          " of " + std::to_string(ctx.num_nodes) + " needs rank 0's address and port)");
  if (launcher_) {
    watchdog_ = std::make_unique<Watchdog>();
    watchdog_->thread = std::thread([this] {
      for (;;) {
        {
          std::unique_lock lk(watchdog_->mu);
          if (watchdog_->cv.wait_for(lk, std::chrono::milliseconds(100), [this] { return watchdog_->stop; })) return;
        }
        std::string f;
        {
          std::lock_guard lk(watchdog_->launcher_mu);
          f = launcher_->failure();
        }
        if (!f.empty()) fail(f + "; stopping this run");
      }
    });
  }
  try {
    ProcessGroupOptions o;
    o.master_addr = env_.master_addr;
    o.master_port = env_.master_port;
    o.rank = rank_;
    o.world_size = world_;
    o.timeout = ctx.timeout;
    pg_ = std::make_shared<ProcessGroup>(o);
  } catch (...) {  // the ranks this one started would wait for the group until the timeout
    stop_watchdog();
    if (launcher_) launcher_->kill_all();
    launcher_.reset();
    try {
      throw;
    } catch (const DistError& e) {
      throw DistError("hgraph DDP rank " + std::to_string(rank_) + ": joining the process group of " +
                      std::to_string(world_) + " at " + env_.master_addr + ":" + std::to_string(env_.master_port) +
                      " failed: " + e.what());
    }
  }
}

void DDPStrategy::stop_watchdog() {
  if (!watchdog_) return;
  {
    std::lock_guard lk(watchdog_->mu);
    watchdog_->stop = true;
  }
  watchdog_->cv.notify_all();
  watchdog_->thread.join();
  watchdog_.reset();
}

template <class F>
auto DDPStrategy::collective(const char* what, F&& f) {
  try {
    return f();
  } catch (const DistError& e) {
    fail(std::string(what) + " failed: " + e.what());
  }
}

void DDPStrategy::setup_module(models::Module& m) {
  module_ = &m;
  if (world_ > 1) sync_from_rank0(false);
  std::shared_ptr<ProcessGroup> pg = pg_;
  DDPReducer::AllReduce allreduce = [pg](float* d, size_t n, uint32_t tag) {
    pg->allreduce(d, n, ReduceOp::Sum, tag);
  };
  reducer_ = std::make_unique<DDPReducer>(
      m.named_parameters(), world_ > 1 ? allreduce : DDPReducer::AllReduce([](float*, size_t, uint32_t) {}), world_,
      DDPReducerOptions{.bucket_cap_mb = opt_.bucket_cap_mb,
                        .first_bucket_mb = opt_.first_bucket_mb,
                        .find_unused_parameters = opt_.find_unused_parameters});
}

// One broadcast of every tensor's bytes, behind the signature: a model that differs between
// ranks is an error naming both signatures' first difference instead of silently wrong data.
void DDPStrategy::sync_from_rank0(bool buffers_only) {
  auto ts = state_of(*module_, buffers_only);
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

void DDPStrategy::backward(const Tensor& loss, bool sync_gradients) {
  if (!reducer_) throw InvalidArgument("DDP: backward before setup_module");
  if (opt_.broadcast_buffers && world_ > 1 && module_) sync_from_rank0(true);
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
  stop_watchdog();
  pg_.reset();
  if (!launcher_) return;
  auto launcher = std::move(launcher_);
  // The other local ranks run the same program to its end; one that failed fails this one.
  const std::vector<std::string> failures = launcher->wait_all(60'000);
  if (failures.empty()) return;
  std::string all;
  for (const auto& f : failures) all += (all.empty() ? "" : "; ") + f;
  launcher_ = std::move(launcher);
  fail(all);
}

}  // namespace hg::training
