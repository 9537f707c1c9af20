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
seconds=${1:-2}
build=${2:-build}
shift $(($# < 2 ? $# : 2))
thread_counts=${*:-1 2}
rounds=${ZOO_ROUNDS:-2}
data=$build/zoo
bench=$build/bench/hg_zoo_bench
ort_tool=bench/ort_bench.js
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
models=(mlp lenet5 resnet18 bert identity)

/usr/bin/python3 bench/torch_zoo_bench.py prepare "$data" 2> >(grep -v Warning >&2)
[ -d bench/node_modules/onnxruntime-node ] || bash scripts/setup.sh --with-bench >&2

out=$data/results.jsonl
: > "$out.tmp"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$rounds"); do
  for t in $thread_counts; do
    export OMP_NUM_THREADS=$t HG_HPU_THREADS=$t
    echo "round $round, threads $t: oneDNN peak, hgraph, PyTorch, ONNX Runtime" >&2
    "$bench" peak --seconds "$seconds" >> "$out.tmp"
    # Replay and eager/lazy in separate processes: the eager ops run on the hpu queue's worker
    # thread, whose OpenMP team would compete with the replaying thread's team for the 2 cores.
    "$bench" latency "$data" --seconds "$seconds" --runtimes replay,replay_zoo >> "$out.tmp"
    "$bench" latency "$data" --seconds "$seconds" --runtimes eager,lazy >> "$out.tmp"
    # PyTorch without this machine's OpenBLAS core-type override (it forces a slow kernel).
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_zoo_bench.py run "$data" "$t" "$seconds" \
      2> >(grep -v -i warn >&2) >> "$out.tmp"
    # identity first and last (its faster run is the fixed cost ORT net subtracts)
    for m in identity "${models[@]}"; do
      NODE_PATH=bench/node_modules node "$ort_tool" "$data/$m/model.onnx" "$data/$m/input.npy" "$t" 1,8,32 "$seconds" |
        /usr/bin/python3 -c 'import json, sys
for line in sys.stdin:
    j = json.loads(line); j["runtime"] = "ort"; j["model"] = sys.argv[1]; print(json.dumps(j))' "$m" >> "$out.tmp"
    done
  done
done
# Tiny ops: one thread; fusion off so the 1,000 scale ops stay 1,000 steps.
OMP_NUM_THREADS=1 HG_HPU_THREADS=1 HG_DISABLE_FUSION=1 "$bench" overhead --seconds "$seconds" >> "$out.tmp"
OMP_NUM_THREADS=1 HG_HPU_THREADS=1 bash bench/zoo_start.sh "$build" >> "$out.tmp"
mv "$out.tmp" "$out"
echo "done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 bench/zoo_chart.py "$out" "$data/meta.json" bench/zoo_latency.png
