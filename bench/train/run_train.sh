#!/usr/bin/env bash
# The training benchmark in one run: training samples/s of hgraph eager, hgraph lazy (the cached
# step graph), hgraph replay (graphs::StepReplay: the step replayed without tracing) and PyTorch eager (Debian's python3-torch) on the digits MLP 64-64-10
# (batch 32 and 256), LeNet-5 (batch 32) and the BERT-style encoder (batch 8, 128 tokens), with
# the same initial weights, batches, optimizer (SGD, momentum 0.9) and threads (OMP_NUM_THREADS +
# HG_HPU_THREADS / torch.set_num_threads); then DDP scaling (2 ranks x 1 thread against 2
# independent 1-thread processes at the same time), then the digits loss curves (the raw loop,
# PyTorch, and the Trainer with its CSVLogger).
#   bash bench/train/run_train.sh [SECONDS] [BUILD_DIR] [THREADS...]
# SECONDS per (runtime, model, batch) cell (default 3); BUILD_DIR default build, with
# hg_train_bench built (`cmake --build BUILD_DIR --target hg_train_bench`); THREADS default "1 2".
# TRAIN_ROUNDS (default 2) repeats the throughput cells (report.py keeps each cell's best round:
# a disturbance on the shared VM hits one round, and every runtime gets the same treatment).
# TRAIN_PARTS (default "check speed ddp digits") picks the parts (check: the loss after the same
# 25 steps in every framework). The DDP part: TRAIN_DDP_MODELS ("mlp 32;lenet5 64;bert 8"),
# TRAIN_DDP_MODES ("lazy replay"), TRAIN_DDP_STEPS (per model by default). Writes BUILD_DIR/train/results.jsonl (TRAIN_OUT: another name),
# the digits CSVs and bench/train/digits_loss.png, and prints report.py's tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-3}
build=${2:-build}
shift $(($# < 2 ? $# : 2))
thread_counts=${*:-1 2}
rounds=${TRAIN_ROUNDS:-2}
parts=${TRAIN_PARTS:-check speed ddp digits}
data=$build/train
bench=$build/bench/hg_train_bench
# PyTorch with the OpenMP OpenBLAS (it obeys the thread count) and without this machine's
# OpenBLAS core-type override (it forces a slow kernel), as in bench/run_zoo.sh.
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
torch_py() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/train/torch_train.py "$@" 2> >(grep -v -i warn >&2); }
configs=("mlp 32" "mlp 256" "lenet5 32" "bert 8")
has() { [[ " $parts " == *" $1 "* ]]; }
# a cell that fails is reported and skipped, the run goes on
cell() { "$@" >> "$out.tmp" || echo "FAILED (exit $?): $*" >&2; }
trainer_steps() {  # steps per second at 1 thread (rough) x SECONDS
  local rate
  case "$1 $2" in "mlp 32") rate=3000 ;; "mlp 256") rate=1000 ;; "lenet5 32") rate=200 ;; *) rate=8 ;; esac
  /usr/bin/python3 -c "print(max(20, int($rate * $seconds)))"
}

for c in "${configs[@]}" "lenet5 64" "digits 32"; do
  set -- $c
  "$bench" prepare "$data" --model "$1" --batch "$2"
done
out=$data/${TRAIN_OUT:-results}.jsonl
: > "$out.tmp"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)" >&2

if has check; then
  # the same 25 steps (5 warm-up + 20) in every framework from the same init and batches
  export OMP_NUM_THREADS=1 HG_HPU_THREADS=1
  for c in "mlp 32" "lenet5 32" "bert 8"; do
    set -- $c
    for mode in lazy replay eager; do
      cell "$bench" run "$data" --model "$1" --batch "$2" --mode "$mode" --steps 20 --tag check
    done
    cell torch_py run "$data" --model "$1" --batch "$2" --threads 1 --steps 20 --tag check
  done
fi

if has speed; then
  for round in $(seq "$rounds"); do
    for t in $thread_counts; do
      export OMP_NUM_THREADS=$t HG_HPU_THREADS=$t
      echo "round $round, threads $t: hgraph lazy, replay, eager, PyTorch eager, hgraph Trainer (lazy, replay)" >&2
      for c in "${configs[@]}"; do
        set -- $c
        # the loss read on the host every step (the previous step's) and every 10 steps
        for mode in lazy replay eager; do
          for every in 1 10; do
            cell "$bench" run "$data" --model "$1" --batch "$2" --mode "$mode" --seconds "$seconds" --sync-every "$every"
          done
        done
        cell torch_py run "$data" --model "$1" --batch "$2" --threads "$t" --seconds "$seconds"
        # the same through the Trainer (fixed steps: about SECONDS at the raw loop's speed)
        for replay in 0 1; do
          cell "$bench" trainer "$data" --model "$1" --batch "$2" --steps "$(trainer_steps "$1" "$2")" --replay "$replay"
        done
      done
    done
  done
fi

if has ddp; then
  # 2 ranks x 1 thread on 127.0.0.1 against 2 independent 1-thread processes started together
  # (no communication); each process trains on its own batch of B samples per step.
  export OMP_NUM_THREADS=1 HG_HPU_THREADS=1
  ddp_steps=${TRAIN_DDP_STEPS:-}
  # TRAIN_DDP_MODES: lazy (every step traced; the host waits for the buckets) and replay (the
  # step replayed, its all-reduce inside the step's graph); the processes it is compared with
  # run the same mode.
  IFS=';' read -ra ddp_configs <<< "${TRAIN_DDP_MODELS:-mlp 32;lenet5 64;bert 8}"
  for c in "${ddp_configs[@]}"; do
    set -- $c
    case $1 in mlp) steps=${ddp_steps:-10000} ;; lenet5) steps=${ddp_steps:-400} ;; *) steps=${ddp_steps:-40} ;; esac
    for round in $(seq "$rounds"); do
      for mode in ${TRAIN_DDP_MODES:-lazy replay}; do
        echo "DDP round $round: $1 batch $2 per process, $steps steps, $mode" >&2
        # one process alone, then two at once
        cell "$bench" run "$data" --model "$1" --batch "$2" --mode "$mode" --steps "$steps" --tag single
        start=$(($(date +%s) + 5))  # both time from the same instant, after their warm-ups
        "$bench" run "$data" --model "$1" --batch "$2" --mode "$mode" --steps "$steps" --start-at "$start" --tag independent_0 > "$data/ind0.json" &
        p0=$!
        "$bench" run "$data" --model "$1" --batch "$2" --mode "$mode" --steps "$steps" --start-at "$start" --tag independent_1 > "$data/ind1.json" &
        p1=$!
        wait "$p0" && wait "$p1" || echo "FAILED: an independent $1 process" >&2
        cat "$data/ind0.json" "$data/ind1.json" >> "$out.tmp"
        # DDP: rank 0 launches rank 1 (training/cluster_env.h's launcher) on a free port.
        cell timeout 600 "$bench" ddp "$data" --model "$1" --batch "$2" --mode "$mode" --steps "$steps" --devices 2
      done
    done
  done
fi

if has digits; then
  export OMP_NUM_THREADS=1 HG_HPU_THREADS=1
  # the raw loop and PyTorch over the same split and per-epoch orders; the Trainer (lazy, its
  # default CSVLogger) over training::random_split and its DataLoader's shuffle
  rm -rf "$data/digits_trainer"
  "$bench" digits "$data" "$data/digits_hgraph.csv" --epochs 30 &&
  torch_py digits "$data" "$data/digits_torch.csv" --epochs 30 &&
  "$bench" trainer-digits "$data" "$data/digits_trainer" --epochs 30 &&
  /usr/bin/python3 bench/train/loss_curve.py bench/train/digits_loss.png \
    "hgraph raw loop=$data/digits_hgraph.csv" "PyTorch=$data/digits_torch.csv" \
    "hgraph Trainer=$data/digits_trainer/lightning_logs/version_0/metrics.csv" || echo "FAILED: the digits curves" >&2
fi

mv "$out.tmp" "$out"
echo "done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 bench/train/report.py "$out"
