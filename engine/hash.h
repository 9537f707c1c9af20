// A fast 64-bit non-cryptographic hash of bytes: cache keys, entry checksums and the content
// digests that tell whether weights changed.
//
//   uint64_t h = hg::hash64(bytes);                   // std::span<const uint8_t>
//   uint64_t k = hg::hash64("resnet18|fusion");       // text
//   hg::Hasher s;                                     // the same over pieces
//   s.update(header); s.update(payload);              // == hg::hash64(header + payload)
//   uint64_t c = s.digest();
//
// Four independent multiply-rotate lanes over 32-byte blocks, then the tail and the length
// folded in and a final avalanche: about 10 GB/s on one core, so checking the 45 MB of
// ResNet-18's weights costs a few milliseconds (byte-at-a-time FNV-1a took 45 ms). Values are
// the same on every little-endian host and are stored in files: changing the function is a
// format change of everything that stores one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace hg {

class Hasher {
 public:
  explicit Hasher(uint64_t seed = 0);
  void update(std::span<const uint8_t> bytes);
  uint64_t digest() const;  // of everything given so far; update may continue

 private:
  uint64_t lanes_[4];
  uint8_t block_[32];
  size_t buffered_ = 0;  // bytes in block_
  uint64_t total_ = 0;
};

inline uint64_t hash64(std::span<const uint8_t> bytes, uint64_t seed = 0) {
  Hasher h(seed);
  h.update(bytes);
  return h.digest();
}
inline uint64_t hash64(std::string_view s, uint64_t seed = 0) {
  return hash64({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, seed);
}

}  // namespace hg
