// Byte-level text corpora and their blocks (training/data_files.h).
#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "training/data_files.h"

namespace hg::training {

namespace {

// The byte offset of the first invalid UTF-8 sequence (RFC 3629: no overlongs, no surrogates,
// at most U+10FFFF), or npos. A NUL byte counts as invalid: text files hold none.
size_t invalid_utf8(std::string_view s) {
  size_t i = 0;
  const auto b = [&s](size_t k) { return static_cast<uint8_t>(s[k]); };
  while (i < s.size()) {
    const uint8_t c = b(i);
    if (c >= 0x01 && c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return i;
    if (i + len > s.size() || b(i + 1) < lo || b(i + 1) > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (b(i + k) < 0x80 || b(i + k) > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace

TextCorpus read_text_corpus(const std::filesystem::path& path, size_t max_bytes) {
  namespace fs = std::filesystem;
  TextCorpus c;
  std::vector<fs::path> files;
  const bool is_dir = fs::is_directory(path);
  if (is_dir) {
    for (const auto& e : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else if (fs::exists(path)) {
    files.push_back(path);
  } else {
    throw NotFoundError(path.string() + ": no such file or directory");
  }
  std::set<fs::path> seen;
  for (const auto& f : files) {
    if (!seen.insert(fs::canonical(f)).second) continue;  // a link to a file already read
    const auto m = map_file(f);
    const std::string_view text(reinterpret_cast<const char*>(m->bytes().data()), m->bytes().size());
    if (const size_t bad = invalid_utf8(text); bad != std::string_view::npos) {
      if (!is_dir)
        throw FormatError(f.string() + ": byte offset " + std::to_string(bad) + ": not UTF-8 text (byte 0x" +
                          std::string(1, "0123456789abcdef"[static_cast<uint8_t>(text[bad]) >> 4]) +
                          "0123456789abcdef"[static_cast<uint8_t>(text[bad]) & 15] + ")");
      c.skipped.push_back(f);
      continue;
    }
    if (text.empty()) continue;
    const size_t add = text.size() + (text.back() == '\n' ? 0 : 1);
    if (c.bytes.size() + add > max_bytes)
      throw TooLargeError(f.string() + ": the corpus passes the limit of " + std::to_string(max_bytes) + " bytes");
    c.bytes.append(text);
    if (text.back() != '\n') c.bytes += '\n';
    c.files.push_back(f);
  }
  if (c.bytes.empty()) throw FormatError(path.string() + ": no UTF-8 text (" + std::to_string(c.skipped.size()) + " files skipped)");
  return c;
}

std::pair<std::string, std::string> split_text(const std::string& bytes, double holdout_fraction) {
  if (!(holdout_fraction >= 0 && holdout_fraction < 1))
    throw InvalidArgument("split_text: holdout_fraction must be in [0, 1), got " + std::to_string(holdout_fraction));
  const auto cut = bytes.size() - static_cast<size_t>(static_cast<double>(bytes.size()) * holdout_fraction);
  return {bytes.substr(0, cut), bytes.substr(cut)};
}

TextBlocks::TextBlocks(std::string bytes, int64_t max_len, int64_t stride)
    : bytes_(std::move(bytes)), max_len_(max_len), stride_(stride == 0 ? max_len : stride) {
  if (max_len_ < 1) throw InvalidArgument("TextBlocks: max_len must be >= 1, got " + std::to_string(max_len_));
  if (stride_ < 1) throw InvalidArgument("TextBlocks: stride must be >= 1, got " + std::to_string(stride));
  if (static_cast<int64_t>(bytes_.size()) < max_len_ + 1)
    throw InvalidArgument("TextBlocks: " + std::to_string(bytes_.size()) + " bytes of text, fewer than one block of " +
                          std::to_string(max_len_) + " + 1 (the shifted target)");
}

int64_t TextBlocks::size() const { return (static_cast<int64_t>(bytes_.size()) - max_len_ - 1) / stride_ + 1; }

std::vector<Tensor> TextBlocks::get(int64_t index) const {
  Batch b = get_batch({index});
  return {b[0].reshape({max_len_}), b[1].reshape({max_len_})};
}

Batch TextBlocks::get_batch(const std::vector<int64_t>& indices) const {
  if (indices.empty()) throw InvalidArgument("TextBlocks::get_batch: no indices");
  const auto n = static_cast<int64_t>(indices.size());
  Tensor x = Tensor::empty({n, max_len_}, DType::I64), y = Tensor::empty({n, max_len_}, DType::I64);
  int64_t* xd = x.data<int64_t>();
  int64_t* yd = y.data<int64_t>();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[static_cast<size_t>(k)];
    if (i < 0 || i >= size())
      throw InvalidArgument("TextBlocks: index " + std::to_string(i) + " out of range for size " + std::to_string(size()));
    const auto* p = reinterpret_cast<const uint8_t*>(bytes_.data()) + i * stride_;
    for (int64_t t = 0; t < max_len_; ++t) {
      xd[k * max_len_ + t] = p[t];
      yd[k * max_len_ + t] = p[t + 1];
    }
  }
  return {x, y};
}

}  // namespace hg::training
