// A versioned, checksummed binary form of a Graph, for the on-disk graph cache.
//
//   hg::graphs::EntryHeader h{hg::graphs::engine_version(), hg::graphs::cpu_isa(), key};
//   std::vector<uint8_t> bytes = hg::graphs::write_entry(h, exe->graph());
//   hg::graphs::Graph g = hg::graphs::read_entry(bytes, h, "cache/ab12.hgg");  // throws FormatError
//
// Entry layout (little-endian, as written by this host):
//   "HGGRAPH\0"  u32 format version  str engine version  str CPU ISA  str key
//   u32 padding length (< 64)  zero bytes  u64 payload length  payload (the graph, or what a
//   cache stores: it starts at a multiple of 64 bytes in the entry)  u64 checksum (hg::hash64 of every byte before it)
// where str = u32 length + bytes. read_entry trusts nothing: every length is bounds-checked,
// the checksum verified, op names looked up, input ids checked to point backwards, metas
// re-inferred and compared, outputs checked in range.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/hash.h"
#include "graphs/ir.h"

namespace hg::graphs {

inline constexpr uint32_t kGraphFormatVersion = 3;  // 3: nodes carry their channel block; 2: hg::hash64 checksums, aligned payload
inline constexpr size_t kEntryPayloadAlignment = 64;

struct EntryHeader {
  std::string engine_version;
  std::string cpu_isa;
  std::string key;
};

// The hgraph engine version compiled into this binary (entries from another version are stale).
const std::string& engine_version();
// The CPU features kernels may depend on (cpuid): "x86_64 sse4.2 avx avx2 fma avx512f ...".
const std::string& cpu_isa();


std::vector<uint8_t> serialize_graph(const Graph& g);
// Throws FormatError naming `what` (a file name) and the byte offset of what was wrong.
Graph deserialize_graph(std::span<const uint8_t> payload, const std::string& what);

// The envelope of every cache entry around any payload (a graph, an imported model): the
// payload starts at the offset unwrap_entry returns and ends 8 bytes before the end.
// An entry is frame.head, the payload's parts, then the 8 bytes of frame.checksum (written as
// parts, without copying a large payload into one buffer).
struct EntryFrame {
  std::vector<uint8_t> head;
  uint64_t checksum = 0;
};
EntryFrame frame_entry(const EntryHeader& h, const std::vector<std::span<const uint8_t>>& payload);
size_t unwrap_entry(std::span<const uint8_t> bytes, const EntryHeader& expect, const std::string& what);

std::vector<uint8_t> write_entry(const EntryHeader& h, const Graph& g);
// Checks magic, format version, the header against `expect`, lengths and checksum, then the
// graph itself. Throws FormatError saying what was wrong.
Graph read_entry(std::span<const uint8_t> bytes, const EntryHeader& expect, const std::string& what);

}  // namespace hg::graphs
