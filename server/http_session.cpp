#include <sys/socket.h>

#include <algorithm>
#include <utility>
#include <cerrno>

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
constexpr size_t kHeadReserve = size_t{64} << 10;  // counted in flight when a body starts

std::string str(beast::string_view v) { return std::string(v.data(), v.size()); }

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
    if (self->state_ == State::Reading && self->reader_.idle()) self->close();
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

// Reads the next request: what is buffered (pipelined) first, then from the socket, each read
// before the reader's deadline (idle, header, body rate).
void Session::do_read() {
  if (shutdown_) return close();
  state_ = State::Reading;
  head_ = false;  // an error answered before the next head is parsed has its body
  method_.clear();
  target_.clear();
  evictable_ = true;
  reader_.next_request(SteadyClock::now());
  on_read(reader_.parse());
}

void Session::read_more() {
  const SteadyClock::time_point deadline = reader_.deadline();
  if (deadline == SteadyClock::time_point::max()) stream_.expires_never();
  else stream_.expires_at(deadline);
  stream_.async_read_some(reader_.prepare(), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec) return self->close();  // too slow, the peer left, or the drain closed us
    self->on_read(self->reader_.commit(n, SteadyClock::now()));
  });
}

void Session::on_read(RequestReader::Event e) {
  using Event = RequestReader::Event;
  if ((reader_.in_body() || (e == Event::Body && !reader_.body().empty())) && !body_within_budget()) return;
  switch (e) {
    case Event::NeedMore: return read_more();
    case Event::Head: return on_header();
    case Event::Body: return on_body();
    case Event::Failed:
      head_at_ = SteadyClock::now();
      if (reader_.had_head()) {
        version_ = reader_.head().version();
        method_ = str(reader_.head().method_string());
        target_ = str(reader_.head().target());
        head_ = reader_.head().method() == http::verb::head;
      }
      return fail(reader_.status(), reader_.message());
    case Event::Closed: return close();
  }
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

void Session::on_header() {
  head_at_ = SteadyClock::now();
  coding_ = ContentCoding::Identity;
  const auto& msg = reader_.head();
  version_ = msg.version();
  method_ = str(msg.method_string());
  target_ = str(msg.target());
  head_ = msg.method() == http::verb::head;
  request_bytes_ = 0;
  evictable_ = false;
  const boost::optional<uint64_t> length = reader_.content_length();
  // An answer from the head alone: a small body is read and dropped so the connection can
  // stay open; a large one (or one the client waits to be asked for) is never read, and the
  // connection closes after the answer.
  const auto answer_now = [&](HttpResponse r) {
    const bool expects_continue = beast::iequals(msg[http::field::expect], "100-continue");
    if (!reader_.message_done() && length && *length <= kDiscardBytes && !expects_continue && msg.keep_alive()) {
      early_answer_ = std::move(r);
      return read_body(*length);
    }
    state_ = State::Busy;
    keep_alive_ = reader_.message_done() && msg.keep_alive();
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
  // The body is counted in flight as it arrives (read_body_some); a first share now, so that a
  // server at its budget refuses new bodies before reading them.
  const size_t reserve = reader_.message_done() ? 0 : std::min<size_t>(length.value_or(limit), kHeadReserve);
  if (reserve && !srv_->reserve_body(reserve))
    return fail(503, "too many request bytes in flight (limit " + std::to_string(srv_->opt.max_inflight_body_bytes) +
                         " bytes); retry later", {{"Retry-After", "1"}});
  reserved_ = reserve;
  head_reserve_ = reserve;
  if (version_ >= 11 && !reader_.message_done() && beast::iequals(msg[http::field::expect], "100-continue")) {
    stream_.expires_after(srv_->opt.request_timeout);
    net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                     [self = shared_from_this(), limit](beast::error_code ec2, size_t) {
                       if (ec2) return self->close();
                       self->read_body(limit);
                     });
    return;
  }
  read_body(limit);
}

void Session::read_body(size_t limit) {
  body_limit_ = limit;
  reader_.read_body(limit, SteadyClock::now());
  on_read(reader_.parse());
}

// After each read of a body: the memory it holds (the body's capacity) is counted in flight;
// false once the request was answered with an error.
bool Session::body_within_budget() {
  const std::string& body = reader_.body();
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
  auto msg = reader_.release();
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
  if (reader_.buffered() == 0) return close();
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
