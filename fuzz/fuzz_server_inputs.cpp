// The fuzz targets for what the HTTP server reads from a client or its model repository: raw
// request bytes (http), a generate or OpenAI request body (generate) and a model's config.json (config).
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <string>

#include "engine/error.h"
#include "fuzz/fuzz_targets.h"
#include "server/generate.h"
#include "server/openai.h"
#include "server/http_server.h"
#include "server/model_config.h"
#include "server/router.h"

namespace hg::fuzz {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

std::string str(beast::string_view v) { return std::string(v.data(), v.size()); }

// The next request of a connection whose remaining bytes are `input`, read as the server's
// session does (a fresh parser per request with the server's default header and body limits);
// nullopt where the server would answer 400/413/431 or see the connection end mid-request.
std::optional<server::HttpRequest> read_request(std::string_view& input, bool& keep_alive) {
  const server::HttpServerOptions limits;
  http::request_parser<http::string_body> parser;
  parser.body_limit(limits.max_body_bytes);
  parser.header_limit(static_cast<uint32_t>(limits.max_header_bytes));
  parser.eager(true);
  beast::error_code ec;
  while (!parser.is_done()) {
    const size_t used = parser.put(boost::asio::buffer(input.data(), input.size()), ec);
    input.remove_prefix(used);
    if (ec == http::error::need_more) ec = {};
    if (ec) return std::nullopt;
    if (used == 0) {  // what is left is not enough, and the client sends no more
      parser.put_eof(ec);
      if (ec || !parser.is_done()) return std::nullopt;
    }
  }
  auto msg = parser.release();
  keep_alive = msg.keep_alive();
  server::HttpRequest req;
  req.method = str(msg.method_string());
  req.target = str(msg.target());
  req.body = std::move(msg.body());
  for (const auto& f : msg) req.headers.emplace_back(str(f.name_string()), str(f.value()));
  return req;
}

}  // namespace

// Every request of a connection (pipelined, until one is not keep-alive), each routed as
// KServeHandler does before any handler runs: endpoint, allowed method, and the 404/405
// answers that echo the method and path.
void load_http(std::string_view input) {
  bool keep_alive = true;
  while (keep_alive && !input.empty()) {
    std::optional<server::HttpRequest> req = read_request(input, keep_alive);
    if (!req) return;
    const server::Route route = server::parse_route(req->target);
    const std::string path(server::target_path(req->target));
    if (route.endpoint == server::Endpoint::Unknown) {
      server::json_error(404, "no endpoint for " + req->method + " " + path);
      continue;
    }
    const std::string allow = server::allowed_methods(route.endpoint);
    if (req->method != allow)
      server::json_error(405, "method " + req->method + " is not allowed for " + path + " (allowed: " + allow + ")");
  }
}

// One body through every text generation request parser: each accepts it or throws hg::Error.
void load_generate(std::string_view input) {
  for (auto parse : {+[](std::string_view b) { server::parse_generate_request(b); },
                     +[](std::string_view b) { server::parse_completion_request(b); },
                     +[](std::string_view b) { server::parse_chat_request(b); }}) {
    try {
      parse(input);
    } catch (const Error&) {  // rejected: the next parser still gets the body
    }
  }
}

// config.json of a model folder "fuzz"; an accepted config must come back from its own
// to_json() unchanged (model_config.h promises parse(to_json()) gives the same config).
void load_config(std::string_view input) {
  const std::filesystem::path dir = scratch_dir() / "fuzz";
  std::filesystem::create_directories(dir);
  write_bytes(dir / "config.json", input);
  const server::ModelConfig c = server::ModelConfig::load(dir);
  const nlohmann::json j = c.to_json();
  nlohmann::json again;
  try {
    again = server::ModelConfig::parse(j, "to_json()", c.name).to_json();
  } catch (const Error& e) {
    round_trip_differs("config " + j.dump() + " is rejected: " + e.what());
  }
  if (again != j) round_trip_differs("config " + j.dump() + " reads back as " + again.dump());
}

}  // namespace hg::fuzz
