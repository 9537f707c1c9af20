#!/usr/bin/env bash
# The reference results on Fashion-MNIST: hgraph-train runs training/configs/fashion_mlp.json and
# fashion_lenet.json and fashion_cnn.json (a "sequential" model; one process, and DDP with 2 ranks), and PyTorch runs the same recipes
# (bench/train/fashion.py: same model, optimizer, schedule, batch, epochs, augmentation, test on
# the same t10k files) at the same thread count, one after the other, alternating frameworks.
# Prints one JSON line per run (test accuracy, fit seconds, seconds per epoch) and draws the
# curves into bench/train/fashion_curves.png.
#   bash bench/train/run_fashion.sh [BUILD_DIR] [EPOCHS]
# BUILD_DIR default build (hgraph-train built); EPOCHS default: the configs' (15).
# FASHION_MODELS (default "mlp lenet cnn"), FASHION_DDP (default 1: also the 2-rank runs),
# FASHION_SEEDS (default "0": the seeds of the weights and the data order; several give the
# spread; the run ends with each configuration's mean and range over them).
# The 2-rank runs keep the recipe's global batch: each rank takes half of data.batch_size, as
# one does to reproduce a single-process result with DDP (Lightning's batch_size is per rank).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
epochs=${2:-}
models=${FASHION_MODELS:-mlp lenet cnn}
out=$build/fashion
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMP_NUM_THREADS=1 HG_HPU_THREADS=1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git rev-parse --short HEAD)"
results=$out/results.jsonl
: > "$results"
for m in $models; do
  cfg=training/configs/fashion_$m.json
  batch=$(/usr/bin/python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['data']['batch_size'])" "$cfg")
  for seed in ${FASHION_SEEDS:-0}; do
    sets=(--set trainer.default_root_dir="$out/$m" --set export.dir="$out/repository" --set trainer.enable_progress_bar=false
          --set trainer.callbacks=[] --set data.seed="$seed" --set model.seed="$seed")
    [ -n "$epochs" ] && sets+=(--set trainer.max_epochs="$epochs" --set optimizer.scheduler.t_max="$epochs")
    suffix=$([ "$seed" = 0 ] || echo "_s$seed")
    for devices in 1 $([ "${FASHION_DDP:-1}" = 1 ] && echo 2); do
      rm -rf "$out/$m/lightning_logs"
      log=$out/hgraph_${m}_d$devices$suffix.txt
      "$build/training/hgraph-train" --config "$cfg" "${sets[@]}" --set trainer.devices="$devices" \
          --set data.batch_size=$((batch / devices)) --set export.name="fashion_${m}_d$devices" > "$log" 2>&1
      cp "$out/$m/lightning_logs/version_0/metrics.csv" "$out/hgraph_${m}_d$devices$suffix.csv"
      /usr/bin/python3 - "$log" "$m" "$devices" "$seed" >> "$results" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
fit = float(re.search(r"(\d+) epochs, \d+ steps, fit ([0-9.]+) s", text).group(2))
epochs = int(re.search(r"(\d+) epochs, \d+ steps, fit", text).group(1))
acc = float(re.search(r"held-out test_acc ([0-9.]+)", text).group(1))
loss = float(re.search(r"held-out test_loss ([0-9.]+)", text).group(1))
print(json.dumps({"framework": "hgraph", "model": sys.argv[2], "devices": int(sys.argv[3]), "seed": int(sys.argv[4]), "test_acc": acc,
                    "test_loss": loss, "epochs": epochs, "fit_seconds": fit, "seconds_per_epoch": fit / epochs}))
PY
      tail -1 "$results"
    done
    torch_args=()
    [ -n "$epochs" ] && torch_args+=(--epochs "$epochs")
    /usr/bin/python3 bench/train/fashion.py "$cfg" "$out/torch_$m$suffix.csv" --threads 1 --seed "$seed" "${torch_args[@]}" \
        2> "$out/torch_$m$suffix.log" | tee -a "$results"
  done
done
/usr/bin/python3 - "$results" <<'PY'
import collections, json, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    model = {"lenet5": "lenet", "sequential": "cnn"}.get(r["model"], r["model"])  # PyTorch names the architecture
    runs[(model, r["framework"].split()[0], r.get("devices", 1))].append(r)
for (model, framework, devices), rs in sorted(runs.items()):
    acc = [r["test_acc"] for r in rs]
    spe = sum(r["seconds_per_epoch"] for r in rs) / len(rs)
    print(f"{model:10s} {framework:8s} devices {devices}: test accuracy mean {sum(acc) / len(acc):.4f} "
          f"(min {min(acc):.4f}, max {max(acc):.4f}, {len(acc)} seeds), {spe:.2f} s/epoch")
PY
first=$(set -- ${FASHION_SEEDS:-0}; [ "$1" = 0 ] || echo "_s$1")
curves=()
for m in $models; do curves+=("hgraph $m=$out/hgraph_${m}_d1$first.csv" "PyTorch $m=$out/torch_$m$first.csv"); done
LOSS_CURVE_TITLE="Fashion-MNIST: hgraph-train and PyTorch, the same recipes (training/configs/fashion_*.json)" \
LOSS_CURVE_ACC_MIN=0.75 /usr/bin/python3 bench/train/loss_curve.py bench/train/fashion_curves.png "${curves[@]}"
echo "curves: bench/train/fashion_curves.png"
