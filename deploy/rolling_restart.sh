#!/usr/bin/env bash
# Restarts hgraph-serve replicas one at a time, so that nginx (deploy/nginx-hgraph.conf) always has
# one serving: SIGTERM a replica, wait until its process is gone, start it again, wait until
# /v2/health/ready answers 200, wait --settle seconds, then the next replica. A replica is stopped
# only while all the others answer ready. Every wait is bounded; a timeout stops the script (exit 1)
# naming the replica, which is left as it is, the others untouched.
#
#   deploy/rolling_restart.sh 8001 8002                   # systemd: units hgraph-serve@PORT
#   deploy/rolling_restart.sh --pid-file '/run/hg/%p.pid' --start 'CMD' 8001 8002
#
# Without systemd, --pid-file names each replica's pid file (%p: the port) and --start a bash
# command that starts replica $1 (the port) in the background and writes that pid file.
# Options: --host ADDR (127.0.0.1) where the replicas listen; --stop-timeout S (40: the unit's
# TimeoutStopSec, --drain-timeout + 10); --ready-timeout S (300); --settle S (3: longer than the
# upstream fail_timeout, so that nginx uses the restarted replica again before the next one stops).
set -euo pipefail
host=127.0.0.1 stop_timeout=40 ready_timeout=300 settle=3 pid_file="" start=""
usage() { echo "usage: $0 [--host ADDR] [--stop-timeout S] [--ready-timeout S] [--settle S] [--pid-file PATTERN --start CMD] PORT..." >&2; exit 2; }
while (($#)); do
  case "$1" in
    --host) host=$2; shift 2 ;;
    --stop-timeout) stop_timeout=$2; shift 2 ;;
    --ready-timeout) ready_timeout=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    --pid-file) pid_file=$2; shift 2 ;;
    --start) start=$2; shift 2 ;;
    -*) usage ;;
    *) break ;;
  esac
done
(($#)) || usage
[[ -n $pid_file && -n $start ]] || [[ -z $pid_file && -z $start ]] ||
  { echo "rolling_restart: --pid-file and --start go together" >&2; exit 2; }

log() { echo "rolling_restart: $(date +%T.%3N) $*"; }
now_ms() { date +%s%3N; }
die() { echo "rolling_restart: $*" >&2; exit 1; }

# True while process $1 exists and is not a zombie (a zombie has exited; its parent has not reaped it).
alive() {
  local state
  [[ -r /proc/$1/stat ]] && read -r _ _ state _ < "/proc/$1/stat" 2>/dev/null && [[ $state != Z ]]
}

# SIGTERM replica $1 and wait, at most --stop-timeout seconds, until its process has exited.
stop_replica() {
  local port=$1
  if [[ -z $pid_file ]]; then
    # systemd sends the unit's KillSignal (SIGTERM) and waits for the exit (TimeoutStopSec).
    timeout "$stop_timeout" systemctl stop "hgraph-serve@$port" ||
      die "hgraph-serve@$port did not stop within $stop_timeout s"
    return
  fi
  local file=${pid_file//%p/$port} pid
  pid=$(cat "$file") || die "no pid file $file for the replica on port $port"
  kill -TERM "$pid" || die "cannot signal the replica on port $port (pid $pid from $file)"
  local deadline=$((SECONDS + stop_timeout))
  while alive "$pid"; do
    ((SECONDS < deadline)) || die "the replica on port $port (pid $pid) still runs $stop_timeout s after SIGTERM"
    sleep 0.1
  done
}

start_replica() {
  local port=$1
  if [[ -z $pid_file ]]; then
    systemctl start "hgraph-serve@$port" || die "systemctl start hgraph-serve@$port failed"
  else
    bash -c "$start" rolling_restart "$port" || die "the start command failed for port $port: $start"
  fi
}

# The status of the replica's /v2/health/ready (empty when it does not answer).
ready_status() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$host:$1/v2/health/ready" || true
}

# Wait, at most --ready-timeout seconds, until the replica's /v2/health/ready answers 200.
wait_ready() {
  local port=$1 deadline=$((SECONDS + ready_timeout)) code
  while :; do
    code=$(ready_status "$port")
    [[ $code == 200 ]] && return
    ((SECONDS < deadline)) || die "the replica on port $port is not ready $ready_timeout s after its start (last answer: ${code:-none})"
    sleep 0.2
  done
}

for port in "$@"; do
  # Never take a replica away while another one is not serving.
  for other in "$@"; do
    [[ $other == "$port" || $(ready_status "$other") == 200 ]] ||
      die "not stopping port $port: the replica on port $other is not ready"
  done
  t0=$(now_ms)
  log "port $port: SIGTERM, waiting for the drain to finish"
  stop_replica "$port"
  log "port $port: stopped; starting"
  start_replica "$port"
  wait_ready "$port"
  log "port $port: ready $(($(now_ms) - t0)) ms after the SIGTERM; settling $settle s"
  sleep "$settle"
done
log "done: $* restarted"
