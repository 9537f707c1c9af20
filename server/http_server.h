// An asynchronous HTTP/1.1 server (Boost.Beast): keep-alive, a fixed pool of I/O threads
// running one io_context, a body limit, graceful shutdown on SIGINT/SIGTERM.
//
//   hg::server::HttpServerOptions opt;
//   opt.port = 0;                                        // ephemeral
//   hg::server::HttpServer srv(opt, [](hg::server::HttpRequest&& req, hg::server::Reply reply) {
//     reply({200, R"({"ok":true})"});                    // now, or later from any thread
//   });
//   uint16_t port = srv.listen();                        // bound, accepting after start()
//   srv.start();                                         // spawns opt.threads I/O threads
//   srv.wait();                                          // returns after stop() or a signal
//
//   // A streamed (chunked) body, e.g. server-sent events, produced on another thread:
//   reply({.status = 200, .content_type = "text/event-stream",
//          .stream = [pool](std::shared_ptr<ResponseStream> out) {
//            pool->post([out] { for (auto& e : events()) if (!out->write(e)) return;  out->close(); });
//          }});
//
// Threads: the handler, `stream` and on_stop run on an I/O thread, and there are only
// opt.threads of them, shared by every connection. They must not block (no inference, no
// waiting on a queue, no sleeping): a blocked I/O thread delays every other connection,
// health probes included. Hand slow work to another thread and reply from there. Reading a
// request (headers and body) is asynchronous: a slow or huge upload occupies no thread.
//
// Shutdown (stop() or a signal): on_stop is called (the handler turns readiness off there),
// idle keep-alive connections are closed, and requests in flight (streamed responses
// included) finish and are answered with `Connection: close`. Until none is left the listener
// stays open and each new connection gets one request answered, with `Connection: close`
// (so probes see the handler's "not ready" rather than a refused connection); then the
// listener closes and wait() returns. After opt.drain_timeout the remaining connections are
// cut (their streams' write() returns false).
// Errors the HTTP layer answers itself, all with {"error": "..."} and then closing the
// connection: 413 body over the limit, 431 header over the limit, 400 unparsable HTTP, 500 a
// handler that threw or dropped its reply, 503 when the bodies in flight would pass
// max_inflight_body_bytes or a reserve connection asks for anything but a probe. A compressed
// body (HeadCheck::compressed_body) is inflated on the I/O thread a bounded step at a time,
// yielding between steps; its output counts against the body limit (413 once crossed) and the
// bytes in flight (503), a corrupt stream is 400 and an unknown Content-Encoding 415 (these
// keep the connection open).
// Framing follows RFC 9112: conflicting Content-Length, Content-Length with Transfer-Encoding,
// a Transfer-Encoding whose final coding is not chunked (or any in HTTP/1.0), a missing or
// repeated Host, bare CR or LF line ends are 400; a transfer coding besides chunked is 501; all
// of them close the connection. Pipelined requests are answered in order. HEAD is answered like
// GET without a body; 204 and 304 answers carry no body and no Content-Length.
//
// Hostile clients: at most max_connections connections serve requests; reserve_connections
// more are accepted for the probe paths only (one request each), and beyond that a new
// connection is closed at once. A connection waits at most idle_timeout for the first byte of
// a request, then header_timeout for the rest of the header; a body must keep arriving at
// min_body_bytes_per_sec on average after body_grace. on_head sees every request's head
// before its body is read: it can answer at once (wrong route, method or token: the body is
// never buffered) or set a smaller body limit. A client that closes its connection while its
// request is being handled sets HttpRequest::cancelled.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hg::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... ("HEAD" is passed on as is; its answer loses its body)
  std::string target;  // path and query as sent: "/v2/models/m/infer"
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set (by an I/O thread) once the client has closed the connection before its answer: work
  // for it may stop. Null for requests that did not come from a socket.
  std::shared_ptr<const std::atomic<bool>> cancelled = nullptr;
  // Case-insensitive lookup; empty when absent.
  std::string_view header(std::string_view name) const;
  bool is_cancelled() const { return cancelled && cancelled->load(std::memory_order_relaxed); }
};

// The body of a streamed response (chunked transfer encoding), e.g. server-sent events.
// Thread-safe; write from any thread. Each write() goes out as one HTTP chunk, in order.
// The sink keeps the connection open (and counted in flight for the drain) until it is closed
// or dropped.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Queues a chunk for the client; false once the client is gone or the server is cut off
  // (stop producing). A chunk that would take the connection's unsent bytes past
  // HttpServerOptions::max_unsent_bytes is refused the same way and the connection closed: a
  // client that does not read its answer holds no more than that.
  virtual bool write(std::string chunk) = 0;
  // False while more than half of max_unsent_bytes is queued and not yet written: a producer
  // that can wait should (the generators hold the sequence back a step); then write() again.
  virtual bool ready() const { return true; }
  // Ends the body (idempotent). Dropping the last reference without close() also ends it.
  virtual void close() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers = {};  // extra ones, e.g. {"Allow", "GET"}
  // Set: the response is streamed. The status and headers go out (with `body`, if any, as the
  // first chunk), then `stream` is called once with the sink the rest of the body goes to.
  std::function<void(std::shared_ptr<ResponseStream>)> stream = nullptr;
  std::string request_id = {};  // the request's own id, when it has one (for the access log)
};

// What the HTTP layer reports of each response as it starts going out.
struct ResponseRecord {
  std::string_view method, target;
  int status = 0;
  size_t request_bytes = 0, response_bytes = 0;  // bodies (a streamed response: its first part)
  std::chrono::microseconds duration{0};          // from the complete request head to the answer
  std::string_view request_id;
};

// on_head's verdict on a request head: answer now (the body is not read; the connection
// closes after the answer), or read a body of at most max_body_bytes.
struct HeadCheck {
  std::optional<HttpResponse> answer = std::nullopt;
  size_t max_body_bytes = SIZE_MAX;  // further capped by HttpServerOptions::max_body_bytes
  // The body may come compressed (Content-Encoding gzip or deflate): the HTTP layer inflates it
  // within the same body limit and hands the handler the plain body, without Content-Encoding.
  // False (and without on_head): a compressed body gets 415.
  bool compressed_body = false;
};

// Sends the response for one request. Call it once, from any thread; later calls are
// ignored. Dropping every copy without calling it answers 500.
using Reply = std::function<void(HttpResponse)>;
using HttpHandler = std::function<void(HttpRequest&&, Reply)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0 picks an ephemeral port
  int threads = 2;
  size_t max_body_bytes = size_t{64} << 20;
  size_t max_header_bytes = size_t{16} << 10;
  size_t max_inflight_body_bytes = size_t{512} << 20;  // bodies read and not yet answered, all connections
  size_t max_connections = 1024;   // capped by the process's file descriptor limit at listen()
  size_t reserve_connections = 16;  // beyond max_connections, for reserve_paths only
  std::vector<std::string> reserve_paths = {"/v2/health/live", "/v2/health/ready"};
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};     // wait for a request's first byte
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};   // then the rest of its header
  size_t min_body_bytes_per_sec = 16 << 10;                             // average, after body_grace
  std::chrono::milliseconds body_grace{std::chrono::seconds(5)};
  std::chrono::milliseconds request_timeout{std::chrono::seconds(60)};  // write a response (each chunk)
  size_t max_unsent_bytes = size_t{256} << 10;  // a streamed response's queued, unwritten bytes per connection
  std::chrono::milliseconds drain_timeout{std::chrono::seconds(30)};    // graceful shutdown cap
  bool handle_signals = true;  // SIGINT/SIGTERM call stop()
  std::ostream* log = nullptr;  // shutdown messages, accept errors (at most one line a second)
  // Called with each request's head before its body is read (route, method, auth, body cap).
  // Any I/O thread; must not block. Null: every body up to max_body_bytes is read.
  std::function<HeadCheck(const HttpRequest& head)> on_head;
  // Called once when shutdown begins (stop() or a signal), before connections drain: the
  // handler turns readiness off and refuses new work there. Must not block.
  std::function<void()> on_stop;
  // Runs `work` off the I/O threads (each step of inflating a compressed body); false: refused
  // (its pool is full or stopping; the request gets 503). Null: the work runs on the I/O thread.
  std::function<bool(std::function<void()> work)> offload;
  // Called once no request has been busy for quiet_after, after a request was (the end of a
  // burst): serve_main gives freed heap memory back to the OS there. On an I/O thread; it may
  // take a few milliseconds, not more. Null or 0 ms: never.
  std::function<void()> on_quiet;
  std::chrono::milliseconds quiet_after{std::chrono::seconds(1)};
  // Called for every response as it starts going out, including the errors the HTTP layer
  // answers itself (metrics, the access log). Any thread; must not block or throw.
  std::function<void(const ResponseRecord&)> on_response;
};

// {"error": message} as a JSON body.
HttpResponse json_error(int status, std::string_view message);

class HttpServer {
 public:
  HttpServer(HttpServerOptions opt, HttpHandler handler);
  ~HttpServer();  // stop() + wait()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; returns the bound port. Throws hg::IoError.
  uint16_t listen();
  // Starts accepting on opt.threads I/O threads (listen() first if not done).
  void start();
  // Blocks until shutdown has finished and the I/O threads have exited.
  void wait();
  // Thread-safe and idempotent: begins the graceful shutdown; `why` goes to the log
  // ("SIGTERM: shutting down ...").
  void stop(const char* why = "stop requested");
  bool stopping() const;
  uint16_t port() const;

  struct Impl;  // opaque

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace hg::server
