// The byte-level tokenizer of the GPT model (models/gpt.h): token i is byte i (0..255), so
// every text encodes losslessly and every token sequence decodes to bytes.
//
//   std::vector<int64_t> ids = hg::models::encode_bytes("héllo");      // 6 tokens (é is 2 bytes)
//   std::string raw = hg::models::decode_bytes(ids);                   // the bytes again
//   hg::models::Utf8Text t = hg::models::decode_utf8(raw);              // valid UTF-8 for display
//   if (!t.invalid_offsets.empty()) ...                                // where U+FFFD replaced bytes
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hg::models {

inline constexpr int64_t kByteVocab = 256;

std::vector<int64_t> encode_bytes(std::string_view text);

// The bytes of `ids`. Throws hg::InvalidArgument naming the position and value of the first
// token outside [0, 256).
std::string decode_bytes(const std::vector<int64_t>& ids);

// `bytes` with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart
// (Unicode's "substitution of maximal subparts", as Python's errors="replace"): a truncated
// sequence is one replacement, each byte that cannot start or continue a sequence another.
struct Utf8Text {
  std::string text;
  std::vector<size_t> invalid_offsets;  // byte offset in the input of each replaced subpart
};
Utf8Text decode_utf8(std::string_view bytes);

}  // namespace hg::models
