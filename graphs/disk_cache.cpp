#include "graphs/disk_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "graphs/graph_dump.h"
#include "graphs/graph_serialize.h"

namespace hg::graphs {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExt = ".hgg";

EntryHeader header_for(const std::string& key) { return {engine_version(), cpu_isa(), key}; }

bool is_entry(const fs::directory_entry& e) {
  std::error_code ec;
  const std::string name = e.path().filename().string();
  return e.is_regular_file(ec) && name.size() > 4 && name.front() != '.' && e.path().extension() == kExt;
}

// A temporary file of write_file_atomic (".<entry>.tmp-XXXXXX") that a writer which died left
// behind: old enough that no live writer still owns it.
bool is_stale_temp(const fs::directory_entry& e) {
  std::error_code ec;
  const std::string name = e.path().filename().string();
  if (name.front() != '.' || name.find(std::string(kExt) + ".tmp-") == std::string::npos || !e.is_regular_file(ec))
    return false;
  const auto mtime = e.last_write_time(ec);
  return !ec && fs::file_time_type::clock::now() - mtime > std::chrono::minutes(10);
}

}  // namespace

DiskCacheConfig parse_disk_cache_config(const std::string& spec) {
  DiskCacheConfig cfg;
  const size_t comma = spec.rfind(',');
  std::string dir = spec, mb;
  if (comma != std::string::npos) {
    dir = spec.substr(0, comma);
    mb = spec.substr(comma + 1);
  }
  if (dir.empty()) throw InvalidArgument("graph cache '" + spec + "': the directory is empty (expected dir[,max_MB])");
  cfg.dir = dir;
  if (comma != std::string::npos) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(mb.data(), mb.data() + mb.size(), v);
    if (ec != std::errc() || p != mb.data() + mb.size() || v == 0 || v > (uint64_t{1} << 30))
      throw InvalidArgument("graph cache '" + spec + "': max_MB '" + mb + "' is not a positive whole number of MB");
    cfg.max_bytes = v << 20;
  }
  return cfg;
}

DiskCache::DiskCache(DiskCacheConfig cfg) : cfg_(std::move(cfg)) {
  std::error_code ec;
  fs::create_directories(cfg_.dir, ec);
  if (ec || !fs::is_directory(cfg_.dir))
    throw IoError("graph cache: cannot create directory " + cfg_.dir.string() + (ec ? ": " + ec.message() : ""));
}

fs::path DiskCache::path_for(const std::string& key) const {
  return cfg_.dir / (hex64(hash64(key)) + kExt);
}

template <class Parse>
std::optional<std::invoke_result_t<Parse, std::shared_ptr<const MappedFile>, const fs::path&>> DiskCache::load_entry(
    const std::string& key, Parse parse) {
  const fs::path p = path_for(key);
  std::error_code ec;
  if (!fs::exists(p, ec)) {
    ++misses_;
    return std::nullopt;
  }
  if (const uint64_t size = fs::file_size(p, ec); !ec && size > cfg_.max_bytes) {
    discard(key, "it is " + std::to_string(size) + " bytes, more than the cache's cap of " +
                     std::to_string(cfg_.max_bytes));
    ++misses_;
    return std::nullopt;
  }
  try {
    auto r = parse(map_file(p), p);
    fs::last_write_time(p, fs::file_time_type::clock::now(), ec);  // recently used: evicted last
    ++hits_;
    return r;
  } catch (const IoError& e) {  // vanished or unreadable: a miss
    spdlog::warn("graph cache: cannot read {}: {}", p.string(), e.what());
    ++misses_;
    return std::nullopt;
  } catch (const FormatError& e) {
    discard(key, e.what());
    ++misses_;
    return std::nullopt;
  }
}

std::optional<Graph> DiskCache::load(const std::string& key) {
  return load_entry(key, [&](std::shared_ptr<const MappedFile> file, const fs::path& p) {
    return read_entry(file->bytes(), header_for(key), p.string());
  });
}

std::optional<DiskCache::Blob> DiskCache::load_blob(const std::string& key) {
  return load_entry(key, [&](std::shared_ptr<const MappedFile> file, const fs::path& p) {
    const size_t offset = unwrap_entry(file->bytes(), header_for(key), p.string());
    return Blob{std::move(file), offset};
  });
}

void DiskCache::discard(const std::string& key, const std::string& why) {
  const fs::path p = path_for(key);
  spdlog::warn("graph cache: removing invalid entry {}: {}", p.string(), why);
  std::error_code ec;
  fs::remove(p, ec);
  ++invalid_;
}

void DiskCache::store(const std::string& key, const Graph& optimized) {
  const std::vector<uint8_t> bytes = write_entry(header_for(key), optimized);
  store_entry(key, {bytes});
}

void DiskCache::store_blob(const std::string& key, const std::vector<ByteSpan>& payload) {
  const EntryFrame f = frame_entry(header_for(key), payload);
  std::vector<ByteSpan> parts{f.head};
  parts.insert(parts.end(), payload.begin(), payload.end());
  parts.push_back({reinterpret_cast<const uint8_t*>(&f.checksum), sizeof f.checksum});
  store_entry(key, parts);
}

void DiskCache::store_entry(const std::string& key, const std::vector<ByteSpan>& parts) {
  const fs::path p = path_for(key);
  try {
    write_file_atomic(p, parts, Durability::Unsynced);  // checksummed, rebuilt if lost
  } catch (const Error& e) {  // the cache is an optimization: the caller goes on without the entry
    spdlog::warn("graph cache: cannot write {}: {}", p.string(), e.what());
    return;
  }
  ++writes_;
  evict(p);
}

void DiskCache::evict(const fs::path& keep) {
  std::lock_guard lk(evict_mu_);
  struct File {
    fs::path path;
    fs::file_time_type mtime;
    uint64_t size;
  };
  std::vector<File> files;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cfg_.dir, ec)) {
    if (is_stale_temp(e)) {
      std::error_code ec2;
      fs::remove(e.path(), ec2);
      continue;
    }
    if (!is_entry(e)) continue;
    std::error_code ec2;
    const uint64_t size = e.file_size(ec2);
    const auto mtime = e.last_write_time(ec2);
    if (ec2) continue;  // removed by another process meanwhile
    total += size;
    files.push_back({e.path(), mtime, size});
  }
  if (total <= cfg_.max_bytes) return;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.mtime < b.mtime; });
  for (const File& f : files) {
    if (total <= cfg_.max_bytes) break;
    if (f.path == keep) continue;
    std::error_code ec2;
    if (fs::remove(f.path, ec2)) {
      ++evictions_;
      spdlog::debug("graph cache: evicted {} ({} bytes)", f.path.string(), f.size);
    }
    total -= f.size;
  }
}

uint64_t DiskCache::total_bytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cfg_.dir, ec)) {
    std::error_code ec2;
    if (is_entry(e)) total += e.file_size(ec2);
  }
  return total;
}

DiskCacheStats DiskCache::stats() const {
  return {hits_.load(), misses_.load(), invalid_.load(), writes_.load(), evictions_.load()};
}

namespace {

struct Global {
  std::mutex mu;
  bool configured = false;
  std::shared_ptr<DiskCache> cache;
};

Global& global() {
  static Global* g = new Global;  // used from device threads until exit: never destroyed
  return *g;
}

}  // namespace

void set_disk_cache(std::optional<DiskCacheConfig> cfg) {
  auto cache = cfg ? std::make_shared<DiskCache>(std::move(*cfg)) : nullptr;
  Global& g = global();
  std::lock_guard lk(g.mu);
  g.cache = std::move(cache);
  g.configured = true;
}

std::shared_ptr<DiskCache> disk_cache() {
  Global& g = global();
  std::lock_guard lk(g.mu);
  if (!g.configured) {
    g.configured = true;
    const char* v = std::getenv("HG_GRAPH_CACHE");
    if (v && *v) {
      try {
        g.cache = std::make_shared<DiskCache>(parse_disk_cache_config(v));
      } catch (const Error& e) {
        spdlog::warn("graph cache: ignoring HG_GRAPH_CACHE='{}': {}", v, e.what());
      }
    }
  }
  return g.cache;
}

}  // namespace hg::graphs
