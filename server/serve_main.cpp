// hgraph-serve: the KServe v2 REST inference server.
//
//   hgraph-serve --model-repository models/repository --host 127.0.0.1 --port 8000
//   hgraph-serve --port 0        # bundled repository, ephemeral port; prints the URL
//
// Loads and warms up (captures every batch bucket of) each model before listening, then
// prints "hgraph-serve listening on http://HOST:PORT" on stdout. SIGINT/SIGTERM: stop
// accepting, finish the requests in flight, exit 0.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"
#include "graphs/graph_dump.h"
#include "models/buckets.h"
#include "server/http_server.h"
#include "server/kserve.h"
#include "server/model_repository.h"

namespace po = boost::program_options;

namespace {

std::filesystem::path default_repository() {
#ifdef HG_DEFAULT_REPOSITORY
  return HG_DEFAULT_REPOSITORY;
#else
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "models" / "repository";
#endif
}


}  // namespace

int main(int argc, char** argv) {
  std::string repository, host = "127.0.0.1", device = "hpu:0", batch_sizes, dump_graph;
  int port = 8000, http_threads = 2, infer_threads = 2, drain_seconds = 30;
  size_t max_body = size_t{64} << 20;
  po::options_description desc("hgraph-serve options");
  desc.add_options()
      ("help,h", "show this help")
      ("model-repository", po::value(&repository), "model repository DIR/<model>/<version>/model.json "
                                                   "(default: the bundled repository)")
      ("host", po::value(&host)->default_value(host), "address to bind")
      ("port", po::value(&port)->default_value(port), "TCP port; 0 picks a free one")
      ("http-threads", po::value(&http_threads)->default_value(http_threads), "I/O threads")
      ("infer-threads", po::value(&infer_threads)->default_value(infer_threads),
       "inference threads (0: run inference on the I/O threads)")
      ("max-body-bytes", po::value(&max_body)->default_value(max_body), "request body limit (larger: 413)")
      ("device", po::value(&device)->default_value(device), "device to run on: cpu, hpu, hpu:N")
      ("batch-sizes", po::value(&batch_sizes), "batch buckets to capture, e.g. 1,2,4,8 (default: 1..32)")
      ("drain-timeout", po::value(&drain_seconds)->default_value(drain_seconds),
       "seconds to finish requests in flight on shutdown")
      ("dump-graph", po::value(&dump_graph), "write every compiled graph (nodes, memory plan, passes) to FILE (- : stderr)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    if (port < 0 || port > 65535) throw hg::InvalidArgument("--port must be in [0, 65535]");
    if (http_threads < 1) throw hg::InvalidArgument("--http-threads must be at least 1");
    if (infer_threads < 0) throw hg::InvalidArgument("--infer-threads must not be negative");
    if (drain_seconds < 0) throw hg::InvalidArgument("--drain-timeout must not be negative");
  } catch (const std::exception& e) {
    std::cerr << "hgraph-serve: " << e.what() << "\n" << desc << "\n";
    return 2;
  }

  try {
    if (!dump_graph.empty()) hg::graphs::set_graph_dump(dump_graph);
    hg::models::PredictorOptions popt;
    popt.device = hg::Device::parse(device);
    if (!batch_sizes.empty()) popt.batch_buckets = hg::models::parse_buckets(batch_sizes);
    const std::filesystem::path dir = repository.empty() ? default_repository() : std::filesystem::path(repository);
    std::cerr << "hgraph-serve: loading models from " << dir.string() << " on " << popt.device.str() << std::endl;
    hg::server::RepositoryOptions ropt;
    ropt.dir = dir;
    ropt.predictor = popt;
    ropt.log = &std::cerr;
    hg::server::ModelRepository repo(ropt);

    hg::server::KServeOptions kopt;
    kopt.infer_threads = infer_threads;
    hg::server::KServeHandler kserve(repo, kopt);

    hg::server::HttpServerOptions hopt;
    hopt.host = host;
    hopt.port = static_cast<uint16_t>(port);
    hopt.threads = http_threads;
    hopt.max_body_bytes = max_body;
    hopt.drain_timeout = std::chrono::seconds(drain_seconds);
    hopt.log = &std::cerr;
    {
      hg::server::HttpServer server(hopt, kserve.http_handler());
      uint16_t bound = server.listen();
      server.start();
      const bool ipv6 = host.find(':') != std::string::npos;
      std::cout << "hgraph-serve listening on http://" << (ipv6 ? "[" + host + "]" : host) << ":" << bound
                << std::endl;
      if (!repo.all_ready()) std::cerr << "hgraph-serve: not ready: some models are UNAVAILABLE" << std::endl;
      server.wait();
      kserve.shutdown();  // inference threads end before the server's io_context goes away
    }
    std::cerr << "hgraph-serve: stopped" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "hgraph-serve: " << e.what() << std::endl;
    return 1;
  }
}
