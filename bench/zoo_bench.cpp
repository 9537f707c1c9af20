// hgraph's side of the zoo benchmark (bench/run_zoo.sh runs it next to PyTorch and ONNX Runtime).
// Data from `bench/torch_zoo_bench.py prepare DIR`. Threads: OMP_NUM_THREADS and HG_HPU_THREADS.
//
//   hg_zoo_bench latency DIR [--models mlp,lenet5,resnet18,bert,identity] [--batches 1,8,32]
//                [--seconds 2] [--runtimes replay,replay_zoo,eager,lazy]
//       one JSON line per (runtime, model, batch): median_ms, p99_ms, n (per-call wall times).
//       replay      Predictor over DIR/MODEL/model.onnx (one captured HPU graph, frozen weights);
//                   a model with a dynamic dimension besides the batch (a sequence axis) runs
//                   at the input file's sample shape (one signature). With DIR/MODEL/output.safetensors
//                   (PyTorch's output), max_rel_err: max|replay - PyTorch| / max|PyTorch|.
//       replay_bf16 the same compiled in BF16 (PredictorOptions::precision); max_rel_err as above
//       replay_int8 the same with its linears and convolutions in INT8 (dynamic quantization)
//       replay_int8_static  the same with the convolutions' ranges calibrated on 64 generated
//                   inputs first (Predictor::calibrate_int8: static quantization)
//       replay_zoo  Predictor over DIR/MODEL/zoo (the same weights in hgraph's native modules)
//       eager       the imported ONNX module on hpu:0, op by op; the output read on the host
//       lazy        the same module traced in lazy mode, mark_step(), the output read on the host
//   hg_zoo_bench agreement DIR [--models ..] [--precision bf16|int8] [--samples 1000] [--batch 8]
//                [--calibrate N]
//       the reduced-precision replay against hgraph's FP32 on fixed inputs (Predictor::
//       check_precision): top-1 agreement and max relative error, one JSON line per model;
//       --calibrate: INT8 static, calibrated on N other generated inputs first.
//   hg_zoo_bench profile DIR --models M [--batch 8] [--precision fp32|bf16|int8] [--seconds 2] [--top 25]
//       where a replay's time goes (graphs/step_profile.h): time per op kind and the largest
//       (op, dtype, shape) rows, as text.
//   hg_zoo_bench overhead [--nodes 1000] [--seconds 2]
//       per-node replay cost: HPU graphs of 1 and of N `scale` ops on one element
//       (run with HG_DISABLE_FUSION=1, which run_zoo.sh sets, so no pass merges the chain).
//   hg_zoo_bench peak [--sizes 1024,2048,4096] [--seconds 2]
//       oneDNN f32 matmul GFLOP/s on square matrices (the FP32 limit for achieved GFLOP/s).
//   hg_zoo_bench start MODEL_DIR BATCH [LABEL]
//       wall time from nothing to a captured graph: Predictor::load + capture_all (in a fresh
//       process; HG_GRAPH_CACHE decides whether the compile comes from the disk cache), with the
//       capture's compile time (cache lookup included) and whether it hit the disk cache, then
//       the first replay; LABEL (e.g. cold, warm) is copied into the JSON line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/hpu_graph.h"
#include "graphs/lazy.h"
#include "graphs/step_profile.h"
#include "models/module.h"
#include "models/onnx_import.h"
#include "models/predictor.h"
#include "models/safetensors.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Timing {
  double median_ms, p99_ms;
  size_t n;
  std::optional<double> max_rel_err = {};  // replay against PyTorch's output
};

// The same protocol as bench/torch_zoo_bench.py: a warm-up of at least 3 calls and 0.5 s (at
// most 20 calls), then per-call wall times for `seconds` (at least 5 calls, at most 5000).
Timing time_calls(const std::function<void()>& fn, double seconds) {
  auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i) {
    fn();
    if (i >= 2 && ms_since(t0) > 500) break;
  }
  std::vector<double> times;
  t0 = Clock::now();
  while (times.size() < 5 || (ms_since(t0) < seconds * 1e3 && times.size() < 5000)) {
    const auto a = Clock::now();
    fn();
    times.push_back(ms_since(a));
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times[static_cast<size_t>(times.size() * 0.99)], times.size()};
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> out;
  for (const auto& x : split(s)) out.push_back(std::stoll(x));
  return out;
}

// --name value options after the positional arguments.
std::map<std::string, std::string> options(int argc, char** argv, int first) {
  std::map<std::string, std::string> o;
  for (int i = first; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc) throw hg::InvalidArgument("hg_zoo_bench: bad option '" + k + "'");
    o[k.substr(2)] = argv[i + 1];
  }
  return o;
}

std::string opt(const std::map<std::string, std::string>& o, const std::string& k, const std::string& dflt) {
  auto it = o.find(k);
  return it == o.end() ? dflt : it->second;
}

int threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  return v ? std::atoi(v) : 0;
}

void emit(nlohmann::json j) {
  j["threads"] = threads();
  std::cout << j.dump() << std::endl;
}

// The input array of DIR/MODEL/input.safetensors: batch 32, a batch-b run uses its first b rows.
struct Input {
  hg::DType dtype;
  hg::Shape shape;  // [32, ...]
  std::vector<uint8_t> data;
  int64_t sample_bytes() const { return static_cast<int64_t>(data.size()) / shape[0]; }
  hg::Tensor tensor(int64_t batch, hg::Device d) const {
    hg::Shape s = shape;
    s[0] = batch;
    const int64_t n = hg::numel(s);
    if (dtype == hg::DType::I64) {
      const auto* p = reinterpret_cast<const int64_t*>(data.data());
      return hg::Tensor::from_indices(std::vector<int64_t>(p, p + n), s, d);
    }
    const auto* p = reinterpret_cast<const float*>(data.data());
    return hg::Tensor::from_vector(std::vector<float>(p, p + n), s, d);
  }
};

Input read_input(const fs::path& file) {
  auto f = hg::safetensors::read(file);
  const auto* e = f.find("input");
  if (!e) throw hg::FormatError(file.string() + ": no tensor 'input'");
  return {e->dtype == "I64" ? hg::DType::I64 : hg::DType::F32, hg::Shape(e->shape.begin(), e->shape.end()), e->data};
}

// max|got - want| / max(max|want|, 1e-6) over the first got.size() values of the F32 tensor
// "output" of `file` (bench/onnx_coverage.py's error); infinite for a non-finite value.
double max_rel_err(const std::vector<float>& got, const fs::path& file) {
  auto f = hg::safetensors::read(file);
  const auto* e = f.find("output");
  if (!e || e->dtype != "F32" || e->data.size() < got.size() * sizeof(float))
    throw hg::FormatError(file.string() + ": no F32 tensor 'output' of the batch's size");
  const auto* want = reinterpret_cast<const float*>(e->data.data());
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return HUGE_VAL;
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

// calibration > 0: INT8 with static ranges, calibrated on that many generated inputs first.
Timing replay(const fs::path& dir, const Input& in, int64_t batch, double seconds, const fs::path& reference,
              hg::graphs::Precision precision = hg::graphs::Precision::Fp32, int64_t calibration = 0) {
  auto p = hg::models::Predictor::load(dir, {.batch_buckets = {batch}, .precision = precision});
  // Dynamic dimensions besides the batch: the input file's sample shape is the signature
  // (output_shapes captures its graph before the timing).
  std::vector<hg::Shape> sample;
  if (p->input_size(0) < 0) sample.emplace_back(in.shape.begin() + 1, in.shape.end());
  if (calibration > 0) p->calibrate_int8({.samples = calibration, .signature = sample});
  p->capture_all();
  std::vector<float> out(static_cast<size_t>(batch * hg::numel(p->output_shapes(sample).at(0))));
  const void* x = in.data.data();
  Timing t = time_calls([&] { p->run({x}, batch, {out.data()}, sample); }, seconds);
  if (fs::exists(reference)) t.max_rel_err = max_rel_err(out, reference);
  return t;
}

Timing eager(hg::models::Module& net, const Input& in, int64_t batch, bool lazy, double seconds) {
  const hg::Device hpu = hg::Device::hpu(0);
  hg::NoGradGuard no_grad;
  const hg::Tensor x = in.tensor(batch, hpu);  // made before lazy tracing starts: a device tensor
  hg::graphs::enable_lazy_mode(lazy);
  const Timing t = time_calls(
      [&] {
        std::vector<hg::Tensor> y = net.forward_all({x});
        if (lazy) hg::graphs::mark_step(hpu);
        volatile float sink = y[0].to_vector()[0];  // the host read: waits for the device
        (void)sink;
      },
      seconds);
  hg::graphs::enable_lazy_mode(false);
  return t;
}

int latency(const fs::path& data, const std::map<std::string, std::string>& o) {
  const auto models = split(opt(o, "models", "mlp,lenet5,resnet18,bert,identity"));
  const auto batches = split_ints(opt(o, "batches", "1,8,32"));
  const auto runtimes = split(opt(o, "runtimes", "replay,replay_zoo,eager,lazy"));
  const double seconds = std::stod(opt(o, "seconds", "2"));
  auto has = [&](const char* r) { return std::find(runtimes.begin(), runtimes.end(), r) != runtimes.end(); };
  for (const auto& m : models) {
    const fs::path dir = data / m;
    const Input in = read_input(dir / "input.safetensors");
    std::unique_ptr<hg::models::Module> net;
    if (has("eager") || has("lazy")) {
      net = hg::models::build_module(hg::models::import_onnx(dir / "model.onnx"));
      net->eval();
      net->to(hg::Device::hpu(0));
    }
    for (int64_t b : batches) {
      // A runtime that fails on a model (e.g. an op it cannot capture) is reported, not fatal.
      auto measure = [&](const char* runtime, const std::function<Timing()>& run) {
        nlohmann::json j{{"runtime", runtime}, {"model", m}, {"batch", b}};
        try {
          const Timing t = run();
          j.update({{"median_ms", t.median_ms}, {"p99_ms", t.p99_ms}, {"n", t.n}});
          if (t.max_rel_err) j["max_rel_err"] = *t.max_rel_err;
        } catch (const std::exception& e) {
          hg::synchronize(hg::Device::hpu(0));
          hg::graphs::enable_lazy_mode(false);
          j["error"] = e.what();
        }
        emit(j);
      };
      const fs::path reference = dir / "output.safetensors";
      if (has("replay")) measure("hgraph_replay", [&] { return replay(dir, in, b, seconds, reference); });
      for (auto p : {hg::graphs::Precision::Bf16, hg::graphs::Precision::Int8}) {
        const std::string name = std::string("replay_") + hg::graphs::precision_name(p);
        if (has(name.c_str()))
          measure(("hgraph_" + name).c_str(), [&] { return replay(dir, in, b, seconds, reference, p); });
      }
      if (has("replay_int8_static"))
        measure("hgraph_replay_int8_static",
                [&] { return replay(dir, in, b, seconds, reference, hg::graphs::Precision::Int8, 64); });
      if (has("replay_zoo") && fs::exists(dir / "zoo"))
        measure("hgraph_replay_zoo", [&] { return replay(dir / "zoo", in, b, seconds, reference); });
      if (has("eager")) measure("hgraph_eager", [&] { return eager(*net, in, b, false, seconds); });
      if (has("lazy")) measure("hgraph_lazy", [&] { return eager(*net, in, b, true, seconds); });
    }
  }
  return 0;
}

int agreement(const fs::path& data, const std::map<std::string, std::string>& o) {
  const auto precision = hg::graphs::parse_precision(opt(o, "precision", "bf16"));
  const int64_t samples = std::stoll(opt(o, "samples", "1000")), batch = std::stoll(opt(o, "batch", "8"));
  const int64_t calibration = std::stoll(opt(o, "calibrate", "0"));
  for (const auto& m : split(opt(o, "models", "resnet18,bert"))) {
    const Input in = read_input(data / m / "input.safetensors");
    auto p = hg::models::Predictor::load(data / m, {.batch_buckets = {batch}, .precision = precision});
    hg::models::PrecisionCheckOptions c{.samples = samples};
    if (p->input_size(0) < 0) c.signature.emplace_back(in.shape.begin() + 1, in.shape.end());
    if (calibration > 0)  // other seeds than the check's: calibrated on other inputs than it checks
      p->calibrate_int8({.samples = calibration, .seed = 1000, .signature = c.signature});
    const auto t0 = Clock::now();
    const hg::models::PrecisionReport r = p->check_precision(c);
    emit({{"model", m}, {"precision", hg::graphs::precision_name(precision)}, {"samples", r.samples},
          {"rows", r.rows}, {"top1_agreement", r.top1_agreement}, {"max_rel_err", r.max_relative_error},
          {"calibration", calibration},
          {"seconds", ms_since(t0) / 1000}});
  }
  return 0;
}

int profile(const fs::path& data, const std::map<std::string, std::string>& o) {
  const auto precision = hg::graphs::parse_precision(opt(o, "precision", "fp32"));
  const int64_t batch = std::stoll(opt(o, "batch", "8"));
  const double seconds = std::stod(opt(o, "seconds", "2"));
  for (const auto& m : split(opt(o, "models", "bert"))) {
    const Input in = read_input(data / m / "input.safetensors");
    hg::graphs::StepProfile::start();
    const Timing t = replay(data / m, in, batch, seconds, {}, precision);
    const auto rows = hg::graphs::StepProfile::stop();
    std::cout << m << " batch " << batch << " " << hg::graphs::precision_name(precision) << ": median "
              << t.median_ms << " ms (timed per step)\n"
              << hg::graphs::StepProfile::table(rows, std::stoul(opt(o, "top", "25")));
  }
  return 0;
}

// An HPU graph of `nodes` scale ops on one element, alternately x2 and x0.5.
struct Chain {
  hg::Tensor in, out;
  hg::graphs::HPUGraph graph{hg::Device::hpu(0)};
  explicit Chain(int nodes) : in(hg::Tensor::full({1}, 1.0f, hg::Device::hpu(0))) {
    hg::NoGradGuard no_grad;
    graph.capture_begin();
    out = in;
    for (int i = 0; i < nodes; ++i) out = hg::ops::scale(out, i % 2 ? 0.5 : 2.0);
    graph.capture_end();
  }
};

int overhead(const std::map<std::string, std::string>& o) {
  const int nodes = std::stoi(opt(o, "nodes", "1000"));
  const double seconds = std::stod(opt(o, "seconds", "2"));
  hg::graphs::enable_lazy_mode(false);
  Chain one(1), chain(nodes);
  const Timing t1 = time_calls([&] { one.graph.replay(); }, seconds);
  const Timing tn = time_calls([&] { chain.graph.replay(); }, seconds);
  const auto steps = chain.graph.executable().num_steps();
  emit({{"runtime", "hgraph_replay"},
        {"model", "chain"},
        {"nodes", nodes},
        {"steps", steps},
        {"one_op_us", t1.median_ms * 1e3},
        {"median_ms", tn.median_ms},
        {"per_node_us", tn.median_ms * 1e3 / static_cast<double>(steps)},
        {"per_node_net_us", (tn.median_ms - t1.median_ms) * 1e3 / static_cast<double>(steps - 1)},
        {"result", chain.out.to_vector()[0]}});
  return 0;
}

int peak(const std::map<std::string, std::string>& o) {
  using namespace dnnl;
  const double seconds = std::stod(opt(o, "seconds", "2"));
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  for (int64_t n : split_ints(opt(o, "sizes", "1024,2048,4096"))) {
    memory::desc md({n, n}, memory::data_type::f32, memory::format_tag::ab);
    matmul prim(matmul::primitive_desc(matmul::desc(md, md, md), eng));
    std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
    memory ma(md, eng, a.data()), mb(md, eng, b.data()), mc(md, eng, c.data());
    const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    const Timing t = time_calls(
        [&] {
          prim.execute(s, args);
          s.wait();
        },
        seconds);
    emit({{"runtime", "onednn_matmul"}, {"size", n}, {"median_ms", t.median_ms}, {"gflops", 2.0 * n * n * n / t.median_ms / 1e6}});
  }
  return 0;
}

int start(const fs::path& dir, int64_t batch, const std::string& label) {
  const auto t0 = Clock::now();
  auto p = hg::models::Predictor::load(dir, {.batch_buckets = {batch}});
  const double load_ms = ms_since(t0);
  const auto info = p->capture_all();
  const double total_ms = ms_since(t0);
  std::vector<uint8_t> in(static_cast<size_t>(batch * p->input_size(0)) * hg::dtype_size(p->input_dtype(0)));
  std::vector<float> out(static_cast<size_t>(batch * p->output_size(0)));
  const auto t1 = Clock::now();
  p->run({in.data()}, batch, {out.data()});
  const auto& b = info.at(0);
  emit({{"runtime", "hgraph_start"}, {"model", dir.string()}, {"batch", batch}, {"cache", label},
        {"load_ms", load_ms}, {"capture_ms", b.capture_ms}, {"compile_ms", b.compile_ms}, {"disk_hit", b.disk_hit},
        {"constants_hit", b.constants_hit},
        {"total_ms", total_ms}, {"first_run_ms", ms_since(t1)}});
  return 0;
}

int usage() {
  std::cerr << "usage: hg_zoo_bench latency DIR [--models ..] [--batches ..] [--seconds S] [--runtimes ..]\n"
               "       hg_zoo_bench agreement DIR [--models ..] [--precision bf16] [--samples N] [--batch B] [--calibrate N]\n"
               "       hg_zoo_bench profile DIR --models M [--batch B] [--precision P] [--seconds S] [--top N]\n"
               "       hg_zoo_bench overhead [--nodes N] [--seconds S]\n"
               "       hg_zoo_bench peak [--sizes N,..] [--seconds S]\n"
               "       hg_zoo_bench start MODEL_DIR BATCH [LABEL]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  try {
    if (mode == "latency" && argc >= 3) return latency(argv[2], options(argc, argv, 3));
    if (mode == "agreement" && argc >= 3) return agreement(argv[2], options(argc, argv, 3));
    if (mode == "profile" && argc >= 3) return profile(argv[2], options(argc, argv, 3));
    if (mode == "overhead") return overhead(options(argc, argv, 2));
    if (mode == "peak") return peak(options(argc, argv, 2));
    if (mode == "start" && (argc == 4 || argc == 5)) return start(argv[2], std::stoll(argv[3]), argc == 5 ? argv[4] : "");
  } catch (const std::exception& e) {
    std::cerr << "hg_zoo_bench: " << e.what() << "\n";
    hg::synchronize(hg::Device::hpu(0));
    return 1;
  }
  return usage();
}
