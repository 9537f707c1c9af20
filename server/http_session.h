// Internal to the HTTP layer (server/http_server.h): the server state shared by its
// connections, and one connection (Session). http_server.cpp accepts and drains,
// http_session.cpp reads requests and writes responses.
#pragma once
#include <utility>  // before asio: its awaitable.hpp uses std::exchange

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "server/compression.h"
#include "server/http_server.h"
#include "server/request_reader.h"

namespace hg::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

class Session;

struct HttpServer::Impl {
  // Declared before the io_context so that sessions destroyed with it can still deregister.
  std::weak_ptr<Impl> self;  // streams keep the server state alive (not running) until dropped
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::deque<std::weak_ptr<Session>> reserve_order;  // reserve connections, oldest first (ctl strand)
  size_t active = 0;          // connections
  size_t busy = 0;            // requests read and not yet fully answered (streams included)
  size_t inflight_bytes = 0;  // bodies reserved by requests being read or handled
  std::atomic<bool> stopping{false};
  std::atomic<bool> finished{false};

  HttpServerOptions opt;
  HttpHandler handler;
  size_t max_connections = 0;  // opt.max_connections, capped by the descriptor limit at listen()
  uint16_t port = 0;
  bool listening = false;
  std::vector<std::thread> threads;
  // Rate-limited log lines (accept errors, refused connections): at most one a second.
  SteadyClock::time_point last_log{};
  size_t suppressed = 0;

  net::io_context ioc;
  net::strand<net::io_context::executor_type> ctl{net::make_strand(ioc)};  // acceptor, signals, timer
  tcp::acceptor acceptor{ctl};
  net::signal_set signals{ctl};
  net::steady_timer drain_timer{ctl};
  net::steady_timer quiet_timer{ctl};  // opt.on_quiet's
  bool quiet_armed = false;             // under mu
  SteadyClock::time_point last_done{};  // under mu: the last request answered
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  Impl(HttpServerOptions o, HttpHandler h)
      : opt(std::move(o)), handler(std::move(h)), work(net::make_work_guard(ioc)) {}

  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void begin_stop(const char* why);
  void session_opened(Session* s, std::weak_ptr<Session> w);
  // With every slot taken, closes the longest-open reserve connection that is waiting for a
  // request's head or lingering after its answer (ctl strand); false when there is none.
  bool evict_idle_reserve();
  void session_closed(Session* s);
  void request_begun();
  void request_done();
  void quiet_check();  // on ctl: on_quiet once quiet_after has passed with nothing busy, else wait on
  // false: over max_inflight_body_bytes. A request that would hold more than kSmallBodyBytes
  // (`held` counts what it reserved before) may use only 7/8 of the budget: the last eighth
  // stays for small requests while large slow ones are in flight.
  bool reserve_body(size_t bytes, size_t held = 0);
  void release_body(size_t bytes);
  std::vector<std::shared_ptr<Session>> live_sessions();
  void maybe_finish();   // on ctl: once no request is busy, close the listener and idle connections
  void cut_remaining();  // after the I/O threads exited: close what the drain left open
  void responded(const ResponseRecord& r) {
    if (opt.on_response) opt.on_response(r);
  }
  void log(const std::string& msg);
  void log_limited(const std::string& msg);  // ctl strand only
};

// One connection: read a request, hand it to the handler, write the reply, repeat.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl* srv, tcp::socket&& socket, bool reserve)
      : srv_(srv), stream_(std::move(socket)), reserve_(reserve), reader_(srv->opt) {}
  ~Session();

  void start();
  // From any thread, once the drain has no request left: close unless answering one.
  void close_if_reading();
  // From any thread: finish the request in flight (if any), then close.
  void shutdown();
  // On the session's strand.
  void write(HttpResponse r);
  net::any_io_executor executor() { return stream_.get_executor(); }
  // A streamed body: chunks queued by the sink (from any thread) are written in order, one
  // HTTP chunk each; the last chunk ends the response.
  bool stream_dead() const { return dead_.load(std::memory_order_acquire); }
  // The sink's accounting of queued, unwritten bytes (any thread): false when `n` more would
  // exceed max_unsent_bytes (the stream is then cut).
  bool take_unsent(size_t n);
  bool backlogged() const { return unsent_.load(std::memory_order_relaxed) > srv_->opt.max_unsent_bytes / 2; }
  void push_chunk(std::string chunk);
  void end_stream();
  // The server gave up draining; called with the I/O threads stopped.
  void cut();
  // Waiting for a request's head, or lingering after its last answer (any thread): the
  // connection may be evicted to give its reserve slot to a newcomer.
  bool evictable() const { return evictable_.load(std::memory_order_relaxed); }
  bool is_reserve() const { return reserve_; }

 private:
  enum class State { Reading, Busy, Writing, Streaming, Closed };

  std::shared_ptr<ResponseStream> make_sink();
  void report(const HttpResponse& r);
  void start_stream(HttpResponse r);
  void watch_peer();
  void pump();
  void on_chunk_written(beast::error_code ec);
  void fail_stream();
  void do_read();
  void read_more();                         // into the reader, until its deadline
  void on_read(RequestReader::Event e);     // what the reader made of the bytes
  void fail(int status, std::string_view message, std::vector<std::pair<std::string, std::string>> headers = {});
  void on_header();
  void read_body(size_t limit);
  bool body_within_budget();
  void on_body();
  void inflate_some();
  void inflated(bool done, std::exception_ptr error);  // a step's outcome, on the strand
  void handle(HttpRequest req);
  void answer_error(int status, std::string_view message, std::vector<std::pair<std::string, std::string>> headers = {});
  void on_write(beast::error_code ec);
  void close_after_keep_alive();
  void linger_close();
  void drain_input();
  bool closing() const { return shutdown_ || srv_->stopping.load(); }
  void answered();
  void close();

  HttpServer::Impl* srv_;
  beast::tcp_stream stream_;
  const bool reserve_;  // accepted beyond max_connections: probes only, one request
  RequestReader reader_;
  std::optional<http::response<http::string_body>> res_;
  std::array<char, 16384> discard_;
  std::optional<http::response<http::empty_body>> shdr_;  // a streamed response's header
  std::optional<http::response_serializer<http::empty_body>> ssr_;
  std::deque<std::string> chunks_;
  std::string cur_chunk_;
  bool writing_ = false, stream_end_ = false, last_sent_ = false, watching_ = false;
  std::atomic<bool> dead_{false};
  std::atomic<size_t> unsent_{0};  // bytes the sink queued that are not yet written
  std::atomic<bool> evictable_{true};
  std::optional<HttpResponse> early_answer_;  // on_head's answer, sent once the small body is dropped
  std::shared_ptr<std::atomic<bool>> cancelled_;  // the request in flight's HttpRequest::cancelled
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_ = false;  // the request in flight is HEAD: its answer goes out without a body
  bool shutdown_ = false;
  bool counted_ = false;  // in Impl::busy
  size_t reserved_ = 0;   // body bytes counted in Impl::inflight_bytes
  size_t body_limit_ = 0;
  ContentCoding coding_ = ContentCoding::Identity;  // of the request body in flight
  // A compressed body being inflated: the request (body moved to compressed_), its inflater.
  std::optional<HttpRequest> inflating_;
  std::string compressed_;
  std::unique_ptr<Inflater> inflater_;
  size_t head_reserve_ = 0;  // what on_header reserved for the body
  std::string method_, target_;  // of the request in flight, for the response record
  size_t request_bytes_ = 0;
  SteadyClock::time_point head_at_;
  State state_ = State::Reading;
};

}  // namespace hg::server
