#include "training/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <thread>

#include "training/process_group.h"

namespace hg::training {
namespace {

using Clock = std::chrono::steady_clock;
enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kCheck = 5 };
enum Status : uint8_t { kOk = 0, kError = 1 };

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_i64(std::string& s, int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
void put_str(std::string& s, std::string_view v) {
  if (v.size() > TcpStore::kMaxFrameBytes - 64)
    throw DistError("store: a key or value of " + std::to_string(v.size()) + " bytes is too large");
  put_u32(s, static_cast<uint32_t>(v.size()));
  s.append(v);
}
std::string frame(const std::string& body) {
  std::string f;
  put_u32(f, static_cast<uint32_t>(body.size()));
  return f + body;
}

// Bounds-checked reading of a frame body; every getter returns false past the end.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool u8(uint8_t& v) {
    if (b_.size() < 1) return false;
    v = static_cast<uint8_t>(b_[0]);
    b_.remove_prefix(1);
    return true;
  }
  bool u32(uint32_t& v) {
    if (b_.size() < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<uint8_t>(b_[i])) << (8 * i);
    b_.remove_prefix(4);
    return true;
  }
  bool i64(int64_t& v) {
    if (b_.size() < 8) return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= uint64_t(static_cast<uint8_t>(b_[i])) << (8 * i);
    v = static_cast<int64_t>(u);
    b_.remove_prefix(8);
    return true;
  }
  bool str(std::string& v) {
    uint32_t n;
    if (!u32(n) || b_.size() < n) return false;
    v.assign(b_.substr(0, n));
    b_.remove_prefix(n);
    return true;
  }
  bool keys(std::vector<std::string>& ks) {
    uint32_t n;
    if (!u32(n) || n > b_.size() / 4) return false;  // each key needs at least its length
    ks.resize(n);
    for (auto& k : ks)
      if (!str(k)) return false;
    return true;
  }
  bool done() const { return b_.empty(); }

 private:
  std::string_view b_;
};

std::string errno_text(int e) { return std::strerror(e); }

// getaddrinfo for addr:port, IPv4 first.
std::vector<sockaddr_storage> resolve(const std::string& addr, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw DistError("cannot resolve MASTER_ADDR '" + addr + "': " + ::gai_strerror(rc));
  std::vector<sockaddr_storage> out, v6;
  for (addrinfo* p = res; p; p = p->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, p->ai_addr, p->ai_addrlen);
    (p->ai_family == AF_INET ? out : v6).push_back(ss);
  }
  ::freeaddrinfo(res);
  out.insert(out.end(), v6.begin(), v6.end());
  if (out.empty()) throw DistError("MASTER_ADDR '" + addr + "' resolves to no address");
  return out;
}

socklen_t sockaddr_len(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

}  // namespace

// Single-threaded poll loop: accepts connections, parses frames, keeps GET/WAIT requests
// pending until a SET/ADD makes them answerable. A connection whose frame is malformed is closed.
class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& addr, int port) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw DistError("store: pipe: " + errno_text(errno));
    try {
      listen_on(addr, port);
    } catch (...) {
      ::close(wake_[0]);
      ::close(wake_[1]);
      throw;
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~TcpStoreServer() {
    char c = 1;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto& [fd, conn] : conns_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  int port() const { return port_; }

 private:
  struct Pending {
    Op op;
    std::vector<std::string> keys;
  };
  struct Conn {
    std::string in, out;
    std::optional<Pending> pending;
    bool closing = false;
  };

  // A loopback MASTER_ADDR (127.x, ::1, localhost: a single-node job) is bound as given; any
  // other address or host name binds every interface of its family, as PyTorch's TCPStore does,
  // so a host name that resolves to 127.0.1.1 on node 0 still lets the other nodes in.
  void listen_on(const std::string& addr, int port) {
    sockaddr_storage ss = resolve(addr, port, true).front();
    unsigned char probe[sizeof(in6_addr)];
    bool literal = addr == "localhost" || ::inet_pton(AF_INET, addr.c_str(), probe) == 1 ||
                   ::inet_pton(AF_INET6, addr.c_str(), probe) == 1;
    bool loopback = ss.ss_family == AF_INET
                        ? (ntohl(reinterpret_cast<sockaddr_in&>(ss).sin_addr.s_addr) >> 24) == 127
                        : IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6&>(ss).sin6_addr);
    if (!(literal && loopback)) {
      sockaddr_storage any{};
      any.ss_family = ss.ss_family;
      if (ss.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in&>(any).sin_port = htons(static_cast<uint16_t>(port));
      } else {
        reinterpret_cast<sockaddr_in6&>(any).sin6_port = htons(static_cast<uint16_t>(port));
      }
      ss = any;
    }
    listen_fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd_ < 0) throw DistError("store: socket: " + errno_text(errno));
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&ss), sockaddr_len(ss));
    if (rc != 0) {
      int e = errno;
      ::close(listen_fd_);
      if (e == EADDRINUSE)
        throw DistError("MASTER_PORT " + std::to_string(port) + " on " + addr +
                        " is already in use (another job or a previous run still holds it; pick another MASTER_PORT)");
      throw DistError("store: cannot bind " + addr + ":" + std::to_string(port) + ": " + errno_text(e));
    }
    if (::listen(listen_fd_, 128) != 0) {
      int e = errno;
      ::close(listen_fd_);
      throw DistError("store: listen on " + addr + ":" + std::to_string(port) + ": " + errno_text(e));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(bound).sin_port
                                             : reinterpret_cast<sockaddr_in6&>(bound).sin6_port);
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& [fd, c] : conns_) fds.push_back({fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        spdlog::error("store server: poll failed: {}", errno_text(errno));
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) accept_all();
      for (size_t i = 2; i < fds.size(); ++i) {
        auto it = conns_.find(fds[i].fd);
        if (it == conns_.end() || !fds[i].revents) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(fds[i].fd, it->second);
        if (!it->second.closing && (fds[i].revents & POLLOUT)) flush(fds[i].fd, it->second);
      }
      for (auto it = conns_.begin(); it != conns_.end();) {
        if (it->second.closing) {
          ::close(it->first);
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      conns_[fd] = Conn{};
    }
  }

  void read_from(int fd, Conn& c) {
    char buf[65536];
    bool eof = false;
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) eof = true;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) c.closing = true;
      break;
    }
    process(fd, c);  // a client may send its last request and close at once
    if (eof) c.closing = true;
  }

  // Answers the frames buffered on c, in order, stopping at one that must wait.
  void process(int fd, Conn& c) {
    while (!c.closing && !c.pending && c.in.size() >= 4) {
      uint32_t len = 0;
      Reader(c.in).u32(len);
      if (len > TcpStore::kMaxFrameBytes || len == 0) {
        spdlog::warn("store server: closing a connection that sent a frame of {} bytes", len);
        c.closing = true;
        return;
      }
      if (c.in.size() < 4 + size_t(len)) return;
      std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + size_t(len));
      if (!handle(c, body)) {
        spdlog::warn("store server: closing a connection that sent a malformed request");
        c.closing = true;
        return;
      }
    }
    flush(fd, c);
  }

  bool handle(Conn& c, const std::string& body) {
    Reader r(body);
    uint8_t op;
    if (!r.u8(op)) return false;
    std::string key, value;
    std::vector<std::string> keys;
    int64_t delta;
    switch (op) {
      case kSet:
        if (!r.str(key) || !r.str(value) || !r.done()) return false;
        kv_[key] = std::move(value);
        reply(c, kOk, "");
        wake_pending();
        return true;
      case kGet:
        if (!r.str(key) || !r.done()) return false;
        c.pending = Pending{kGet, {key}};
        try_answer(c);
        return true;
      case kWait:
        if (!r.keys(keys) || !r.done()) return false;
        c.pending = Pending{kWait, std::move(keys)};
        try_answer(c);
        return true;
      case kAdd: {
        if (!r.str(key) || !r.i64(delta) || !r.done()) return false;
        int64_t cur = 0;
        if (auto it = kv_.find(key); it != kv_.end()) {
          char* end = nullptr;
          errno = 0;
          cur = std::strtoll(it->second.c_str(), &end, 10);
          if (it->second.empty() || *end != '\0' || errno != 0) {
            reply(c, kError, "ADD on key '" + key + "' whose value is not an integer");
            return true;
          }
        }
        kv_[key] = std::to_string(cur + delta);
        std::string out;
        put_i64(out, cur + delta);
        reply(c, kOk, out);
        wake_pending();
        return true;
      }
      case kCheck: {
        if (!r.keys(keys) || !r.done()) return false;
        bool all = true;
        for (auto& k : keys) all = all && kv_.count(k);
        reply(c, kOk, std::string(1, all ? '\1' : '\0'));
        return true;
      }
      default:
        return false;
    }
  }

  bool try_answer(Conn& c) {
    for (auto& k : c.pending->keys)
      if (!kv_.count(k)) return false;
    reply(c, kOk, c.pending->op == kGet ? kv_[c.pending->keys[0]] : std::string());
    c.pending.reset();
    return true;
  }

  void wake_pending() {
    for (auto& [fd, c] : conns_) {
      if (c.pending && !c.closing && try_answer(c)) {
        flush(fd, c);
        if (!c.in.empty()) process(fd, c);  // later frames queued behind the one that waited
      }
    }
  }

  void reply(Conn& c, Status s, const std::string& payload) {
    std::string body(1, static_cast<char>(s));
    body += payload;
    c.out += frame(body);
  }

  void flush(int fd, Conn& c) {
    while (!c.out.empty()) {
      ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c.closing = true;
        return;
      }
    }
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::map<int, Conn> conns_;
  std::map<std::string, std::string> kv_;
  std::thread thread_;
};

TcpStore::TcpStore(const std::string& addr, int port, bool host_server, std::chrono::milliseconds timeout)
    : addr_(addr), port_(port), timeout_(timeout) {
  if (port < 0 || port > 65535) throw DistError("MASTER_PORT " + std::to_string(port) + " is not a TCP port (0-65535)");
  if (host_server) {
    server_ = std::make_unique<TcpStoreServer>(addr, port);
    port_ = server_->port();
  } else if (port == 0) {
    throw DistError("store client: MASTER_PORT is 0 (unset); only the rank hosting the store may use an ephemeral port");
  }
  std::lock_guard<std::mutex> lock(mu_);
  connect_locked();
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TcpStore::connect_locked() {
  auto deadline = Clock::now() + timeout_;
  std::string last = "timed out";
  auto where = addr_ + ":" + std::to_string(port_);
  for (;;) {
    for (auto& ss : resolve(addr_, port_, false)) {
      int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) throw DistError("store client: socket: " + errno_text(errno));
      int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&ss), sockaddr_len(ss));
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        rc = ::poll(&p, 1, std::max(1, std::min(remaining_ms(deadline), 1000))) == 1 ? 0 : -1;
        int err = 0;
        socklen_t l = sizeof(err);
        if (rc == 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) == 0 && err != 0) {
          errno = err;
          rc = -1;
        } else if (rc != 0) {
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fd_ = fd;
        return;
      }
      last = errno_text(errno);
      ::close(fd);
    }
    if (Clock::now() >= deadline)
      throw DistError("cannot reach the store at " + where + " (MASTER_ADDR:MASTER_PORT) within " +
                      std::to_string(timeout_.count()) + " ms: " + last + " — is rank 0 running there?");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, std::max(1, remaining_ms(deadline)))));
  }
}

std::string TcpStore::request(const std::string& body, std::chrono::milliseconds timeout, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  auto where = "store at " + addr_ + ":" + std::to_string(port_);
  if (fd_ < 0) connect_locked();
  auto fail = [&](const std::string& msg) {
    ::close(fd_);  // the reply may still come: a fresh connection keeps the next request in sync
    fd_ = -1;
    throw DistError(where + ": " + what + " " + msg);
  };
  auto deadline = Clock::now() + timeout;
  std::string out = frame(body);
  for (size_t off = 0; off < out.size();) {
    ssize_t n = ::send(fd_, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("failed: " + errno_text(errno) + " (rank 0, which hosts the store, is gone?)");
    off += static_cast<size_t>(n);
  }
  std::string in;
  size_t need = 4;
  for (;;) {
    while (in.size() < need) {
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, remaining_ms(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) fail("timed out after " + std::to_string(timeout.count()) + " ms");
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, std::min(sizeof(buf), need - in.size()), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) fail("failed: the store closed the connection (rank 0, which hosts it, is gone?)");
      if (n < 0) fail("failed: " + errno_text(errno));
      in.append(buf, static_cast<size_t>(n));
    }
    if (need > 4) break;
    uint32_t len = 0;
    Reader(in).u32(len);
    if (len == 0 || len > kMaxFrameBytes) fail("failed: malformed reply of " + std::to_string(len) + " bytes");
    need = 4 + size_t(len);
  }
  if (in[4] != kOk) throw DistError(where + ": " + what + " failed: " + in.substr(5));
  return in.substr(5);
}

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string b(1, char(kSet));
  put_str(b, key);
  put_str(b, value);
  request(b, timeout_, "set of key '" + key + "'");
}

std::string TcpStore::get(const std::string& key) { return get(key, timeout_); }

std::string TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::string b(1, char(kGet));
  put_str(b, key);
  return request(b, timeout, "get of key '" + key + "'");
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string b(1, char(kWait)), names;
  put_u32(b, static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) {
    put_str(b, k);
    names += (names.empty() ? "'" : ", '") + k + "'";
  }
  request(b, timeout, "wait for keys " + names);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string b(1, char(kAdd));
  put_str(b, key);
  put_i64(b, delta);
  std::string r = request(b, timeout_, "add to key '" + key + "'");
  int64_t v = 0;
  if (!Reader(r).i64(v)) throw DistError("store at " + addr_ + ": malformed ADD reply");
  return v;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::string b(1, char(kCheck));
  put_u32(b, static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) put_str(b, k);
  std::string r = request(b, timeout_, "check");
  if (r.size() != 1) throw DistError("store at " + addr_ + ": malformed CHECK reply");
  return r[0] != 0;
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  std::string v = store_.get(key);
  return {v.begin(), v.end()};
}

void GlooStore::wait(const std::vector<std::string>& keys) { store_.wait(keys); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_.wait(keys, timeout);
}

}  // namespace hg::training
