// An in-process fake KServe server for the client tests: hg::server::HttpServer on
// 127.0.0.1 (port 0) whose handler answers canned responses and records every request.
//
//   FakeServer srv(always(200, R"({"live":true})"));
//   hg::server::Client c(srv.url());
//   c.live();
//   srv.last().target;                                   // "/v2/health/live"
//   auto [status, msg] = client_error([&] { c.model_config("x"); });
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "server/client.h"
#include "server/http_server.h"

namespace hg::test {

using hg::server::HttpRequest;
using hg::server::HttpResponse;

inline HttpResponse answer(int status, std::string body, std::string content_type = "application/json") {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

// An HTTP server on an ephemeral loopback port that answers with `respond` and keeps every
// request it saw.
class FakeServer {
 public:
  using Respond = std::function<HttpResponse(const HttpRequest&)>;
  explicit FakeServer(Respond respond) : respond_(std::move(respond)) {
    hg::server::HttpServerOptions opt;
    opt.port = 0;
    opt.handle_signals = false;
    server_ = std::make_unique<hg::server::HttpServer>(opt, [this](HttpRequest&& req, hg::server::Reply reply) {
      HttpResponse r = respond_(req);
      {
        std::lock_guard<std::mutex> lock(mu_);
        seen_.push_back(std::move(req));
      }
      reply(std::move(r));
    });
    port_ = server_->listen();
    server_->start();
  }
  ~FakeServer() { server_->stop(); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<HttpRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  HttpRequest last() const {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_FALSE(seen_.empty());
    return seen_.empty() ? HttpRequest{} : seen_.back();
  }

 private:
  Respond respond_;
  mutable std::mutex mu_;
  std::vector<HttpRequest> seen_;
  std::unique_ptr<hg::server::HttpServer> server_;
  uint16_t port_ = 0;
};

// Answers every request with the same canned response.
inline FakeServer::Respond always(int status, std::string body, std::string content_type = "application/json") {
  return [=](const HttpRequest&) { return answer(status, body, content_type); };
}

// The status of the ClientError that f throws (-1 if it throws none) and its message.
inline std::pair<int, std::string> client_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const hg::server::ClientError& e) {
    return {e.status(), e.what()};
  }
  return {-1, ""};
}

}  // namespace hg::test
