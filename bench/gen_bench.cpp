// The GPT decode step over the paged KV cache, without the server around it: B sequences of C
// positions each decode one token (the benchmark's model: d_model 128, 4 layers, max_len 512),
// replayed from the captured graph as the generate scheduler does, with keys and values stored as
// F32 (last argument 0) or BF16 (1). Reports tokens/s and the KV cache bytes the step reads per
// second (keys and values of every layer, every position).
//
//   OMP_NUM_THREADS=1 HG_HPU_THREADS=1 ./build/bench/hg_bench --benchmark_filter=PagedDecodeStep
//   (HG_BENCH_PROFILE=1: also the time per op of each case's steps, graphs/step_profile.h)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "engine/autograd.h"
#include "graphs/step_profile.h"
#include "models/gpt.h"
#include "models/gpt_paged.h"
#include "models/kv_blocks.h"

namespace {

void BM_PagedDecodeStep(benchmark::State& st) {
  const int64_t batch = st.range(0), context = st.range(1), block = 16;
  const hg::DType dtype = st.range(2) ? hg::DType::BF16 : hg::DType::F32;
  hg::NoGradGuard g;
  hg::models::GPT gpt({.d_model = 128, .nhead = 4, .layers = 4, .ff = 512, .max_len = 512});
  gpt.to(hg::Device::hpu(0));
  gpt.eval();
  hg::models::KVBlockPool pool(gpt.kv_options(block, batch * (512 / block), dtype));
  hg::models::PagedDecoder dec(gpt, pool, {.batch_buckets = {batch}, .max_step_tokens = 256});
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  std::vector<hg::models::PagedRow> rows;
  for (auto& t : tables) {  // each sequence's context: written once, prefilled in chunks of 256
    if (!pool.allocate(pool.blocks_for(context + 1), t)) st.SkipWithError("the pool is too small");
    for (int64_t at = 0; at < context; at += 256) {
      std::vector<int64_t> tokens(static_cast<size_t>(std::min<int64_t>(256, context - at)));
      std::iota(tokens.begin(), tokens.end(), at);
      for (auto& x : tokens) x %= 256;
      dec.step({{.tokens = tokens, .start = at, .blocks = &t}});
    }
    rows.push_back({.tokens = {1}, .start = context, .blocks = &t});
  }
  const bool profile = std::getenv("HG_BENCH_PROFILE") != nullptr;
  if (profile) hg::graphs::StepProfile::start();
  for (auto _ : st) benchmark::DoNotOptimize(dec.step(rows));  // rewrites position `context`: same work each time
  if (profile) std::printf("%s", hg::graphs::StepProfile::table(hg::graphs::StepProfile::stop(), 12).c_str());
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  const double kv_bytes = 2.0 * static_cast<double>(hg::dtype_size(dtype)) * 4 * 128 * static_cast<double>(batch) *
                          static_cast<double>(context + 1);
  st.counters["KV GB/s"] = benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PagedDecodeStep)
    ->ArgsProduct({{1, 8, 32}, {16, 172, 400}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
