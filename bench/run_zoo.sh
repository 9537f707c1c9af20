#!/usr/bin/env bash
# The zoo benchmark in one run: hgraph (graph replay through the Predictor from the
# ONNX file and from the zoo package, eager, lazy) against PyTorch eager, TorchScript (frozen)
# and ONNX Runtime (onnxruntime-node, CPU, the same ONNX file) on the digits MLP, LeNet-5,
# ResNet-18 (224x224), the BERT-style encoder (seq 128) and an identity model, at batch 1, 8, 32,
# with 1 and 2 threads (OMP_NUM_THREADS, HG_HPU_THREADS, torch.set_num_threads, ORT's
# intraOpNumThreads); plus oneDNN's f32 matmul peak, the per-node replay overhead of a 1,000-op
# graph and the start time of a cold capture against a warm disk graph cache.
#   bash bench/run_zoo.sh [SECONDS] [BUILD_DIR] [THREADS...]
# SECONDS per (runtime, model, batch) cell (default 2; 0.2 for a smoke test); BUILD_DIR default
# build, with hg_zoo_bench built (`cmake --build build --target hg_zoo_bench`); THREADS default
# "1 2". ZOO_ROUNDS (default 2) repeats the latency runs; each cell keeps its fastest round's
# median (a transient disturbance on the shared VM hits one round, not both, and every runtime
# gets the same treatment). Writes BUILD_DIR/zoo/results.jsonl, prints the tables, ratios and
# targets (markdown) and draws bench/zoo_latency.png. Peers: `bash scripts/setup.sh --with-bench`
# installs PyTorch and ONNX Runtime (bench/package.json into bench/node_modules).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/zoo_lib.sh
zoo_args "$@"
rounds=${ZOO_ROUNDS:-2}
data=$build/zoo
models=(mlp lenet5 resnet18 bert identity)

cells() {  # THREADS
  "$bench" peak --seconds "$seconds"
  # Replay and eager/lazy in separate processes: the eager ops run on the hpu queue's worker
  # thread, whose OpenMP team would compete with the replaying thread's team for the 2 cores.
  "$bench" latency "$data" --seconds "$seconds" --runtimes replay,replay_zoo
  "$bench" latency "$data" --seconds "$seconds" --runtimes eager,lazy
  zoo_pytorch "$data" "$1" "$seconds"
  # identity first and last (its faster run is the fixed cost ORT net subtracts)
  for m in identity "${models[@]}"; do
    zoo_ort "$data" "$m" "$1" 1,8,32 "$seconds"
  done
}

zoo_prepare "$data" zoo
out=$data/results.jsonl
: > "$out.tmp"
zoo_rounds "$rounds" "$thread_counts" cells "$out.tmp"
# Tiny ops: one thread; fusion off so the 1,000 scale ops stay 1,000 steps.
OMP_NUM_THREADS=1 HG_HPU_THREADS=1 HG_DISABLE_FUSION=1 "$bench" overhead --seconds "$seconds" >> "$out.tmp"
OMP_NUM_THREADS=1 HG_HPU_THREADS=1 bash bench/zoo_start.sh "$build" >> "$out.tmp"
mv "$out.tmp" "$out"
echo "done; $(zoo_load)" >&2
/usr/bin/python3 bench/zoo_chart.py "$out" "$data/meta.json" bench/zoo_latency.png
