#include "graphs/graph_cache.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "engine/error.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_serialize.h"

namespace hg::graphs {

size_t executable_bytes(const Executable& exe) { return exe.arena_bytes() + exe.constant_bytes(); }

std::shared_ptr<const Executable> GraphCache::get(const std::string& key) {
  std::lock_guard lk(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->exe;
}

void GraphCache::put(const std::string& key, std::shared_ptr<const Executable> exe) {
  const size_t bytes = executable_bytes(*exe);
  std::lock_guard lk(mu_);
  if (auto it = map_.find(key); it != map_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    map_.erase(it);
  }
  if (bytes > limits_.max_bytes) return;  // would evict everything and still not fit
  lru_.push_front({key, std::move(exe), bytes});
  map_[key] = lru_.begin();
  bytes_ += bytes;
  evict_locked();
}

void GraphCache::evict_locked() {
  while (!lru_.empty() && (lru_.size() > limits_.max_entries || bytes_ > limits_.max_bytes)) {
    bytes_ -= lru_.back().bytes;
    map_.erase(lru_.back().key);
    lru_.pop_back();
    ++evictions_;
  }
}

void GraphCache::clear() {
  std::lock_guard lk(mu_);
  lru_.clear();
  map_.clear();
  bytes_ = 0;
}

void GraphCache::set_limits(GraphCacheLimits limits) {
  std::lock_guard lk(mu_);
  limits_ = limits;
  evict_locked();
}

GraphCacheLimits GraphCache::limits() const {
  std::lock_guard lk(mu_);
  return limits_;
}

GraphCacheStats GraphCache::stats() const {
  std::lock_guard lk(mu_);
  return {hits_, misses_, evictions_, lru_.size(), bytes_};
}

std::vector<std::string> GraphCache::keys() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> k;
  for (const auto& e : lru_) k.push_back(e.key);
  return k;
}

GraphCache& memory_graph_cache() {
  static GraphCache* c = new GraphCache();  // executables may be used from device threads at exit
  return *c;
}

std::string compile_key(const Graph& g, const PassOptions& opt) {
  return g.signature() + (opt.fusion ? "|fusion" : "|nofusion");
}

std::shared_ptr<const Executable> compile_cached(const Graph& g, std::vector<const void*> frozen_data,
                                                 CompileInfo* info) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileInfo local;
  CompileInfo& out = info ? *info : local;
  out = {};
  auto done = [&](std::shared_ptr<const Executable> exe) {
    out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return exe;
  };
  const PassOptions opt = default_pass_options();
  const std::string key = compile_key(g, opt);
  bool frozen = false;
  for (const Node& n : g.nodes) frozen = frozen || n.frozen;
  if (!frozen) {
    if (auto exe = memory_graph_cache().get(key)) {
      out.memory_hit = true;
      return done(std::move(exe));
    }
  }
  std::shared_ptr<DiskCache> disk = disk_cache();
  std::shared_ptr<const Executable> exe;
  if (disk) {
    if (std::optional<Graph> optimized = disk->load(key)) {
      try {
        exe = Executable::compile(std::move(*optimized), {.passes = opt, .optimize = false}, frozen_data);
        std::vector<TensorMeta> in(g.num_inputs), outs;
        for (const Node& n : g.nodes)
          if (n.kind == Node::Kind::Input) in[n.input_index] = n.meta;
        for (int o : g.outputs) outs.push_back(g.nodes[o].meta);
        if (exe->input_metas() != in || exe->output_metas() != outs)
          throw FormatError("its inputs or outputs differ from the graph looked up");
        out.disk_hit = true;
      } catch (const Error& e) {
        exe.reset();
        disk->discard(key, std::string("it does not compile to the graph looked up: ") + e.what());
      }
    }
  }
  if (!exe) {
    exe = Executable::compile(g, {.passes = opt, .optimize = true}, frozen_data);
    if (disk) {
      try {
        disk->store(key, exe->graph());
      } catch (const Error& e) {
        spdlog::warn("graph cache: cannot write {}: {}", disk->path_for(key).string(), e.what());
      }
    }
  }
  if (!frozen) memory_graph_cache().put(key, exe);
  return done(std::move(exe));
}

}  // namespace hg::graphs
