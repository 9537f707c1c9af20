// The in-memory cache of compiled graphs, keyed by the graph signature (structure,
// attributes and input signature), LRU-bounded by count.
//
//   hg::graphs::GraphCache cache(256);
//   auto exe = cache.get_or_compile(graph);   // compiles on a miss
#pragma once
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "graphs/executable.h"

namespace hg::graphs {

class GraphCache {
 public:
  explicit GraphCache(size_t capacity) : capacity_(capacity) {}
  std::shared_ptr<const Executable> get_or_compile(const Graph& g, bool* hit = nullptr);
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Executable>>;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> map_;
};

}  // namespace hg::graphs
