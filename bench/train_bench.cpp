// hgraph's side of the training benchmark of issue 7 (bench/train/run_train.sh runs it next to
// PyTorch's bench/train/torch_train.py on the same files). Threads: OMP_NUM_THREADS and
// HG_HPU_THREADS (the OpenMP team of hpu:0's queue worker, where the ops run).
//
//   hg_train_bench prepare DIR --model mlp|lenet5|bert --batch B [--batches 8]
//       DIR/MODEL_bB/init.safetensors (the zoo model's initial state_dict, seed 0; PyTorch's
//       scripts/torch_zoo.py definitions have the same keys) and data.safetensors ("x" and "y":
//       --batches batches of B samples; the MLP takes digits rows, LeNet-5 and the encoder
//       seeded random inputs and labels).
//   hg_train_bench run DIR --model M --batch B --mode lazy|replay|eager [--seconds 3] [--warmup 5] [--sync-every 1]
//                      [--steps N] [--tag T] [--start-at UNIX_SECONDS]
//       a raw training loop on hpu:0: forward, cross_entropy, backward, SGD (momentum 0.9)
//       step, zero_grad, mark_step; the batches of data.safetensors in turn. Lazy: one traced
//       step graph per step, compiled once and replayed from the cache; replay: the same step
//       through graphs::StepReplay (traced until two steps record the same graph, then replayed
//       without running the loop's code); eager:
//       graphs::enable_lazy_mode(false), op by op. --warmup steps first (not timed), then steps
//       until --seconds have passed (or exactly --steps N), then one host read of the loss (waits for the device).
//       Every --sync-every steps the loss of that many steps earlier is read on the host: the
//       host traces ahead of hpu:0's queue, and this bounds the queue at 2 * sync-every steps.
//       One JSON line: samples_per_s, steps, seconds, cpu_s (process user + system time over
//       the timed steps), host_cpu_s (the calling thread's: tracing / dispatch; the rest is mostly
//       hpu:0's worker), first and last loss, lazy graph cache statistics, hpu:0 memory, the
//       timed window's start and end (Unix seconds) and --tag. --start-at: after the warm-up,
//       wait until that wall-clock time before timing (lines up independent processes).
//   hg_train_bench ddp DIR --model M --batch B [--mode lazy|replay|eager] [--steps 100] [--warmup 5] [--devices 2]
//       the same loop under training/ddp_strategy.h's DDPStrategy over `--devices` processes on
//       127.0.0.1 (this one is rank 0 and launches the others, or LOCAL_RANK etc. are set):
//       each rank trains on B samples per step (rank r: batches r, r + world, ...); after the
//       warm-up a barrier, then exactly --steps steps. Rank 0 prints one JSON line with the
//       combined samples/s (world * B * steps over the slowest rank's time) and the summed CPU time.
//   hg_train_bench digits DIR OUT.csv [--epochs 30] [--batch 32] [--mode lazy]
//       the digits MLP (64-64-10) from DIR/digits/init.safetensors over the per-epoch orders of
//       DIR/digits/order.safetensors (written by `prepare DIR --model digits`): per epoch the
//       mean training loss and the accuracy on the held-out rows, as CSV (epoch,train_loss,val_loss,val_acc).
//   hg_train_bench trainer DIR --model M --batch B [--steps 200] [--warmup 5] [--replay 0|1]: the same
//       loop through the Trainer (bench/train_bench_trainer.cpp); --replay 1 sets replay_steps.
//   hg_train_bench loader [--workers 2] ...: the DataLoader's throughput (bench/train_bench_trainer.cpp).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/lazy.h"
#include "graphs/step_replay.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "models/zoo.h"
#include "bench/train_bench.h"
#include "training/ddp_strategy.h"
#include "training/sgd.h"

namespace train_bench {

Options options(int argc, char** argv, int first) {
  std::map<std::string, std::string> o;
  for (int i = first; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc) throw hg::InvalidArgument("hg_train_bench: bad option '" + k + "'");
    o[k.substr(2)] = argv[i + 1];
  }
  return o;
}

std::string opt(const Options& o, const std::string& k, const std::string& dflt) {
  auto it = o.find(k);
  return it == o.end() ? dflt : it->second;
}

int env_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  return v ? std::atoi(v) : 0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<hg::models::Module> make_model(const std::string& model) {
  if (model == "mlp" || model == "digits") return hg::models::zoo::mlp({64, 64, 10}, 0);
  if (model == "lenet5") return hg::models::zoo::lenet5(10, 0);
  if (model == "bert") return hg::models::zoo::bert_classifier({}, 0);
  throw hg::InvalidArgument("hg_train_bench: unknown model '" + model + "' (mlp, lenet5, bert)");
}

double learning_rate(const std::string& model) { return model == "mlp" || model == "digits" ? 0.1 : 0.01; }

Digits load_digits() {
  const std::string file = std::string(HG_SOURCE_DIR) + "/models/data/digits.safetensors";
  const auto f = hg::safetensors::read(file);
  const auto* img = f.find("images");
  const auto* lab = f.find("labels");
  if (!img || !lab || img->dtype != "U8" || lab->dtype != "U8")
    throw hg::FormatError(file + ": expected U8 'images' and 'labels'");
  Digits d;
  for (uint8_t v : img->data) d.x.push_back(static_cast<float>(v) / 16.0f);
  for (uint8_t v : lab->data) d.y.push_back(v);
  return d;
}

hg::safetensors::Entry f32_entry(const std::string& name, const hg::Shape& shape, const std::vector<float>& v) {
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  return {name, "F32", shape, std::vector<uint8_t>(b, b + v.size() * 4)};
}

hg::safetensors::Entry i64_entry(const std::string& name, const hg::Shape& shape, const std::vector<int64_t>& v) {
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  return {name, "I64", shape, std::vector<uint8_t>(b, b + v.size() * 8)};
}

fs::path model_dir(const fs::path& root, const std::string& model, int64_t batch) {
  return model == "digits" ? root / "digits" : root / (model + "_b" + std::to_string(batch));
}

int prepare(const fs::path& root, const std::map<std::string, std::string>& o) {
  const std::string model = opt(o, "model", "mlp");
  const int64_t batch = std::stoll(opt(o, "batch", "32")), nb = std::stoll(opt(o, "batches", "8"));
  const fs::path dir = model_dir(root, model, batch);
  fs::create_directories(dir);
  hg::safetensors::write(dir / "init.safetensors", hg::models::to_safetensors(make_model(model)->state_dict()));
  std::mt19937_64 rng(7);
  hg::safetensors::File data;
  if (model == "digits") {
    // A seeded 80/20 split and one order of the training rows per epoch.
    const Digits d = load_digits();
    const int64_t n = static_cast<int64_t>(d.y.size()), epochs = std::stoll(opt(o, "epochs", "30"));
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t n_val = n / 5, n_train = n - n_val;
    std::vector<int64_t> val(perm.begin(), perm.begin() + n_val), train(perm.begin() + n_val, perm.end()), orders;
    for (int64_t e = 0; e < epochs; ++e) {
      std::shuffle(train.begin(), train.end(), rng);
      orders.insert(orders.end(), train.begin(), train.end());
    }
    data.entries = {i64_entry("val", {n_val}, val), i64_entry("order", {epochs, n_train}, orders)};
    hg::safetensors::write(dir / "order.safetensors", data);
    return 0;
  }
  const int64_t n = batch * nb;
  std::vector<int64_t> y(static_cast<size_t>(n));
  if (model == "mlp") {
    const Digits d = load_digits();
    std::vector<float> x;
    for (int64_t i = 0; i < n; ++i) {
      const size_t r = static_cast<size_t>(i) % d.y.size();
      x.insert(x.end(), d.x.begin() + static_cast<std::ptrdiff_t>(r * 64), d.x.begin() + static_cast<std::ptrdiff_t>(r * 64 + 64));
      y[static_cast<size_t>(i)] = d.y[r];
    }
    data.entries.push_back(f32_entry("x", {n, 64}, x));
  } else if (model == "lenet5") {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * 32 * 32));
    for (auto& v : x) v = u(rng);
    for (auto& v : y) v = static_cast<int64_t>(rng() % 10);
    data.entries.push_back(f32_entry("x", {n, 1, 32, 32}, x));
  } else if (model == "bert") {
    std::vector<int64_t> ids(static_cast<size_t>(n * kBertSeq));
    for (auto& v : ids) v = static_cast<int64_t>(rng() % 1000);
    for (auto& v : y) v = static_cast<int64_t>(rng() % 2);
    data.entries.push_back(i64_entry("x", {n, kBertSeq}, ids));
  } else {
    throw hg::InvalidArgument("hg_train_bench prepare: unknown model '" + model + "'");
  }
  data.entries.push_back(i64_entry("y", {n}, y));
  hg::safetensors::write(dir / "data.safetensors", data);
  return 0;
}

std::unique_ptr<hg::models::Module> load_model(const std::string& model, const fs::path& dir) {
  auto net = make_model(model);
  const fs::path f = dir / "init.safetensors";
  net->load_state_dict(hg::models::tensors_from(hg::safetensors::read(f), f.string()));
  net->to(kHpu);
  net->train();
  return net;
}

}  // namespace train_bench

namespace {

using namespace train_bench;
using hg::Tensor;
using Clock = std::chrono::steady_clock;

// The batches of data.safetensors as hpu tensors (made before lazy tracing starts).
std::vector<std::pair<Tensor, Tensor>> load_batches(const fs::path& dir, int64_t batch) {
  const fs::path f = dir / "data.safetensors";
  auto t = hg::models::tensors_from(hg::safetensors::read(f), f.string());
  const Tensor x = t.at("x"), y = t.at("y");
  const int64_t nb = x.dim(0) / batch;
  if (nb < 1) throw hg::InvalidArgument(f.string() + ": fewer than " + std::to_string(batch) + " samples");
  std::vector<std::pair<Tensor, Tensor>> out;
  const int64_t row = x.numel() / x.dim(0);
  hg::Shape xs = x.shape();
  xs[0] = batch;
  for (int64_t b = 0; b < nb; ++b) {
    const Tensor yb = Tensor::from_indices(
        std::vector<int64_t>(y.data<int64_t>() + b * batch, y.data<int64_t>() + (b + 1) * batch), {batch}, kHpu);
    Tensor xb = x.dtype() == hg::DType::I64
                    ? Tensor::from_indices(std::vector<int64_t>(x.data<int64_t>() + b * batch * row,
                                                                x.data<int64_t>() + (b + 1) * batch * row),
                                           xs, kHpu)
                    : Tensor::from_vector(
                          std::vector<float>(x.data<float>() + b * batch * row, x.data<float>() + (b + 1) * batch * row),
                          xs, kHpu);
    out.emplace_back(xb, yb);
  }
  return out;
}

int run(const fs::path& root, const std::map<std::string, std::string>& o) {
  const std::string model = opt(o, "model", "mlp"), mode = opt(o, "mode", "lazy");
  const int64_t batch = std::stoll(opt(o, "batch", "32"));
  const int warmup = std::stoi(opt(o, "warmup", "5"));
  const int64_t sync_every = std::max<int64_t>(1, std::stoll(opt(o, "sync-every", "1")));
  const double seconds = std::stod(opt(o, "seconds", "3"));
  const int64_t fixed_steps = std::stoll(opt(o, "steps", "0"));
  if (mode != "lazy" && mode != "eager" && mode != "replay")
    throw hg::InvalidArgument("hg_train_bench: --mode must be lazy, replay or eager");
  const fs::path dir = model_dir(root, model, batch);
  auto net = load_model(model, dir);
  const auto batches = load_batches(dir, batch);
  hg::training::SGD sgd(net->named_parameters(), {.lr = learning_rate(model), .momentum = kMomentum});
  hg::graphs::enable_lazy_mode(mode != "eager");

  size_t next = 0;
  hg::graphs::StepReplay replay(kHpu);
  auto body = [&](const std::vector<Tensor>& in) {
    Tensor loss = hg::ops::cross_entropy(net->forward(in[0]), in[1]);
    loss.backward();
    sgd.step();
    sgd.zero_grad();
    return std::vector<Tensor>{loss};
  };
  auto step = [&] {
    const auto& [x, y] = batches[next++ % batches.size()];
    if (mode == "replay") return replay.run({x, y}, body, sgd.replay_guard(), [&] { sgd.on_replayed_step(); })[0];
    Tensor loss = body({x, y})[0];
    hg::graphs::mark_step(kHpu);
    return loss;
  };
  const float first_loss = step().item();
  for (int i = 1; i < warmup; ++i) step().item();
  if (std::getenv("HG_TRAIN_BENCH_TRACE_MEMORY"))
    for (int i = 0; i < 20; ++i) {
      step().item();
      std::cerr << "step " << i << ": hpu in use " << hg::memory_stats(kHpu).in_use << " bytes\n";
    }
  if (const double start_at = std::stod(opt(o, "start-at", "0")); start_at > 0) {
    hg::synchronize(kHpu);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, start_at - unix_seconds())));
  }
  const auto stats0 = hg::graphs::lazy_stats();
  const double cpu0 = cpu_seconds(), host0 = thread_cpu_seconds();
  const double unix0 = unix_seconds();
  const auto t0 = Clock::now();
  int64_t steps = 0;
  Tensor loss, earlier;
  auto more = [&] {
    if (fixed_steps > 0) return steps < fixed_steps;
    return steps < 3 || std::chrono::duration<double>(Clock::now() - t0).count() < seconds;
  };
  while (more()) {
    loss = step();
    // The host runs ahead of hpu:0's queue; reading the loss of `sync_every` steps ago bounds
    // the queue (and its memory) at 2 * sync_every steps without draining it.
    if (++steps % sync_every == 0) {
      if (earlier.defined()) earlier.item();
      earlier = loss;
    }
  }
  const double host_cpu = thread_cpu_seconds() - host0;  // tracing / dispatch, without the final wait
  const float last_loss = loss.item();  // waits for the device
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count(), cpu = cpu_seconds() - cpu0;
  const auto stats = hg::graphs::lazy_stats();
  const hg::MemoryStats mem = hg::memory_stats(kHpu);
  hg::graphs::enable_lazy_mode(false);
  nlohmann::json j{{"runtime", "hgraph_" + mode},
                   {"model", model},
                   {"batch", batch},
                   {"threads", env_threads()},
                   {"tag", opt(o, "tag", "")},
                   {"t_start", unix0},
                   {"t_end", unix_seconds()},
                   {"steps", steps},
                   {"sync_every", sync_every},
                   {"seconds", wall},
                   {"samples_per_s", static_cast<double>(steps * batch) / wall},
                   {"cpu_s", cpu},
                   {"host_cpu_s", host_cpu},
                   {"first_loss", first_loss},
                   {"last_loss", last_loss},
                   {"graphs_run", stats.steps - stats0.steps},
                   {"cache_hits", stats.cache_hits - stats0.cache_hits},
                   {"cache_misses", stats.cache_misses - stats0.cache_misses},
                   {"steps_replayed", replay.stats().replayed},
                   {"replay_fallback", replay.stats().last_fallback},
                   {"replay_host_us", replay.stats().replayed ? replay.stats().replay_host_s * 1e6 / static_cast<double>(replay.stats().replayed) : 0.0},
                   {"hpu_in_use_mb", static_cast<double>(mem.in_use) / (1 << 20)},
                   {"hpu_max_in_use_mb", static_cast<double>(mem.max_in_use) / (1 << 20)}};
  std::cout << j.dump() << std::endl;
  return 0;
}

// DDP: this process is rank 0 (it launches ranks 1..devices-1 with the same arguments) or a
// launched rank. Rank r trains on batches r, r + world, ... of data.safetensors; every step is
// forward, cross_entropy, the strategy's backward (gradient buckets all-reduced on its
// communication thread), finish_gradient_sync, SGD step, zero_grad, mark_step. --mode replay:
// the step through graphs::StepReplay with the strategy's in-graph reduction (replay_steps).
int ddp(const fs::path& root, const std::map<std::string, std::string>& o) {
  const std::string model = opt(o, "model", "mlp"), mode = opt(o, "mode", "lazy");
  const int64_t batch = std::stoll(opt(o, "batch", "32")), steps = std::stoll(opt(o, "steps", "100"));
  const int warmup = std::stoi(opt(o, "warmup", "5")), devices = std::stoi(opt(o, "devices", "2"));
  const fs::path dir = model_dir(root, model, batch);
  hg::training::DDPStrategy strategy;
  strategy.setup_environment({.device = kHpu, .devices = devices, .timeout = std::chrono::seconds(300)});
  const int rank = strategy.global_rank(), world = strategy.world_size();
  auto net = load_model(model, dir);
  const auto batches = load_batches(dir, batch);
  strategy.setup_module(*net);
  hg::training::SGD sgd(net->named_parameters(), {.lr = learning_rate(model), .momentum = kMomentum});
  if (mode != "lazy" && mode != "eager" && mode != "replay")
    throw hg::InvalidArgument("hg_train_bench ddp: --mode must be lazy, replay or eager");
  hg::graphs::enable_lazy_mode(mode != "eager");
  if (mode == "replay" && !strategy.replay_steps(true))
    throw hg::InvalidArgument("hg_train_bench ddp: the strategy cannot replay steps");
  hg::graphs::StepReplay replay(kHpu);
  auto body = [&](const std::vector<Tensor>& in) {
    Tensor loss = hg::ops::cross_entropy(net->forward(in[0]), in[1]);
    strategy.backward(loss, true);
    strategy.finish_gradient_sync();
    sgd.step();
    sgd.zero_grad();
    return std::vector<Tensor>{loss};
  };
  size_t next = static_cast<size_t>(rank);
  auto step = [&] {
    const auto& [x, y] = batches[next % batches.size()];
    next += static_cast<size_t>(world);
    if (mode == "replay")
      return replay.run({x, y}, body, sgd.replay_guard(), [&] {
        strategy.before_replayed_step();
        sgd.on_replayed_step();
      })[0];
    Tensor loss = body({x, y})[0];
    hg::graphs::mark_step(kHpu);
    return loss;
  };
  const float first_loss = step().item();
  for (int i = 1; i < warmup; ++i) step().item();
  strategy.barrier("bench_start");
  const double cpu0 = cpu_seconds(), unix0 = unix_seconds();
  const auto t0 = Clock::now();
  Tensor loss;
  for (int64_t i = 0; i < steps; ++i) loss = step();
  const float last_loss = loss.item();
  const uint64_t replayed = replay.stats().replayed;
  const double wall = strategy.reduce(std::chrono::duration<double>(Clock::now() - t0).count(), hg::training::ReduceOp::Max);
  const double cpu = strategy.reduce(cpu_seconds() - cpu0, hg::training::ReduceOp::Sum);
  const double loss_mean = strategy.reduce(last_loss, hg::training::ReduceOp::Mean);
  if (rank == 0) {
    nlohmann::json j{{"runtime", "hgraph_ddp_" + mode},
                     {"model", model},
                     {"batch", batch},
                     {"world", world},
                     {"threads", env_threads()},
                     {"tag", "ddp"},
                     {"t_start", unix0},
                     {"t_end", unix_seconds()},
                     {"steps", steps},
                     {"seconds", wall},
                     {"samples_per_s", static_cast<double>(steps * batch * world) / wall},
                     {"cpu_s", cpu},
                     {"first_loss", first_loss},
                     {"last_loss", loss_mean},
                     {"steps_replayed", replayed}};
    std::cout << j.dump() << std::endl;
  }
  hg::graphs::enable_lazy_mode(false);
  strategy.teardown();
  return 0;
}

int digits(const fs::path& root, const fs::path& csv, const std::map<std::string, std::string>& o) {
  const int64_t batch = std::stoll(opt(o, "batch", "32"));
  const std::string mode = opt(o, "mode", "lazy");
  const fs::path dir = root / "digits";
  auto net = load_model("digits", dir);
  const auto f = hg::safetensors::read(dir / "order.safetensors");
  const auto order = hg::models::tensors_from(f, (dir / "order.safetensors").string());
  const Tensor ord = order.at("order"), val = order.at("val");
  const int64_t epochs = std::min<int64_t>(std::stoll(opt(o, "epochs", "30")), ord.dim(0)), n_train = ord.dim(1);
  const Digits d = load_digits();
  auto gather = [&](const int64_t* rows, int64_t n) {
    std::vector<float> x;
    std::vector<int64_t> y;
    for (int64_t i = 0; i < n; ++i) {
      const auto r = static_cast<size_t>(rows[i]);
      x.insert(x.end(), d.x.begin() + static_cast<std::ptrdiff_t>(r * 64), d.x.begin() + static_cast<std::ptrdiff_t>(r * 64 + 64));
      y.push_back(d.y[r]);
    }
    return std::pair{Tensor::from_vector(x, {n, 64}, kHpu), Tensor::from_indices(y, {n}, kHpu)};
  };
  const auto [val_x, val_y] = gather(val.data<int64_t>(), val.numel());
  hg::training::SGD sgd(net->named_parameters(), {.lr = learning_rate("digits"), .momentum = kMomentum});
  std::ofstream out(csv);
  out << "epoch,train_loss,val_loss,val_acc\n";
  for (int64_t e = 0; e < epochs; ++e) {
    hg::graphs::enable_lazy_mode(false);  // batches made on the device, outside the trace
    std::vector<std::pair<Tensor, Tensor>> bs;
    for (int64_t s = 0; s + batch <= n_train; s += batch) bs.push_back(gather(ord.data<int64_t>() + e * n_train + s, batch));
    hg::graphs::enable_lazy_mode(mode == "lazy");
    net->train();
    std::vector<Tensor> losses;
    for (const auto& [x, y] : bs) {
      Tensor loss = hg::ops::cross_entropy(net->forward(x), y);
      loss.backward();
      sgd.step();
      sgd.zero_grad();
      hg::graphs::mark_step(kHpu);
      losses.push_back(loss.detach());
    }
    double sum = 0;
    for (const auto& l : losses) sum += l.item();
    net->eval();
    hg::NoGradGuard no_grad;
    const Tensor logits = net->forward(val_x);
    const float val_loss = hg::ops::cross_entropy(logits, val_y).item();
    const std::vector<float> l = logits.to_vector();
    const std::vector<int64_t> t = val_y.to_indices();
    int64_t ok = 0;
    for (size_t i = 0; i < t.size(); ++i) ok += std::max_element(l.begin() + i * 10, l.begin() + i * 10 + 10) - (l.begin() + i * 10) == t[i];
    out << std::setprecision(9) << e << "," << sum / static_cast<double>(losses.size()) << "," << val_loss << ","
        << static_cast<double>(ok) / static_cast<double>(t.size()) << "\n";
  }
  hg::graphs::enable_lazy_mode(false);
  std::cout << "wrote " << csv.string() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "prepare" && argc > 2) return prepare(argv[2], options(argc, argv, 3));
    if (cmd == "run" && argc > 2) return run(argv[2], options(argc, argv, 3));
    if (cmd == "ddp" && argc > 2) return ddp(argv[2], options(argc, argv, 3));
    if (cmd == "trainer" && argc > 2) return trainer_run(argv[2], options(argc, argv, 3));
    if (cmd == "trainer-digits" && argc > 3) return trainer_digits(argv[2], argv[3], options(argc, argv, 4));
    if (cmd == "digits" && argc > 3) return digits(argv[2], argv[3], options(argc, argv, 4));
    if (cmd == "loader") return loader_run(options(argc, argv, 2));
    std::cerr << "usage: hg_train_bench prepare|run|ddp|trainer DIR [--model M --batch B ...] | digits|trainer-digits DIR OUT"
                 " | loader [--workers W ...]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hg_train_bench: " << e.what() << "\n";
    return 1;
  }
}
