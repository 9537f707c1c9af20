#include "engine/host_arena.h"

#include <memory>
#include <mutex>
#include <oneapi/tbb/global_control.h>
#include <string>

#include "engine/error.h"

namespace hg {

namespace {

// The process's TBB worker limit: the live HostArenas' threads plus one (TBB counts the
// external thread in it); TBB's default when none lives.
class WorkerLimit {
 public:
  void add(int threads) {
    std::lock_guard lock(mu_);
    reserved_ += threads;
    // The new control is made before the old one goes: while both live, TBB applies the smaller.
    std::unique_ptr<tbb::global_control> next;
    if (reserved_ > 0)
      next = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                   static_cast<size_t>(reserved_) + 1);
    control_ = std::move(next);
  }

 private:
  std::mutex mu_;
  int reserved_ = 0;
  std::unique_ptr<tbb::global_control> control_;
};

// Never destroyed: a HostArena owned by a static object may outlive static destruction.
WorkerLimit& worker_limit() {
  static WorkerLimit* limit = new WorkerLimit;
  return *limit;
}

int checked(int threads) {
  if (threads < 1) throw InvalidArgument("HostArena: threads must be >= 1, got " + std::to_string(threads));
  return threads;
}

}  // namespace

HostArena::HostArena(int threads, tbb::task_arena::priority priority)
    : threads_(checked(threads)), arena_(threads_, 0, priority) {
  worker_limit().add(threads_);
}

HostArena::~HostArena() { worker_limit().add(-threads_); }

}  // namespace hg
