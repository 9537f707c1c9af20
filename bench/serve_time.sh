#!/usr/bin/env bash
# Time to serve from a clean clone: clones REPO (default: this checkout) at BRANCH (default: its
# current branch) into a temporary directory, runs scripts/serve.sh there without ccache and stops
# the server once it prints "listening". Prints the wall time to "listening", the CPU time (user +
# sys of everything serve.sh ran: setup, configure, build, model load) and the CPU model.
#   bash bench/serve_time.sh [REPO [BRANCH]]
set -euo pipefail
repo=${1:-$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)}
branch=${2:-$(git -C "$repo" rev-parse --abbrev-ref HEAD)}
dir=$(mktemp -d "${TMPDIR:-/tmp}/hgraph-serve-time.XXXXXX")
pid=""  # /usr/bin/time; its child is serve.sh, which becomes hgraph-serve
cleanup() {
  [[ -n $pid ]] && { pkill -KILL -P "$pid"; kill -KILL "$pid"; } 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
git clone -q -b "$branch" "$repo" "$dir/src"
cd "$dir/src"
unset CMAKE_CXX_COMPILER_LAUNCHER CCACHE_DIR
start=$(date +%s.%N)
PORT=0 /usr/bin/time -f "%U %S" -o "$dir/cpu" bash scripts/serve.sh > "$dir/serve.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 3600))
until grep -q "listening on" "$dir/serve.log"; do
  kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)) || { tail -20 "$dir/serve.log"; echo "serve.sh did not reach listening" >&2; exit 1; }
  sleep 0.2
done
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
pkill -INT -P "$pid"  # hgraph-serve shuts down gracefully
wait "$pid" || true
pid=""
read -r user sys < "$dir/cpu"
echo "commit $(git rev-parse --short HEAD): wall to listening ${wall} s; CPU user ${user} s + sys ${sys} s"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
