// The memory the served models may hold, server-wide: each load reserves what it will allocate
// before allocating it (its files' bytes, the KV cache, the captured graphs' arenas and
// constants), and what a version holds comes back when the version is gone (unloaded and
// drained, replaced by a reload, or its load failed).
//
//   hg::server::MemoryBudget budget(hg::server::default_model_memory());  // 0: no limit
//   auto lease = budget.lease("model 'gpt'");
//   lease->charge("generation.max_batch_total_tokens (a KV cache of 524288 tokens)", kv_bytes);  // or throws
//   copt.memory_budget = lease->left();   // what a bounded step (the bucket captures) may spend
//   lease->charge("the captured batch buckets", captured_bytes);
//   version->memory = lease;              // released with the last reference
//
// charge() throws OutOfMemoryError naming what was asked for, its bytes, the budget and what
// the loaded models hold, e.g. "model 'gpt': generation.max_batch_total_tokens (a KV cache of
// 524288 tokens) needs 2048.0 MiB, but the model memory budget (--model-memory-mb 1024) has
// 1000.3 MiB left (23.7 MiB held by loaded models)".
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace hg::server {

class MemoryBudget : public std::enable_shared_from_this<MemoryBudget> {
 public:
  // A load's share; what it charged is given back when the last reference goes.
  class Lease {
   public:
    Lease(std::shared_ptr<MemoryBudget> budget, std::string owner);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    void charge(std::string_view what, size_t bytes);
    size_t held() const { return held_; }
    size_t left() const;  // what the budget has left (SIZE_MAX without a limit)

   private:
    std::shared_ptr<MemoryBudget> budget_;
    std::string owner_;
    size_t held_ = 0;
  };

  explicit MemoryBudget(size_t bytes) : total_(bytes) {}
  static std::shared_ptr<MemoryBudget> make(size_t bytes) { return std::make_shared<MemoryBudget>(bytes); }
  std::shared_ptr<Lease> lease(std::string owner) { return std::make_shared<Lease>(shared_from_this(), std::move(owner)); }
  size_t total() const { return total_; }  // 0: no limit
  size_t used() const;

 private:
  const size_t total_;
  mutable std::mutex mu_;
  size_t used_ = 0;
};

// Three quarters of the machine's memory: MemTotal of /proc/meminfo, or the cgroup's memory.max
// when that is lower; 0 when neither can be read (no limit).
size_t default_model_memory();

}  // namespace hg::server
