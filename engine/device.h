// Devices: `cpu` and the host-backed HPUs `hpu:0..N-1`.
//
//   hg::Device d = hg::Device::parse("hpu:0");
//   hg::MemoryStats s = hg::memory_stats(d);        // Limit, InUse, MaxInUse, ...
//   hg::device_backend(d).enqueue([] { /* runs in order on hpu:0's queue */ });
//   hg::synchronize(d);
//
// Number of HPUs: env HG_HPU_DEVICES (default 1). Pool capacity per HPU: env
// HG_HPU_MEMORY_MB (default 4096). Compute threads per HPU: env HG_HPU_THREADS (default:
// OpenMP's, i.e. OMP_NUM_THREADS or all cores) — the size of the OpenMP team (oneDNN's
// runtime) that each HPU's queue worker uses, so e.g. two HPUs with one thread each never
// oversubscribe two cores. Going over the capacity throws hg::OutOfMemoryError and leaves
// the device usable.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace hg {

enum class DeviceKind : uint8_t { CPU, HPU };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  static Device cpu() { return {}; }
  static Device hpu(int i = 0) { return {DeviceKind::HPU, i}; }
  static Device parse(std::string_view s);  // "cpu", "hpu", "hpu:1"; throws InvalidArgument
  std::string str() const;
  bool is_hpu() const { return kind == DeviceKind::HPU; }
  bool operator==(const Device&) const = default;
};

// Gaudi's memory statistics (names as habana_frameworks.torch.hpu.memory_stats()).
struct MemoryStats {
  int64_t limit = 0, in_use = 0, max_in_use = 0, num_allocs = 0, num_frees = 0, active_allocs = 0,
          max_alloc_size = 0;
};

// A counted pool over host memory with a hard capacity. Freed blocks are kept (up to
// `cache_limit` bytes) and reused for requests of the same rounded size, so eager ops pay
// neither fresh page faults for large outputs nor malloc's aligned-allocation path for small
// ones: blocks under 64 KiB sit on intrusive free lists per 64-byte size class (no
// allocation to cache them), larger ones in a size-keyed map.
class MemoryPool {
 public:
  MemoryPool(std::string name, int64_t capacity, size_t cache_limit = size_t{256} << 20)
      : name_(std::move(name)), capacity_(capacity), cache_limit_(cache_limit) {}
  ~MemoryPool();
  void* allocate(size_t bytes);  // 64-byte aligned; throws OutOfMemoryError past the capacity
  void release(void* p, size_t bytes);
  MemoryStats stats() const;
  void reset_peak();
  void empty_cache();  // returns every cached block to the system

 private:
  static size_t block_size(size_t bytes);
  std::string name_;
  mutable std::mutex mu_;
  int64_t capacity_;
  size_t cache_limit_, cached_bytes_ = 0;
  std::multimap<size_t, void*> cache_;  // block size -> free block (64 KiB and more)
  std::vector<void*> small_;            // per size class (block / 64): a free list linked through the blocks
  MemoryStats s_;
};

// An in-order queue served by one worker thread. Tasks must not throw: a task that
// throws is reported and the queue records the first error, which synchronize() rethrows.
class ExecQueue {
 public:
  // threads > 0: the OpenMP team size of work run on the worker thread.
  explicit ExecQueue(std::string name, int threads = 0);
  ~ExecQueue();
  uint64_t enqueue(std::function<void()> task);  // returns the task's event (see record)
  // Runs `task` in queue order and returns when it has run: on the calling thread when the
  // queue is idle (no hand-off to the worker, with the queue's OpenMP team size; returns
  // true), else queued behind the pending work (waits for it alone, then rethrows a task error
  // as synchronize does; returns false).
  template <class F>
  bool run_sync(F&& task);
  uint64_t record();               // an event: the count of tasks enqueued so far
  void wait(uint64_t event);       // blocks until that task has run
  bool done(uint64_t event) const;
  void synchronize();              // waits for everything enqueued; rethrows a task error
  // At process exit: drops the tasks not yet started and any enqueued later (nothing can read
  // their results any more, and the libraries they call may already be torn down), and waits
  // for the running one.
  void abandon_pending();
  bool on_worker_thread() const { return std::this_thread::get_id() == worker_.get_id(); }

 private:
  void run(int threads);
  bool try_begin_inline();
  void end_inline();
  void rethrow_error();  // the first recorded task error, as InternalError (caller holds no lock)
  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> tasks_;
  uint64_t enqueued_ = 0, completed_ = 0;
  std::string error_;
  bool stop_ = false;
  bool abandoned_ = false;  // abandon_pending() ran: later tasks are dropped as they come
  bool busy_ = false;  // a task is running (on the worker or inline)
  int threads_;        // OpenMP team size for this queue's work (0: leave as is)
  std::thread worker_;
};

template <class F>
bool ExecQueue::run_sync(F&& task) {
  if (try_begin_inline()) {
    try {
      task();
    } catch (...) {
      end_inline();
      throw;
    }
    end_inline();
    return true;
  }
  wait(enqueue(std::forward<F>(task)));
  rethrow_error();
  return false;
}

// The interface a device implementation provides; the host backend is the only one here.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  // Runs `task` in device order: inline for cpu, on the queue for hpu.
  virtual void enqueue(std::function<void()> task) = 0;
  // Runs `task` in device order and waits for it (inline when the device is idle).
  virtual void run_sync(const std::function<void()>& task) = 0;
  virtual void synchronize() = 0;
  virtual ExecQueue* queue() = 0;  // nullptr for cpu
};

DeviceBackend& device_backend(Device d);  // throws DeviceError for a device that does not exist
int hpu_device_count();
MemoryStats memory_stats(Device d);
void reset_peak_memory_stats(Device d);
void synchronize(Device d);

}  // namespace hg
