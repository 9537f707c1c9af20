#include "graphs/graph_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/error.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_dump.h"
#include "graphs/graph_serialize.h"

namespace hg::graphs {

size_t executable_bytes(const Executable& exe) { return exe.arena_bytes() + exe.constant_bytes(); }

uint64_t memory_key(const Graph& g, const PassOptions& opt) {
  return g.structural_hash() ^ (opt.fusion ? 0 : ~0ull) ^ (static_cast<uint64_t>(opt.precision) * 0x9e3779b97f4a7c15ull) ^
         (opt.int8_ranges ? opt.int8_ranges->digest() : 0) ^ (static_cast<uint64_t>(opt.int8_calibration_tag) << 32);
}

std::shared_ptr<const Executable> GraphCache::get(const Graph& g, const PassOptions& opt) {
  const uint64_t key = memory_key(g, opt);
  std::lock_guard lk(mu_);
  const Entry* e = lru_.get_if(key, [&](const Entry& e) { return e.graph.same_structure(g); });
  return e ? e->exe : nullptr;
}

void GraphCache::put(const Graph& g, std::shared_ptr<const Executable> exe, const PassOptions& opt) {
  const uint64_t key = memory_key(g, opt);
  std::lock_guard lk(mu_);
  lru_.put(key, {g, std::move(exe)});
}

void GraphCache::clear() {
  std::lock_guard lk(mu_);
  lru_.clear();
}

void GraphCache::set_limits(GraphCacheLimits limits) {
  std::lock_guard lk(mu_);
  lru_.set_limits(limits);
}

GraphCacheLimits GraphCache::limits() const {
  std::lock_guard lk(mu_);
  return lru_.limits();
}

GraphCacheStats GraphCache::stats() const {
  std::lock_guard lk(mu_);
  return lru_.stats();
}

std::vector<uint64_t> GraphCache::keys() const {
  std::lock_guard lk(mu_);
  return lru_.keys();
}

GraphCache& memory_graph_cache() {
  static GraphCache* c = new GraphCache();  // executables may be used from device threads at exit
  return *c;
}

std::string compile_key(const Graph& g, const PassOptions& opt) {
  return g.signature() + (opt.fusion ? "|fusion" : "|nofusion") +
         (opt.precision == Precision::Fp32 ? "" : std::string("|") + precision_name(opt.precision)) +
         (opt.int8_ranges ? "|ranges " + hex64(opt.int8_ranges->digest()) : "") +
         (opt.int8_calibration_tag ? "|calibration " + std::to_string(opt.int8_calibration_tag) : "");
}

namespace {

// The disk entry of an executable's computed constants: u32 count, then per constant u32 node
// index, u64 byte size, the bytes. Keyed by the compile key and a digest of the frozen data
// they were computed from (other weights, other constants).
std::string constants_key(const Graph& g, const std::vector<const void*>& frozen_data, const std::string& key) {
  uint64_t digest = 0;
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::Input && n.frozen && static_cast<size_t>(n.input_index) < frozen_data.size() &&
        frozen_data[n.input_index])
      digest = hash64({static_cast<const uint8_t*>(frozen_data[n.input_index]), n.meta.bytes()}, digest);
  return "constants|" + hex64(digest) + "|" + key;
}

// Layout: u32 count, u32 0, then per constant {u32 node index, u32 0, u64 offset, u64 bytes},
// then the data; offsets are from the payload's start, ascending, multiples of 64 (the cache
// maps entries with the payload 64-byte aligned, so the executable uses them in place).
constexpr size_t kConstantAlign = kEntryPayloadAlignment;

size_t align_up(size_t n) { return (n + kConstantAlign - 1) / kConstantAlign * kConstantAlign; }

// The payload as parts: the table (padded), then each constant and its padding.
struct ConstantsPayload {
  std::vector<uint8_t> table;
  std::vector<ByteSpan> parts;
};

ConstantsPayload constants_payload(const StoredConstants& c) {
  static constexpr uint8_t kZeros[kConstantAlign] = {};
  ConstantsPayload r;
  r.table.assign(align_up(8 + 24 * c.size()), 0);
  const auto count = static_cast<uint32_t>(c.size());
  std::memcpy(r.table.data(), &count, 4);
  r.parts.push_back(r.table);
  size_t row = 8, at = r.table.size();
  for (const auto& [i, b] : c) {
    const auto node = static_cast<uint32_t>(i);
    const uint64_t offset = at, n = b.size();
    std::memcpy(r.table.data() + row, &node, 4);
    std::memcpy(r.table.data() + row + 8, &offset, 8);
    std::memcpy(r.table.data() + row + 16, &n, 8);
    r.parts.push_back(b);
    r.parts.push_back({kZeros, align_up(at + n) - (at + n)});
    row += 24;
    at = align_up(at + n);
  }
  return r;
}

StoredConstants parse_constants(std::span<const uint8_t> payload, const std::string& what) {
  auto fail = [&](size_t at, const std::string& msg) -> void {
    throw FormatError(what + ": constants table at payload byte " + std::to_string(at) + ": " + msg);
  };
  auto u64_at = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, payload.data() + at, 8);
    return v;
  };
  if (payload.size() < 8) fail(0, "truncated (no count)");
  uint32_t count;
  std::memcpy(&count, payload.data(), 4);
  if (count > (payload.size() - 8) / 24) fail(0, "count " + std::to_string(count) + " does not fit the entry");
  StoredConstants r;
  uint64_t next = 8 + 24 * uint64_t{count};
  for (uint32_t k = 0; k < count; ++k) {
    const size_t row = 8 + 24 * size_t{k};
    uint32_t node;
    std::memcpy(&node, payload.data() + row, 4);
    const uint64_t offset = u64_at(row + 8), n = u64_at(row + 16);
    if (offset % kConstantAlign || offset < next || offset > payload.size() || n > payload.size() - offset)
      fail(row, "node %" + std::to_string(node) + ": " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                    " overlap, are unaligned or pass the end (" + std::to_string(payload.size()) + " bytes)");
    if (!r.emplace(static_cast<int>(node), payload.subspan(offset, n)).second)
      fail(row, "node %" + std::to_string(node) + " appears twice");
    next = offset + n;
  }
  return r;
}

}  // namespace

std::shared_ptr<const Executable> compile_cached(const Graph& g, std::vector<const void*> frozen_data,
                                                 CompileInfo* info, const PassOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileInfo local;
  CompileInfo& out = info ? *info : local;
  out = {};
  auto done = [&](std::shared_ptr<const Executable> exe) {
    out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return exe;
  };
  bool frozen = false;
  for (const Node& n : g.nodes) frozen = frozen || n.frozen;
  if (!frozen) {
    if (auto exe = memory_graph_cache().get(g, opt)) {
      out.memory_hit = true;
      return done(std::move(exe));
    }
  }
  const std::string key = compile_key(g, opt);  // text: built only past the memory cache
  std::shared_ptr<DiskCache> disk = disk_cache();
  std::shared_ptr<const Executable> exe;
  // With frozen data, the constants computed from it are cached on disk next to the graph.
  std::string ckey_memo;  // hashing the frozen data is done only when constants are looked up or stored
  auto ckey = [&]() -> const std::string& {
    if (ckey_memo.empty()) ckey_memo = constants_key(g, frozen_data, key);
    return ckey_memo;
  };
  bool constants_stored = false;
  if (disk) {
    if (std::optional<Graph> optimized = disk->load(key)) {
      const bool has_constants = std::any_of(optimized->nodes.begin(), optimized->nodes.end(),
                                             [](const Node& n) { return n.kind == Node::Kind::Op && n.constant; });
      std::optional<DiskCache::Blob> blob = frozen && has_constants ? disk->load_blob(ckey()) : std::nullopt;
      auto compile_stored = [&](const StoredConstants* constants, std::shared_ptr<const void> owner) {
        exe = Executable::compile(
            *optimized, {.passes = opt, .optimize = false, .constants = constants, .constants_owner = std::move(owner)},
            frozen_data);
        std::vector<TensorMeta> in(g.num_inputs), outs;
        for (const Node& n : g.nodes)
          if (n.kind == Node::Kind::Input) in[n.input_index] = n.meta;
        for (int o : g.outputs) outs.push_back(g.nodes[o].meta);
        if (exe->input_metas() != in || exe->output_metas() != outs)
          throw FormatError("its inputs or outputs differ from the graph looked up");
        out.disk_hit = true;
      };
      try {
        if (blob) {
          try {
            const StoredConstants c = parse_constants(blob->payload(), disk->path_for(ckey()).string());
            compile_stored(&c, blob->file);
            constants_stored = out.constants_hit = true;
          } catch (const FormatError& e) {
            exe.reset();
            out.disk_hit = false;
            disk->discard(ckey(), std::string("its constants do not fit the graph: ") + e.what());
          }
        }
        if (!exe) compile_stored(nullptr, nullptr);
      } catch (const Error& e) {
        exe.reset();
        out.disk_hit = false;
        disk->discard(key, std::string("it does not compile to the graph looked up: ") + e.what());
      }
    }
  }
  if (!exe) {
    exe = Executable::compile(g, {.passes = opt, .optimize = true}, frozen_data);
    if (disk) disk->store(key, exe->graph());
  }
  if (disk && frozen && !constants_stored)
    if (const StoredConstants computed = exe->computed_constants(); !computed.empty())
      disk->store_blob(ckey(), constants_payload(computed).parts);
  if (!frozen) memory_graph_cache().put(g, exe, opt);
  return done(std::move(exe));
}

}  // namespace hg::graphs
