#include "server/compression.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "server/http_error.h"

namespace hg::server {

namespace {

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

Deflated deflated(ContentCoding c) {
  if (c == ContentCoding::Identity) throw InternalError("an identity body is not compressed");
  return c == ContentCoding::Gzip ? Deflated::Gzip : Deflated::Zlib;
}

std::string body_name(ContentCoding c) { return std::string(coding_name(c)) + " body"; }

std::string compress(std::string_view data, ContentCoding c) {
  return c == ContentCoding::Identity ? std::string(data) : deflate_compress(data, deflated(c));
}

void encode_response(HttpResponse& r, ContentCoding c) {
  r.headers.emplace_back("Vary", "Accept-Encoding");
  if (c == ContentCoding::Identity) return;
  r.body = compress(r.body, c);
  r.headers.emplace_back("Content-Encoding", coding_name(c));
}

std::string inflate(std::string_view data, ContentCoding c, size_t max_output) {
  if (c == ContentCoding::Identity) {
    if (data.size() > max_output)
      throw HttpError(413, "body of " + std::to_string(data.size()) + " bytes exceeds the limit of " +
                               std::to_string(max_output) + " bytes");
    return std::string(data);
  }
  return hg::inflate(data, deflated(c), max_output, body_name(c));
}

}  // namespace hg::server
