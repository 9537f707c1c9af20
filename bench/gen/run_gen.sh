#!/usr/bin/env bash
# The text generation benchmark: hgraph-serve's generate_stream (continuous batching) under a
# closed loop of C clients (bench/gen/load.py), and PyTorch decoding the same prompts with a KV
# cache in static batches of C (bench/gen/torch_decode.py), same weights, greedy, 128 new tokens,
# prompts of 16-200 bytes; C = 1, 8, 32, the two runtimes one after the other per C. Prints one
# JSON line per cell, then the ratios and targets (bench/gen/report.py).
#   bash bench/gen/run_gen.sh [BUILD_DIR] [THREADS]
# BUILD_DIR default build (hgraph-serve and hgraph-train built); THREADS default 1 (OMP_NUM_THREADS,
# HG_HPU_THREADS, torch.set_num_threads). GEN_PACKAGE: a GPT package to serve (a version folder);
# default: a GPT of d_model 128, 4 layers, max_len 512, made by one hgraph-train step on fortunes.
# GEN_CONCURRENCY (default "1 8 32"), GEN_REQUESTS (per cell, default 4 per client, at least 8),
# GEN_STEP_TOKENS (generation.max_step_tokens, default 128), GEN_KV_DTYPE (generation.kv_cache_dtype,
# default float32).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
threads=${2:-1}
out=$build/gen
mkdir -p "$out"
export OMP_NUM_THREADS=$threads HG_HPU_THREADS=$threads
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg); threads $threads" >&2
echo "commit: $(git rev-parse --short HEAD)" >&2
package=${GEN_PACKAGE:-}
if [ -z "$package" ]; then
  rm -rf "$out/train"
  "$build/training/hgraph-train" --config training/configs/fortunes_gpt.json --set model.config.max_len=512 \
    --set trainer.max_steps=1 --set data.batch_size=2 --set trainer.default_root_dir="$out/train" \
    --set export.dir="$out/train/repo" --set export.name=gpt --set trainer.enable_progress_bar=false > "$out/train.log" 2>&1
  package=$out/train/repo/gpt/1
fi
rm -rf "$out/repo"
mkdir -p "$out/repo/gpt"
cp -r "$package" "$out/repo/gpt/1"
echo "{\"max_batch_size\": 32, \"generation\": {\"max_batch\": 32, \"max_step_tokens\": ${GEN_STEP_TOKENS:-128}, \"kv_cache_dtype\": \"${GEN_KV_DTYPE:-float32}\"}}" > "$out/repo/gpt/config.json"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
}
trap cleanup EXIT
"$build/server/hgraph-serve" --model-repository "$out/repo" --host 127.0.0.1 --port 0 > "$out/serve.out" 2> "$out/serve.log" &
pids+=($!)
url=
for _ in $(seq 1200); do  # up to 10 minutes to load and capture
  url=$(grep -o 'http://[^ ]*' "$out/serve.out" || true)
  [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v2/models/gpt/ready")" = 200 ] && break
  kill -0 "${pids[0]}" 2> /dev/null || { cat "$out/serve.log" >&2; exit 1; }
  sleep 0.5
done
results=$out/results.jsonl
: > "$results"
for c in ${GEN_CONCURRENCY:-1 8 32}; do
  n=${GEN_REQUESTS:-0}
  /usr/bin/python3 bench/gen/load.py "$url" gpt --concurrency "$c" --requests "$n" --max-tokens 128 | tee -a "$results"
  env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/gen/torch_decode.py "$out/repo/gpt/1" --concurrency "$c" --requests "$n" \
    --max-tokens 128 --threads "$threads" 2> /dev/null | tee -a "$results"
done
curl -s "$url/metrics" | grep -E '^hg_generate_(tokens|preemptions|steps|step_rows|step_tokens)_total' >&2 || true
echo "done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 bench/gen/report.py "$results"
