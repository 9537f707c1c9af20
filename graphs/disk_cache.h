// The on-disk graph cache: optimized graphs (after the passes) stored one file per key in a
// directory with a size cap, so a second process (or a restart) skips the passes.
//
//   setenv HG_GRAPH_CACHE=/var/cache/hgraph,1024        // dir, max MB (default 1024)
//   hg::graphs::set_disk_cache(hg::graphs::DiskCacheConfig{"/tmp/hgc", 512 << 20});  // or in code
//   if (auto dc = hg::graphs::disk_cache()) {
//     std::optional<Graph> g = dc->load(key);       // nullopt: absent, or invalid (logged, removed)
//     dc->store(key, exe->graph());                 // atomic write, then evicts the oldest beyond the cap
//   }
//
// Entries are named <hash64(key) as 16 hex digits>.hgg (format: graphs/graph_serialize.h). The
// key text given to load/store is stored inside the entry and compared on load, with the
// engine version and the CPU ISA. Writes go to a temporary file renamed over the entry, so two
// processes writing the same key leave one complete entry. A hit touches the file's mtime;
// eviction removes the least recently written or used entries first.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "graphs/ir.h"

namespace hg::graphs {

struct DiskCacheConfig {
  std::filesystem::path dir;
  uint64_t max_bytes = uint64_t{1024} << 20;
};

// Parses "dir[,max_MB]" (HG_GRAPH_CACHE's syntax); throws InvalidArgument naming the bad part.
DiskCacheConfig parse_disk_cache_config(const std::string& spec);

struct DiskCacheStats {
  uint64_t hits = 0, misses = 0, invalid = 0, writes = 0, evictions = 0;
};

class DiskCache {
 public:
  explicit DiskCache(DiskCacheConfig cfg);  // creates the directory; throws IoError
  const DiskCacheConfig& config() const { return cfg_; }

  std::filesystem::path path_for(const std::string& key) const;
  // The graph stored under `key`, validated; nullopt when absent. An entry that fails
  // validation is logged (warning naming the file and the problem), removed, and counted.
  std::optional<Graph> load(const std::string& key);
  // Writes `optimized` under `key` atomically, then evicts the oldest entries beyond the cap
  // (never the one just written). Throws IoError.
  void store(const std::string& key, const Graph& optimized);
  // Removes the entry for `key` (e.g. it decoded but did not compile); logs `why`.
  void discard(const std::string& key, const std::string& why);
  uint64_t total_bytes() const;  // of all entries in the directory
  DiskCacheStats stats() const;

 private:
  void evict(const std::filesystem::path& keep);
  DiskCacheConfig cfg_;
  std::mutex evict_mu_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, invalid_{0}, writes_{0}, evictions_{0};
};

// The process-wide disk cache compile_cached uses: configured from HG_GRAPH_CACHE on first
// use, or by set_disk_cache (nullopt turns it off). Null when off.
void set_disk_cache(std::optional<DiskCacheConfig> cfg);
std::shared_ptr<DiskCache> disk_cache();

}  // namespace hg::graphs
