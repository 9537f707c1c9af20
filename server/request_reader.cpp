#include "server/request_reader.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "server/http_error.h"

namespace hg::server {

namespace {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using Time = RequestReader::Time;

std::string str(beast::string_view v) { return std::string(v.data(), v.size()); }

// t + d, or Time::max() where that would overflow (timeouts come from flags).
template <class Duration>
Time after(Time t, Duration d) {
  const auto step = std::chrono::duration_cast<std::chrono::duration<double>>(d).count();
  const auto room = std::chrono::duration<double>(Time::max() - t).count();
  if (step >= room) return Time::max();
  return t + std::chrono::duration_cast<Time::duration>(std::chrono::duration<double>(step));
}

// RFC 9112's framing rules that Beast leaves to its caller, checked on a parsed head: the
// status and message of the answer (the connection then closes), or nullopt when it is sound.
// - Transfer-Encoding (section 6.1, 6.3): refused in HTTP/1.0 (the framing is faulty); chunked
//   must be the final coding, or the body's length is unknown (400: what follows would be read
//   as the next request); another coding before it is not implemented (501).
// - Host (section 3.2): exactly one in an HTTP/1.1 request, at most one in any.
std::optional<std::pair<int, std::string>> framing_error(const RequestReader::Message& msg) {
  const size_t hosts = msg.count(http::field::host);
  if (hosts > 1) return std::pair{400, std::to_string(hosts) + " Host header fields (one is allowed)"};
  if (hosts == 0 && msg.version() >= 11) return std::pair{400, std::string("an HTTP/1.1 request without a Host header field")};
  if (msg.count(http::field::transfer_encoding) == 0) return std::nullopt;
  if (msg.version() < 11) return std::pair{400, std::string("Transfer-Encoding in an HTTP/1.0 request")};
  std::vector<std::string> codings;
  for (auto it = msg.find(http::field::transfer_encoding); it != msg.end() && it->name() == http::field::transfer_encoding; ++it)
    for (const auto& c : http::token_list{it->value()}) codings.push_back(str(c));
  if (codings.empty() || !beast::iequals(codings.back(), "chunked"))
    return std::pair{400, std::string("Transfer-Encoding without chunked as its final coding (the body's length is unknown)")};
  if (codings.size() > 1)
    return std::pair{501, "the transfer coding '" + printable(codings.front(), 64) + "' is not implemented (only chunked is)"};
  return std::nullopt;
}
bool tchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}
bool ows(char c) { return c == ' ' || c == '\t'; }

// RFC 9112 section 7.1.1: chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ).
bool chunk_extensions_ok(std::string_view s) {
  size_t i = 0;
  const auto skip_ws = [&] { while (i < s.size() && ows(s[i])) ++i; };
  const auto token = [&] {
    const size_t from = i;
    while (i < s.size() && tchar(s[i])) ++i;
    return i > from;
  };
  for (;;) {
    skip_ws();
    if (i == s.size()) return true;
    if (s[i++] != ';') return false;
    skip_ws();
    if (!token()) return false;
    skip_ws();
    if (i == s.size() || s[i] != '=') continue;
    ++i;
    skip_ws();
    if (i < s.size() && s[i] == '"') {  // qdtext / quoted-pair, no CTLs but HTAB
      for (++i;; ++i) {
        if (i == s.size()) return false;
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '"') break;
        if (c == '\\') {
          if (++i == s.size()) return false;
        } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
          return false;
        }
      }
      ++i;
    } else if (!token()) {
      return false;
    }
  }
}

// A trailer field line: field-name ":" OWS field-value, no CTLs but HTAB (it is then dropped:
// trailers are not merged into the request's headers).
bool trailer_field_ok(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && tchar(s[i])) ++i;
  if (i == 0 || i == s.size() || s[i] != ':') return false;
  for (++i; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}
}  // namespace

RequestReader::RequestReader(const HttpServerOptions& opt) : opt_(opt) {
  buffer_.max_size(std::max(opt.max_header_bytes, kReadBufferBytes) + kReadBufferBytes);
}

void RequestReader::next_request(Time now) {
  parser_.emplace();
  parser_->header_limit(UINT32_MAX);  // parse() bounds the head (Beast's bound depends on the reads)
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // read_body() sets this request's
  phase_ = Phase::Head;
  started_ = head_start_ = last_read_ = now;
  got_bytes_ = buffer_.size() > 0;
  head_scanned_ = 0;
  head_taken_ = 0;
  body_limit_ = 0;
  framing_ = 0;
  status_ = 0;
  message_.clear();
}

net::mutable_buffer RequestReader::prepare() {
  // A head is read 4 KiB at a time (an idle connection holds no more), a body 64 KiB.
  const size_t want = phase_ == Phase::Body ? kReadBufferBytes : kHeadReadBytes;
  const size_t room = buffer_.max_size() - std::min(buffer_.max_size(), buffer_.size());
  return buffer_.prepare(std::max<size_t>(1, std::min(room, want)));
}

RequestReader::Event RequestReader::commit(size_t n, Time now) {
  buffer_.commit(n);
  last_read_ = now;
  if (n > 0 && phase_ == Phase::Head && !got_bytes_) {
    got_bytes_ = true;
    head_start_ = now;
  }
  return parse();
}

RequestReader::Event RequestReader::end_of_input() {
  return phase_ == Phase::Failed ? Event::Failed : Event::Closed;
}

RequestReader::Event RequestReader::parse() {
  if (phase_ == Phase::Failed) return Event::Failed;
  if (phase_ == Phase::HeadDone) return Event::Head;
  if (phase_ == Phase::Done) return Event::Body;
  for (;;) {
    if (phase_ == Phase::Head && !parser_->got_some()) {
      // An empty line before a request line is ignored (RFC 9112 section 2.2), as some clients
      // send one after a body; a lone CR waits for its LF.
      for (auto b = buffer_.cdata(); b.size() >= 2 && std::memcmp(b.data(), "\r\n", 2) == 0; b = buffer_.cdata())
        buffer_.consume(2);
      if (buffer_.size() == 1 && *static_cast<const char*>(buffer_.cdata().data()) == '\r') return Event::NeedMore;
    }
    if (phase_ == Phase::Body) return parse_body();
    if (buffer_.size() == 0) return Event::NeedMore;
    const net::const_buffer data = buffer_.cdata();
    // Beast parses a start line from whatever the first read brought, and later ones only once
      // it sees the end of the head: its verdict on a broken head would depend on where the
      // reads split it. So it gets the head up to its end (CRLF CRLF, or LF LF for a head with
      // bare line ends); a head longer than max_header_bytes is refused here, counting what
    // Beast already took.
    const size_t offered = head_end(static_cast<const char*>(data.data()), data.size());
    const size_t left = opt_.max_header_bytes - std::min(opt_.max_header_bytes, head_taken_);
    if (offered == 0 ? data.size() >= left : offered > left) return failed(http::error::header_limit);
    if (offered == 0) {
      head_scanned_ = std::max(head_scanned_, data.size() < 3 ? 0 : data.size() - 3);
      return Event::NeedMore;
    }
    beast::error_code ec;
    const size_t used = parser_->put(net::const_buffer(data.data(), offered), ec);
    buffer_.consume(used);
    head_scanned_ -= std::min(head_scanned_, used);  // Beast takes whole fields of a head it has not all of
    head_taken_ += used;
    if (ec == http::error::need_more) {
      if (used == 0) head_scanned_ = std::max(head_scanned_, offered);  // not the head's end for Beast: the next one
      continue;
    }
    if (ec) return failed(ec);
    if (!parser_->is_header_done()) continue;
    if (auto bad = framing_error(parser_->get()))
      return fail(bad->first, (bad->first == 400 ? "malformed HTTP request: " : "") + bad->second);
    phase_ = Phase::HeadDone;
    return Event::Head;
  }
}

// The body, framed here rather than by Beast (whose chunk parser charges a chunk's size against
// the body limit again each time it re-reads an unfinished chunk-size line): Content-Length
// bytes, or RFC 9112's chunked coding, one step at a time on what is buffered.
RequestReader::Event RequestReader::parse_body() {
  std::string& body = parser_->get().body();
  for (;;) {
    const auto data = buffer_.cdata();
    const char* p = static_cast<const char*>(data.data());
    const size_t n = data.size();
    if (chunk_ == Chunk::Data || chunk_ == Chunk::Length) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(left_, n));
      body.append(p, take);
      buffer_.consume(take);
      left_ -= take;
      if (left_ > 0) return Event::NeedMore;
      if (chunk_ == Chunk::Length) return body_done();
      chunk_ = Chunk::DataEnd;
      continue;
    }
    if (chunk_ == Chunk::DataEnd) {
      if (n < 2) return Event::NeedMore;
      if (p[0] != '\r' || p[1] != '\n') return fail(400, "malformed HTTP request: bad chunk (its data does not end with CRLF)");
      consume_framing(2);
      chunk_ = Chunk::Size;
      continue;
    }
    // A chunk-size line, or a line of the trailer part: up to its LF, within kMaxChunkHeaderBytes
    // (the trailer part as a whole).
    const size_t room = kMaxChunkHeaderBytes - std::min(kMaxChunkHeaderBytes, chunk_ == Chunk::Trailer ? trailer_bytes_ : 0);
    const char* lf = static_cast<const char*>(std::memchr(p, '\n', std::min(n, room)));
    if (!lf) {
      if (n < room) return Event::NeedMore;
      return fail(400, "malformed HTTP request: a chunk header, chunk extension or trailer part exceeds " +
                           std::to_string(kMaxChunkHeaderBytes) + " bytes");
    }
    const size_t line = static_cast<size_t>(lf - p) + 1;
    if (line < 2 || p[line - 2] != '\r') return fail(400, "malformed HTTP request: bad chunk (a line without CRLF)");
    const std::string_view text(p, line - 2);
    if (chunk_ == Chunk::Trailer) {
      trailer_bytes_ += line;
      if (text.empty()) {
        consume_framing(line);
        return body_done();
      }
      if (!trailer_field_ok(text)) return fail(400, "malformed HTTP request: bad trailer field");
      consume_framing(line);
      continue;
    }
    uint64_t size = 0;
    size_t i = 0;
    for (; i < text.size() && std::isxdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (size >> 60) return fail(400, "malformed HTTP request: bad chunk size (past 2^64)");
      const char c = text[i];
      size = size * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    if (i == 0) return fail(400, "malformed HTTP request: bad chunk size (not hexadecimal)");
    if (!chunk_extensions_ok(text.substr(i))) return fail(400, "malformed HTTP request: bad chunk extension");
    if (size > body_limit_ - std::min<uint64_t>(body_limit_, body.size()))
      return fail(413, "request body exceeds the limit of " + std::to_string(body_limit_) + " bytes");
    consume_framing(line);
    if (size == 0) {
      chunk_ = Chunk::Trailer;
      trailer_bytes_ = 0;
      continue;
    }
    left_ = size;
    chunk_ = Chunk::Data;
    if (auto e = framing_within_slack()) return *e;
  }
}

void RequestReader::read_body(size_t limit, Time now) {
  body_limit_ = limit;
  body_start_ = last_read_ = now;
  framing_ = 0;
  phase_ = parser_->is_done() ? Phase::Done : Phase::Body;
  if (phase_ != Phase::Body) return;
  if (parser_->chunked()) {
    chunk_ = Chunk::Size;
  } else {
    chunk_ = Chunk::Length;
    left_ = parser_->content_length().value_or(0);
    if (left_ > limit) fail(413, "request body exceeds the limit of " + std::to_string(limit) + " bytes");
  }
}

RequestReader::Event RequestReader::body_done() {
  phase_ = Phase::Done;
  return Event::Body;
}

void RequestReader::consume_framing(size_t n) {
  buffer_.consume(n);
  framing_ += n;
}

std::optional<RequestReader::Event> RequestReader::framing_within_slack() {
  const size_t data_bytes = body().size();
  if (framing_ <= data_bytes + kFramingSlack) return std::nullopt;
  return fail(400, "malformed HTTP request: chunked framing of " + std::to_string(framing_) + " bytes for " +
                       std::to_string(data_bytes) + " bytes of data");
}

RequestReader::Message RequestReader::release() {
  Message m = parser_->release();
  parser_.reset();
  phase_ = Phase::Done;
  return m;
}

Time RequestReader::deadline() const {
  if (phase_ == Phase::Head)
    return got_bytes_ ? after(head_start_, opt_.header_timeout) : after(started_, opt_.idle_timeout);
  if (phase_ != Phase::Body) return Time::max();
  const size_t rate = opt_.min_body_bytes_per_sec;
  if (rate == 0) return after(last_read_, opt_.request_timeout);
  const double seconds = (static_cast<double>(body().size()) + static_cast<double>(rate)) / static_cast<double>(rate);
  return after(after(body_start_, opt_.body_grace), std::chrono::duration<double>(seconds));
}

size_t RequestReader::head_end(const char* p, size_t n) {
  for (size_t i = std::min(head_scanned_, n); i < n; ++i) {
    if (p[i] != '\n') continue;
    if (i >= 3 && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r') return i + 1;
    if (i + 1 < n && p[i + 1] == '\n') return i + 2;
  }
  return 0;
}

RequestReader::Event RequestReader::fail(int status, std::string message) {
  phase_ = Phase::Failed;
  status_ = status;
  message_ = std::move(message);
  return Event::Failed;
}

RequestReader::Event RequestReader::failed(const beast::error_code& ec) {
  if (ec == http::error::body_limit)
    return fail(413, "request body exceeds the limit of " + std::to_string(body_limit_) + " bytes");
  if (ec == http::error::header_limit)
    return fail(431, "request header exceeds the limit of " + std::to_string(opt_.max_header_bytes) + " bytes");
  return fail(400, "malformed HTTP request: " + ec.message());
}

}  // namespace hg::server
