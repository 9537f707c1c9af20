// HTTP content codings (RFC 9110): gzip and deflate bodies with zlib, bounded inflation, and
// Accept-Encoding negotiation.
//
//   using namespace hg::server;
//   std::optional<ContentCoding> c = parse_content_encoding(req.header("Content-Encoding"));  // nullopt: 415
//   Inflater in(*c, body, /*max_output=*/64 << 20);
//   while (!in.step(1 << 20)) {}           // 1 MiB of output a step; throws HttpError 413 / 400
//   std::string plain = in.take_output();
//
//   ContentCoding out = negotiate_encoding(req.header("Accept-Encoding"));  // "gzip;q=0.5, *;q=0" -> Gzip
//   std::string packed = compress(plain, out);                               // Identity: a copy
//   std::string again = inflate(packed, out, /*max_output=*/plain.size());
//   encode_response(http_response, out);   // body compressed, Content-Encoding and Vary set
//
// deflate means the zlib format (RFC 1950); a raw deflate stream (RFC 1951), which some clients
// send instead, is recognised by its missing zlib header. A gzip body may hold several members
// (concatenated files). Errors name the coding and the byte offset of the compressed input where
// inflation failed: a corrupt stream or trailing bytes are 400, output beyond max_output is 413
// (inflation stops as soon as it is crossed).
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_server.h"

namespace hg::server {

enum class ContentCoding { Identity, Gzip, Deflate };

// "gzip", "deflate", "identity".
const char* coding_name(ContentCoding c);

// A Content-Encoding value: "" or "identity" is Identity; "gzip" (or "x-gzip") and "deflate",
// in any case, with surrounding blanks. nullopt for anything else, stacks ("gzip, br") included.
std::optional<ContentCoding> parse_content_encoding(std::string_view value);

// The coding of an answer to a request with this Accept-Encoding (absent or empty: Identity):
// the highest q-value among gzip, deflate and identity, with `*` standing for those not named,
// and gzip before deflate before identity on ties; identity not named (nor `*`) comes after any
// coding named with q > 0. Malformed entries are ignored; when everything is refused (q=0) the
// answer is Identity all the same (RFC 9110 allows it).
ContentCoding negotiate_encoding(std::string_view accept_encoding);

// `data` compressed with zlib's default level (Identity: unchanged).
std::string compress(std::string_view data, ContentCoding c);

// A successful answer in coding `c` (negotiated from its request's Accept-Encoding): the body
// compressed and Content-Encoding set (nothing for Identity), and `Vary: Accept-Encoding`
// either way. Small bodies are compressed too, as Triton does.
void encode_response(HttpResponse& r, ContentCoding c);

// Inflates a compressed body a bounded step at a time, so a caller can count the memory it
// takes and yield between steps.
class Inflater {
 public:
  // `input` must outlive the Inflater. Identity is not a coding to inflate.
  Inflater(ContentCoding c, std::string_view input, size_t max_output);
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Produces up to max_step more bytes of output; true once the stream is complete. Throws
  // HttpError 413 past max_output, 400 for a corrupt or truncated stream or trailing bytes.
  bool step(size_t max_step);
  // What the output buffer will hold (capacity, bytes) after the next step(max_step): an upper
  // bound, for budgets counted before memory is taken.
  size_t capacity_after_step(size_t max_step) const;
  size_t capacity() const { return out_.capacity(); }
  size_t input_offset() const;  // compressed bytes consumed so far
  std::string take_output() { return std::move(out_); }

 private:
  struct Stream;
  size_t room(size_t max_step) const;  // output bytes the next step may produce
  ContentCoding coding_;
  std::string_view in_;
  size_t max_output_;
  std::string out_;
  std::unique_ptr<Stream> z_;
};

// The whole of `data` inflated (Identity: a copy), within max_output bytes; throws as step().
std::string inflate(std::string_view data, ContentCoding c, size_t max_output);

}  // namespace hg::server
