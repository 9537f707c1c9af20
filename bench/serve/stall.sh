#!/usr/bin/env bash
# Stall during a load: the latency of model A (the digits MLP) served at a small concurrency,
# first alone ("idle"), then while model B (ResNet-18) is loaded (imported, captured) and
# unloaded again and again through the repository API ("loading"), on one hgraph-serve. Prints
# A's p50/p99/p99.9 in each phase, their ratio and how many loads ran. Uses the serving
# benchmark's repository and bodies (bench/serve/prepare.py; made here when missing).
#   bash bench/serve/stall.sh [SECONDS] [BUILD_DIR]        (default 10 s per phase, build)
# Environment: STALL_CONCURRENCY (wrk connections on A, default 4), HG_SERVE_ARGS (extra
# hgraph-serve arguments), HG_GRAPH_CACHE (B's loads start warm from it when set), SERVE_BIN
# (another hgraph-serve binary, e.g. another commit's, on the same repository and bodies).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-10}
build=${2:-build}
conc=${STALL_CONCURRENCY:-4}
out=$build/serve
serve=${SERVE_BIN:-$build/server/hgraph-serve}
[ -x "$serve" ] || { echo "stall.sh: $serve not built" >&2; exit 2; }
if [ ! -f "$out/repo/resnet18/config.json" ]; then
  /usr/bin/python3 bench/torch_zoo_bench.py prepare "$build/zoo" 2> >(grep -v Warning >&2)
  /usr/bin/python3 bench/serve/prepare.py "$build/zoo" "$out" 2
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HG_HPU_THREADS=${HG_HPU_THREADS:-1}
log=$(mktemp -d /tmp/hg_stall.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2> /dev/null && wait "$pid" 2> /dev/null
  rm -rf "$log"
}
trap cleanup EXIT
# shellcheck disable=SC2086
"$serve" --model-repository "$out/repo" --host 127.0.0.1 --port 0 --model-control-mode explicit \
  --load-model mlp ${HG_SERVE_ARGS:-} > "$log/out" 2> "$log/err" &
pid=$!
url=
for _ in $(seq 600); do
  url=$(grep -o 'http://[^ ]*' "$log/out" || true)
  [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v2/models/mlp/ready")" = 200 ] && break
  kill -0 "$pid" 2> /dev/null || { cat "$log/err" >&2; exit 1; }
  sleep 0.5
done
[ -n "$url" ] || { echo "stall.sh: hgraph-serve did not start" >&2; exit 1; }

phase() {  # NAME: wrk on A for SECONDS, its JSON line tagged with NAME
  wrk -t1 -c"$conc" -d"${seconds}s" --timeout 60s --latency -s bench/serve/post.lua \
    "$url/v2/models/mlp/infer" -- "$out/bodies/mlp.json" | grep '^WRK_JSON ' | sed "s/^WRK_JSON /$1 /"
}
phase idle > "$log/idle"
(
  end=$((SECONDS + seconds + 1))
  n=0
  while [ $SECONDS -lt $end ]; do
    curl -sf -X POST "$url/v2/repository/models/resnet18/load" -o /dev/null || { echo "load failed" >&2; exit 1; }
    curl -sf -X POST "$url/v2/repository/models/resnet18/unload" -o /dev/null || { echo "unload failed" >&2; exit 1; }
    n=$((n + 1))
  done
  echo "$n" > "$log/loads"
) &
loader=$!
phase loading > "$log/loading"
wait "$loader"
/usr/bin/python3 - "$log" "$conc" "$seconds" << 'EOF'
import json, sys
log, conc, seconds = sys.argv[1], sys.argv[2], sys.argv[3]
rows = {}
for name in ("idle", "loading"):
    tag, text = open(f"{log}/{name}").read().split(" ", 1)
    rows[name] = json.loads(text)
loads = open(f"{log}/loads").read().strip()
print(f"model A = mlp at c={conc}, {seconds} s per phase; model B = resnet18 loaded and unloaded {loads} times "
      "during the loading phase")
print("| phase | req/s | p50 | p99 | p99.9 | errors |")
print("|---|---:|---:|---:|---:|---:|")
for name, r in rows.items():
    print(f"| {name} | {r['rps']:,.0f} | {r['p50_us']:,} us | {r['p99_us']:,} us | {r['p999_us']:,} us | "
          f"{r['non200'] + r.get('socket_errors', 0)} |")
i, l = rows["idle"], rows["loading"]
print(f"p99 loading / idle: {l['p99_us'] / i['p99_us']:.2f}; p50: {l['p50_us'] / i['p50_us']:.2f}")
EOF
