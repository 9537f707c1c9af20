#!/usr/bin/env bash
# The serving benchmark of issue 6 in one run: hgraph-serve against a FastAPI + uvicorn + PyTorch
# server (bench/serve/fastapi_peer.py) on the same models, weights and KServe v2 JSON requests,
# driven by wrk (bench/serve/post.lua) on 127.0.0.1 at each concurrency, model by model: for
# each model, hgraph at every concurrency, then the peer at every concurrency (the _b1 models,
# the encoder without batching, are hgraph only). Each (server, model, concurrency) cell gets a 1 s
# warm-up, then SECONDS of wrk; hgraph's GET /metrics is scraped before and after each cell.
#   bash bench/serve/run_serve.sh [SECONDS] [BUILD_DIR]
# SECONDS per cell (default 10; 2 for a smoke test), BUILD_DIR default build, with hgraph-serve
# built (`cmake --build build --target hgraph-serve`). Environment:
#   SERVE_MODELS       default "identity mlp lenet5 resnet18_64 resnet18 bert bert_b1 bert_s16
#                      bert_s16_b1" (bench/serve/prepare.py says what each is)
#   SERVE_CONCURRENCY  wrk connections, default "1 16 128"
#   SERVE_THREADS      compute threads per model instance / uvicorn worker (OMP_NUM_THREADS,
#                      HG_HPU_THREADS; torch.set_num_threads), default 1
#   SERVE_INSTANCES    hgraph instances per model (config.json instance_group) and uvicorn
#                      workers, default 2 (the machine's 2 cores)
#   WRK_THREADS        wrk threads (capped at the connection count), default 1
#   HG_SERVE_ARGS      extra hgraph-serve arguments
# wrk, the servers and everything else share the machine's cores. Writes BUILD_DIR/serve/
# (repository, bodies, runs/: each cell's wrk output and metrics scrapes, meta.json) and prints
# the markdown report (bench/serve/report.py: tables, ratios, targets).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-10}
build=${2:-build}
models=${SERVE_MODELS:-identity mlp lenet5 resnet18_64 resnet18 bert bert_b1 bert_s16 bert_s16_b1}
concurrency=${SERVE_CONCURRENCY:-1 16 128}
threads=${SERVE_THREADS:-1}
instances=${SERVE_INSTANCES:-2}
wrk_threads=${WRK_THREADS:-1}
data=$build/zoo
out=$build/serve
runs=$out/runs
serve=$build/server/hgraph-serve
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
[ -x "$serve" ] || { echo "run_serve.sh: $serve not built" >&2; exit 2; }
command -v wrk > /dev/null || { echo "run_serve.sh: wrk not installed (scripts/setup.sh --with-bench)" >&2; exit 2; }

/usr/bin/python3 bench/torch_zoo_bench.py prepare "$data" 2> >(grep -v Warning >&2)
/usr/bin/python3 bench/serve/prepare.py "$data" "$out" "$instances"
rm -rf "$runs"
mkdir -p "$runs"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
}
trap cleanup EXIT

# wait_ready URL PATH...: every path answers 200 within 600 s
wait_ready() {
  local url=$1 path
  shift
  for path in "$@"; do
    for _ in $(seq 1200); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "$url$path")" = 200 ] && continue 2
      sleep 0.5
    done
    echo "run_serve.sh: $url$path not ready after 600 s" >&2
    exit 1
  done
}

cores=$(getconf _NPROCESSORS_ONLN)
export OMP_NUM_THREADS=$threads HG_HPU_THREADS=$threads
# shellcheck disable=SC2086
"$serve" --model-repository "$out/repo" --host 127.0.0.1 --port 0 ${HG_SERVE_ARGS:-} \
  > "$out/hgraph.out" 2> "$out/hgraph.log" &
pids+=($!)
for _ in $(seq 1200); do
  hg_url=$(grep -o 'http://[^ ]*' "$out/hgraph.out" || true)
  [ -n "$hg_url" ] && break
  kill -0 "${pids[0]}" 2> /dev/null || { cat "$out/hgraph.log" >&2; exit 1; }
  sleep 0.5
done

peer_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
peer_url=http://127.0.0.1:$peer_port
# PyTorch without this machine's OpenBLAS core-type override (it forces a slow kernel).
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE HG_PEER_DATA="$data" HG_PEER_THREADS="$threads" \
  /usr/bin/python3 bench/serve/fastapi_peer.py --port "$peer_port" --workers "$instances" > "$out/peer.log" 2>&1 &
pids+=($!)

ready_paths=()
for m in $models; do ready_paths+=("/v2/models/$m/ready"); done
wait_ready "$hg_url" "${ready_paths[@]}"
wait_ready "$peer_url" /v2/health/ready

cat > "$runs/meta.json" << EOF
{"date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "commit": "$(git rev-parse --short HEAD)",
 "command": "bash bench/serve/run_serve.sh $seconds $build", "seconds": $seconds,
 "models": "$models", "concurrency": "$concurrency", "threads": $threads, "instances": $instances,
 "wrk_threads": $wrk_threads, "hgraph_args": "${HG_SERVE_ARGS:-}",
 "cores": $cores, "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)",
 "load_before": "$load_before", "load_start": "$(cut -d' ' -f1-3 /proc/loadavg)"}
EOF
echo "machine: $cores cores; load $load_before before the start, $(cut -d' ' -f1-3 /proc/loadavg) now; hgraph $hg_url, peer $peer_url" >&2

# wait_idle: until both servers' process trees have used under 5% of a core for 0.5 s (at most
# 300 s). A server keeps working through the requests queued when wrk stops (a slow model at
# concurrency 128 leaves seconds of work); the next cell must not share the cores with that.
wait_idle() { /usr/bin/python3 bench/serve/proc_cpu.py wait-idle "${pids[@]}"; }

# cell SERVER URL MODEL CONCURRENCY
cell() {
  local server=$1 url=$2 model=$3 c=$4
  local name=$runs/${server}__${model}__c$c target=$2/v2/models/$3/infer body=$out/bodies/$3.json
  local t=$((wrk_threads < c ? wrk_threads : c)) pid=${pids[0]}
  [ "$server" = peer ] && pid=${pids[1]}
  wrk -t"$t" -c"$c" -d1s --timeout 60s -s bench/serve/post.lua "$target" -- "$body" > /dev/null
  wait_idle
  [ "$server" = hgraph ] && curl -s "$url/metrics" > "$name.before.prom"
  cut -d' ' -f1 /proc/loadavg > "$name.load"
  local cpu_before
  cpu_before=$(/usr/bin/python3 bench/serve/proc_cpu.py seconds "$pid")
  wrk -t"$t" -c"$c" -d"${seconds}s" --timeout 60s --latency -s bench/serve/post.lua "$target" -- "$body" > "$name.wrk"
  echo "$cpu_before $(/usr/bin/python3 bench/serve/proc_cpu.py seconds "$pid")" > "$name.cpu"  # the server's CPU seconds
  [ "$server" = hgraph ] && curl -s "$url/metrics" > "$name.after.prom"
  wait_idle
  echo "$server $model c=$c: $(grep -o '"rps": [0-9.]*' "$name.wrk"), $(grep -o '"p50_us": [0-9]*' "$name.wrk"), $(grep -o '"non200": [0-9]*' "$name.wrk")" >&2
}

peer_models=$(/usr/bin/python3 -c 'import json, sys
print(" ".join(m["name"] for m in json.load(open(sys.argv[1])) if m["peer"]))' "$out/models.json")
for m in $models; do
  cs=$concurrency
  # ResNet-18 on 224x224 images: ~1.5 MB of JSON and tens of ms per request; with 128 waiting,
  # each answer takes longer than a cell lasts (none would complete), so at most concurrency 16.
  [ "$m" = resnet18 ] && cs=$(for c in $concurrency; do if [ "$c" -le 16 ]; then echo "$c"; fi; done)
  for c in $cs; do cell hgraph "$hg_url" "$m" "$c"; done
  if [[ " $peer_models " == *" $m "* ]]; then
    for c in $cs; do cell peer "$peer_url" "$m" "$c"; done
  fi
done
echo "done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 bench/serve/report.py "$out"
