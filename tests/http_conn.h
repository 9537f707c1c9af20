// A blocking HTTP/1.1 connection to a local test server, byte-exact: any method, headers and
// body; keep-alive; Content-Length, chunked and read-until-close bodies. End-to-end tests use
// it where they need control the client library does not give: sending a request and reading
// its answer separately (in flight across a SIGTERM), custom headers (auth, binary tensors),
// telling a refused connection from one cut mid-answer, and timing single round trips.
//
//   hg::test::HttpConn c(server.port());                       // 127.0.0.1, 120 s I/O timeout
//   hg::test::HttpReply r = c.request("POST", "/v2/models/m/infer", body,
//                                     {{"Authorization", "Bearer tok"}});
//   r.status;  r.header("Retry-After");  r.body;
//   c.send("GET", "/v2/health/ready");  ...;  r = c.read();     // split in two
//   c.send_raw("NOT HTTP\r\n\r\n");  r = c.read();            // any bytes
//
// Failures throw HttpConnError with kind(): Refused (nothing listens), Closed (the peer closed
// or reset the connection before any byte of the answer), Truncated (after part of it),
// Timeout.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/wait.h"

namespace hg::test {

class HttpConnError : public std::runtime_error {
 public:
  enum class Kind { Refused, Closed, Truncated, Timeout };
  HttpConnError(Kind k, const std::string& msg) : std::runtime_error(msg), kind_(k) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpReply {
  int status = 0;
  Headers headers;
  std::string body;
  // Case-insensitive; empty when absent.
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
    return {};
  }
};

class HttpConn {
 public:
  // `timeout` bounds every send and receive (tests/wait.h's kWaitLimit by default).
  explicit HttpConn(int port, std::chrono::milliseconds timeout = kWaitLimit) : port_(port), timeout_(timeout) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      const int err = errno;
      close(fd_);
      fd_ = -1;
      throw HttpConnError(err == ECONNREFUSED ? HttpConnError::Kind::Refused : HttpConnError::Kind::Closed,
                          "connect to 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(err));
    }
  }
  ~HttpConn() {
    if (fd_ >= 0) close(fd_);
  }
  HttpConn(const HttpConn&) = delete;
  HttpConn& operator=(const HttpConn&) = delete;

  // Sends bytes as they are (malformed HTTP, say).
  // Sends every byte; false once the peer has closed or reset the connection.
  bool try_send(std::string_view bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  void send_raw(std::string_view bytes) {
    if (!try_send(bytes)) fail("send");
  }


  // Sends one request (Content-Length always set, Host added).
  void send(const std::string& method, const std::string& path, std::string_view body = {},
            const Headers& headers = {}) {
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port_) +
                      "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    bool has_type = false;
    for (const auto& [k, v] : headers) {
      req += k + ": " + v + "\r\n";
      has_type = has_type || strcasecmp(k.c_str(), "Content-Type") == 0;
    }
    if (!body.empty() && !has_type) req += "Content-Type: application/json\r\n";
    req += "\r\n";
    req.append(body);
    send_raw(req);
  }

  // Reads one complete response (of a HEAD request: no body, whatever Content-Length says).
  HttpReply read(bool head_request = false) {
    HttpReply r;
    reading_ = true;
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) fill("the response head");
    const std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    size_t eol = head.find("\r\n");
    const std::string status_line = head.substr(0, eol);
    if (status_line.compare(0, 5, "HTTP/") != 0 || status_line.size() < 12)
      throw HttpConnError(HttpConnError::Kind::Closed, "bad status line: " + status_line);
    r.status = std::stoi(status_line.substr(9, 3));
    while (eol != std::string::npos) {
      const size_t next = head.find("\r\n", eol + 2);
      const std::string line = head.substr(eol + 2, next == std::string::npos ? std::string::npos : next - eol - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t v = colon + 1;
        while (v < line.size() && line[v] == ' ') ++v;
        r.headers.emplace_back(line.substr(0, colon), line.substr(v));
      }
      eol = next;
    }
    if (head_request) {
    } else if (strcasecmp(r.header("Transfer-Encoding").c_str(), "chunked") == 0) {
      read_chunked(r.body);
    } else if (!r.header("Content-Length").empty()) {
      const size_t len = std::stoull(r.header("Content-Length"));
      while (buf_.size() < len) fill("the body");
      r.body = buf_.substr(0, len);
      buf_.erase(0, len);
    } else if (r.status >= 200 && r.status != 204 && r.status != 304) {
      while (fill_or_eof()) {
      }
      r.body = std::move(buf_);
      buf_.clear();
    }
    reading_ = false;
    got_any_ = !buf_.empty();
    return r;
  }

  HttpReply request(const std::string& method, const std::string& path, std::string_view body = {},
                    const Headers& headers = {}) {
    send(method, path, body, headers);
    return read(method == "HEAD");
  }

  // Reads and drops whatever comes until the peer closes: true; false when the connection's
  // I/O timeout passes first (the peer kept it open) or it was reset.
  bool closed_by_peer() {
    char chunk[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

 private:
  // Closed before any byte of the response being read, Truncated after some.
  HttpConnError::Kind cut_kind() const {
    return reading_ && got_any_ ? HttpConnError::Kind::Truncated : HttpConnError::Kind::Closed;
  }

  [[noreturn]] void fail(const char* what) const {
    const int err = errno;
    const bool timeout = err == EAGAIN || err == EWOULDBLOCK;
    throw HttpConnError(timeout ? HttpConnError::Kind::Timeout : cut_kind(),
                        std::string(what) + ": " +
                            (timeout ? "timed out after " + std::to_string(timeout_.count()) + " ms waiting for 127.0.0.1:" +
                                           std::to_string(port_)
                                     : std::string(std::strerror(err))));
  }

  bool fill_or_eof() {
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0) fail("recv");
    buf_.append(chunk, static_cast<size_t>(n));
    got_any_ = got_any_ || n > 0;
    return n > 0;
  }

  void fill(const char* waiting_for) {
    if (!fill_or_eof()) throw HttpConnError(cut_kind(), std::string("connection closed while reading ") + waiting_for);
  }

  void read_chunked(std::string& body) {
    while (true) {
      size_t eol;
      while ((eol = buf_.find("\r\n")) == std::string::npos) fill("a chunk size");
      const size_t size = std::stoull(buf_.substr(0, eol), nullptr, 16);
      buf_.erase(0, eol + 2);
      while (buf_.size() < size + 2) fill("a chunk");
      body.append(buf_, 0, size);
      buf_.erase(0, size + 2);
      if (size == 0) return;  // no trailers are sent by the server
    }
  }

  int port_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  std::string buf_;        // received, not yet consumed
  bool reading_ = false;   // inside read()
  bool got_any_ = false;   // some byte of the response being read has arrived
};

}  // namespace hg::test
