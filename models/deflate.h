// Deflate streams (RFC 1951) in their gzip (RFC 1952) and zlib (RFC 1950) wrappers, with zlib:
// compression, and inflation bounded in output and done a step at a time. The one codec of the
// project: HTTP bodies (server/compression.h) and compressed data files (IDX, .npz) use it.
//
//   std::string packed = hg::deflate_compress(text, hg::Deflated::Gzip);
//   std::string plain = hg::inflate(packed, hg::Deflated::Gzip, /*max_output=*/64 << 20, "t10k.gz");
//
//   hg::Inflater in(hg::Deflated::Zlib, body, /*max_output=*/64 << 20, "deflate body");
//   while (!in.step(1 << 20)) {}   // 1 MiB of output a step; throws FormatError / TooLargeError
//   std::string out = in.take_output();
//
// Zlib input without a zlib header is read as a raw deflate stream; gzip input may hold several
// members (concatenated files). Errors start with the caller's name for the input and give the
// byte offset of the compressed input where inflation failed: a corrupt or truncated stream or
// trailing bytes are hg::FormatError, output beyond max_output is hg::TooLargeError (inflation
// stops as soon as the limit is crossed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace hg {

enum class Deflated { Gzip, Zlib, Raw };  // Raw: a bare deflate stream (zip members)

// "gzip", "zlib" or "deflate".
const char* deflated_name(Deflated f);

// True when `data` starts with the gzip magic number (1f 8b).
bool has_gzip_magic(std::string_view data);

// CRC-32 (ISO 3309: gzip's and zip's check), continuing from `crc` (0 to start).
uint32_t crc32(std::string_view data, uint32_t crc = 0);

// `data` compressed with zlib's fastest level.
std::string deflate_compress(std::string_view data, Deflated f);

class Inflater {
 public:
  // `input` must outlive the Inflater; `what` names it in errors ("gzip body", a file name).
  Inflater(Deflated f, std::string_view input, size_t max_output, std::string what);
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Produces up to max_step more bytes of output from at most about max_input more bytes of
  // input (a body of many empty gzip members makes no output: its work is bounded by input);
  // true once the stream is complete.
  bool step(size_t max_step, size_t max_input = SIZE_MAX);
  // What the output buffer will hold (capacity, bytes) after the next step(max_step): an upper
  // bound, for budgets counted before memory is taken.
  size_t capacity_after_step(size_t max_step) const;
  size_t capacity() const { return out_.capacity(); }
  size_t input_offset() const;  // compressed bytes consumed so far
  std::string take_output() { return std::move(out_); }

 private:
  struct Stream;
  size_t room(size_t max_step) const;  // output bytes the next step may produce
  Deflated format_;
  std::string_view in_;
  size_t max_output_;
  std::string what_;
  std::string out_;
  std::unique_ptr<Stream> z_;
};

// The whole of `data` inflated within max_output bytes; throws as Inflater::step().
std::string inflate(std::string_view data, Deflated f, size_t max_output, const std::string& what);

}  // namespace hg
