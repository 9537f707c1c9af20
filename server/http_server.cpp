#include "server/http_server.h"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <csignal>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <thread>
#include <unordered_map>

#include "engine/error.h"

namespace hg::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {
constexpr std::chrono::seconds kLingerTimeout{2};
const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string str(beast::string_view v) { return std::string(v.data(), v.size()); }
}  // namespace

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

HttpResponse json_error(int status, std::string_view message) {
  nlohmann::json j = {{"error", std::string(message)}};
  return {status, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json", {}};
}

class Session;

struct HttpServer::Impl {
  // Declared before the io_context so that sessions destroyed with it can still deregister.
  std::weak_ptr<Impl> self;  // streams keep the server state alive (not running) until dropped
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  size_t active = 0;  // connections
  size_t busy = 0;    // requests read and not yet fully answered (streams included)
  std::atomic<bool> stopping{false};
  std::atomic<bool> finished{false};

  HttpServerOptions opt;
  HttpHandler handler;
  uint16_t port = 0;
  bool listening = false;
  std::vector<std::thread> threads;

  net::io_context ioc;
  net::strand<net::io_context::executor_type> ctl{net::make_strand(ioc)};  // acceptor, signals, timer
  tcp::acceptor acceptor{ctl};
  net::signal_set signals{ctl};
  net::steady_timer drain_timer{ctl};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  Impl(HttpServerOptions o, HttpHandler h)
      : opt(std::move(o)), handler(std::move(h)), work(net::make_work_guard(ioc)) {}

  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void begin_stop(const char* why);
  void session_opened(Session* s, std::weak_ptr<Session> w);
  void session_closed(Session* s);
  void request_begun();
  void request_done();
  std::vector<std::shared_ptr<Session>> live_sessions();
  void maybe_finish();  // on ctl: once no request is busy, close the listener and idle connections
  void cut_remaining();  // after the I/O threads exited: close what the drain left open
  void responded(int status) {
    if (opt.on_response) opt.on_response(status);
  }
  void log(const std::string& msg) {
    if (opt.log) {
      *opt.log << msg << std::endl;
    }
  }
};

// One connection: read a request, hand it to the handler, write the reply, repeat.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl* srv, tcp::socket&& socket) : srv_(srv), stream_(std::move(socket)) {}
  ~Session() {
    answered();
    srv_->session_closed(this);
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  // From any thread, once the drain has no request left: close unless answering one.
  void close_if_reading() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->shutdown_ = true;
      if (self->state_ == State::Reading) self->close();
    });
  }

  // From any thread: finish the request in flight (if any), then close.
  void shutdown() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->shutdown_ = true;
      if (self->state_ == State::Reading && self->buffer_.size() == 0 &&
          !(self->parser_ && self->parser_->got_some()))
        self->close();
    });
  }

  // On the session's strand.
  void write(HttpResponse r) {
    if (state_ != State::Busy) {
      if (r.stream) r.stream(make_sink());  // the connection is gone: the sink refuses every write
      return;
    }
    srv_->responded(r.status);
    if (r.stream) return start_stream(std::move(r));
    state_ = State::Writing;
    res_.emplace();
    res_->version(version_);
    res_->result(static_cast<unsigned>(r.status));
    res_->set(http::field::server, "hgraph");
    res_->set(http::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) res_->set(beast::string_view(k.data(), k.size()), v);
    res_->body() = std::move(r.body);
    res_->keep_alive(keep_alive_ && !closing());
    res_->prepare_payload();
    stream_.expires_after(srv_->opt.request_timeout);
    http::async_write(stream_, *res_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  // A streamed body: chunks queued by the sink (from any thread) are written in order, one
  // HTTP chunk each; the last chunk ends the response.
  bool stream_dead() const { return dead_.load(std::memory_order_acquire); }
  void push_chunk(std::string chunk) {
    if (state_ != State::Streaming || stream_end_) return;
    chunks_.push_back(std::move(chunk));
    pump();
  }
  void end_stream() {
    if (state_ != State::Streaming || stream_end_) return;
    stream_end_ = true;
    pump();
  }
  // The server gave up draining; called with the I/O threads stopped.
  void cut() {
    dead_ = true;
    beast::error_code ec;
    stream_.socket().close(ec);
  }

 private:
  enum class State { Reading, Busy, Writing, Streaming, Closed };

  std::shared_ptr<ResponseStream> make_sink();

  void start_stream(HttpResponse r) {
    state_ = State::Streaming;
    stream_end_ = false;
    shdr_.emplace();
    shdr_->version(version_);
    shdr_->result(static_cast<unsigned>(r.status));
    shdr_->set(http::field::server, "hgraph");
    shdr_->set(http::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) shdr_->set(beast::string_view(k.data(), k.size()), v);
    shdr_->keep_alive(keep_alive_ && !closing() && version_ >= 11);
    if (version_ >= 11) shdr_->chunked(true);  // HTTP/1.0: the body ends when the connection closes
    ssr_.emplace(*shdr_);
    if (!r.body.empty()) chunks_.push_back(std::move(r.body));
    writing_ = true;
    stream_.expires_after(srv_->opt.request_timeout);
    http::async_write_header(stream_, *ssr_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_chunk_written(ec);
    });
    watch_peer();
    r.stream(make_sink());
  }

  // While streaming nothing is read; a wait for readability notices a client that went away
  // without consuming a pipelined request. A one-byte peek tells them apart: 0 bytes is the
  // peer's EOF, data is a pipelined request (left for later), EAGAIN a spurious wake-up.
  void watch_peer() {
    watching_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      self->watching_ = false;
      if (ec || self->state_ != State::Streaming) return;
      char byte;
      ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_peer();
      if (n <= 0) self->fail_stream();
    });
  }

  void pump() {
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

  void on_chunk_written(beast::error_code ec) {
    writing_ = false;
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

  void fail_stream() {
    dead_ = true;
    chunks_.clear();
    close();
  }

  void do_read() {
    if (shutdown_) return close();
    state_ = State::Reading;
    parser_.emplace();
    parser_->body_limit(srv_->opt.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(srv_->opt.max_header_bytes));
    stream_.expires_after(srv_->opt.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  // Answers an error the HTTP layer detects itself, then closes the connection.
  void fail(int status, std::string_view message) {
    state_ = State::Busy;
    keep_alive_ = false;
    write(json_error(status, message));
  }

  bool read_error(beast::error_code ec) {
    if (!ec) return false;
    static const auto& http_category = http::make_error_code(http::error::bad_method).category();
    if (ec == http::error::body_limit) {
      fail(413, "request body exceeds the limit of " + std::to_string(srv_->opt.max_body_bytes) + " bytes");
    } else if (ec == http::error::header_limit) {
      fail(431, "request header exceeds the limit of " + std::to_string(srv_->opt.max_header_bytes) + " bytes");
    } else if (ec.category() == http_category && ec != http::error::end_of_stream &&
               ec != http::error::partial_message) {
      fail(400, "malformed HTTP request: " + ec.message());
    } else {
      close();  // the peer went away, timed out, or we are shutting down
    }
    return true;
  }

  void on_header(beast::error_code ec) {
    if (read_error(ec)) return;
    auto& req = parser_->get();
    version_ = req.version();
    if (version_ >= 11 && !parser_->is_done() && beast::iequals(req[http::field::expect], "100-continue")) {
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

  void read_body() {
    if (parser_->is_done()) return on_body({});
    stream_.expires_after(srv_->opt.request_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    if (read_error(ec)) return;
    stream_.expires_never();
    auto msg = parser_->release();
    parser_.reset();
    keep_alive_ = msg.keep_alive();
    HttpRequest req;
    req.method = str(msg.method_string());
    req.target = str(msg.target());
    req.body = std::move(msg.body());
    req.headers.reserve(8);
    for (const auto& f : msg) req.headers.emplace_back(str(f.name_string()), str(f.value()));
    state_ = State::Busy;
    counted_ = true;
    srv_->request_begun();

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

  void on_write(beast::error_code ec) {
    bool eof = res_->need_eof();
    res_.reset();
    if (ec) return close();
    answered();
    if (eof) return linger_close();
    if (closing()) return close_after_keep_alive();
    do_read();
  }

  // A response that went out as keep-alive, and the drain began meanwhile: close like an idle
  // connection (the client does not expect the close, so waiting for its end would stall the
  // drain), unless it already sent more.
  void close_after_keep_alive() {
    if (buffer_.size() == 0) return close();
    linger_close();
  }

  // Stop sending, then read and drop what the client still sends (e.g. the rest of a body
  // over the limit) until it closes, so that it sees our response rather than a reset.
  void linger_close() {
    state_ = State::Closed;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    stream_.expires_after(kLingerTimeout);
    drain_input();
  }

  void drain_input() {
    stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain_input();
    });
  }

  // After this response the connection closes: the server is draining.
  bool closing() const { return shutdown_ || srv_->stopping.load(); }

  // The request in flight (if any) no longer counts for the drain.
  void answered() {
    if (counted_) srv_->request_done();
    counted_ = false;
  }

  void close() {
    answered();
    state_ = State::Closed;
    dead_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  HttpServer::Impl* srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
  std::array<char, 16384> discard_;
  std::optional<http::response<http::empty_body>> shdr_;  // a streamed response's header
  std::optional<http::response_serializer<http::empty_body>> ssr_;
  std::deque<std::string> chunks_;
  std::string cur_chunk_;
  bool writing_ = false, stream_end_ = false, last_sent_ = false, watching_ = false;
  std::atomic<bool> dead_{false};
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool shutdown_ = false;
  bool counted_ = false;  // in Impl::busy
  State state_ = State::Reading;
};

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
    net::post(session_->executor(), [s = session_, c = std::move(chunk)]() mutable { s->push_chunk(std::move(c)); });
    return true;
  }
  void close() override {
    std::lock_guard lk(mu_);
    if (!session_) return;
    auto ex = session_->executor();
    net::post(ex, [s = std::move(session_)] { s->end_stream(); });
  }

 private:
  std::shared_ptr<HttpServer::Impl> srv_;  // destroyed after the session
  std::mutex mu_;
  std::shared_ptr<Session> session_;
};

std::shared_ptr<ResponseStream> Session::make_sink() {
  return std::make_shared<StreamSink>(srv_->self.lock(), shared_from_this());
}

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc),
                        [this](beast::error_code ec, tcp::socket s) { on_accept(ec, std::move(s)); });
}

void HttpServer::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (!acceptor.is_open()) return;
  if (ec) {
    log(std::string("hgraph-serve: accept failed: ") + ec.message());
    // Back off briefly (e.g. out of file descriptors) instead of spinning.
    auto t = std::make_shared<net::steady_timer>(ctl, std::chrono::milliseconds(50));
    t->async_wait([this, t](beast::error_code) {
      if (acceptor.is_open()) do_accept();
    });
    return;
  }
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto s = std::make_shared<Session>(this, std::move(socket));
  session_opened(s.get(), s);
  s->start();  // while draining: one request, answered with Connection: close
  do_accept();
}

void HttpServer::Impl::session_opened(Session* s, std::weak_ptr<Session> w) {
  std::lock_guard lk(mu);
  sessions.emplace(s, std::move(w));
  ++active;
}

void HttpServer::Impl::session_closed(Session* s) {
  bool last = false;
  {
    std::lock_guard lk(mu);
    sessions.erase(s);
    --active;
    last = active == 0 && stopping;
  }
  if (last && !finished) net::post(ctl, [this] { maybe_finish(); });
}

void HttpServer::Impl::request_begun() {
  std::lock_guard lk(mu);
  ++busy;
}

void HttpServer::Impl::request_done() {
  bool idle = false;
  {
    std::lock_guard lk(mu);
    --busy;
    idle = busy == 0 && stopping;
  }
  if (idle && !finished) net::post(ctl, [this] { maybe_finish(); });
}

std::vector<std::shared_ptr<Session>> HttpServer::Impl::live_sessions() {
  std::vector<std::shared_ptr<Session>> live;
  std::lock_guard lk(mu);
  for (auto& [p, w] : sessions)
    if (auto s = w.lock()) live.push_back(std::move(s));
  return live;
}

void HttpServer::Impl::maybe_finish() {
  {
    std::lock_guard lk(mu);
    if (busy != 0) return;
  }
  if (acceptor.is_open()) {
    beast::error_code ec;
    acceptor.close(ec);
    for (auto& s : live_sessions()) s->close_if_reading();
  }
  {
    std::lock_guard lk(mu);
    if (active != 0) return;
  }
  drain_timer.cancel();
  work.reset();
}

void HttpServer::Impl::cut_remaining() {
  for (auto& s : live_sessions()) s->cut();
}

void HttpServer::Impl::begin_stop(const char* why) {
  if (stopping.exchange(true)) return;
  log(std::string("hgraph-serve: ") + why + ": shutting down (finishing requests in flight)");
  if (opt.on_stop) {
    try {
      opt.on_stop();
    } catch (const std::exception& e) {
      log(std::string("hgraph-serve: on_stop failed: ") + e.what());
    }
  }
  net::post(ctl, [this] {
    beast::error_code ec;
    signals.cancel(ec);
    drain_timer.expires_after(opt.drain_timeout);
    drain_timer.async_wait([this](beast::error_code ec2) {
      if (ec2) return;
      size_t n;
      {
        std::lock_guard lk(mu);
        n = active;
      }
      log("hgraph-serve: drain timeout: closing " + std::to_string(n) + " connections");
      ioc.stop();
    });
    maybe_finish();
  });
  for (auto& s : live_sessions()) s->shutdown();
}

HttpServer::HttpServer(HttpServerOptions opt, HttpHandler handler)
    : impl_(std::make_shared<Impl>(std::move(opt), std::move(handler))) {
  impl_->self = impl_;
}

HttpServer::~HttpServer() {
  stop();
  wait();
}

uint16_t HttpServer::listen() {
  Impl& m = *impl_;
  if (m.listening) return m.port;
  const std::string where = m.opt.host + ":" + std::to_string(m.opt.port);
  try {
    tcp::resolver resolver(m.ioc);
    auto results = resolver.resolve(m.opt.host, std::to_string(m.opt.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service);
    if (results.empty()) throw IoError("cannot resolve '" + m.opt.host + "'");
    tcp::endpoint ep = results.begin()->endpoint();
    m.acceptor.open(ep.protocol());
    m.acceptor.set_option(net::socket_base::reuse_address(true));
    m.acceptor.bind(ep);
    m.acceptor.listen(net::socket_base::max_listen_connections);
    m.port = m.acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    throw IoError("cannot listen on " + where + ": " + e.code().message());
  }
  m.listening = true;
  return m.port;
}

void HttpServer::start() {
  Impl& m = *impl_;
  if (!m.threads.empty()) return;
  listen();
  if (m.opt.handle_signals) {
    m.signals.add(SIGINT);
    m.signals.add(SIGTERM);
    m.signals.async_wait([&m](beast::error_code ec, int sig) {
      if (ec) return;
      m.begin_stop(sig == SIGINT ? "SIGINT" : "SIGTERM");
    });
  }
  net::post(m.ctl, [&m] {
    if (!m.stopping) m.do_accept();
  });
  int n = std::max(1, m.opt.threads);
  for (int i = 0; i < n; ++i) m.threads.emplace_back([&m] { m.ioc.run(); });
}

void HttpServer::wait() {
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  if (!impl_->threads.empty()) impl_->cut_remaining();
  impl_->finished = true;
}

void HttpServer::stop() { impl_->begin_stop("stop requested"); }

bool HttpServer::stopping() const { return impl_->stopping; }

uint16_t HttpServer::port() const { return impl_->port; }

}  // namespace hg::server
