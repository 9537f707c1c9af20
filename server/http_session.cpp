#include <sys/socket.h>

#include <algorithm>
#include <utility>
#include <cerrno>
#include <cstring>
#include <limits>

#include "server/http_error.h"
#include "server/http_session.h"
#include "server/router.h"

namespace hg::server {

namespace {
constexpr std::chrono::seconds kLingerTimeout{2};
constexpr uint64_t kDiscardBytes = 64 << 10;  // a refused request's body read (and dropped) to keep its connection
constexpr size_t kInflateStep = size_t{1} << 20;       // output inflated between two turns of the event loop
constexpr size_t kInflateInputStep = size_t{64} << 10;  // and input: empty gzip members make no output
const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
// HTTP/1.1 framing bounds (as nginx bounds them): the unparsed bytes a chunked body may leave in
// the connection's buffer, i.e. one chunk-size line with its extensions, or the whole trailer
// part; the buffer itself never grows past kReadBufferBytes beyond the header limit; and a
// chunked body's framing (chunk headers, CRLFs, trailers) may not outweigh its data by more
// than kFramingSlack.
constexpr size_t kMaxChunkHeaderBytes = 1024;
constexpr size_t kReadBufferBytes = size_t{64} << 10;
constexpr size_t kFramingSlack = size_t{64} << 10;
constexpr size_t kHeadReserve = size_t{64} << 10;  // counted in flight when a body starts

std::string str(beast::string_view v) { return std::string(v.data(), v.size()); }

// RFC 9112's framing rules that Beast leaves to its caller, checked on a parsed head: the
// status and message of the answer (the connection then closes), or nullopt when it is sound.
// - Transfer-Encoding (section 6.1, 6.3): refused in HTTP/1.0 (the framing is faulty); chunked
//   must be the final coding, or the body's length is unknown (400: what follows would be read
//   as the next request); another coding before it is not implemented (501).
// - Host (section 3.2): exactly one in an HTTP/1.1 request, at most one in any.
std::optional<std::pair<int, std::string>> framing_error(const http::request_parser<GrowingBody>::value_type& msg) {
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

// The status line and headers every answer carries, plain or streamed.
template <class Message>
void set_head(Message& m, const HttpResponse& r, unsigned version) {
  m.version(version);
  m.result(static_cast<unsigned>(r.status));
  m.set(http::field::server, "hgraph");
  m.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) m.set(beast::string_view(k.data(), k.size()), v);
}
}  // namespace

// The sink of a streamed response: holds the session until closed or dropped, and the server
// state until dropped.
class StreamSink : public ResponseStream {
 public:
  StreamSink(std::shared_ptr<HttpServer::Impl> srv, std::shared_ptr<Session> s)
      : srv_(std::move(srv)), session_(std::move(s)) {}
  ~StreamSink() override { close(); }
  bool write(std::string chunk) override {
    std::lock_guard lk(mu_);
    if (!session_ || session_->stream_dead()) return false;
    if (chunk.empty()) return true;  // an empty chunk would end the body
    if (!session_->take_unsent(chunk.size())) return false;
    net::post(session_->executor(), [s = session_, c = std::move(chunk)]() mutable { s->push_chunk(std::move(c)); });
    return true;
  }
  bool ready() const override {
    std::lock_guard lk(mu_);
    return !session_ || session_->stream_dead() || !session_->backlogged();  // a dead one: write() says so
  }
  void close() override {
    std::lock_guard lk(mu_);
    if (!session_) return;
    auto ex = session_->executor();
    net::post(ex, [s = std::move(session_)] { s->end_stream(); });
  }

 private:
  std::shared_ptr<HttpServer::Impl> srv_;  // destroyed after the session
  mutable std::mutex mu_;
  std::shared_ptr<Session> session_;
};

Session::~Session() {
  answered();
  srv_->session_closed(this);
}

std::shared_ptr<ResponseStream> Session::make_sink() {
  return std::make_shared<StreamSink>(srv_->self.lock(), shared_from_this());
}

void Session::start() {
  buffer_.max_size(std::max(srv_->opt.max_header_bytes, kReadBufferBytes) + 4096);
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
}

void Session::close_if_reading() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->shutdown_ = true;
    if (self->state_ == State::Reading || self->state_ == State::Closed) self->close();
  });
}

void Session::shutdown() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->shutdown_ = true;
    if (self->state_ == State::Reading && self->buffer_.size() == 0 && !(self->parser_ && self->parser_->got_some()))
      self->close();
  });
}

void Session::report(const HttpResponse& r) {
  ResponseRecord rec;
  rec.method = method_;
  rec.target = target_;
  rec.status = r.status;
  rec.request_bytes = request_bytes_;
  rec.response_bytes = head_ ? 0 : r.body.size();
  rec.duration = std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - head_at_);
  rec.request_id = r.request_id;
  srv_->responded(rec);
}

void Session::write(HttpResponse r) {
  if (state_ != State::Busy) {
    if (r.stream) r.stream(make_sink());  // the connection is gone: the sink refuses every write
    return;
  }
  if (r.status < 200 || r.status > 599)  // 1xx is never a final answer
    r = json_error(500, "the request handler answered with status " + std::to_string(r.status));
  // 204 and 304 answers have no body and no Content-Length (RFC 9110 sections 8.6, 15.3.5, 15.4.5).
  const bool bodiless = r.status == 204 || r.status == 304;
  if (bodiless) r.body.clear();
  report(r);
  if (head_ || bodiless) r.stream = nullptr;  // HEAD: the header alone; nothing is produced
  if (r.stream) return start_stream(std::move(r));
  state_ = State::Writing;
  res_.emplace();
  set_head(*res_, r, version_);
  res_->body() = std::move(r.body);
  res_->keep_alive(keep_alive_ && !closing() && !reserve_);
  res_->prepare_payload();
  if (head_) res_->body().clear();  // Content-Length stays that of the GET answer
  if (bodiless) res_->erase(http::field::content_length);
  stream_.expires_after(srv_->opt.request_timeout);
  http::async_write(stream_, *res_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

bool Session::take_unsent(size_t n) {
  size_t have = unsent_.load(std::memory_order_relaxed);
  do {
    if (n > srv_->opt.max_unsent_bytes - std::min(have, srv_->opt.max_unsent_bytes)) {
      // The client does not read its answer: stop queueing for it and close the connection.
      if (!dead_.exchange(true)) net::post(executor(), [self = shared_from_this()] { self->fail_stream(); });
      return false;
    }
  } while (!unsent_.compare_exchange_weak(have, have + n, std::memory_order_relaxed));
  return true;
}

void Session::push_chunk(std::string chunk) {
  if (state_ != State::Streaming || stream_end_) return;
  chunks_.push_back(std::move(chunk));
  pump();
}

void Session::end_stream() {
  if (state_ != State::Streaming || stream_end_) return;
  stream_end_ = true;
  pump();
}

void Session::cut() {
  dead_ = true;
  beast::error_code ec;
  stream_.socket().close(ec);
}

void Session::start_stream(HttpResponse r) {
  state_ = State::Streaming;
  stream_end_ = false;
  shdr_.emplace();
  set_head(*shdr_, r, version_);
  shdr_->keep_alive(keep_alive_ && !closing() && version_ >= 11 && !reserve_);
  if (version_ >= 11) shdr_->chunked(true);  // HTTP/1.0: the body ends when the connection closes
  ssr_.emplace(*shdr_);
  if (!r.body.empty()) {
    unsent_.fetch_add(r.body.size(), std::memory_order_relaxed);  // subtracted once written, as the sink's
    chunks_.push_back(std::move(r.body));
  }
  writing_ = true;
  stream_.expires_after(srv_->opt.request_timeout);
  http::async_write_header(stream_, *ssr_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_chunk_written(ec); });
  if (!watching_) watch_peer();
  r.stream(make_sink());
}

// While a request is handled or its answer streamed nothing is read; a wait for readability
// notices a client that went away. A one-byte peek tells them apart: 0 bytes is the peer's
// EOF, data is a pipelined request (left for later), EAGAIN a spurious wake-up.
void Session::watch_peer() {
  watching_ = true;
  stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    self->watching_ = false;
    if (ec || (self->state_ != State::Streaming && self->state_ != State::Busy)) return;
    char byte;
    ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_peer();
    if (n > 0) return;
    if (self->cancelled_) self->cancelled_->store(true);
    if (self->state_ == State::Streaming) self->fail_stream();
  });
}

void Session::pump() {
  if (writing_ || state_ != State::Streaming) return;
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->on_chunk_written(ec); };
  if (!chunks_.empty()) {
    cur_chunk_ = std::move(chunks_.front());
    chunks_.pop_front();
    writing_ = true;
    stream_.expires_after(srv_->opt.request_timeout);
    if (version_ >= 11) net::async_write(stream_, http::make_chunk(net::buffer(cur_chunk_)), std::move(done));
    else net::async_write(stream_, net::buffer(cur_chunk_), std::move(done));
  } else if (stream_end_) {
    writing_ = true;
    last_sent_ = true;
    stream_.expires_after(srv_->opt.request_timeout);
    if (version_ >= 11) net::async_write(stream_, http::make_chunk_last(), std::move(done));
    else net::post(stream_.get_executor(), [done = std::move(done)]() mutable { done({}, 0); });
  }
}

void Session::on_chunk_written(beast::error_code ec) {
  writing_ = false;
  unsent_.fetch_sub(std::exchange(cur_chunk_, std::string()).size(), std::memory_order_relaxed);
  if (ec) return fail_stream();
  if (!last_sent_) return pump();
  // The response is complete: stop watching the peer (no write is pending now), then carry on.
  stream_.expires_never();
  last_sent_ = false;
  bool said_keep_alive = shdr_->keep_alive();
  bool reuse = said_keep_alive && version_ >= 11 && !closing();
  answered();
  ssr_.reset();
  shdr_.reset();
  beast::error_code ignored;
  if (watching_) stream_.socket().cancel(ignored);
  state_ = State::Writing;
  if (reuse) return do_read();
  if (said_keep_alive) return close_after_keep_alive();
  linger_close();
}

void Session::fail_stream() {
  dead_ = true;
  if (cancelled_) cancelled_->store(true);  // the producer stops without another write
  chunks_.clear();
  close();
}

// Waits up to idle_timeout for the first byte of the next request, then reads its header.
void Session::do_read() {
  if (shutdown_) return close();
  state_ = State::Reading;
  head_ = false;  // an error answered before the next head is parsed has its body
  method_.clear();
  target_.clear();
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(srv_->opt.max_header_bytes));
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // on_header sets this request's limit
  evictable_ = true;
  if (buffer_.size() > 0) return read_header();  // pipelined
  stream_.expires_after(srv_->opt.idle_timeout);
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec) return self->close();  // idle too long, the peer left, or the drain closed us
    self->buffer_.commit(n);
    self->read_header();
  });
}

void Session::read_header() {
  // An empty line before a request line is ignored (RFC 9112 section 2.2), as some clients send
  // one after a body.
  for (auto b = buffer_.cdata(); b.size() >= 2 && std::memcmp(b.data(), "\r\n", 2) == 0; b = buffer_.cdata())
    buffer_.consume(2);
  stream_.expires_after(srv_->opt.header_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

// Answers an error the HTTP layer detects itself (or on_head's answer), then closes the
// connection without reading the rest of the request.
void Session::fail(int status, std::string_view message, std::vector<std::pair<std::string, std::string>> headers) {
  HttpResponse r = json_error(status, message);
  r.headers = std::move(headers);
  state_ = State::Busy;
  keep_alive_ = false;
  write(std::move(r));
}

void Session::fail_chunk_header() {
  fail(400, "malformed HTTP request: a chunk header, chunk extension or trailer part exceeds " +
                std::to_string(kMaxChunkHeaderBytes) + " bytes");
}

bool Session::read_error(beast::error_code ec) {
  if (!ec) return false;
  static const auto& http_category = http::make_error_code(http::error::bad_method).category();
  if (ec == http::error::buffer_overflow) {
    fail_chunk_header();
  } else if (ec == http::error::body_limit) {
    fail(413, "request body exceeds the limit of " + std::to_string(body_limit_) + " bytes");
  } else if (ec == http::error::header_limit) {
    fail(431, "request header exceeds the limit of " + std::to_string(srv_->opt.max_header_bytes) + " bytes");
  } else if (ec.category() == http_category && ec != http::error::end_of_stream && ec != http::error::partial_message) {
    fail(400, "malformed HTTP request: " + ec.message());
  } else {
    close();  // the peer went away, was too slow, or we are shutting down
  }
  return true;
}

void Session::on_header(beast::error_code ec) {
  head_at_ = SteadyClock::now();
  coding_ = ContentCoding::Identity;
  if (read_error(ec)) return;
  auto& msg = parser_->get();
  version_ = msg.version();
  method_ = str(msg.method_string());
  target_ = str(msg.target());
  head_ = msg.method() == http::verb::head;
  request_bytes_ = 0;
  evictable_ = false;
  if (auto bad = framing_error(msg)) {
    const int status = bad->first;
    return fail(status, (status == 400 ? "malformed HTTP request: " : "") + bad->second);
  }
  const boost::optional<uint64_t> length = parser_->content_length();
  // An answer from the head alone: a small body is read and dropped so the connection can
  // stay open; a large one (or one the client waits to be asked for) is never read, and the
  // connection closes after the answer.
  const auto answer_now = [&](HttpResponse r) {
    const bool expects_continue = beast::iequals(msg[http::field::expect], "100-continue");
    if (!parser_->is_done() && length && *length <= kDiscardBytes && !expects_continue && msg.keep_alive()) {
      early_answer_ = std::move(r);
      parser_->body_limit(*length);
      body_limit_ = *length;
      return read_body();
    }
    state_ = State::Busy;
    keep_alive_ = parser_->is_done() && msg.keep_alive();
    write(std::move(r));
  };
  const std::string_view path = target_path(target_);
  if (reserve_) {
    const auto& paths = srv_->opt.reserve_paths;
    if (std::find(paths.begin(), paths.end(), path) == paths.end())
      return fail(503, "the server is at its connection limit (" + std::to_string(srv_->max_connections) +
                           "); retry later", {{"Retry-After", "1"}});
  }
  size_t limit = srv_->opt.max_body_bytes;
  bool compressed_ok = false;
  if (srv_->opt.on_head) {
    HttpRequest head;
    head.method = method_;
    head.target = target_;
    for (const auto& f : msg) head.headers.emplace_back(str(f.name_string()), str(f.value()));
    HeadCheck check;
    try {
      check = srv_->opt.on_head(head);
    } catch (const std::exception& e) {
      check.answer = json_error(500, std::string("internal error: ") + e.what());
    }
    if (check.answer) return answer_now(std::move(*check.answer));
    limit = std::min(limit, check.max_body_bytes);
    compressed_ok = check.compressed_body;
  }
  const beast::string_view encoding = msg[http::field::content_encoding];
  const size_t encodings = msg.count(http::field::content_encoding);
  const std::optional<ContentCoding> coding =
      encodings > 1 ? std::nullopt : parse_content_encoding({encoding.data(), encoding.size()});
  if (!coding) {
    const std::string what = encodings > 1 ? "a body with " + std::to_string(encodings) + " Content-Encoding fields"
                                           : "Content-Encoding '" + printable({encoding.data(), encoding.size()}, 64) + "'";
    HttpResponse r = json_error(415, what + " is not supported: send gzip, deflate or identity (one coding, not a list)");
    r.headers.emplace_back("Accept-Encoding", "gzip, deflate");
    return answer_now(std::move(r));
  }
  if (*coding != ContentCoding::Identity && !compressed_ok) {
    HttpResponse r = json_error(415, method_ + " " + printable(path) + " takes no compressed body (Content-Encoding: " +
                                         coding_name(*coding) + "); send it uncompressed");
    r.headers.emplace_back("Accept-Encoding", "identity");
    return answer_now(std::move(r));
  }
  coding_ = *coding;
  if (length && *length > limit)
    return fail(413, "request body of " + std::to_string(*length) + " bytes exceeds the limit of " +
                         std::to_string(limit) + " bytes for " + method_ + " " + std::string(path));
  parser_->body_limit(limit);
  body_limit_ = limit;
  // The body is counted in flight as it arrives (read_body_some); a first share now, so that a
  // server at its budget refuses new bodies before reading them.
  const size_t reserve = parser_->is_done() ? 0 : std::min<size_t>(length.value_or(limit), kHeadReserve);
  if (reserve && !srv_->reserve_body(reserve))
    return fail(503, "too many request bytes in flight (limit " + std::to_string(srv_->opt.max_inflight_body_bytes) +
                         " bytes); retry later", {{"Retry-After", "1"}});
  reserved_ = reserve;
  head_reserve_ = reserve;
  if (version_ >= 11 && !parser_->is_done() && beast::iequals(msg[http::field::expect], "100-continue")) {
    stream_.expires_after(srv_->opt.request_timeout);
    net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                     [self = shared_from_this()](beast::error_code ec2, size_t) {
                       if (ec2) return self->close();
                       self->read_body();
                     });
    return;
  }
  read_body();
}

void Session::read_body() {
  if (parser_->is_done()) return on_body();
  body_start_ = SteadyClock::now();
  body_read_ = 0;
  read_body_some();
}

// Each read must come in time for the body's average rate to stay at min_body_bytes_per_sec
// (after body_grace): a client trickling bytes is cut off, whatever the body's size. Progress
// is body data only: chunk headers, extensions and trailers do not count.
void Session::read_body_some() {
  const HttpServerOptions& o = srv_->opt;
  const size_t data = parser_->get().body().size();
  if (o.min_body_bytes_per_sec == 0) {
    stream_.expires_after(o.request_timeout);
  } else {
    const double seconds = static_cast<double>(data + o.min_body_bytes_per_sec) /
                           static_cast<double>(o.min_body_bytes_per_sec);
    stream_.expires_at(body_start_ + o.body_grace +
                       std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(seconds)));
  }
  http::async_read_some(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->body_read_ += n;
    if (self->read_error(ec)) return;
    if (!self->body_within_bounds()) return;
    if (self->parser_->is_done()) return self->on_body();
    self->read_body_some();
  });
}

// After each read of a body: its framing is within bounds, and the memory it holds (the body's
// capacity) is counted in flight; false once the request was answered with an error.
bool Session::body_within_bounds() {
  const std::string& body = parser_->get().body();
  if (parser_->chunked()) {
    if (!parser_->is_done() && buffer_.size() > kMaxChunkHeaderBytes) {
      fail_chunk_header();
      return false;
    }
    const size_t framing = body_read_ - std::min(body_read_, body.size() + buffer_.size());
    if (framing > body.size() + kFramingSlack) {
      fail(400, "malformed HTTP request: chunked framing of " + std::to_string(framing) + " bytes for " +
                    std::to_string(body.size()) + " bytes of data");
      return false;
    }
  }
  if (body.capacity() > reserved_) {
    if (!srv_->reserve_body(body.capacity() - reserved_, reserved_)) {
      fail(503, "too many request bytes in flight (limit " + std::to_string(srv_->opt.max_inflight_body_bytes) +
                    " bytes); retry later", {{"Retry-After", "1"}});
      return false;
    }
    reserved_ = body.capacity();
  }
  return true;
}

void Session::on_body() {
  stream_.expires_never();
  auto msg = parser_->release();
  parser_.reset();
  keep_alive_ = msg.keep_alive();
  if (early_answer_) {  // answered from the head; the body was read only to keep the connection
    state_ = State::Busy;
    HttpResponse r = std::move(*early_answer_);
    early_answer_.reset();
    return write(std::move(r));
  }
  HttpRequest req;
  req.method = method_;
  req.target = target_;
  req.body = std::move(msg.body());
  request_bytes_ = req.body.size();
  req.headers.reserve(8);
  for (const auto& f : msg)  // an inflated body is handed on without its Content-Encoding
    if (coding_ == ContentCoding::Identity || f.name() != http::field::content_encoding)
      req.headers.emplace_back(str(f.name_string()), str(f.value()));
  state_ = State::Busy;
  counted_ = true;
  srv_->request_begun();
  if (coding_ == ContentCoding::Identity) return handle(std::move(req));
  compressed_ = std::move(req.body);
  req.body = std::string();
  inflating_ = std::move(req);
  inflate_some();
}

// One step of inflating a compressed body (bounded in output and in input bytes), on one of the
// offload threads when the server has them (HttpServerOptions::offload), else on this I/O thread;
// the next step is posted, so other connections are served between steps. The memory a step will
// take is counted in flight before it is taken.
void Session::inflate_some() {
  if (state_ != State::Busy || !inflating_) return;  // the connection was cut meanwhile
  try {
    if (!inflater_) inflater_ = std::make_unique<Inflater>(deflated(coding_), compressed_, body_limit_, body_name(coding_));
    const size_t need = std::max(head_reserve_, compressed_.size() + inflater_->capacity_after_step(kInflateStep));
    if (need > reserved_) {
      if (!srv_->reserve_body(need - reserved_))
        throw HttpError(503, "too many request bytes in flight (limit " +
                                 std::to_string(srv_->opt.max_inflight_body_bytes) + " bytes) to inflate this " +
                                 coding_name(coding_) + " body; retry later");
      reserved_ = need;
    }
    if (!srv_->opt.offload) return inflated(inflater_->step(kInflateStep, kInflateInputStep), nullptr);
    // Only this task touches the inflater until it posts back: the strand waits for it. It keeps
    // the server state (the io_context it posts to) until after it has let go of the session.
    auto work = [srv = srv_->self.lock(), self = shared_from_this()]() mutable {
      bool done = false;
      std::exception_ptr error;
      try {
        done = self->inflater_->step(kInflateStep, kInflateInputStep);
      } catch (...) {
        error = std::current_exception();
      }
      auto ex = self->stream_.get_executor();
      net::post(ex, [self = std::move(self), done, error] { self->inflated(done, error); });
    };
    if (!srv_->opt.offload(std::move(work)))
      throw HttpError(503, "too many request bodies waiting to be inflated; retry later");
  } catch (...) {
    inflated(false, std::current_exception());
  }
}

void Session::inflated(bool done, std::exception_ptr error) {
  if (state_ != State::Busy || !inflating_) return;
  if (!error && !done) return net::post(stream_.get_executor(), [self = shared_from_this()] { self->inflate_some(); });
  if (error) {
    inflater_.reset();
    inflating_.reset();
    compressed_ = std::string();
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      const int status = http_status(e);
      std::vector<std::pair<std::string, std::string>> headers;
      if (status == 503) headers.emplace_back("Retry-After", "1");
      return answer_error(status, e.what() + (" (" + method_ + " " + printable(target_path(target_)) + ")"),
                          std::move(headers));
    } catch (...) {
      return answer_error(500, "inflating the request body failed");
    }
  }
  HttpRequest req = std::move(*inflating_);
  inflating_.reset();
  req.body = inflater_->take_output();
  inflater_.reset();
  compressed_ = std::string();
  const size_t held = std::max(head_reserve_, req.body.capacity());  // from now on, the plain body
  if (reserved_ > held) {
    srv_->release_body(reserved_ - held);
    reserved_ = held;
  }
  handle(std::move(req));
}

// An error found once the whole body was read: the connection stays usable.
void Session::answer_error(int status, std::string_view message, std::vector<std::pair<std::string, std::string>> headers) {
  HttpResponse r = json_error(status, message);
  r.headers = std::move(headers);
  write(std::move(r));
}

void Session::handle(HttpRequest req) {
  cancelled_ = std::make_shared<std::atomic<bool>>(false);
  req.cancelled = cancelled_;
  if (!watching_) watch_peer();

  // The reply may come from any thread; it always lands back on this session's strand.
  struct ReplyState {
    std::shared_ptr<HttpServer::Impl> srv;  // a reply may outlive the server: keep its state
    std::shared_ptr<Session> session;
    std::atomic<bool> done{false};
    void send(HttpResponse r) {
      if (done.exchange(true)) return;
      auto s = std::move(session);  // a reply kept after answering does not keep the connection
      net::dispatch(s->executor(), [s, r = std::move(r)]() mutable { s->write(std::move(r)); });
    }
    ~ReplyState() {
      if (!done.load()) send(json_error(500, "the request handler did not answer"));
    }
  };
  auto rs = std::make_shared<ReplyState>();
  rs->srv = srv_->self.lock();
  rs->session = shared_from_this();
  Reply reply = [rs](HttpResponse r) { rs->send(std::move(r)); };
  try {
    srv_->handler(std::move(req), reply);
  } catch (const std::exception& e) {
    reply(json_error(500, std::string("internal error: ") + e.what()));
  } catch (...) {
    reply(json_error(500, "internal error"));
  }
}

void Session::on_write(beast::error_code ec) {
  bool eof = res_->need_eof();
  res_.reset();
  beast::error_code ignored;
  if (watching_) stream_.socket().cancel(ignored);
  if (ec) return close();
  answered();
  if (eof || reserve_) return linger_close();
  if (closing()) return close_after_keep_alive();
  do_read();
}

// A response that went out as keep-alive, and the drain began meanwhile: close like an idle
// connection (the client does not expect the close, so waiting for its end would stall the
// drain), unless it already sent more.
void Session::close_after_keep_alive() {
  if (buffer_.size() == 0) return close();
  linger_close();
}

// Stop sending, then read and drop what the client still sends (e.g. the rest of a body
// over the limit) until it closes, so that it sees our response rather than a reset.
void Session::linger_close() {
  state_ = State::Closed;
  evictable_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  stream_.expires_after(kLingerTimeout);
  drain_input();
}

void Session::drain_input() {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->drain_input();
  });
}

// The request in flight (if any) no longer counts for the drain, nor its body for the budget.
void Session::answered() {
  if (counted_) srv_->request_done();
  counted_ = false;
  if (reserved_) srv_->release_body(reserved_);
  reserved_ = 0;
}

void Session::close() {
  answered();
  state_ = State::Closed;
  dead_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace hg::server
