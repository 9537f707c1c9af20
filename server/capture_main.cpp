// hgraph-capture: compiles and captures a model package for every batch bucket ahead of
// time (warmup) and reports what each bucket cost.
//
//   hgraph-capture --model models/repository/digits_mlp/1 --batch-sizes 1,2,4,8 --device hpu:0
//   batch 1: capture 3.2 ms, arena 4096 bytes
//   ...
//   total: 4 buckets, capture 11.9 ms, arena 40960 bytes (load 25.0 ms)
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"
#include "models/predictor.h"
#include "server/model_repository.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  std::string model, batch_sizes = "1,2,4,8", device = "hpu:0";
  po::options_description desc("hgraph-capture options");
  desc.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model)->required(), "model package version directory (with model.json)")
      ("batch-sizes", po::value(&batch_sizes)->default_value(batch_sizes), "comma-separated batch buckets")
      ("device", po::value(&device)->default_value(device), "device: cpu, hpu, hpu:N");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "hgraph-capture: " << e.what() << "\n" << desc << "\n";
    return 2;
  }

  try {
    hg::models::PredictorOptions opt;
    opt.device = hg::Device::parse(device);
    opt.batch_buckets = hg::server::parse_batch_sizes(batch_sizes);
    auto t0 = std::chrono::steady_clock::now();
    auto predictor = hg::models::Predictor::load(model, opt);
    double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<hg::models::BucketInfo> buckets = predictor->capture_all();
    double total_ms = 0;
    size_t total_bytes = 0;
    for (const auto& b : buckets) {
      std::printf("batch %lld: capture %.1f ms, arena %zu bytes\n", static_cast<long long>(b.batch), b.capture_ms,
                  b.arena_bytes);
      total_ms += b.capture_ms;
      total_bytes += b.arena_bytes;
    }
    std::printf("total: %zu buckets, capture %.1f ms, arena %zu bytes (load %.1f ms) on %s\n", buckets.size(),
                total_ms, total_bytes, load_ms, opt.device.str().c_str());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "hgraph-capture: " << e.what() << std::endl;
    return 1;
  }
}
