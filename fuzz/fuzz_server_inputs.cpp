// The fuzz targets for what the HTTP server reads from a client or its model repository: a
// connection's bytes split into reads over simulated time (http), a generate or OpenAI request
// body (generate) and a model's config.json (config).
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "fuzz/fuzz_targets.h"
#include "server/generate.h"
#include "server/openai.h"
#include "server/http_server.h"
#include "server/model_config.h"
#include "server/request_reader.h"
#include "server/router.h"

namespace hg::fuzz {
namespace {

namespace http = boost::beast::http;
using server::RequestReader;
using Event = RequestReader::Event;
using Time = RequestReader::Time;

std::string str(boost::beast::string_view v) { return std::string(v.data(), v.size()); }

// A connection's script: the bytes a client sends, the reads they arrive in and when.
// Input: data, then K control bytes, then K itself (one byte). Control byte 0 sets the server's
// options (bit 0: a body-rate floor of 1 KiB/s after a 1 s grace; bit 1: small limits, 512-byte
// heads and 4 KiB bodies); each pair after it is one read: (bytes - 1, 50 ms ticks of simulated
// time before it). What the pairs leave arrives in one read at the end.
struct Script {
  server::HttpServerOptions opt;
  std::string_view data;
  std::vector<std::pair<size_t, int>> reads;
};

Script read_script(std::string_view input) {
  Script s;
  s.opt.min_body_bytes_per_sec = 0;
  if (input.empty()) return s;
  const size_t k = std::min<size_t>(static_cast<unsigned char>(input.back()), input.size() - 1);
  input.remove_suffix(1);
  const std::string_view control = input.substr(input.size() - k);
  s.data = input.substr(0, input.size() - k);
  const unsigned flags = control.empty() ? 0 : static_cast<unsigned char>(control[0]);
  if (flags & 1) {
    s.opt.min_body_bytes_per_sec = 1024;
    s.opt.body_grace = std::chrono::seconds(1);
  }
  if (flags & 2) {
    s.opt.max_header_bytes = 512;
    s.opt.max_body_bytes = 4096;
  }
  for (size_t i = 1; i + 1 < control.size(); i += 2)
    s.reads.emplace_back(static_cast<unsigned char>(control[i]) + 1, static_cast<unsigned char>(control[i + 1]));
  return s;
}

// What the connection made of its bytes, in order: each request read (method, target, headers,
// body), then how it ended: an error answer (status and message), the peer's end, or a cut by
// the connection's deadline.
struct Outcome {
  int status = 0;  // 0: a request; -1: the input ended; -2: cut at its deadline
  std::string what;
  bool operator==(const Outcome&) const = default;
};

void check(bool ok, const std::string& what) {
  if (!ok) round_trip_differs("http connection: " + what);
}

// Routes a request as KServeHandler does before any handler runs: endpoint, allowed method, and
// the 404/405 answers that echo the method and path.
void route(const std::string& method, const std::string& target) {
  const server::Route r = server::parse_route(target);
  const std::string path(server::target_path(target));
  if (r.endpoint == server::Endpoint::Unknown) {
    server::json_error(404, "no endpoint for " + method + " " + path);
    return;
  }
  const std::string allow = server::allowed_methods(r.endpoint);
  if (method != allow) server::json_error(405, "method " + method + " is not allowed for " + path + " (allowed: " + allow + ")");
}

// Drives a RequestReader as Session does (a head's Content-Length over the limit is 413, a
// request that is not keep-alive ends the connection), feeding `s.data` in s.reads (split) or
// all at once, and checks on the way that the buffer and body stay within their limits and
// that each deadline is the one the options give: header_timeout from a head's first byte, the
// body-rate floor on body data alone.
std::vector<Outcome> run(const Script& s, bool split) {
  const server::HttpServerOptions& o = s.opt;
  RequestReader r(o);
  Time now{};
  Time first_byte{}, body_start{};
  std::vector<Outcome> out;
  size_t pos = 0, next = 0;
  r.next_request(now);
  Event e = r.parse();
  bool head_bytes = false;
  for (;;) {
    switch (e) {
      case Event::NeedMore: {
        if (pos == s.data.size()) {
          e = r.end_of_input();
          if (e == Event::Closed) out.push_back({-1, "end"});
          if (e == Event::Failed) out.push_back({r.status(), r.message()});
          return out;
        }
        size_t n = s.data.size() - pos;
        if (split && next < s.reads.size()) {
          n = std::min(n, s.reads[next].first);
          now += std::chrono::milliseconds(50) * s.reads[next].second;
          ++next;
        }
        const Time deadline = r.deadline();
        if (r.in_body() && o.min_body_bytes_per_sec > 0) {
          const double allowed = std::chrono::duration<double>(o.body_grace).count() +
                                 static_cast<double>(r.body().size() + o.min_body_bytes_per_sec) / o.min_body_bytes_per_sec;
          check(deadline <= body_start + std::chrono::duration_cast<Time::duration>(std::chrono::duration<double>(allowed)) +
                                std::chrono::microseconds(1),
                "the body deadline is later than its rate floor allows");
        } else if (!r.in_body() && head_bytes) {
          check(deadline <= first_byte + o.header_timeout, "the head deadline is later than header_timeout");
        }
        if (now > deadline) {
          out.push_back({-2, "cut"});
          return out;
        }
        if (!head_bytes && !r.in_body()) first_byte = now;
        head_bytes = true;
        while (n > 0) {  // one read of the client's may take more than one of the connection's
          auto room = r.prepare();
          const size_t k = std::min(n, room.size());
          std::memcpy(room.data(), s.data.data() + pos, k);
          pos += k;
          n -= k;
          e = r.commit(k, now);
          check(r.buffered() <= r.buffer_limit(), "the read buffer holds more than its limit");
          if (e != Event::NeedMore) break;
        }
        break;
      }
      case Event::Head: {
        const auto length = r.content_length();
        if (length && *length > o.max_body_bytes) {
          out.push_back({413, "Content-Length " + std::to_string(*length)});
          return out;
        }
        body_start = now;
        r.read_body(o.max_body_bytes, now);
        e = r.parse();
        break;
      }
      case Event::Body: {
        check(r.body().size() <= o.max_body_bytes, "a body of " + std::to_string(r.body().size()) + " bytes passed its limit");
        auto msg = r.release();
        std::string what = str(msg.method_string()) + " " + str(msg.target()) + " " + std::to_string(msg.version());
        for (const auto& f : msg) what += "\n" + str(f.name_string()) + ": " + str(f.value());
        what += "\n\n" + msg.body();
        route(str(msg.method_string()), str(msg.target()));
        out.push_back({0, std::move(what)});
        if (!msg.keep_alive()) return out;
        r.next_request(now);
        head_bytes = r.buffered() > 0;
        first_byte = now;
        e = r.parse();
        break;
      }
      case Event::Failed:
        out.push_back({r.status(), r.message()});
        return out;
      case Event::Closed:
        out.push_back({-1, "end"});
        return out;
    }
  }
}

std::string describe(const std::vector<Outcome>& v) {
  std::string s;
  for (const auto& o : v) s += "[" + std::to_string(o.status) + " " + o.what.substr(0, 200) + "] ";
  return s;
}

}  // namespace

// A connection's bytes (read_script) through the reader Session uses, twice: in one read with
// no time passing, and split into the script's reads over simulated time. However the bytes are
// split, the requests read and the answer that ends the connection are the same; a connection
// cut at its deadline read a prefix of them.
void load_http(std::string_view input) {
  const Script s = read_script(input);
  const std::vector<Outcome> whole = run(s, false);
  const std::vector<Outcome> split = run(s, true);
  if (!split.empty() && split.back().status == -2) {
    const size_t n = split.size() - 1;
    check(n <= whole.size() && std::equal(split.begin(), split.begin() + n, whole.begin()),
          "cut at its deadline after " + describe(split) + "but in one read it is " + describe(whole));
  } else {
    check(split == whole, "split into reads it is " + describe(split) + "but in one read " + describe(whole));
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
