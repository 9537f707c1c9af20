#include "server/compression.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <new>

#include "server/http_error.h"

namespace hg::server {

namespace {

constexpr size_t kZlibChunk = size_t{1} << 30;  // zlib counts in 32-bit units
constexpr int kGzipWindow = 15 + 16;            // windowBits: gzip wrapper
constexpr int kZlibWindow = 15;                 // zlib wrapper
constexpr int kRawWindow = -15;                 // no wrapper

Bytef* bytes(const char* p) { return reinterpret_cast<Bytef*>(const_cast<char*>(p)); }

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// A zlib header (RFC 1950): method 8 (deflate), a window of at most 32 KiB, a check multiple of 31.
bool has_zlib_header(std::string_view in) {
  if (in.size() < 2) return true;  // too short for either: let zlib report the truncation
  const auto cmf = static_cast<unsigned char>(in[0]), flg = static_cast<unsigned char>(in[1]);
  return (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && ((cmf << 8) | flg) % 31 == 0;
}

// A q-value (RFC 9110 §12.4.2): 0 to 1; nullopt when malformed.
std::optional<double> parse_q(std::string_view params) {
  double q = 1;
  while (!params.empty()) {
    const size_t semi = params.find(';');
    const std::string_view p = trim(params.substr(0, semi));
    params = semi == std::string_view::npos ? std::string_view{} : params.substr(semi + 1);
    if (p.size() < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=') continue;  // other parameters: ignored
    const std::string_view v = trim(p.substr(2));
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), q);
    if (ec != std::errc() || end != v.data() + v.size() || !(q >= 0 && q <= 1)) return std::nullopt;
  }
  return q;
}

}  // namespace

const char* coding_name(ContentCoding c) {
  switch (c) {
    case ContentCoding::Gzip: return "gzip";
    case ContentCoding::Deflate: return "deflate";
    case ContentCoding::Identity: break;
  }
  return "identity";
}

std::optional<ContentCoding> parse_content_encoding(std::string_view value) {
  const std::string_view v = trim(value);
  if (v.empty() || iequals(v, "identity")) return ContentCoding::Identity;
  if (iequals(v, "gzip") || iequals(v, "x-gzip")) return ContentCoding::Gzip;
  if (iequals(v, "deflate")) return ContentCoding::Deflate;
  return std::nullopt;
}

ContentCoding negotiate_encoding(std::string_view accept_encoding) {
  double gzip = -1, deflate = -1, identity = -1, any = -1;  // -1: not named
  while (!accept_encoding.empty()) {
    const size_t comma = accept_encoding.find(',');
    const std::string_view item = accept_encoding.substr(0, comma);
    accept_encoding = comma == std::string_view::npos ? std::string_view{} : accept_encoding.substr(comma + 1);
    const size_t semi = item.find(';');
    const std::string_view name = trim(item.substr(0, semi));
    const std::optional<double> q = parse_q(semi == std::string_view::npos ? std::string_view{} : item.substr(semi + 1));
    if (name.empty() || !q) continue;
    if (iequals(name, "gzip") || iequals(name, "x-gzip")) gzip = std::max(gzip, *q);
    else if (iequals(name, "deflate")) deflate = std::max(deflate, *q);
    else if (iequals(name, "identity")) identity = std::max(identity, *q);
    else if (name == "*") any = std::max(any, *q);
  }
  const auto weight = [any](double named, double unnamed) { return named >= 0 ? named : any >= 0 ? any : unnamed; };
  ContentCoding best = ContentCoding::Identity;
  // Identity is always acceptable (RFC 9110 §12.5.3), but a client that names a coding and not
  // identity prefers that coding.
  double best_q = weight(identity, 0);
  if (const double q = weight(deflate, 0); q > 0 && q >= best_q) best = ContentCoding::Deflate, best_q = q;
  if (const double q = weight(gzip, 0); q > 0 && q >= best_q) best = ContentCoding::Gzip;
  return best;
}

std::string compress(std::string_view data, ContentCoding c) {
  if (c == ContentCoding::Identity) return std::string(data);
  z_stream z{};
  // The fastest level: a response is compressed on the request's own thread, and tensors of
  // floats gain little from the slower ones.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, c == ContentCoding::Gzip ? kGzipWindow : kZlibWindow, 8,
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
    if (rc == Z_STREAM_ERROR) throw InternalError(std::string("zlib deflate failed for a ") + coding_name(c) + " body");
    pos = static_cast<size_t>(reinterpret_cast<const char*>(z.next_in) - data.data());
    produced = static_cast<size_t>(reinterpret_cast<char*>(z.next_out) - out.data());
  }
  out.resize(produced);
  return out;
}

void encode_response(HttpResponse& r, ContentCoding c) {
  r.headers.emplace_back("Vary", "Accept-Encoding");
  if (c == ContentCoding::Identity) return;
  r.body = compress(r.body, c);
  r.headers.emplace_back("Content-Encoding", coding_name(c));
}

struct Inflater::Stream {
  z_stream z{};
  size_t pos = 0;  // input consumed
  bool done = false;
  ~Stream() { inflateEnd(&z); }
};

Inflater::Inflater(ContentCoding c, std::string_view input, size_t max_output)
    : coding_(c), in_(input), max_output_(max_output), z_(std::make_unique<Stream>()) {
  if (c == ContentCoding::Identity) throw InternalError("Inflater: an identity body is not compressed");
  const int window = c == ContentCoding::Gzip ? kGzipWindow : has_zlib_header(input) ? kZlibWindow : kRawWindow;
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

bool Inflater::step(size_t max_step) {
  Stream& s = *z_;
  if (s.done) return true;
  const char* name = coding_name(coding_);
  const size_t before = out_.size(), space = room(max_step);
  out_.reserve(before + space);
  out_.resize(before + space);
  s.z.next_out = bytes(out_.data() + before);
  s.z.avail_out = static_cast<uInt>(space);
  while (s.z.avail_out > 0 && !s.done) {
    s.z.next_in = bytes(in_.data() + s.pos);
    s.z.avail_in = static_cast<uInt>(std::min(in_.size() - s.pos, kZlibChunk));
    const int rc = ::inflate(&s.z, Z_NO_FLUSH);
    s.pos = static_cast<size_t>(reinterpret_cast<const char*>(s.z.next_in) - in_.data());
    if (rc == Z_STREAM_END) {
      if (s.pos == in_.size()) s.done = true;
      else if (coding_ == ContentCoding::Gzip) inflateReset(&s.z);  // another gzip member follows
      else throw HttpError(400, std::string(name) + " body has " + std::to_string(in_.size() - s.pos) +
                                    " trailing bytes after the end of its stream at byte offset " + std::to_string(s.pos));
    } else if (rc == Z_BUF_ERROR || (rc == Z_OK && s.pos == in_.size() && s.z.avail_out > 0)) {
      throw HttpError(400, std::string(name) + " body is truncated: its stream ends at byte offset " +
                               std::to_string(s.pos) + " before it is complete");
    } else if (rc != Z_OK) {
      throw HttpError(400, std::string(name) + " body is corrupt at byte offset " + std::to_string(s.pos) +
                               " of " + std::to_string(in_.size()) + ": " + (s.z.msg ? s.z.msg : zError(rc)));
    }
  }
  out_.resize(before + space - s.z.avail_out);
  if (out_.size() > max_output_)
    throw HttpError(413, "decompressed " + std::string(name) + " body exceeds the limit of " +
                             std::to_string(max_output_) + " bytes (inflation stopped at byte offset " +
                             std::to_string(s.pos) + " of " + std::to_string(in_.size()) + ")");
  return s.done;
}

std::string inflate(std::string_view data, ContentCoding c, size_t max_output) {
  if (c == ContentCoding::Identity) {
    if (data.size() > max_output)
      throw HttpError(413, "body of " + std::to_string(data.size()) + " bytes exceeds the limit of " +
                               std::to_string(max_output) + " bytes");
    return std::string(data);
  }
  Inflater in(c, data, max_output);
  while (!in.step(size_t{16} << 20)) {
  }
  return in.take_output();
}

}  // namespace hg::server
