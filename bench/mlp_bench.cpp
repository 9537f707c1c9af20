// Latency of the bundled digits MLP (64-64-10): eager on cpu, eager on hpu (device queue),
// lazy on hpu (trace + cached graph per call) and HPU graph replay through the Predictor.
//
//   ./build/bench/hg_bench --benchmark_filter=Mlp    (bench/run_mlp.sh adds PyTorch and ratios)
#include <benchmark/benchmark.h>

#include <random>

#include "engine/autograd.h"
#include "graphs/lazy.h"
#include "models/package.h"
#include "models/predictor.h"
#include "models/module.h"

namespace {

const char* kModel = HG_SOURCE_DIR "/models/repository/digits_mlp/1";

std::vector<float> input(int64_t batch) {
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> x(static_cast<size_t>(batch * 64));
  for (auto& v : x) v = u(rng);
  return x;
}

void eager(benchmark::State& st, hg::Device d, bool lazy) {
  hg::graphs::enable_lazy_mode(lazy);
  auto net = hg::models::build_module(hg::models::load_package(kModel));
  net->to(d);
  hg::NoGradGuard g;
  const int64_t b = st.range(0);
  hg::Tensor x = hg::Tensor::from_vector(input(b), {b, 64}, d);
  for (auto _ : st) benchmark::DoNotOptimize(net->forward(x).to_vector());
  hg::graphs::enable_lazy_mode(false);
}

void BM_MlpEagerCpu(benchmark::State& st) { eager(st, hg::Device::cpu(), false); }
void BM_MlpEagerHpu(benchmark::State& st) { eager(st, hg::Device::hpu(0), false); }
void BM_MlpLazyHpu(benchmark::State& st) { eager(st, hg::Device::hpu(0), true); }

void BM_MlpGraphReplay(benchmark::State& st) {
  const int64_t b = st.range(0);
  auto p = hg::models::Predictor::load(kModel, {.batch_buckets = {b}});
  p->capture_all();
  const auto x = input(b);
  std::vector<float> out(static_cast<size_t>(b * 10));
  for (auto _ : st) p->run({x.data()}, b, {out.data()});
}

}  // namespace

BENCHMARK(BM_MlpEagerCpu)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MlpEagerHpu)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MlpLazyHpu)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MlpGraphReplay)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMicrosecond);
