#!/usr/bin/env bash
# Builds hgraph-fuzz with clang + libFuzzer + ASan/UBSan (build-fuzz/) and fuzzes each loader
# for a fixed time: `bash scripts/fuzz.sh [seconds per target, default 60] [target...]`;
# HG_FUZZ_RUNS=N stops a target after N executions if that comes first (a campaign:
# `HG_FUZZ_RUNS=10000000 bash scripts/fuzz.sh 1800`).
# Seeds come from fuzz/corpus/<target>/ (committed; scripts/fuzz_seeds.py writes them); new
# inputs go to build-fuzz/corpus/<target>/, findings to build-fuzz/findings/. Exits non-zero
# if any target finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(safetensors package onnx infer http generate config checkpoint graph_cache data_file)
bash scripts/setup.sh --with-fuzz
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHG_FUZZ=ON \
  -DCMAKE_CXX_COMPILER=clang++-14 -DHG_BUILD_BENCH=OFF > /dev/null
cmake --build build-fuzz -j2 --target hgraph-fuzz
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  echo "fuzz: $t for ${seconds}s"
  # UBSan reports are findings too (the build lets them recover; halt_on_error stops there).
  if ! HG_FUZZ_TARGET=$t ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      build-fuzz/fuzz/hgraph-fuzz \
      -max_total_time="$seconds" -runs="${HG_FUZZ_RUNS:--1}" -timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=1024 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/findings/$t/" "build-fuzz/corpus/$t" "fuzz/corpus/$t" \
      > "build-fuzz/$t.log" 2>&1; then
    echo "fuzz: $t FOUND A PROBLEM, see build-fuzz/$t.log and build-fuzz/findings/$t/"
    status=1
  fi
  grep -E "^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::new_units_added" "build-fuzz/$t.log" | sed "s/^/  $t /"
done
exit $status
