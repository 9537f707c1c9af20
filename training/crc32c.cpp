#include "training/crc32c.h"

#include <array>

namespace hg::training {
namespace {

// Slicing-by-4 tables: table[0] is the byte-at-a-time table, table[k][b] advances b by k more
// zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 4> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 4; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
};

const Tables& tables() {
  static const Tables tables;
  return tables;
}

}  // namespace

uint32_t crc32c_extend(uint32_t crc, ByteSpan data) {
  const auto& t = tables().t;
  uint32_t c = ~crc;
  const uint8_t* p = data.data();
  size_t n = data.size();
  for (; n >= 4; n -= 4, p += 4) {
    c ^= uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    c = t[3][c & 0xFF] ^ t[2][(c >> 8) & 0xFF] ^ t[1][(c >> 16) & 0xFF] ^ t[0][c >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return ~c;
}

}  // namespace hg::training
