#!/usr/bin/env bash
# Reduced precision in one run: hgraph's replay in FP32, BF16 and INT8, dynamic and static (calibrated
# on 64 generated inputs) ("precision" and "calibration" in config.json: PredictorOptions::precision) against ONNX Runtime on the same ONNX file in FP32 and on its INT8
# version (bench/quantize_onnx.py: the graph ORT's dynamic quantization makes, with the scales
# hgraph uses), at batch 1 and 8, 1 and 2 threads; then the agreement of BF16 and INT8 with
# hgraph's FP32 on fixed inputs (Predictor::check_precision: top-1 and max relative error).
#   bash bench/run_precision.sh [SECONDS] [BUILD_DIR] [THREADS...]
# Models: the zoo's ResNet-18 and BERT-style encoder (bench/run_zoo.sh's data) and the PyTorch
# exports of bench/run_brought.sh (ResNet-50, MobileNetV2, EfficientNet-B0, ViT-B/16, BERT-base, and
# BERT-base with separate q/k/v projections as Hugging Face writes it).
# PRECISION_ROUNDS (default 1) repeats the latency runs; AGREEMENT_SAMPLES (default 1000; the
# brought models 200) sets the check. Writes BUILD_DIR/precision.jsonl and prints the tables.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/zoo_lib.sh
zoo_args "$@"
rounds=${PRECISION_ROUNDS:-1}
samples=${AGREEMENT_SAMPLES:-1000}
zoo_prepare "$build/zoo" zoo
zoo_prepare "$build/brought" brought
sets=("$build/zoo:resnet18,bert" "$build/brought:resnet50,mobilenet_v2,efficientnet_b0,vit_b_16,bert_base,bert_base_hf")
for s in "${sets[@]}"; do  # the INT8 ONNX files ORT runs (models without a linear layer get none)
  IFS=, read -ra ms <<< "${s#*:}"
  for m in "${ms[@]}"; do
    f=${s%%:*}/$m
    [ -f "$f/model_int8.onnx" ] || /usr/bin/python3 bench/quantize_onnx.py "$f/model.onnx" "$f/model_int8.onnx" >&2
  done
done

cells() {  # THREADS
  local s dir m
  for s in "${sets[@]}"; do
    dir=${s%%:*}
    "$bench" latency "$dir" --models "${s#*:}" --batches 1,8 --seconds "$seconds" \
      --runtimes replay,replay_bf16,replay_int8,replay_int8_static
    IFS=, read -ra ms <<< "${s#*:}"
    for m in "${ms[@]}"; do
      zoo_ort "$dir" "$m" "$1" 1,8 "$seconds"
      NODE_PATH=bench/node_modules node bench/ort_bench.js "$dir/$m/model_int8.onnx" "$dir/$m/input.npy" "$1" 1,8 \
        "$seconds" | /usr/bin/python3 -c 'import json, sys
for line in sys.stdin:
    j = json.loads(line); j["runtime"] = "ort_int8"; j["model"] = sys.argv[1]; print(json.dumps(j))' "$m"
    done
  done
}

out=$build/precision.jsonl
: > "$out.tmp"
zoo_rounds "$rounds" "$thread_counts" cells "$out.tmp"
export OMP_NUM_THREADS=1 HG_HPU_THREADS=1
for p in bf16 int8; do
  "$bench" agreement "$build/zoo" --models resnet18,bert --precision $p --samples "$samples" >> "$out.tmp"
  "$bench" agreement "$build/brought" --models resnet50,bert_base --precision $p --samples $((samples < 200 ? samples : 200)) \
    >> "$out.tmp"
done
"$bench" agreement "$build/zoo" --models resnet18 --precision int8 --samples "$samples" --calibrate 64 >> "$out.tmp"
"$bench" agreement "$build/brought" --models resnet50 --precision int8 --samples $((samples < 200 ? samples : 200)) \
  --calibrate 64 >> "$out.tmp"
# The yardstick for the brought models' agreement: PyTorch's own BF16 autocast on the same networks.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_precision.py resnet50 mobilenet_v2 \
  2> >(grep -v -i warn >&2) >> "$out.tmp"
mv "$out.tmp" "$out"
echo "done; $(zoo_load)" >&2
/usr/bin/python3 bench/precision_table.py "$out"
