#!/usr/bin/env bash
# Engine benchmark with peers in one run: hgraph eager ops, our kernels and oneDNN called
# directly (hg_bench) against PyTorch (bench/torch_ops.py), same shapes, THREADS threads
# (default 1). Prints microseconds / GFLOP/s and the ratios. hg_bench runs every benchmark 3
# times in random interleaved order and reports medians, so the load other processes put on
# the machine falls on both sides of a ratio alike.
#   bash bench/run_ops.sh [THREADS] [BUILD_DIR]      (BUILD_DIR default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
build=${2:-build}
export OMP_NUM_THREADS=$threads
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$build/bench/hg_bench" --benchmark_filter='Dispatch|Matmul|Conv|Eltwise' --benchmark_format=json \
  --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true > /tmp/hg_ops_bench.json
# The PyTorch peer without this machine's OpenBLAS core-type override (it forces a slow
# kernel; see env's README) and with the OpenMP OpenBLAS, as DESIGN.md says.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_ops.py "$threads" conv eltwise \
  > /tmp/torch_ops_bench.jsonl
/usr/bin/python3 - "$threads" <<'PY'
import json, sys
hg = {b["run_name"].replace("BM_", "").replace("/real_time", ""): b
      for b in json.load(open("/tmp/hg_ops_bench.json"))["benchmarks"] if b.get("aggregate_name") == "median"}
pt = {j["name"]: j for j in map(json.loads, open("/tmp/torch_ops_bench.jsonl"))}
print(f"threads={sys.argv[1]}")
print("dispatch overhead (us per op; ratio = PyTorch / hgraph, > 1: hgraph cheaper)")
for op in ("DispatchAdd", "DispatchRelu"):
    h, p = hg[op]["real_time"], pt[op]["us"]
    print(f"  {op:14s} hgraph {h:7.2f} (cpu {hg[op]['cpu_time']:5.2f})  pytorch {p:7.2f}  ratio {p / h:.2f}")
for kind in ("Matmul", "Conv"):
    rows = sorted({k.split("/")[1] for k in hg if k.startswith(kind + "Hgraph/")},
                  key=lambda s: (len(s), s))
    if not rows:
        continue
    print(f"{kind} GFLOP/s: hgraph, oneDNN direct, PyTorch; hgraph/oneDNN, hgraph/PyTorch;")
    print("  hgraph/oneDNN by CPU time of the calling thread (at 1 thread: less disturbed by other processes)")
    for r in rows:
        hb, db = hg[f"{kind}Hgraph/{r}"], hg[f"{kind}OneDnnDirect/{r}"]
        h, d = hb["GFLOPs"], db["GFLOPs"]
        p = pt[f"{kind}/{r}"]["gflops"]
        print(f"  {r:>12s} {h:8.1f} {d:8.1f} {p:8.1f}   {h / d:5.2f} {h / p:5.2f}   {db['cpu_time'] / hb['cpu_time']:5.2f}")
rows = [k.split("/", 1)[1] for k in hg if k.startswith("EltwiseHgraph/")]
if rows:
    print("Activations and softmax (us): hgraph eager, our loop kernel, oneDNN kernel, PyTorch eager;")
    print("  loop/oneDNN (> 1: oneDNN faster), PyTorch/hgraph (> 1: hgraph faster)")
    for r in rows:
        h = hg[f"EltwiseHgraph/{r}"]["real_time"]
        l = hg[f"EltwiseLoop/{r}"]["real_time"]
        d = hg.get(f"EltwiseOneDnn/{r}", {}).get("real_time", float("nan"))
        p = pt[f"Eltwise/{r}"]["us"]
        print(f"  {r:>25s} {h:9.2f} {l:9.2f} {d:9.2f} {p:9.2f}   {l / d:6.2f} {p / h:6.2f}")
PY
