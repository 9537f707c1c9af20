// Atomic file writes: a temporary file in the same directory, fsync, rename, fsync the
// directory. A reader sees the old file or the complete new one, never a torn one.
//
//   std::string json = "...";
//   hg::write_file_atomic("dir/model.json", {hg::as_bytes(json)});
//   hg::write_file_atomic("dir/w.bin", {header_bytes, payload_bytes});   // several parts
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace hg {

using ByteSpan = std::span<const uint8_t>;
inline ByteSpan as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// Throws hg::IoError naming the path on any failure; leaves no temporary file behind.
void write_file_atomic(const std::filesystem::path& path, const std::vector<ByteSpan>& parts);

// Reads a whole file; throws hg::IoError naming the path.
std::vector<uint8_t> read_file(const std::filesystem::path& path);

}  // namespace hg
