#include "server/memory_budget.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "engine/error.h"

namespace hg::server {

namespace {
// What a budget of `total` bytes (0: no limit) has left with `used` charged.
size_t left_of(size_t total, size_t used) { return total ? total - std::min(used, total) : SIZE_MAX; }

std::string mib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}
}  // namespace

MemoryBudget::Lease::Lease(std::shared_ptr<MemoryBudget> budget, std::string owner)
    : budget_(std::move(budget)), owner_(std::move(owner)) {}

MemoryBudget::Lease::~Lease() {
  std::lock_guard lk(budget_->mu_);
  budget_->used_ -= held_;
}

void MemoryBudget::Lease::charge(std::string_view what, size_t bytes) {
  MemoryBudget& b = *budget_;
  std::lock_guard lk(b.mu_);
  const size_t left = left_of(b.total_, b.used_);
  if (bytes > left)
    throw OutOfMemoryError(owner_ + ": " + std::string(what) + " needs " + mib(bytes) +
                           ", but the model memory budget (--model-memory-mb " + std::to_string(b.total_ >> 20) +
                           ") has " + mib(left) + " left (" + mib(b.used_ - held_) + " held by loaded models, " +
                           mib(held_) + " by this load so far)");
  b.used_ += bytes;
  held_ += bytes;
}

size_t MemoryBudget::Lease::left() const {
  std::lock_guard lk(budget_->mu_);
  return left_of(budget_->total_, budget_->used_);
}

size_t MemoryBudget::used() const {
  std::lock_guard lk(mu_);
  return used_;
}

size_t default_model_memory() {
  uint64_t total = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemTotal:") {
      total = kb << 10;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");  // "max" (no limit) does not parse
  uint64_t limit = 0;
  if (cgroup >> limit && limit > 0 && (total == 0 || limit < total)) total = limit;
  return static_cast<size_t>(total / 4 * 3);
}

}  // namespace hg::server
