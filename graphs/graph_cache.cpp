#include "graphs/graph_cache.h"

namespace hg::graphs {

std::shared_ptr<const Executable> GraphCache::get_or_compile(const Graph& g, bool* hit) {
  std::string key = g.signature();
  {
    std::lock_guard lk(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      if (hit) *hit = true;
      return it->second->second;
    }
  }
  if (hit) *hit = false;
  auto exe = Executable::compile(g);
  std::lock_guard lk(mu_);
  if (!map_.count(key)) {
    lru_.emplace_front(key, exe);
    map_[std::move(key)] = lru_.begin();
    while (lru_.size() > capacity_) {
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return exe;
}

size_t GraphCache::size() const {
  std::lock_guard lk(mu_);
  return lru_.size();
}

}  // namespace hg::graphs
