#!/usr/bin/env bash
# Soak test of hgraph-serve (not part of CI): one server, three models, wrk at 64 connections for a
# long run with malformed requests mixed in and a model reloaded every minute, the server's RSS
# and open fds sampled throughout; fails on memory or fd growth, unexpected statuses, socket
# errors, failed reloads or a dead server.
#
#   bash bench/soak/run_soak.sh [DURATION_S] [OUT_DIR]
#   SOAK_SERVER=/path/to/hgraph-serve bash bench/soak/run_soak.sh 150     # a 2.5-minute trial
#
# DURATION_S: seconds of load (default $SOAK_DURATION or 1800), OUT_DIR default build/soak.
# Environment (defaults in brackets):
#   SOAK_SERVER        the hgraph-serve binary [build/server/hgraph-serve, from the repository root]
#   SOAK_WARMUP        seconds of warm-up excluded from the rules [DURATION/10: 180 s of 30 min]
#   SOAK_CONNECTIONS   wrk connections [64];   WRK_THREADS  wrk threads [1]
#   SOAK_BAD_EVERY     every Nth request is a malformed one [200]; 0: none
#   SOAK_RELOAD_EVERY  seconds between reloads (digits_a, digits_b, echo in turn) [60]
#   SOAK_SAMPLE_EVERY  seconds between RSS/fd samples [10]
#   SOAK_RSS_PCT       allowed RSS growth in percent [5];   SOAK_FD_SLACK  allowed fd growth [8]
#   HG_SERVE_ARGS      extra hgraph-serve arguments
# What it does: copies models/repository/digits_mlp/1 to <tmp>/repo/digits_a/1 and digits_b/1,
# writes an identity model <tmp>/repo/echo (FP32 [16] -> [16], max_batch_size 8), starts
# `hgraph-serve --model-control-mode explicit --load-model '*'` on 127.0.0.1 (a free port), sends
# each request of bench/soak/soak.py's list once (OUT/probes.txt: status and body; a valid one
# that is not answered 200 stops the run), then runs wrk with bench/soak/soak.lua for DURATION_S
# while POST /v2/repository/models/M/load {} runs every SOAK_RELOAD_EVERY s and soak.py samples
# /proc/PID/status VmRSS and /proc/PID/fd every SOAK_SAMPLE_EVERY s. Then SIGTERM (30 s, then
# SIGKILL) and the report. Ctrl-C or a failure stops wrk, the reloads, the sampler and the server
# and removes the temporary repository. Only 127.0.0.1 is ever contacted.
# Rules (any one fails the run, exit 1, the reasons printed under "verdict: FAIL"):
#   RSS  baseline = the first sample at or after the warm-up; fail when the largest sample taken
#        at or after 2/3 of DURATION_S exceeds it by more than SOAK_RSS_PCT % (a decrease passes)
#   fds  fail when the last sample exceeds the baseline sample's count by more than SOAK_FD_SLACK
#        (a reload opens the model's files for a moment; the 64 connections are in both samples)
#   statuses: any answer other than 2xx, 4xx or 503; more 4xx answers than malformed requests
#        sent (a valid request refused); connect/read/write socket errors (timeouts, wrk's
#        --timeout 10s, are reported only); no answer at all
#   reloads: any load request not answered 200, or fewer reloads than due (one per
#        SOAK_RELOAD_EVERY s up to DURATION_S - 5 s: the reload driver broke)
#   server: gone when wrk ends (checked then, not during the run), or SIGTERM did not stop it
#        within 30 s with exit status 0
# Outputs in OUT_DIR: samples.csv (time_s,rss_kb,fds), reloads.csv (time_s,model,status,seconds),
# wrk.txt, probes.txt, server.out/server.log, soak.png (RSS and fds over time), summary.txt
# (requests, req/s, statuses, socket errors, RSS start/warm-up/end/max, fds start/end, reloads,
# verdict), also printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-${SOAK_DURATION:-1800}}
out=${2:-build/soak}
server_bin=${SOAK_SERVER:-build/server/hgraph-serve}
warmup=${SOAK_WARMUP:-$((duration / 10))}
connections=${SOAK_CONNECTIONS:-64}
wrk_threads=${WRK_THREADS:-1}
bad_every=${SOAK_BAD_EVERY:-200}
reload_every=${SOAK_RELOAD_EVERY:-60}
sample_every=${SOAK_SAMPLE_EVERY:-10}
py=/usr/bin/python3
helper=bench/soak/soak.py
die() { echo "run_soak.sh: $*" >&2; exit 2; }
[ -x "$server_bin" ] || die "$server_bin is not an executable (build it, or set SOAK_SERVER)"
command -v wrk > /dev/null || die "wrk is not installed (scripts/setup.sh --with-bench)"
$py -c 'import matplotlib' 2> /dev/null || die "python3-matplotlib is missing (scripts/setup.sh --with-python)"

mkdir -p "$out"
rm -f "$out"/{samples.csv,reloads.csv,wrk.txt,probes.txt,server.out,server.log,soak.png,summary.txt}
tmp=$(mktemp -d /tmp/hgraph_soak.XXXXXX)  # tmp/repo: the model repository, tmp/bodies: requests
repo=$tmp/repo
server_pid='' wrk_pid='' reload_pid='' sampler_pid=''

# stop_server: SIGTERM, up to 30 s, then SIGKILL; sets server_exit (empty when it was killed)
server_exit=''
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2> /dev/null || true
  for _ in $(seq 60); do kill -0 "$server_pid" 2> /dev/null || break; sleep 0.5; done
  if kill -0 "$server_pid" 2> /dev/null; then
    echo "run_soak.sh: the server did not stop within 30 s of SIGTERM; SIGKILL" >&2
    kill -KILL "$server_pid" 2> /dev/null || true
    wait "$server_pid" 2> /dev/null || true
  else
    server_exit=0
    wait "$server_pid" 2> /dev/null || server_exit=$?
  fi
  server_pid=''
}
cleanup() {
  for p in $wrk_pid $reload_pid $sampler_pid; do kill "$p" 2> /dev/null || true; done
  stop_server
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "run_soak.sh: interrupted" >&2; exit 130' INT TERM

# The repository: two copies of the digits MLP and an identity model.
for m in digits_a digits_b; do mkdir -p "$repo/$m" && cp -r models/repository/digits_mlp/1 "$repo/$m/1"; done
mkdir -p "$repo/echo/1"
cat > "$repo/echo/config.json" << 'EOF'
{"platform": "identity", "max_batch_size": 8,
 "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
 "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}]}
EOF
$py "$helper" bodies "$tmp/bodies"

# shellcheck disable=SC2086
"$server_bin" --model-repository "$repo" --model-control-mode explicit --load-model '*' \
  --host 127.0.0.1 --port 0 ${HG_SERVE_ARGS:-} > "$out/server.out" 2> "$out/server.log" &
server_pid=$!
url=''
for _ in $(seq 600); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$out/server.out" || true)
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2> /dev/null || { tail -20 "$out/server.log" >&2; server_pid=''; die "the server exited at start"; }
  sleep 0.5
done
[ -n "$url" ] || die "the server printed no http://127.0.0.1:PORT line within 300 s"
for m in digits_a digits_b echo; do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v2/models/$m/ready")" = 200 ] || die "model $m is not ready"
done
echo "run_soak.sh: $url (pid $server_pid), $duration s at c=$connections, warm-up $warmup s, out $out" >&2

# Each request once: the answers the malformed ones get (the run counts only statuses).
while read -r kind class path file; do
  code=$(curl -s -o "$tmp/answer" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary "@$file" "$url$path")
  echo "$kind $class $path -> $code $(head -c 300 "$tmp/answer")" >> "$out/probes.txt"
  [ "$class" = BAD ] || [ "$code" = 200 ] || die "the valid request $kind got $code: $(head -c 300 "$tmp/answer")"
done < "$tmp/bodies/requests.txt"

t0=$EPOCHREALTIME
elapsed() { awk -v a="$EPOCHREALTIME" -v b="$t0" 'BEGIN { printf "%.1f", a - b }'; }
$py "$helper" sample "$server_pid" "$t0" "$sample_every" "$out/samples.csv" &
sampler_pid=$!
wrk -t"$wrk_threads" -c"$connections" -d"${duration}s" --timeout 10s --latency -s bench/soak/soak.lua \
  "$url" -- "$tmp/bodies/requests.txt" "$bad_every" > "$out/wrk.txt" 2>&1 &
wrk_pid=$!
# Reloads at reload_every, 2*reload_every, ... while wrk still runs (stops 5 s before its end).
(
  models=(digits_a digits_b echo)
  trap 'kill "$nap" 2> /dev/null; exit 0' TERM  # cleanup's kill also ends the sleep
  for ((k = 1; k * reload_every <= duration - 5; k++)); do
    sleep "$(awk -v t="$t0" -v now="$EPOCHREALTIME" -v at="$((k * reload_every))" 'BEGIN { d = t + at - now; print (d > 0 ? d : 0) }')" &
    nap=$!
    wait "$nap"
    m=${models[(k - 1) % 3]}
    at=$(elapsed)
    res=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 120 -X POST \
      -H 'Content-Type: application/json' -d '{}' "$url/v2/repository/models/$m/load" || true)
    echo "$at,$m,${res% *},${res#* }" >> "$out/reloads.csv"
  done
) &
reload_pid=$!

wait "$wrk_pid" || echo "run_soak.sh: wrk exited with status $?" >&2
wrk_pid=''
wait "$reload_pid" || true
reload_pid=''
server_state=ok
if ! kill -0 "$server_pid" 2> /dev/null; then
  code=0
  wait "$server_pid" 2> /dev/null || code=$?
  server_state="died during the run with status $code (see $out/server.log)"
  server_pid=''
fi
kill "$sampler_pid" 2> /dev/null || true
wait "$sampler_pid" 2> /dev/null || true
sampler_pid=''
if [ "$server_state" = ok ]; then
  stop_server
  if [ -z "$server_exit" ]; then server_state="did not stop within 30 s of SIGTERM (killed)"
  elif [ "$server_exit" != 0 ]; then server_state="exited with status $server_exit after SIGTERM"; fi
fi
grep -v '^SOAK_JSON' "$out/wrk.txt" | sed 's/^/wrk: /' >&2
$py "$helper" report "$out" "$duration" "$warmup" "${SOAK_RSS_PCT:-5}" "${SOAK_FD_SLACK:-8}" \
  "$reload_every" "$server_state"
