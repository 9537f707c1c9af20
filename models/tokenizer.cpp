#include "models/tokenizer.h"

#include <algorithm>

#include "engine/error.h"

namespace hg::models {

std::vector<int64_t> encode_bytes(std::string_view text) {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string decode_bytes(const std::vector<int64_t>& ids) {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kByteVocab)
      throw InvalidArgument("byte tokenizer: token " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                            " is outside the vocabulary [0, 256)");
    out.push_back(static_cast<char>(ids[i]));
  }
  return out;
}

namespace {

// Length of the well-formed sequence starting with lead byte b (0: b cannot start one) and
// the allowed range of the second byte (Unicode Table 3-7).
struct Lead {
  int length;
  uint8_t lo, hi;
};

Lead lead_of(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes the UTF-16 surrogates
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // up to U+10FFFF
  return {0, 0, 0};
}

}  // namespace

Utf8Text decode_utf8(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  Utf8Text r;
  r.text.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Lead lead = lead_of(static_cast<uint8_t>(bytes[i]));
    size_t good = lead.length ? 1 : 0;  // bytes of the sequence that are valid so far
    while (good > 0 && good < static_cast<size_t>(lead.length) && i + good < bytes.size()) {
      const auto b = static_cast<uint8_t>(bytes[i + good]);
      const bool ok = good == 1 ? (b >= lead.lo && b <= lead.hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++good;
    }
    if (lead.length && good == static_cast<size_t>(lead.length)) {
      r.text.append(bytes.substr(i, good));
    } else {
      r.text.append(kReplacement);
      r.invalid_offsets.push_back(i);
      good = std::max<size_t>(good, 1);
    }
    i += good;
  }
  return r;
}

}  // namespace hg::models
