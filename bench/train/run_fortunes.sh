#!/usr/bin/env bash
# The byte-level GPT reference result: hgraph-train runs training/configs/fortunes_gpt.json on
# the fortunes corpus (Debian's fortunes), then PyTorch runs the same recipe
# (bench/train/fortunes.py) at the same thread count; prints one JSON line each (held-out loss
# and bits per byte, fit seconds), draws bench/train/fortunes_curves.png, and serves the export
# with hgraph-serve on 127.0.0.1 to show a generate answer.
#   bash bench/train/run_fortunes.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
steps=${2:-}
out=$build/fortunes
cfg=training/configs/fortunes_gpt.json
mkdir -p "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git rev-parse --short HEAD)"
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMP_NUM_THREADS=1 HG_HPU_THREADS=1
sets=(--set trainer.default_root_dir="$out/run" --set export.dir="$out/repository" --set trainer.enable_progress_bar=false)
torch_args=()
if [ -n "$steps" ]; then
  sets+=(--set trainer.max_steps="$steps" --set optimizer.scheduler.t_max="$steps")
  torch_args+=(--steps "$steps")
fi
rm -rf "$out/run"
"$build/training/hgraph-train" --config "$cfg" "${sets[@]}" > "$out/hgraph.txt" 2>&1
cp "$out/run/lightning_logs/version_0/metrics.csv" "$out/hgraph.csv"
/usr/bin/python3 - "$out/hgraph.txt" <<'PY'
import json, math, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"(\d+) steps, fit ([0-9.]+) s", text)
loss = float(re.search(r"held-out test_loss ([0-9.]+)", text).group(1))
print(json.dumps({"framework": "hgraph", "test_loss": loss, "test_bpb": loss / math.log(2), "steps": int(m.group(1)),
                  "fit_seconds": float(m.group(2)), "seconds_per_step": float(m.group(2)) / int(m.group(1))}))
PY
/usr/bin/python3 bench/train/fortunes.py "$cfg" "$out/torch.csv" --threads 1 "${torch_args[@]}" 2> "$out/torch.log"
LOSS_CURVE_X=step LOSS_CURVE_TITLE="Byte-level GPT on fortunes: hgraph-train and PyTorch, the same recipe" \
  /usr/bin/python3 bench/train/loss_curve.py bench/train/fortunes_curves.png "hgraph=$out/hgraph.csv" "PyTorch=$out/torch.csv"
# The export served: one greedy and one sampled answer from the generate endpoint.
"$build/server/hgraph-serve" --model-repository "$out/repository" --port 0 > "$out/serve.txt" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 100); do
  port=$(grep -oE '127\.0\.0\.1:[0-9]+|0\.0\.0\.0:[0-9]+|port [0-9]+' "$out/serve.txt" | grep -oE '[0-9]+$' | head -1 || true)
  [ -n "$port" ] && curl -sf "127.0.0.1:$port/v2/health/ready" > /dev/null && break
  sleep 0.2
done
for params in '{"max_tokens": 60}' '{"max_tokens": 60, "temperature": 0.8, "top_k": 40, "seed": 1}'; do
  curl -s "127.0.0.1:$port/v2/models/fortunes_gpt/generate" -d "{\"text_input\": \"Q: What\", \"parameters\": $params}"
  echo
done
