#include "engine/device.h"
#include "engine/stream.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "engine/dtype.h"
#include "engine/error.h"

namespace hg {

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "hpu") return hpu(0);
  if (s.substr(0, 4) == "hpu:" && s.size() > 4) {
    int idx = 0;
    for (char c : s.substr(4)) {
      if (c < '0' || c > '9' || idx > 100000) throw InvalidArgument("bad device string '" + std::string(s) + "'");
      idx = idx * 10 + (c - '0');
    }
    return hpu(idx);
  }
  throw InvalidArgument("bad device string '" + std::string(s) + "': expected cpu, hpu or hpu:N");
}

std::string Device::str() const { return kind == DeviceKind::CPU ? "cpu" : "hpu:" + std::to_string(index); }

// ---- MemoryPool --------------------------------------------------------------------------

namespace {
constexpr size_t kSmallBlock = size_t{64} << 10;  // below: free lists per 64-byte class
}

size_t MemoryPool::block_size(size_t bytes) {
  if (bytes < kSmallBlock) return (bytes + 63) / 64 * 64 + 64;
  size_t r = size_t{64} << 10;  // large blocks: the next size of the form 2^k or 1.5 * 2^k
  while (r < bytes) r = (r & (r - 1)) ? (r / 3) * 4 : r + r / 2;
  return r;
}

MemoryPool::~MemoryPool() { empty_cache(); }

void* MemoryPool::allocate(size_t bytes) {
  // Checked first: block_size() would not terminate for sizes near SIZE_MAX, and in_use + b
  // would overflow for the unbounded cpu pool.
  if (bytes > static_cast<size_t>(std::min<int64_t>(capacity_, kMaxTensorBytes)))
    throw OutOfMemoryError(name_ + ": allocation of " + std::to_string(bytes) + " bytes exceeds the limit of " +
                           std::to_string(std::min<int64_t>(capacity_, kMaxTensorBytes)) + " bytes");
  const int64_t b = static_cast<int64_t>(bytes);
  const size_t block = block_size(bytes);
  void* p = nullptr;
  {
    std::lock_guard lk(mu_);
    if (b > capacity_ - s_.in_use)
      throw OutOfMemoryError(name_ + ": out of memory allocating " + std::to_string(bytes) + " bytes (in use " +
                             std::to_string(s_.in_use) + " of limit " + std::to_string(capacity_) + ")");
    s_.in_use += b;
    s_.max_in_use = std::max(s_.max_in_use, s_.in_use);
    s_.num_allocs++;
    s_.active_allocs++;
    s_.max_alloc_size = std::max(s_.max_alloc_size, b);
    if (block < kSmallBlock) {
      if (!small_.empty() && small_[block / 64]) {
        p = small_[block / 64];
        small_[block / 64] = *static_cast<void**>(p);
        cached_bytes_ -= block;
      }
    } else if (auto it = cache_.find(block); it != cache_.end()) {
      p = it->second;
      cached_bytes_ -= block;
      cache_.erase(it);
    }
  }
  if (!p) p = std::aligned_alloc(64, block);
  if (!p) {
    std::lock_guard lk(mu_);
    s_.in_use -= b;
    s_.num_allocs--;
    s_.active_allocs--;
    throw OutOfMemoryError(name_ + ": host allocation of " + std::to_string(bytes) + " bytes failed");
  }
  return p;
}

void MemoryPool::release(void* p, size_t bytes) {
  const size_t block = block_size(bytes);
  {
    std::lock_guard lk(mu_);
    s_.in_use -= static_cast<int64_t>(bytes);
    s_.num_frees++;
    s_.active_allocs--;
    if (cached_bytes_ + block <= cache_limit_) {
      if (block < kSmallBlock) {
        if (small_.empty()) small_.assign(kSmallBlock / 64 + 2, nullptr);
        *static_cast<void**>(p) = small_[block / 64];
        small_[block / 64] = p;
      } else {
        cache_.emplace(block, p);
      }
      cached_bytes_ += block;
      return;
    }
  }
  std::free(p);
}

void MemoryPool::empty_cache() {
  std::lock_guard lk(mu_);
  for (auto& [size, p] : cache_) std::free(p);
  cache_.clear();
  for (void*& head : small_)
    while (head) {
      void* next = *static_cast<void**>(head);
      std::free(head);
      head = next;
    }
  cached_bytes_ = 0;
}

MemoryStats MemoryPool::stats() const {
  std::lock_guard lk(mu_);
  MemoryStats r = s_;
  r.limit = capacity_;
  return r;
}

void MemoryPool::reset_peak() {
  std::lock_guard lk(mu_);
  s_.max_in_use = s_.in_use;
  s_.max_alloc_size = 0;
}

// ---- ExecQueue ---------------------------------------------------------------------------

namespace {
void abandon_queued_work();  // every device queue's abandon_pending (below, with the registry)
}  // namespace

ExecQueue::ExecQueue(std::string name, int threads)
    : name_(std::move(name)), threads_(threads), worker_([this, threads] { run(threads); }) {}

ExecQueue::~ExecQueue() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

uint64_t ExecQueue::enqueue(std::function<void()> task) {
  // At exit, queued work is dropped and running work finishes before any static is destroyed
  // (graph caches, oneDNN's kernels and primitive cache, some of them first made by a task on
  // the worker after this point). The main thread's thread-locals are destroyed first of all
  // at exit, so work queued from it is abandoned by one; work queued only from other threads
  // by an atexit hook, which runs after the statics made later than its registration.
  static const bool hooked = (std::atexit(abandon_queued_work), true);
  (void)hooked;
  if (::gettid() == ::getpid()) {
    struct AbandonAtExit {
      ~AbandonAtExit() { abandon_queued_work(); }
    };
    thread_local AbandonAtExit guard;
    (void)guard;
  }
  uint64_t event = 0;
  {
    std::lock_guard lk(mu_);
    event = ++enqueued_;
    if (abandoned_) {  // exiting: what destructors still queue is dropped too
      ++completed_;
      return event;
    }
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return event;
}

void ExecQueue::abandon_pending() {
  std::unique_lock lk(mu_);
  abandoned_ = true;
  completed_ += tasks_.size();
  tasks_.clear();
  done_cv_.notify_all();
  if (!on_worker_thread()) done_cv_.wait(lk, [&] { return !busy_; });
}

uint64_t ExecQueue::record() {
  std::lock_guard lk(mu_);
  return enqueued_;
}

bool ExecQueue::done(uint64_t event) const {
  std::lock_guard lk(mu_);
  return completed_ >= event;
}

namespace {

// Before a queue's worker or a waiting host thread goes to sleep it polls for this long: a
// training loop hands a step to the worker and reads the previous step's loss every step, and
// each sleeping side's wake-up costs tens of microseconds on an idle core (more than a small
// model's whole step). yield() gives the core away when other threads want it.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(50);

template <class Ready>
void spin_until(std::unique_lock<std::mutex>& lk, Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  while (!ready() && std::chrono::steady_clock::now() < until) {
    lk.unlock();
    std::this_thread::yield();
    lk.lock();
  }
}

}  // namespace

void ExecQueue::wait(uint64_t event) {
  std::unique_lock lk(mu_);
  spin_until(lk, [&] { return completed_ >= event; });
  done_cv_.wait(lk, [&] { return completed_ >= event; });
}

void ExecQueue::synchronize() {
  if (on_worker_thread()) return;  // a task waiting for its own queue would deadlock
  std::unique_lock lk(mu_);
  const uint64_t target = enqueued_;
  spin_until(lk, [&] { return completed_ >= target; });
  done_cv_.wait(lk, [&] { return completed_ >= target; });
  lk.unlock();
  rethrow_error();
}

void ExecQueue::rethrow_error() {
  std::string e;
  {
    std::lock_guard lk(mu_);
    if (error_.empty()) return;
    e = std::move(error_);
    error_.clear();
  }
  throw InternalError(name_ + ": a queued task failed: " + e);
}

namespace {
thread_local int t_saved_threads = 0;  // the caller's OpenMP team size during an inline task
}

bool ExecQueue::try_begin_inline() {
  if (on_worker_thread()) return true;  // already in queue order
  {
    std::lock_guard lk(mu_);
    if (busy_ || !tasks_.empty()) return false;
    busy_ = true;
    ++enqueued_;
  }
  if (threads_ > 0) {
    t_saved_threads = omp_get_max_threads();
    omp_set_num_threads(threads_);
  }
  return true;
}

void ExecQueue::end_inline() {
  if (on_worker_thread()) return;
  if (threads_ > 0) omp_set_num_threads(t_saved_threads);
  {
    std::lock_guard lk(mu_);
    busy_ = false;
    ++completed_;
  }
  done_cv_.notify_all();
  cv_.notify_one();  // the worker may have work queued behind the inline task
}

void ExecQueue::run(int threads) {
  if (threads > 0) omp_set_num_threads(threads);  // this worker's OpenMP team size
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lk(mu_);
      spin_until(lk, [&] { return stop_ || (!tasks_.empty() && !busy_); });
      cv_.wait(lk, [&] { return stop_ || (!tasks_.empty() && !busy_); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
    }
    std::string err;
    try {
      task();
    } catch (const std::exception& e) {
      err = e.what();
    }
    {
      std::lock_guard lk(mu_);
      busy_ = false;
      ++completed_;
      if (!err.empty() && error_.empty()) error_ = err;
    }
    done_cv_.notify_all();
  }
}

// ---- Host backends -----------------------------------------------------------------------

namespace {

int64_t env_int(const char* name, int64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end || x <= 0) {
    std::cerr << "hgraph: ignoring " << name << "='" << v << "' (expected a positive integer)\n";
    return dflt;
  }
  return x;
}

class CpuBackend final : public DeviceBackend {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t bytes) override { return pool_.allocate(bytes); }
  void release(void* p, size_t bytes) override { pool_.release(p, bytes); }
  MemoryStats stats() const override { return pool_.stats(); }
  void enqueue(std::function<void()> task) override { task(); }
  void run_sync(const std::function<void()>& task) override { task(); }
  void synchronize() override {}
  ExecQueue* queue() override { return nullptr; }
  MemoryPool pool_{"cpu", INT64_MAX};
};

thread_local int t_load_stream_depth = 0;

class HostHpuBackend final : public DeviceBackend {
 public:
  HostHpuBackend(int index, int64_t capacity, int threads)
      : index_(index),
        pool_("hpu:" + std::to_string(index), capacity),
        queue_("hpu:" + std::to_string(index), threads) {}
  Device device() const override { return Device::hpu(index_); }
  void* allocate(size_t bytes) override { return pool_.allocate(bytes); }
  void release(void* p, size_t bytes) override { pool_.release(p, bytes); }
  MemoryStats stats() const override { return pool_.stats(); }
  void enqueue(std::function<void()> task) override { current().enqueue(std::move(task)); }
  void run_sync(const std::function<void()>& task) override { current().run_sync(task); }
  void synchronize() override { current().synchronize(); }
  ExecQueue* queue() override { return &current(); }
  MemoryPool& pool() { return pool_; }
  void abandon_pending() {
    queue_.abandon_pending();
    std::lock_guard lk(load_mu_);
    if (load_queue_) load_queue_->abandon_pending();
  }
  // Waits for the load stream when it exists.
  void synchronize_load() {
    ExecQueue* q = nullptr;
    {
      std::lock_guard lk(load_mu_);
      q = load_queue_.get();
    }
    if (q) q->synchronize();
  }

 private:
  ExecQueue& current() {
    if (t_load_stream_depth == 0) return queue_;
    std::lock_guard lk(load_mu_);
    if (!load_queue_) load_queue_ = std::make_unique<ExecQueue>("hpu:" + std::to_string(index_) + " load", 1);
    return *load_queue_;
  }
  int index_;
  MemoryPool pool_;
  ExecQueue queue_;
  std::mutex load_mu_;
  std::unique_ptr<ExecQueue> load_queue_;  // made on first use: one OpenMP thread
};

struct Registry;
std::atomic<Registry*> g_registry{nullptr};  // while it exists: exit hooks neither make it nor outlive it

struct Registry {
  CpuBackend cpu;
  std::vector<std::unique_ptr<HostHpuBackend>> hpus;
  // Destroyed at exit, after statics made later (oneDNN's among them): work still queued then
  // is dropped rather than run against them.
  ~Registry() {
    g_registry.store(nullptr, std::memory_order_release);
    for (auto& h : hpus) h->abandon_pending();
  }
  Registry() {
    const int n = static_cast<int>(env_int("HG_HPU_DEVICES", 1));
    const int64_t cap = env_int("HG_HPU_MEMORY_MB", 4096) * (int64_t{1} << 20);
    const int threads = static_cast<int>(env_int("HG_HPU_THREADS", 0));
    for (int i = 0; i < n; ++i) hpus.push_back(std::make_unique<HostHpuBackend>(i, cap, threads));
  }
};

Registry& registry() {
  static Registry r;
  static const bool published = (g_registry.store(&r, std::memory_order_release), true);
  (void)published;
  return r;
}

void abandon_queued_work() {
  if (Registry* r = g_registry.load(std::memory_order_acquire))
    for (auto& h : r->hpus) h->abandon_pending();
}

}  // namespace

DeviceBackend& device_backend(Device d) {
  auto& r = registry();
  if (d.kind == DeviceKind::CPU) return r.cpu;
  if (d.index < 0 || d.index >= static_cast<int>(r.hpus.size()))
    throw DeviceError("device " + d.str() + " does not exist (" + std::to_string(r.hpus.size()) +
                      " HPU(s); set HG_HPU_DEVICES for more)");
  return *r.hpus[d.index];
}

int hpu_device_count() { return static_cast<int>(registry().hpus.size()); }
MemoryStats memory_stats(Device d) { return device_backend(d).stats(); }
void synchronize(Device d) { device_backend(d).synchronize(); }

void reset_peak_memory_stats(Device d) {
  auto& r = registry();
  if (d.kind == DeviceKind::CPU) r.cpu.pool_.reset_peak();
  else static_cast<HostHpuBackend&>(device_backend(d)).pool().reset_peak();
}

LoadStreamGuard::LoadStreamGuard() { ++t_load_stream_depth; }

LoadStreamGuard::~LoadStreamGuard() {
  if (--t_load_stream_depth > 0) return;
  // The loads' device work must be done before what it made is used on the default streams.
  for (auto& h : registry().hpus) {
    try {
      h->synchronize_load();
    } catch (const std::exception& e) {  // nobody waited for that task: say so rather than lose it
      std::cerr << "hgraph: a task on hpu:" << h->device().index << "'s load stream failed: " << e.what() << "\n";
    }
  }
}

bool on_load_stream() { return t_load_stream_depth > 0; }

}  // namespace hg
