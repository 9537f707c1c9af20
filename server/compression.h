// HTTP content codings (RFC 9110): gzip and deflate bodies (the codec is models/deflate.h,
// bounded inflation), and Accept-Encoding negotiation.
//
//   using namespace hg::server;
//   std::optional<ContentCoding> c = parse_content_encoding(req.header("Content-Encoding"));  // nullopt: 415
//   hg::Inflater in(deflated(*c), body, /*max_output=*/64 << 20, body_name(*c));
//   while (!in.step(1 << 20)) {}           // 1 MiB of output a step; http_status(e): 413 / 400
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
// (inflation stops as soon as it is crossed): see http_status().
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "models/deflate.h"
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

// The codec of a coding that is not Identity (models/deflate.h; deflate is zlib's wrapper), and the
// name an Inflater gives a body of it in errors ("gzip body").
Deflated deflated(ContentCoding c);
std::string body_name(ContentCoding c);

// The whole of `data` inflated (Identity: a copy), within max_output bytes; throws as
// hg::Inflater::step(): hg::FormatError (400) or hg::TooLargeError (413).
std::string inflate(std::string_view data, ContentCoding c, size_t max_output);

}  // namespace hg::server
