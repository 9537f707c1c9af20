// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI (RFC 3720) and TFRecord
// files use it, and TFRecord's masked form.
//
//   uint32_t c = hg::training::crc32c(hg::as_bytes("123456789"));   // 0xE3069283
//   c = hg::training::crc32c_extend(c, more);                          // streaming
//   uint32_t m = hg::training::masked_crc32c(bytes);                   // what TFRecord stores
#pragma once
#include <cstdint>

#include "engine/atomic_file.h"

namespace hg::training {

uint32_t crc32c_extend(uint32_t crc, ByteSpan data);  // crc of (previous data + data)
inline uint32_t crc32c(ByteSpan data) { return crc32c_extend(0, data); }
// ((crc >> 15) | (crc << 17)) + 0xa282ead8: TFRecord's mask of a stored CRC.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t masked_crc32c(ByteSpan data) { return mask_crc32c(crc32c(data)); }

}  // namespace hg::training
