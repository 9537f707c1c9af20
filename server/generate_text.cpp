#include "server/generate_text.h"

#include <algorithm>

#include "models/tokenizer.h"

namespace hg::server {

namespace {

// Bytes in the UTF-8 sequence this byte starts (2-4), or 0 when it cannot start a multi-byte one.
size_t sequence_length(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// True when `s` is the beginning of a well-formed multi-byte character, not all of it.
bool incomplete_character(std::string_view s) {
  if (s.empty() || sequence_length(static_cast<unsigned char>(s[0])) <= s.size()) return false;
  const models::Utf8Text t = models::decode_utf8(s);  // a valid prefix: one replacement, of all of it
  return t.invalid_offsets.size() == 1 && t.text == "\xEF\xBF\xBD";
}

}  // namespace

GeneratedText::GeneratedText(std::vector<std::string> stop) : stop_(std::move(stop)) {
  std::erase(stop_, std::string());  // "" would stop before the first byte
}

std::string GeneratedText::push(char byte) {
  if (stopped_) return {};
  bytes_ += byte;
  // A lead byte never continues an earlier sequence, so the text before it decodes alone exactly
  // as within the whole; hold the longest tail that is an unfinished character.
  size_t keep = 0;
  for (size_t k = std::min<size_t>(bytes_.size(), 3); k >= 1 && keep == 0; --k)
    if (incomplete_character(std::string_view(bytes_).substr(bytes_.size() - k))) keep = k;
  std::string decoded = models::decode_utf8(std::string_view(bytes_).substr(0, bytes_.size() - keep)).text;
  bytes_.erase(0, bytes_.size() - keep);
  return decoded.empty() ? std::string() : release(std::move(decoded));
}

std::string GeneratedText::finish() {
  if (stopped_) return {};
  std::string out = release(models::decode_utf8(bytes_).text);
  bytes_.clear();
  if (!stopped_) {
    out += held_;
    held_.clear();
  }
  return out;
}

std::string GeneratedText::release(std::string decoded) {
  held_ += decoded;
  size_t first = std::string::npos;
  for (const auto& s : stop_) first = std::min(first, held_.find(s));
  std::string out;
  if (first != std::string::npos) {
    stopped_ = true;
    out = held_.substr(0, first);
    held_.clear();
    bytes_.clear();
    return out;
  }
  // Hold the longest end of the text that a stop string starts with (it starts a character:
  // stop strings are well-formed UTF-8).
  size_t keep = 0;
  for (const auto& s : stop_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace hg::server
