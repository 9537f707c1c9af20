// The on-disk graph cache: optimized graphs (after the passes) stored one file per key in a
// directory with a size cap, so a second process (or a restart) skips the passes.
//
//   setenv HG_GRAPH_CACHE=/var/cache/hgraph,1024        // dir, max MB (default 1024)
//   hg::graphs::set_disk_cache(hg::graphs::DiskCacheConfig{"/tmp/hgc", 512 << 20});  // or in code
//   if (auto dc = hg::graphs::disk_cache()) {
//     std::optional<Graph> g = dc->load(key);       // nullopt: absent, or invalid (logged, removed)
//     dc->store(key, exe->graph());                 // atomic write, then evicts the oldest beyond the cap
//     dc->store_blob("onnx|" + digest, {head, body}); // any other derived artifact, same envelope
//     if (auto b = dc->load_blob("onnx|" + digest)) use(b->payload());
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
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/atomic_file.h"
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
  // (never the one just written). A write that fails is logged (a warning naming the file) and
  // skipped, not thrown: the cache is an optimization and the caller goes on with what it has.
  void store(const std::string& key, const Graph& optimized);
  // The same for an opaque payload (an imported model): validated envelope (engine, ISA, key,
  // checksum), nullopt when absent or invalid (then removed, logged and counted).
  struct Blob {
    std::shared_ptr<const MappedFile> file;  // the whole entry, mapped
    size_t offset = 0;                       // where the payload starts; it ends 8 bytes before the end
    std::span<const uint8_t> payload() const { return file->bytes().subspan(offset, file->bytes().size() - 8 - offset); }
  };
  std::optional<Blob> load_blob(const std::string& key);
  void store_blob(const std::string& key, const std::vector<ByteSpan>& payload);  // the payload in parts
  // Removes the entry for `key` (e.g. it decoded but did not compile); logs `why`.
  void discard(const std::string& key, const std::string& why);
  uint64_t total_bytes() const;  // of all entries in the directory
  DiskCacheStats stats() const;

 private:
  void evict(const std::filesystem::path& keep);
  // The validated entry bytes for `key` and the payload's offset (parse: unwrap_entry), or
  // nullopt as load() describes.
  template <class Parse>
  std::optional<std::invoke_result_t<Parse, std::shared_ptr<const MappedFile>, const std::filesystem::path&>> load_entry(
      const std::string& key, Parse parse);
  void store_entry(const std::string& key, const std::vector<ByteSpan>& parts);
  DiskCacheConfig cfg_;
  std::mutex evict_mu_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, invalid_{0}, writes_{0}, evictions_{0};
};

// The process-wide disk cache compile_cached uses: configured from HG_GRAPH_CACHE on first
// use, or by set_disk_cache (nullopt turns it off). Null when off.
void set_disk_cache(std::optional<DiskCacheConfig> cfg);
std::shared_ptr<DiskCache> disk_cache();

}  // namespace hg::graphs
