// The one keyed cache behind every "one graph per key" store: compiled programs (graph_cache.h),
// wrap_in_hpu_graph's graphs per input signature, the GPT decoder's graphs per attention bucket
// and lazy mode's Runtimes per program. Least recently used first out, bounded by entries and
// by bytes (each entry's cost).
//
//   hg::graphs::LruCache<std::string, Entry> cache({.max_entries = 4}, [](const Entry& e) { return e.bytes; });
//   if (Entry* e = cache.get(key)) use(*e);       // counts a hit (it becomes the most recent) or a miss
//   Entry* e = cache.put(key, std::move(entry));  // evicts from the least recent end; null: too big to keep
//   cache.stats();                                // hits, misses, evictions, entries, bytes
//
// Not thread-safe: an owner shared by threads locks around it. Evicted values are destroyed in
// put(), on the calling thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hg::graphs {

struct CacheLimits {
  size_t max_entries = 0;  // 0: unbounded
  size_t max_bytes = 0;    // 0: unbounded
};

struct CacheStats {
  uint64_t hits = 0, misses = 0, evictions = 0;
  size_t entries = 0, bytes = 0;
};

template <class K, class V, class Hash = std::hash<K>>
class LruCache {
 public:
  using Cost = std::function<size_t(const V&)>;  // an entry's bytes (none: 0)
  explicit LruCache(CacheLimits limits = {}, Cost cost = {}) : limits_(limits), cost_(std::move(cost)) {}

  V* get(const K& key) {
    return get_if(key, [](const V&) { return true; });
  }
  // get, where an entry counts as found only when accept(value) holds (a hash key confirmed).
  template <class Accept>
  V* get_if(const K& key, Accept&& accept) {
    auto it = map_.find(key);
    if (it == map_.end() || !accept(it->second->value)) {
      ++stats_.misses;
      return nullptr;
    }
    ++stats_.hits;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->value;
  }
  // Inserts (or replaces) `key` as the most recent entry, then evicts from the least recent end
  // until both bounds hold. An entry over max_bytes on its own is not kept (and evicts nothing).
  V* put(const K& key, V value) {
    erase(key);
    const size_t bytes = cost_ ? cost_(value) : 0;
    if (limits_.max_bytes && bytes > limits_.max_bytes) return nullptr;
    lru_.push_front({key, std::move(value), bytes});
    map_.emplace(key, lru_.begin());
    stats_.bytes += bytes;
    evict();
    return &lru_.front().value;
  }
  bool erase(const K& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    stats_.bytes -= it->second->bytes;
    lru_.erase(it->second);
    map_.erase(it);
    return true;
  }
  void clear() {  // drops every entry; the counters keep counting
    lru_.clear();
    map_.clear();
    stats_.bytes = 0;
  }
  void set_limits(CacheLimits limits) {
    limits_ = limits;
    evict();
  }
  CacheLimits limits() const { return limits_; }
  CacheStats stats() const {
    CacheStats s = stats_;
    s.entries = lru_.size();
    return s;
  }
  size_t size() const { return lru_.size(); }
  std::vector<K> keys() const {  // most recent first
    std::vector<K> k;
    for (const auto& e : lru_) k.push_back(e.key);
    return k;
  }
  template <class F>
  void for_each(F&& f) const {  // most recent first: f(key, value)
    for (const auto& e : lru_) f(e.key, e.value);
  }

 private:
  struct Entry {
    K key;
    V value;
    size_t bytes;
  };
  void evict() {
    while (!lru_.empty() && ((limits_.max_entries && lru_.size() > limits_.max_entries) ||
                             (limits_.max_bytes && stats_.bytes > limits_.max_bytes))) {
      stats_.bytes -= lru_.back().bytes;
      map_.erase(lru_.back().key);
      lru_.pop_back();
      ++stats_.evictions;
    }
  }
  CacheLimits limits_;
  Cost cost_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<K, typename std::list<Entry>::iterator, Hash> map_;
  CacheStats stats_;
};

}  // namespace hg::graphs
