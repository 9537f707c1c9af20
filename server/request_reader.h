// Internal to the HTTP layer: one connection's requests read from its bytes, with no I/O and no
// clock of its own (sans-I/O). The connection (Session, http_session.cpp) reads from its socket
// into prepare(), commits what arrived and acts on what the bytes made; deadline() says when it
// must be cut if nothing more arrives. The streaming fuzz target drives the same reader with
// bytes split at arbitrary points and simulated time.
//
//   RequestReader r(opt);
//   r.next_request(now);
//   for (auto e = r.parse();; ) {
//     if (e == RequestReader::Event::NeedMore) {     // read into r.prepare() before r.deadline()
//       e = r.commit(read(r.prepare()), now);
//     } else if (e == RequestReader::Event::Head) {  // r.head(): route it, then take its body
//       r.read_body(limit, now);
//       e = r.parse();
//     } else if (e == RequestReader::Event::Body) {  // r.release(): the request; r.next_request(now)
//       ...
//     } else break;                                  // Failed: answer r.status(), r.message(); Closed
//   }
//
// Beast parses heads, each handed over whole; bodies (Content-Length or chunked, RFC 9112 section
// 7.1) are framed here, trailer fields checked and dropped. Bounds, each the same however the
// bytes are split: a head within max_header_bytes (431), a body within the limit read_body()
// sets (413), a chunk-size line with its extensions or a trailer part within
// kMaxChunkHeaderBytes, a chunked body's framing within kFramingSlack of its data, and anything
// Beast's parser or RFC 9112 refuses (400, or 501 for a transfer coding besides chunked). The
// buffer never holds more than the head limit or kReadBufferBytes (whichever is larger), plus
// one read.
#pragma once
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "server/http_server.h"

namespace hg::server {

// A request body held in a std::string that grows with the bytes that arrive (geometrically),
// not reserved at its declared Content-Length as beast's string_body does: a slow upload holds
// (and is counted in flight for) what it sent, not what it announced.
struct GrowingBody {
  using value_type = std::string;
  static std::uint64_t size(const value_type& v) { return v.size(); }
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& b) : body_(b) {}
    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t n = 0;
      for (auto b : boost::beast::buffers_range_ref(buffers)) {
        body_.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      ec = {};
      return n;
    }
    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

class RequestReader {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;
  using Parser = boost::beast::http::request_parser<GrowingBody>;
  using Message = Parser::value_type;
  static constexpr size_t kMaxChunkHeaderBytes = 1024;
  static constexpr size_t kReadBufferBytes = size_t{64} << 10;
  static constexpr size_t kHeadReadBytes = size_t{4} << 10;
  static constexpr size_t kFramingSlack = size_t{64} << 10;

  enum class Event {
    NeedMore,  // read more bytes (into prepare()) before deadline()
    Head,      // a request's head is parsed and sound: head(); then read_body()
    Body,      // the request is complete: release()
    Failed,    // the bytes are not a request we take: answer status() and message(), then close
    Closed,    // the peer ended the connection (or the request) early: close without an answer
  };

  explicit RequestReader(const HttpServerOptions& opt);

  // Starts reading the next request at `now` (bytes already buffered are its first bytes).
  void next_request(Time now);
  // Parses what is buffered.
  Event parse();
  // Where the next read goes (never empty), then how much arrived there.
  boost::asio::mutable_buffer prepare();
  Event commit(size_t n, Time now);
  // The peer shut its side of the connection.
  Event end_of_input();

  // When the connection must be cut if no more bytes arrive: idle_timeout for a request's first
  // byte, header_timeout for the rest of its head, and for the body min_body_bytes_per_sec on
  // average after body_grace (body data only: chunk framing is not progress), or
  // request_timeout after each read without a rate floor. Time::max() while not reading.
  Time deadline() const;

  // After Head (and while reading the body).
  const Message& head() const { return parser_->get(); }
  boost::optional<std::uint64_t> content_length() const { return parser_->content_length(); }
  bool message_done() const { return parser_->is_done(); }
  // Reads the body, of at most `limit` bytes, from `now`.
  void read_body(size_t limit, Time now);
  bool in_body() const { return phase_ == Phase::Body; }
  const std::string& body() const { return parser_->get().body(); }
  // After Body: the request; the reader is then idle until next_request().
  Message release();

  // After Failed: the answer. had_head(): the head was parsed (a request line to report).
  int status() const { return status_; }
  const std::string& message() const { return message_; }
  bool had_head() const { return parser_ && parser_->is_header_done(); }

  // Nothing of a next request has arrived.
  bool idle() const { return buffer_.size() == 0 && !(parser_ && parser_->got_some()); }
  size_t buffered() const { return buffer_.size(); }
  size_t buffer_limit() const { return buffer_.max_size(); }

 private:
  enum class Phase { Head, HeadDone, Body, Done, Failed };
  enum class Chunk { Length, Size, Data, DataEnd, Trailer };  // where a body's framing is
  Event parse_body();
  Event body_done();
  void consume_framing(size_t n);
  std::optional<Event> framing_within_slack();
  // The end of the head in p[0, n) (past its empty line), or 0; scans from head_scanned_.
  size_t head_end(const char* p, size_t n);
  Event fail(int status, std::string message);
  Event failed(const boost::beast::error_code& ec);

  const HttpServerOptions& opt_;
  boost::beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Phase phase_ = Phase::Done;
  Time started_{}, head_start_{}, body_start_{}, last_read_{};
  bool got_bytes_ = false;   // of this request (the header deadline runs)
  size_t head_scanned_ = 0;  // of the buffer, for the end of the head
  size_t head_taken_ = 0;    // bytes of the head Beast has parsed
  size_t body_limit_ = 0;
  Chunk chunk_ = Chunk::Length;
  uint64_t left_ = 0;        // of the Content-Length body or the chunk being read
  size_t framing_ = 0;       // chunk-size lines, CRLFs and trailers read
  size_t trailer_bytes_ = 0;
  int status_ = 0;
  std::string message_;
};

}  // namespace hg::server
