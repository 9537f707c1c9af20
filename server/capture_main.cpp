// hgraph-capture: compiles and captures a model package for every batch bucket ahead of
// time (warmup), writes the disk graph cache, and reports what each bucket cost.
//
//   hgraph-capture --model models/repository/digits_mlp/1 --buckets exp:1:64 --cache /tmp/hgc,512
//   bucket  compile ms  arena MB  sum MB  from cache
//        1        41.2     0.000   0.001  no
//   ...
//   captured 7/7 buckets, compile 130.5 ms, arena 0.041 MB, constants 0.017 MB (load 25.0 ms) on hpu:0
//
// `HG_GRAPH_CACHE=/tmp/hgc,512 hgraph-serve ...` then starts from the cache (no passes run).
// A model with dynamic dimensions is captured over the grid its config.json's "padding" makes
// (the model folder's config, next to the version directory): every sequence bucket times
// every batch bucket, as the server's warm-up does, within --memory-budget. With a reduced
// "precision" in config.json it prints the agreement with FP32 the server checks at load.
// `--profile N` then replays the largest bucket N times and prints where the time goes per op.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/version.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_dump.h"
#include "graphs/step_profile.h"
#include "models/buckets.h"
#include "models/predictor.h"
#include "server/generate.h"
#include "server/generate_scheduler.h"
#include "server/model_config.h"
#include "server/precision_check.h"
#include "server/padding.h"

namespace po = boost::program_options;

namespace {

double mb(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void progress_bar(size_t done, size_t total, int64_t batch) {
  constexpr int kWidth = 30;
  const int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
  std::fprintf(stderr, "\rcapturing [%s%s] %zu/%zu", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), done, total);
  if (done < total) std::fprintf(stderr, " batch %lld   ", static_cast<long long>(batch));
  else std::fprintf(stderr, "              \n");
  std::fflush(stderr);
}

// Replays the largest captured bucket `runs` times on generated inputs (models/precision.h: seeded
// normal floats, integers 1) under graphs::StepProfile and prints the time per op.
void profile(hg::models::Predictor& p, const std::vector<hg::models::BucketInfo>& infos, int64_t runs) {
  const hg::models::BucketInfo* b = nullptr;
  for (const auto& info : infos)
    if (info.captured) b = &info;
  if (!b) {
    std::printf("profile: no captured bucket to replay\n");
    return;
  }
  const auto& spec = p.package().spec;
  std::vector<hg::DType> types;
  std::vector<int64_t> elements, rows;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    types.push_back(p.input_dtype(i));
    elements.push_back(b->signature.empty() ? p.input_size(i) : hg::numel(b->signature[i]));
    rows.push_back(0);
  }
  const auto inputs = hg::models::precision_sample_inputs(types, elements, rows, b->batch, 0);
  const std::vector<hg::Shape> out_shapes = p.output_shapes(b->signature);
  std::vector<std::vector<uint8_t>> outputs;
  for (size_t j = 0; j < out_shapes.size(); ++j)
    outputs.emplace_back(static_cast<size_t>(b->batch * hg::numel(out_shapes[j])) * hg::dtype_size(p.output_dtype(j)));
  std::vector<const void*> in;
  std::vector<void*> out;
  for (const auto& x : inputs) in.push_back(x.data());
  for (auto& y : outputs) out.push_back(y.data());
  hg::graphs::StepProfile::start();
  for (int64_t r = 0; r < runs; ++r) p.run(in, b->batch, out, b->signature);
  const auto table = hg::graphs::StepProfile::stop();
  std::printf("profile: bucket %lld, %lld runs\n%s", static_cast<long long>(b->batch), static_cast<long long>(runs),
              hg::graphs::StepProfile::table(table, 15).c_str());
}

// A text generation model's step graphs: the grid the server captures at load (config.json's
// "generation"), captured here too, so the server finds them in the graph cache.
void capture_generation(const hg::models::Predictor& p, const hg::server::ModelConfig& config) {
  const auto gen = std::dynamic_pointer_cast<hg::server::GenerateScheduler>(hg::server::make_gpt_generator(p.module(), config));
  const hg::server::GenerationStats s = gen->stats();
  std::printf("%8s %9s %11s %9s %11s  %s\n", "tokens", "sequences", "compile ms", "arena MB", "const MB", "from cache");
  double total_ms = 0;
  for (const hg::models::StepGraphInfo& g : gen->grid()) {
    std::printf("%8lld %9lld %11.1f %9.3f %11.3f  %s\n", static_cast<long long>(g.tokens), static_cast<long long>(g.sequences),
                g.compile_ms, mb(g.arena_bytes), mb(g.constant_bytes), g.from_cache ? "yes" : "no");
    total_ms += g.compile_ms;
  }
  std::printf("captured %zu step graphs for text generation, compile %.1f ms, %.3f MB (budget %s): steps of up to "
              "%lld tokens and %lld sequences\n",
              s.captured_graphs, total_ms, mb(s.graph_bytes),
              config.generation.graph_memory_mb ? (std::to_string(config.generation.graph_memory_mb) + " MB").c_str() : "none",
              static_cast<long long>(s.max_step_tokens), static_cast<long long>(s.max_batch));
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, buckets = "1,2,4,8", device = "hpu:0", cache, dump;
  double budget_mb = 0;
  int64_t profile_runs = 0;
  bool no_progress = false;
  po::options_description desc("hgraph-capture options");
  desc.add_options()
      ("help,h", "show this help")
      ("version", "print the version")
      ("model", po::value(&model)->required(), "model package version directory (model.json or model.onnx)")
      ("buckets", po::value(&buckets), "batch buckets: 1,2,4,8 | linear:START:MAX[:STEP] | exp:MIN:MAX (default 1,2,4,8)")
      ("batch-sizes", po::value(&buckets), "alias of --buckets")
      ("device", po::value(&device)->default_value(device), "device: cpu, hpu, hpu:N")
      ("cache", po::value(&cache), "disk graph cache to write, DIR[,MAX_MB] (default: HG_GRAPH_CACHE)")
      ("memory-budget", po::value(&budget_mb), "MB of arenas + constants to spend; larger buckets are left out")
      ("dump-graph", po::value(&dump), "append every compiled graph's dump to FILE (- for stderr)")
      ("profile", po::value(&profile_runs),
       "then replay the largest captured bucket N times on generated inputs and print the time per op")
      ("no-progress", po::bool_switch(&no_progress), "no progress bar on stderr");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    if (vm.count("version")) {
      std::cout << "hgraph-capture " << hg::version() << "\n";
      return 0;
    }
    po::notify(vm);
    if (vm.count("buckets") && vm.count("batch-sizes")) throw po::error("give --buckets or --batch-sizes, not both");
    if (budget_mb < 0) throw po::error("--memory-budget must not be negative");
    if (profile_runs < 0 || profile_runs > 100000) throw po::error("--profile must be in [0, 100000]");
  } catch (const std::exception& e) {
    std::cerr << "hgraph-capture: " << e.what() << "\n" << desc << "\n";
    return 2;
  }

  spdlog::set_default_logger(spdlog::stderr_color_mt("hgraph-capture"));  // stdout holds the table
  try {
    if (!cache.empty()) hg::graphs::set_disk_cache(hg::graphs::parse_disk_cache_config(cache));
    if (!dump.empty()) hg::graphs::set_graph_dump(dump);
    hg::models::PredictorOptions opt;
    opt.device = hg::Device::parse(device);
    opt.batch_buckets = hg::models::parse_buckets(buckets);
    auto t0 = std::chrono::steady_clock::now();
    const hg::server::ModelConfig config = hg::server::ModelConfig::load(std::filesystem::absolute(model).parent_path());
    config.apply(opt);
    auto predictor = hg::models::Predictor::load(model, opt);
    double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    hg::models::CaptureAllOptions copt;
    if (config.padding) {
      hg::server::check_padding(*config.padding, predictor->package().spec);
      copt.signatures = hg::server::padding_signatures(*config.padding, predictor->package().spec);
    }
    copt.memory_budget = static_cast<size_t>(budget_mb * (1 << 20));
    if (!no_progress && isatty(STDERR_FILENO)) copt.progress = progress_bar;
    else if (!no_progress)
      copt.progress = [](size_t done, size_t total, int64_t batch) {
        if (done < total) std::fprintf(stderr, "capturing %zu/%zu: batch %lld\n", done + 1, total, static_cast<long long>(batch));
      };
    if (const size_t n = hg::server::calibrate_model(*predictor, config, std::filesystem::absolute(model).parent_path()))
      spdlog::info("int8 calibrated on {}: {} convolution input ranges fixed", config.calibration->inputs, n);
    std::vector<hg::models::BucketInfo> infos = predictor->capture_all(copt);
    // Reduced precision: the agreement with FP32 the server would check at load (and refuse below
    // the config's minimums: the capture fails the same way).
    std::string precision_line;
    if (config.precision != hg::graphs::Precision::Fp32)
      precision_line = hg::server::precision_report_line(
          config, hg::server::check_model_precision(*predictor, config, std::filesystem::absolute(model).parent_path()));

    double total_ms = 0;
    size_t arena = 0, constants = 0, captured = 0;
    std::vector<std::string> left_out;
    auto signature = [](const hg::models::BucketInfo& b) {
      std::string s;
      for (const auto& shape : b.signature) s += (s.empty() ? "" : " ") + hg::shape_str(shape);
      return s;
    };
    const bool grid = !infos.empty() && !infos[0].signature.empty();
    std::printf("%8s %11s %9s %9s %11s  %s%s\n", "bucket", "compile ms", "arena MB", "sum MB", "const MB", "from cache",
                grid ? "  input shapes" : "");
    for (const auto& b : infos) {
      if (!b.captured) {
        left_out.push_back(grid ? "[" + std::to_string(b.batch) + " x " + signature(b) + "]" : std::to_string(b.batch));
        continue;
      }
      std::string cached = b.disk_hit ? "yes" : "no";
      if (grid) cached += std::string(12 - cached.size(), ' ') + signature(b);
      std::printf("%8lld %11.1f %9.3f %9.3f %11.3f  %s\n", static_cast<long long>(b.batch), b.compile_ms,
                  mb(b.arena_bytes), mb(b.buffer_bytes), mb(b.constant_bytes), cached.c_str());
      total_ms += b.compile_ms;
      arena += b.arena_bytes;
      constants += b.constant_bytes;
      ++captured;
    }
    std::printf("captured %zu/%zu buckets, compile %.1f ms, arena %.3f MB, constants %.3f MB (load %.1f ms) on %s\n",
                captured, infos.size(), total_ms, mb(arena), mb(constants), load_ms, opt.device.str().c_str());
    if (!precision_line.empty()) std::printf("%s\n", precision_line.c_str());
    if (!left_out.empty()) {
      std::printf("left out (memory budget %.3f MB", budget_mb);
      if (grid) std::printf(", max_signatures %zu", config.max_signatures);
      std::printf("):");
      for (const std::string& b : left_out) std::printf(" %s", b.c_str());
      std::printf("\n");
    }
    if (infos.empty() && predictor->input_size(0) < 0)
      std::printf("the model has dynamic dimensions and its config.json names no \"padding\": nothing to capture "
                  "ahead (signatures are captured on first use)\n");
    if (hg::server::is_text_generation_model(predictor->package().spec)) capture_generation(*predictor, config);
    if (profile_runs > 0) profile(*predictor, infos, profile_runs);
    if (auto dc = hg::graphs::disk_cache()) {
      const auto s = dc->stats();
      std::printf("graph cache %s: %llu hits, %llu written, %llu invalid removed, %.3f MB on disk\n",
                  dc->config().dir.c_str(), static_cast<unsigned long long>(s.hits),
                  static_cast<unsigned long long>(s.writes), static_cast<unsigned long long>(s.invalid),
                  mb(dc->total_bytes()));
    }
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "hgraph-capture: " << e.what() << std::endl;
    return 1;
  }
}
