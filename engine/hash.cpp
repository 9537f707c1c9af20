#include "engine/hash.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace hg {

namespace {

constexpr uint64_t kMul1 = 0x9e3779b97f4a7c15ull;  // 2^64 / golden ratio
constexpr uint64_t kMul2 = 0xd6e8feb86659fd93ull;
constexpr uint64_t kMul3 = 0xff51afd7ed558ccdull;

uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t lane(uint64_t acc, uint64_t v) { return std::rotl(acc ^ (v * kMul2), 27) * kMul1; }

void block(uint64_t* l, const uint8_t* p) {
  l[0] = lane(l[0], load64(p));
  l[1] = lane(l[1], load64(p + 8));
  l[2] = lane(l[2], load64(p + 16));
  l[3] = lane(l[3], load64(p + 24));
}

}  // namespace

Hasher::Hasher(uint64_t seed) : lanes_{seed ^ kMul1, seed + kMul2, std::rotl(seed, 17) ^ kMul3, ~seed} {}

void Hasher::update(std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  total_ += n;
  if (buffered_) {
    const size_t take = std::min(n, sizeof block_ - buffered_);
    std::memcpy(block_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < sizeof block_) return;
    block(lanes_, block_);
    buffered_ = 0;
  }
  for (; n >= 32; n -= 32, p += 32) block(lanes_, p);
  if (n) std::memcpy(block_, p, n);
  buffered_ = n;
}

uint64_t Hasher::digest() const {
  const uint64_t* l = lanes_;
  uint64_t h = std::rotl(l[0], 1) + std::rotl(l[1], 7) + std::rotl(l[2], 12) + std::rotl(l[3], 18);
  const uint8_t* p = block_;
  size_t n = buffered_;
  for (; n >= 8; n -= 8, p += 8) h = lane(h, load64(p));
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  h = lane(h, tail ^ (uint64_t{n} << 56));
  h ^= total_ * kMul3;
  h ^= h >> 32;
  h *= kMul3;
  h ^= h >> 29;
  h *= kMul2;
  return h ^ (h >> 32);
}

}  // namespace hg
