#include "models/deflate.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <new>

#include "engine/error.h"

namespace hg {

namespace {

constexpr size_t kZlibChunk = size_t{1} << 30;  // zlib counts in 32-bit units
constexpr int kGzipWindow = 15 + 16;            // windowBits: gzip wrapper
constexpr int kZlibWindow = 15;                 // zlib wrapper
constexpr int kRawWindow = -15;                 // no wrapper

Bytef* bytes(const char* p) { return reinterpret_cast<Bytef*>(const_cast<char*>(p)); }

// A zlib header (RFC 1950): method 8 (deflate), a window of at most 32 KiB, a check multiple of 31.
bool has_zlib_header(std::string_view in) {
  if (in.size() < 2) return true;  // too short for either: let zlib report the truncation
  const auto cmf = static_cast<unsigned char>(in[0]), flg = static_cast<unsigned char>(in[1]);
  return (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && ((cmf << 8) | flg) % 31 == 0;
}

int window_bits(Deflated f) { return f == Deflated::Gzip ? kGzipWindow : f == Deflated::Zlib ? kZlibWindow : kRawWindow; }

}  // namespace

const char* deflated_name(Deflated f) { return f == Deflated::Gzip ? "gzip" : f == Deflated::Zlib ? "zlib" : "deflate"; }

uint32_t crc32(std::string_view data, uint32_t crc) {
  while (!data.empty()) {
    const size_t n = std::min(data.size(), kZlibChunk);
    crc = static_cast<uint32_t>(::crc32(crc, bytes(data.data()), static_cast<uInt>(n)));
    data.remove_prefix(n);
  }
  return crc;
}

bool has_gzip_magic(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b;
}

std::string deflate_compress(std::string_view data, Deflated f) {
  z_stream z{};
  // The fastest level: a response is compressed on the request's own thread, and tensors of
  // floats gain little from the slower ones.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, window_bits(f), 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::bad_alloc();
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, deflateEnd);
  std::string out(deflateBound(&z, data.size()), '\0');
  size_t pos = 0, produced = 0;
  for (int rc = Z_OK; rc != Z_STREAM_END;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    const size_t n = std::min(data.size() - pos, kZlibChunk);
    z.next_in = bytes(data.data() + pos);
    z.avail_in = static_cast<uInt>(n);
    z.next_out = bytes(out.data() + produced);
    z.avail_out = static_cast<uInt>(std::min(out.size() - produced, kZlibChunk));
    rc = deflate(&z, pos + n == data.size() ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_ERROR) throw InternalError(std::string("zlib deflate failed for ") + deflated_name(f) + " output");
    pos = static_cast<size_t>(reinterpret_cast<const char*>(z.next_in) - data.data());
    produced = static_cast<size_t>(reinterpret_cast<char*>(z.next_out) - out.data());
  }
  out.resize(produced);
  return out;
}

struct Inflater::Stream {
  z_stream z{};
  size_t pos = 0;  // input consumed
  bool done = false;
  ~Stream() { inflateEnd(&z); }
};

Inflater::Inflater(Deflated f, std::string_view input, size_t max_output, std::string what)
    : format_(f), in_(input), max_output_(max_output), what_(std::move(what)), z_(std::make_unique<Stream>()) {
  const int window = f == Deflated::Zlib && !has_zlib_header(input) ? kRawWindow : window_bits(f);
  if (inflateInit2(&z_->z, window) != Z_OK) throw std::bad_alloc();
}

Inflater::~Inflater() = default;

size_t Inflater::input_offset() const { return z_->pos; }

// Room for one byte past the limit: producing it tells that the limit was crossed.
size_t Inflater::room(size_t max_step) const {
  const size_t left = max_output_ - std::min(out_.size(), max_output_);
  return std::min({max_step, left == SIZE_MAX ? left : left + 1, kZlibChunk});
}

size_t Inflater::capacity_after_step(size_t max_step) const {
  const size_t need = out_.size() + room(max_step);
  // std::string grows to at least twice its capacity when it grows.
  return need <= out_.capacity() ? out_.capacity() : std::max(need, 2 * out_.capacity());
}

bool Inflater::step(size_t max_step, size_t max_input) {
  Stream& s = *z_;
  if (s.done) return true;
  const size_t first = s.pos;
  const size_t before = out_.size(), space = room(max_step);
  out_.reserve(before + space);
  out_.resize(before + space);
  s.z.next_out = bytes(out_.data() + before);
  s.z.avail_out = static_cast<uInt>(space);
  while (s.z.avail_out > 0 && !s.done && s.pos - first < max_input) {
    s.z.next_in = bytes(in_.data() + s.pos);
    s.z.avail_in = static_cast<uInt>(std::min({in_.size() - s.pos, kZlibChunk, max_input - (s.pos - first)}));
    const int rc = ::inflate(&s.z, Z_NO_FLUSH);
    s.pos = static_cast<size_t>(reinterpret_cast<const char*>(s.z.next_in) - in_.data());
    if (rc == Z_STREAM_END) {
      if (s.pos == in_.size()) s.done = true;
      else if (format_ == Deflated::Gzip) inflateReset(&s.z);  // another gzip member follows
      else throw FormatError(what_ + " has " + std::to_string(in_.size() - s.pos) +
                             " trailing bytes after the end of its stream at byte offset " + std::to_string(s.pos));
    } else if (rc == Z_BUF_ERROR || (rc == Z_OK && s.pos == in_.size() && s.z.avail_out > 0)) {
      throw FormatError(what_ + " is truncated: its stream ends at byte offset " + std::to_string(s.pos) +
                        " before it is complete");
    } else if (rc != Z_OK) {
      throw FormatError(what_ + " is corrupt at byte offset " + std::to_string(s.pos) + " of " +
                        std::to_string(in_.size()) + ": " + (s.z.msg ? s.z.msg : zError(rc)));
    }
  }
  out_.resize(before + space - s.z.avail_out);
  if (out_.size() > max_output_)
    throw TooLargeError("decompressed " + what_ + " exceeds the limit of " + std::to_string(max_output_) +
                        " bytes (inflation stopped at byte offset " + std::to_string(s.pos) + " of " +
                        std::to_string(in_.size()) + ")");
  return s.done;
}

std::string inflate(std::string_view data, Deflated f, size_t max_output, const std::string& what) {
  Inflater in(f, data, max_output, what);
  while (!in.step(size_t{16} << 20)) {
  }
  return in.take_output();
}

}  // namespace hg
