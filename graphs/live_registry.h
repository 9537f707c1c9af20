// Objects that graph kernels find by id when they run: a graph compiled once names its owner
// (a DDP reducer, a KV block pool) by an id in its attrs, and a replay after the owner is gone
// finds nothing instead of a dangling pointer. One registry per type, ids never reused.
//
//   int64_t id = hg::graphs::LiveRegistry<Pool>::get().add(this);     // in the constructor
//   Pool* p = hg::graphs::LiveRegistry<Pool>::get().find(id);          // in a kernel: null once gone
//   hg::graphs::LiveRegistry<Pool>::get().remove(id);                  // in the destructor
#pragma once
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace hg::graphs {

template <class T>
class LiveRegistry {
 public:
  static LiveRegistry& get() {
    static LiveRegistry r;
    return r;
  }
  int64_t add(T* object) {
    std::lock_guard lk(mu_);
    live_[next_] = object;
    return next_++;
  }
  void remove(int64_t id) {
    std::lock_guard lk(mu_);
    live_.erase(id);
  }
  T* find(int64_t id) {
    std::lock_guard lk(mu_);
    const auto it = live_.find(id);
    return it == live_.end() ? nullptr : it->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<int64_t, T*> live_;
  int64_t next_ = 1;
};

}  // namespace hg::graphs
