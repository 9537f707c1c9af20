#!/usr/bin/env bash
# Cold capture against a start from a warm disk graph cache (part of bench/run_zoo.sh): for
# ResNet-18 and the BERT encoder at batch 1, from the ONNX file and from the zoo package, a fresh
# process loads the model and captures its graph three times with an empty HG_GRAPH_CACHE
# directory ("cold": compiled, then written to the cache) and three times with the directory
# that run left ("warm"). One JSON line per process (hg_zoo_bench start).
#   bash bench/zoo_start.sh [BUILD_DIR [BASELINE_BUILD_DIR]]   (data from bench/torch_zoo_bench.py prepare)
# With a baseline build (another commit's build directory), each repetition runs the baseline
# right after the build, on the same data; its lines go to stderr, the build's to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
base=${2:-}
cache=$(mktemp -d /tmp/hg_zoo_cache.XXXXXX)
trap 'rm -rf "$cache"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HG_HPU_THREADS=${HG_HPU_THREADS:-1}
start() {  # BUILD MODEL
  rm -rf "${cache:?}"/*
  HG_GRAPH_CACHE=$cache,1024 "$1/bench/hg_zoo_bench" start "$build/zoo/$2" 1 cold
  HG_GRAPH_CACHE=$cache,1024 "$1/bench/hg_zoo_bench" start "$build/zoo/$2" 1 warm
}
for model in resnet18 resnet18/zoo bert bert/zoo; do
  for rep in 1 2 3; do
    start "$build" "$model"
    if [[ -n $base ]]; then start "$base" "$model" >&2; fi
  done
done
