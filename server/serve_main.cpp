// hgraph-serve: the KServe v2 REST inference server.
//
//   hgraph-serve --model-repository models/repository --host 127.0.0.1 --port 8000
//   hgraph-serve --port 0        # bundled repository, ephemeral port; prints the URL
//   hgraph-serve --model-control-mode explicit --load-model digits_mlp --auth-token-file token.txt
//
// Loads and warms up (captures every batch bucket of) each model before listening, then
// prints "hgraph-serve listening on http://HOST:PORT" on stdout. SIGINT/SIGTERM: readiness
// off, stop accepting, finish the requests in flight (up to --drain-timeout), exit 0; during
// the start-up loading they exit 0 at once (nothing has been served, files are written
// atomically). Binding a non-loopback address in explicit mode without a token is refused
// unless --allow-unauthenticated-management says so.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <boost/asio/ip/address.hpp>
#include <boost/program_options.hpp>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "engine/bundled_data.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/version.h"
#include "graphs/graph_dump.h"
#include "models/buckets.h"
#include "server/access_log.h"
#include "server/http_server.h"
#include "server/kserve.h"
#include "server/memory_budget.h"
#include "server/model_repository.h"

namespace po = boost::program_options;

namespace {

// The bundled repository: <prefix>/share/hgraph/repository when installed, else the source tree's.
std::filesystem::path default_repository() { return hg::bundled_data("repository", HG_DEFAULT_REPOSITORY); }

// The token: the file's first line, or HG_AUTH_TOKEN (a token on the command line would show in ps).
std::string read_token(const std::string& file) {
  if (file.empty()) {
    const char* env = std::getenv("HG_AUTH_TOKEN");
    return env ? env : "";
  }
  std::ifstream in(file);
  std::string token;
  if (!in || !std::getline(in, token)) throw hg::IoError("cannot read --auth-token-file '" + file + "'");
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) throw hg::InvalidArgument("--auth-token-file '" + file + "' holds an empty token");
  return token;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto a = boost::asio::ip::make_address(host, ec);
  return !ec && a.is_loopback();
}

// SIGINT and SIGTERM go to one thread (blocked everywhere else, from before any thread starts):
// during the start-up loading they end the process at once; afterwards they begin the drain.
class SignalWatch {
 public:
  SignalWatch() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    std::thread([this] {
      int sig = 0;
      while (sigwait(&set_, &sig) == 0) {
        const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
        std::lock_guard lk(mu_);
        if (!server_) {
          std::cerr << "hgraph-serve: " << name << " before serving: exiting" << std::endl;
          std::_Exit(0);
        }
        if (!stopped_at_) stopped_at_ = std::chrono::steady_clock::now();
        server_->stop(name);
      }
    }).detach();
  }
  // When the first signal began the drain (now, if none did).
  std::chrono::steady_clock::time_point stopped_at() {
    std::lock_guard lk(mu_);
    return stopped_at_.value_or(std::chrono::steady_clock::now());
  }
  void serving(hg::server::HttpServer* s) {
    std::lock_guard lk(mu_);
    server_ = s;
  }

 private:
  sigset_t set_;
  std::mutex mu_;
  hg::server::HttpServer* server_ = nullptr;
  std::optional<std::chrono::steady_clock::time_point> stopped_at_;
};

}  // namespace

int main(int argc, char** argv) {
  SignalWatch signals;
  std::string repository, host = "127.0.0.1", device = "hpu:0", batch_sizes, dump_graph, control = "none",
                          token_file;
  std::vector<std::string> load_models;
  std::string access_log;
  int port = 8000, http_threads = 2, parse_threads = 2, drain_seconds = 30, poll_seconds = 15;
  size_t max_body = size_t{64} << 20, max_depth = 100, max_control_body = size_t{1} << 20,
         max_inflight = size_t{512} << 20, max_connections = 1024, min_body_rate = 16 << 10, max_loads = 16,
         max_unsent = size_t{256} << 10;
  int64_t idle_ms = 60000, header_ms = 10000, trim_idle_ms = 1000;
  int64_t model_memory_mb = static_cast<int64_t>(hg::server::default_model_memory() >> 20), load_timeout_secs = 600;
  uint64_t max_elements = uint64_t{1} << 26, inline_max_us = 200;
  bool auth_all = false, open_management = false;
  po::options_description desc("hgraph-serve options");
  desc.add_options()
      ("help,h", "show this help")
      ("version", "print the version")
      ("model-repository", po::value(&repository), "model repository DIR/<model>/[config.json, <version>/] "
                                                   "(default: the bundled repository)")
      ("model-control-mode", po::value(&control)->default_value(control),
       "none: load every model at start; poll: also rescan the repository; explicit: load --load-model "
       "models at start, then only on load/unload requests")
      ("load-model", po::value(&load_models)->composing(), "explicit mode: a model to load at start (repeatable; * = all)")
      ("repository-poll-secs", po::value(&poll_seconds)->default_value(poll_seconds), "poll mode: seconds between rescans")
      ("host", po::value(&host)->default_value(host), "address to bind (0.0.0.0 to listen on every interface)")
      ("port", po::value(&port)->default_value(port), "TCP port; 0 picks a free one")
      ("http-threads", po::value(&http_threads)->default_value(http_threads), "HTTP I/O threads")
      ("parse-threads", po::value(&parse_threads)->default_value(parse_threads),
       "threads decoding inference bodies over 64 KiB (smaller ones are decoded on the I/O thread)")
      ("inline-max-us", po::value(&inline_max_us)->default_value(inline_max_us),
       "a request that finds its model idle runs on the I/O thread that decoded it (no hand-off to the "
       "model's instance thread) when the model's recent runs averaged at most this many microseconds "
       "and its max_queue_delay_microseconds is 0; 0: never")
      ("max-body-bytes", po::value(&max_body)->default_value(max_body), "infer and generate body limit (larger: 413)")
      ("max-control-body-bytes", po::value(&max_control_body)->default_value(max_control_body),
       "body limit of every other endpoint (repository, ...; larger: 413)")
      ("max-inflight-bytes", po::value(&max_inflight)->default_value(max_inflight),
       "request bodies being read or handled, all connections together (more: 503)")
      ("max-connections", po::value(&max_connections)->default_value(max_connections),
       "open connections served (16 more are kept for health probes; capped by the file descriptor limit)")
      ("idle-timeout-ms", po::value(&idle_ms)->default_value(idle_ms), "a connection's wait for the next request")
      ("header-timeout-ms", po::value(&header_ms)->default_value(header_ms),
       "time to send the rest of a request header once its first byte came")
      ("min-body-rate", po::value(&min_body_rate)->default_value(min_body_rate),
       "bytes per second a body must average after 5 s (slower: disconnected; 0: no minimum)")
      ("max-unsent-bytes", po::value(&max_unsent)->default_value(max_unsent),
       "a streamed answer's bytes queued for a client that has not read them (past half: its generation "
       "waits; past all: the connection is closed)")
      ("trim-idle-ms", po::value(&trim_idle_ms)->default_value(trim_idle_ms),
       "once no request has been busy for this long after a burst, give freed heap memory back to the "
       "OS (malloc_trim); 0: never")
      ("model-memory-mb", po::value(&model_memory_mb)->default_value(model_memory_mb),
       "MiB every loaded model together may hold (files, KV caches, captured graphs), checked before a load "
       "allocates; the default is 3/4 of the machine's memory; 0: no limit")
      ("load-timeout-secs", po::value(&load_timeout_secs)->default_value(load_timeout_secs),
       "a model load running longer is reported (503) and left to finish in the background, its result "
       "discarded, while later loads and unloads go on; 0: no bound")
      ("max-pending-loads", po::value(&max_loads)->default_value(max_loads),
       "repository load/unload requests waiting for the loader (more: 503)")
      ("access-log", po::value(&access_log), "append one JSON line per request to FILE (- : stderr)")
      ("allow-unauthenticated-management", po::bool_switch(&open_management),
       "allow explicit mode on a non-loopback address without a token (anyone who reaches it can load models)")
      ("max-json-depth", po::value(&max_depth)->default_value(max_depth), "nesting limit of tensor 'data' (deeper: 400)")
      ("max-elements", po::value(&max_elements)->default_value(max_elements), "elements per tensor (more: 400)")
      ("auth-token-file", po::value(&token_file),
       "file whose first line is a bearer token required for repository load/unload (or set HG_AUTH_TOKEN)")
      ("auth-all", po::bool_switch(&auth_all), "require the token on every endpoint except the health probes")
      ("device", po::value(&device)->default_value(device), "device to run on: cpu, hpu, hpu:N")
      ("batch-sizes", po::value(&batch_sizes),
       "batch buckets for models whose config.json names none: 1,2,4,8 or exp:1:32 or linear:1:8 "
       "(default: exp:1:max_batch_size)")
      ("drain-timeout", po::value(&drain_seconds)->default_value(drain_seconds),
       "seconds to finish requests in flight on shutdown")
      ("dump-graph", po::value(&dump_graph), "write every compiled graph (nodes, memory plan, passes) to FILE (- : stderr)");
  hg::server::RepositoryOptions ropt;
  hg::server::KServeOptions kopt;
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    if (vm.count("version")) {
      std::cout << "hgraph-serve " << hg::version() << "\n";
      return 0;
    }
    if (port < 0 || port > 65535) throw hg::InvalidArgument("--port must be in [0, 65535]");
    if (http_threads < 1) throw hg::InvalidArgument("--http-threads must be at least 1");
    if (parse_threads < 0) throw hg::InvalidArgument("--parse-threads must not be negative");
    if (drain_seconds < 0) throw hg::InvalidArgument("--drain-timeout must not be negative");
    if (poll_seconds < 1) throw hg::InvalidArgument("--repository-poll-secs must be at least 1");
    if (max_depth < 1) throw hg::InvalidArgument("--max-json-depth must be at least 1");
    ropt.mode = hg::server::parse_control_mode(control);
    if (!load_models.empty() && ropt.mode != hg::server::ControlMode::Explicit)
      throw hg::InvalidArgument("--load-model needs --model-control-mode explicit");
    ropt.startup_models = load_models;
    ropt.poll_interval = std::chrono::seconds(poll_seconds);
    ropt.predictor.device = hg::Device::parse(device);
    if (!batch_sizes.empty()) ropt.predictor.batch_buckets = hg::models::parse_buckets(batch_sizes);
    ropt.dir = repository.empty() ? default_repository() : std::filesystem::path(repository);
    if (trim_idle_ms < 0) throw hg::InvalidArgument("--trim-idle-ms must not be negative");
    if (idle_ms < 1 || header_ms < 1) throw hg::InvalidArgument("--idle-timeout-ms and --header-timeout-ms must be positive");
    if (max_connections < 1) throw hg::InvalidArgument("--max-connections must be at least 1");
    if (max_loads < 1) throw hg::InvalidArgument("--max-pending-loads must be at least 1");
    ropt.max_pending_tasks = max_loads;
    if (model_memory_mb < 0 || model_memory_mb > (int64_t{1} << 40))
      throw hg::InvalidArgument("--model-memory-mb must be in [0, 2^40]");
    ropt.model_memory = static_cast<size_t>(model_memory_mb) << 20;
    if (load_timeout_secs < 0 || load_timeout_secs > (int64_t{1} << 31))
      throw hg::InvalidArgument("--load-timeout-secs must be in [0, 2^31]");
    ropt.load_timeout = std::chrono::seconds(load_timeout_secs);
    ropt.inline_max_us = inline_max_us;
    kopt.auth_token = read_token(token_file);
    if (ropt.mode == hg::server::ControlMode::Explicit && kopt.auth_token.empty() && !is_loopback(host) &&
        !open_management)
      throw hg::InvalidArgument("--host " + host + " with --model-control-mode explicit and no token would let anyone "
                                "who reaches the port load and unload models: give a token (--auth-token-file or "
                                "HG_AUTH_TOKEN), bind a loopback address, or pass --allow-unauthenticated-management");
    kopt.max_control_body_bytes = max_control_body;
    kopt.auth_all = auth_all;
    if (auth_all && kopt.auth_token.empty()) throw hg::InvalidArgument("--auth-all needs a token (--auth-token-file or HG_AUTH_TOKEN)");
    kopt.parse_threads = parse_threads;
    kopt.limits.max_json_depth = max_depth;
    kopt.limits.max_elements = max_elements;
  } catch (const std::exception& e) {
    std::cerr << "hgraph-serve: " << e.what() << "\n" << desc << "\n";
    return 2;
  }

  try {
    if (!dump_graph.empty()) hg::graphs::set_graph_dump(dump_graph);
    std::unique_ptr<hg::server::AccessLog> alog;  // opened before loading: a bad path fails at once
    if (!access_log.empty()) alog = std::make_unique<hg::server::AccessLog>(access_log);
    std::cerr << "hgraph-serve: loading models from " << ropt.dir.string() << " on " << ropt.predictor.device.str()
              << " (model control mode " << control << ")" << std::endl;
    ropt.log = &std::cerr;
    hg::server::ServerMetrics metrics;  // outlives the repository's batchers and the handler
    ropt.on_batch = [&metrics](const std::string& model, int64_t version, int64_t batch,
                               hg::server::Clock::duration compute) {
      metrics.model(model, std::to_string(version))
          .execution(batch, std::chrono::duration<double, std::micro>(compute).count());
    };
    ropt.on_token = [&metrics](const std::string& model, int64_t version, bool first, hg::server::Clock::duration d) {
      metrics.model(model, std::to_string(version)).token(first, std::chrono::duration<double, std::micro>(d).count());
    };
    hg::server::ModelRepository repo(ropt);
    hg::server::KServeHandler kserve(repo, metrics, kopt);

    hg::server::HttpServerOptions hopt;
    hopt.host = host;
    hopt.port = static_cast<uint16_t>(port);
    hopt.threads = http_threads;
    hopt.max_body_bytes = max_body;
    hopt.max_inflight_body_bytes = max_inflight;
    hopt.max_connections = max_connections;
    hopt.idle_timeout = std::chrono::milliseconds(idle_ms);
    hopt.header_timeout = std::chrono::milliseconds(header_ms);
    hopt.min_body_bytes_per_sec = min_body_rate;
    hopt.max_unsent_bytes = std::max<size_t>(max_unsent, 4096);
    hopt.drain_timeout = std::chrono::seconds(drain_seconds);
    hopt.handle_signals = false;  // SignalWatch
    hopt.log = &std::cerr;
    hopt.on_stop = [&kserve] { kserve.begin_drain(); };
    hopt.on_head = kserve.http_head_check();
    hopt.offload = kserve.http_offload();
    // glibc keeps what a burst freed in its arenas (one per thread that allocated); a burst's
    // bodies and parses would hold their peak for good. Measured in bench/RESULTS.md.
    hopt.quiet_after = std::chrono::milliseconds(trim_idle_ms);
    hopt.on_quiet = [] { malloc_trim(0); };
    hopt.on_response = [&metrics, log = alog.get()](const hg::server::ResponseRecord& r) {
      metrics.http_response(r.status);
      if (log) log->write(r);
    };
    {
      hg::server::HttpServer server(hopt, kserve.http_handler());
      uint16_t bound = server.listen();
      server.start();
      signals.serving(&server);
      const bool ipv6 = host.find(':') != std::string::npos;
      std::cout << "hgraph-serve listening on http://" << (ipv6 ? "[" + host + "]" : host) << ":" << bound
                << std::endl;
      if (!repo.all_ready()) std::cerr << "hgraph-serve: not ready: some models are not READY" << std::endl;
      server.wait();
      signals.serving(nullptr);  // a second signal now ends the process at once
      const auto give_up = signals.stopped_at() + std::chrono::seconds(drain_seconds);
      // Batchers finish what they hold while the handler still exists; a model load still
      // running (it cannot be interrupted) is not waited for beyond --drain-timeout.
      auto repo_done = std::async(std::launch::async, [&repo] { repo.shutdown(); });
      if (repo_done.wait_until(give_up) != std::future_status::ready) {
        std::cerr << "hgraph-serve: a model load is still running after --drain-timeout: exiting without it"
                  << std::endl;
        std::_Exit(0);
      }
      kserve.shutdown();  // parse threads end before the server's io_context goes away
    }
    std::cerr << "hgraph-serve: stopped" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "hgraph-serve: " << e.what() << std::endl;
    return 1;
  }
}
