#include "server/http_server.h"

#include <sys/resource.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <ostream>

#include "engine/error.h"
#include "server/http_session.h"

namespace hg::server {

namespace {

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

// Raises the soft descriptor limit to the hard one and returns it.
size_t descriptor_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
  }
  return r.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(r.rlim_cur);
}
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

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc),
                        [this](beast::error_code ec, tcp::socket s) { on_accept(ec, std::move(s)); });
}

void HttpServer::Impl::log(const std::string& msg) {
  if (opt.log) *opt.log << msg << std::endl;
}

void HttpServer::Impl::log_limited(const std::string& msg) {
  const auto now = SteadyClock::now();
  if (now - last_log < std::chrono::seconds(1)) {
    ++suppressed;
    return;
  }
  last_log = now;
  log(suppressed ? msg + " (and " + std::to_string(suppressed) + " similar messages in the last second)" : msg);
  suppressed = 0;
}

void HttpServer::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (!acceptor.is_open()) return;
  if (ec) {
    log_limited(std::string("hgraph-serve: accept failed: ") + ec.message());
    // Back off (e.g. out of file descriptors) instead of spinning.
    auto t = std::make_shared<net::steady_timer>(ctl, std::chrono::milliseconds(100));
    t->async_wait([this, t](beast::error_code) {
      if (acceptor.is_open()) do_accept();
    });
    return;
  }
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  size_t open;
  {
    std::lock_guard lk(mu);
    open = active;  // only accepting (on ctl) adds connections
  }
  if (open >= max_connections + opt.reserve_connections && !evict_idle_reserve()) {
    log_limited("hgraph-serve: " + std::to_string(open) + " connections open (--max-connections " +
                std::to_string(max_connections) + " and a reserve for probes): closing a new one");
    socket.close(ignored);
  } else {
    auto s = std::make_shared<Session>(this, std::move(socket), open >= max_connections);
    session_opened(s.get(), s);
    if (s->is_reserve()) reserve_order.push_back(s);
    s->start();  // while draining: one request, answered with Connection: close
  }
  do_accept();
}

void HttpServer::Impl::session_opened(Session* s, std::weak_ptr<Session> w) {
  std::lock_guard lk(mu);
  sessions.emplace(s, std::move(w));
  ++active;
}

bool HttpServer::Impl::evict_idle_reserve() {
  while (!reserve_order.empty()) {
    std::shared_ptr<Session> s = reserve_order.front().lock();
    reserve_order.pop_front();
    if (s && s->evictable()) {
      s->close_if_reading();  // it goes away shortly; the newcomer takes its place meanwhile
      return true;
    }
  }
  return false;
}

bool HttpServer::Impl::reserve_body(size_t bytes, size_t held) {
  constexpr size_t kSmallBodyBytes = size_t{1} << 20;
  const size_t max = opt.max_inflight_body_bytes;
  const size_t cap = held + bytes > kSmallBodyBytes ? max - max / 8 : max;
  std::lock_guard lk(mu);
  if (bytes > cap - std::min(inflight_bytes, cap)) return false;
  inflight_bytes += bytes;
  return true;
}

void HttpServer::Impl::release_body(size_t bytes) {
  std::lock_guard lk(mu);
  inflight_bytes -= std::min(bytes, inflight_bytes);
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
  bool idle = false, arm = false;
  {
    std::lock_guard lk(mu);
    --busy;
    idle = busy == 0 && stopping;
    last_done = SteadyClock::now();
    arm = busy == 0 && !quiet_armed && opt.on_quiet && opt.quiet_after.count() > 0 && !stopping;
    quiet_armed = quiet_armed || arm;
  }
  if (idle && !finished) net::post(ctl, [this] { maybe_finish(); });
  if (arm) net::post(ctl, [this] { quiet_check(); });
}

// One timer for the whole server, armed when the last busy request finishes: a request that
// finishes meanwhile moves the deadline (checked when it fires), it does not re-arm.
void HttpServer::Impl::quiet_check() {
  SteadyClock::time_point due;
  {
    std::lock_guard lk(mu);
    if (busy > 0 || stopping) {
      quiet_armed = false;  // the next request to leave nothing busy arms it again
      return;
    }
    due = last_done + opt.quiet_after;
    if (SteadyClock::now() >= due) quiet_armed = false;
  }
  if (SteadyClock::now() < due) {
    quiet_timer.expires_at(due);
    quiet_timer.async_wait([this](beast::error_code ec) {
      if (!ec) quiet_check();
    });
    return;
  }
  try {
    opt.on_quiet();
  } catch (const std::exception& e) {
    log(std::string("on_quiet failed: ") + e.what());
  }
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
    quiet_timer.cancel();  // a pending wait would hold the io_context open
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
    // Each connection takes a descriptor; keep some for model files, the cache and logs.
    const size_t fds = descriptor_limit();
    const size_t spare = 64 + m.opt.reserve_connections;
    m.max_connections = std::max<size_t>(1, std::min(m.opt.max_connections, fds > spare + 16 ? fds - spare : 16));
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
  // A handler that throws (an allocation failure while reading a request, say) drops its
  // connection; the I/O thread carries on with the others.
  for (int i = 0; i < n; ++i)
    m.threads.emplace_back([&m] {
      for (;;) {
        try {
          m.ioc.run();
          return;
        } catch (const std::exception& e) {
          m.log(std::string("hgraph-serve: a connection was dropped: ") + e.what());
        }
      }
    });
}

void HttpServer::wait() {
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  if (!impl_->threads.empty()) impl_->cut_remaining();
  impl_->finished = true;
}

void HttpServer::stop(const char* why) { impl_->begin_stop(why); }

bool HttpServer::stopping() const { return impl_->stopping; }

uint16_t HttpServer::port() const { return impl_->port; }

}  // namespace hg::server
