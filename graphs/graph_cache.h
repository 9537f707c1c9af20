// Compiled-graph caches: an in-memory LRU of executables (bounded by count and bytes) and the
// one entry point graph capture and lazy mode compile through.
//
//   hg::graphs::CompileInfo info;
//   auto exe = hg::graphs::compile_cached(graph, frozen_data, &info);
//   // memory LRU (graphs without frozen inputs), then the disk cache (HG_GRAPH_CACHE, see
//   // graphs/disk_cache.h), else the passes + compile; a compile is written to the disk cache.
//   if (info.disk_hit) ...;  info.compile_ms;
//
//   hg::graphs::GraphCache cache({.max_entries = 64, .max_bytes = 256 << 20});
//   auto e = cache.get(graph);        // null on a miss; a hit becomes the most recent
//   cache.put(graph, exe);            // evicts least recently used beyond either bound
//   cache.stats();                    // hits, misses, evictions, entries, bytes
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graphs/executable.h"
#include "graphs/lru_cache.h"

namespace hg::graphs {

using GraphCacheLimits = CacheLimits;
using GraphCacheStats = CacheStats;

// The memory an executable accounts for: its arena (allocated per user) plus the constant
// buffers it owns.
size_t executable_bytes(const Executable& exe);

// The key of `g` compiled with `opt` in the memory cache: Graph::structural_hash with the pass
// options mixed in (no text is built; a hit is confirmed by comparing the graphs).
uint64_t memory_key(const Graph& g, const PassOptions& opt = default_pass_options());

// The compiled-program cache: an LruCache (graphs/lru_cache.h) of executables by memory_key,
// costed by executable_bytes, behind a lock. Each entry keeps the graph it was compiled from.
class GraphCache {
 public:
  explicit GraphCache(GraphCacheLimits limits = {.max_entries = 256, .max_bytes = size_t{1} << 30})
      : lru_(limits, [](const Entry& e) { return executable_bytes(*e.exe); }) {}
  // The executable compiled from a graph with the same structure as `g`, or null.
  std::shared_ptr<const Executable> get(const Graph& g, const PassOptions& opt = default_pass_options());
  // Inserts (or replaces) `g` as the most recent entry, then evicts from the least recent
  // end until both bounds hold. An entry larger than max_bytes on its own is not kept (and
  // evicts nothing).
  void put(const Graph& g, std::shared_ptr<const Executable> exe, const PassOptions& opt = default_pass_options());
  void clear();  // drops every entry (the hit/miss/eviction counters keep counting)
  void set_limits(GraphCacheLimits limits);  // evicts down to the new bounds (0: unbounded)
  GraphCacheLimits limits() const;
  GraphCacheStats stats() const;
  std::vector<uint64_t> keys() const;  // memory_key of each entry, most recent first

 private:
  struct Entry {
    Graph graph;  // as given to compile: confirms a key match
    std::shared_ptr<const Executable> exe;
  };
  mutable std::mutex mu_;
  LruCache<uint64_t, Entry> lru_;
};

// The process-wide memory cache compile_cached uses.
GraphCache& memory_graph_cache();

struct CompileInfo {
  bool memory_hit = false;
  bool disk_hit = false;
  bool constants_hit = false;  // the constants computed from the frozen data came from the disk cache too
  double compile_ms = 0;  // time spent in compile_cached (lookup + compile)
};

// The disk cache's key of `g` compiled with `opt`: its signature (topology, attributes, input
// signature with frozen marks) and the pass options; the disk cache adds engine version and ISA.
std::string compile_key(const Graph& g, const PassOptions& opt);

// Compiles `g` with the pass options `opt` through the caches. frozen_data as in
// Executable::compile; executables with frozen inputs bake in their data, so they skip the
// memory cache. The disk cache holds the optimized graph and, for graphs with frozen inputs, the
// constants computed from the frozen data (keyed by a digest of it), so a warm compile neither
// runs the passes nor recomputes folded constants; kernels are prepared again.
std::shared_ptr<const Executable> compile_cached(const Graph& g, std::vector<const void*> frozen_data = {},
                                                 CompileInfo* info = nullptr,
                                                 const PassOptions& opt = default_pass_options());

}  // namespace hg::graphs
