#!/usr/bin/env bash
# Runs the MLP benchmark and its PyTorch peer in one go, at THREADS (default 1) threads,
# and prints hgraph's graph replay against PyTorch as ratios (PyTorch time / hgraph time).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
export OMP_NUM_THREADS=$threads
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
./build/bench/hg_bench --benchmark_filter=Mlp --benchmark_format=json --benchmark_min_time=0.5 > /tmp/hg_mlp_bench.json
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_mlp.py "$threads" > /tmp/torch_mlp_bench.jsonl
/usr/bin/python3 - "$threads" <<'PY'
import json, sys
hg = {}
for b in json.load(open("/tmp/hg_mlp_bench.json"))["benchmarks"]:
    name, batch = b["name"].split("/")
    hg.setdefault(name, {})[int(batch)] = b["real_time"]
torch = {j["batch"]: j["median_us"] for j in map(json.loads, open("/tmp/torch_mlp_bench.jsonl"))}
print(f"threads={sys.argv[1]}  (microseconds per forward; ratio = PyTorch / hgraph, >1 means hgraph is faster)")
print(f"{'batch':>5} {'pytorch':>9} " + " ".join(f"{n.replace('BM_Mlp', ''):>12}" for n in hg) + "   replay ratio")
for batch in sorted(torch):
    row = " ".join(f"{hg[n][batch]:12.1f}" for n in hg)
    print(f"{batch:5d} {torch[batch]:9.1f} {row}   {torch[batch] / hg['BM_MlpGraphReplay'][batch]:.2f}x")
PY
