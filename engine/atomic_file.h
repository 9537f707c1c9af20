// Whole-file I/O. Atomic writes: a temporary file in the same directory, fsync, rename, fsync
// the directory; a reader sees the old file or the complete new one, never a torn one. Reads:
// into memory, or mapped read-only (no copy: the page cache's pages).
//
//   std::string json = "...";
//   hg::write_file_atomic("dir/model.json", {hg::as_bytes(json)});
//   hg::write_file_atomic("dir/w.bin", {header_bytes, payload_bytes});   // several parts
//   hg::write_file_atomic("cache/x.hgg", {bytes}, hg::Durability::Unsynced);  // rebuilt if lost
//   std::shared_ptr<const hg::MappedFile> m = hg::map_file("cache/x.hgg");
//   use(m->bytes());                                        // valid while m (or a copy) lives
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace hg {

using ByteSpan = std::span<const uint8_t>;
inline ByteSpan as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// Synced: the new content survives a crash once the call returns. Unsynced skips both fsyncs
// (still atomic for readers; a crash may leave the old file, or an empty or partial new one):
// for caches whose entries are checksummed and rebuilt, where the fsync of a 45 MB entry cost
// more than computing it.
enum class Durability { Synced, Unsynced };

// Throws hg::IoError naming the path on any failure; leaves no temporary file behind.
void write_file_atomic(const std::filesystem::path& path, const std::vector<ByteSpan>& parts,
                       Durability durability = Durability::Synced);

// Reads a whole file; throws hg::IoError naming the path.
std::vector<uint8_t> read_file(const std::filesystem::path& path);

// A whole file mapped read-only and private (pages populated up front; page aligned). Replace
// mapped files by rename, never by writing into them: a writer in place changes what readers see.
class MappedFile {
 public:
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ByteSpan bytes() const { return {static_cast<const uint8_t*>(data_), size_}; }

 private:
  friend std::shared_ptr<const MappedFile> map_file(const std::filesystem::path& path);
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};
// Throws hg::IoError naming the path.
std::shared_ptr<const MappedFile> map_file(const std::filesystem::path& path);

}  // namespace hg
