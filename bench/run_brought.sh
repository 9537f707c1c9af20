#!/usr/bin/env bash
# The models users bring, in one run: hgraph's captured graph (the Predictor replaying the ONNX
# file) against ONNX Runtime (onnxruntime-node, CPU, the same file) and PyTorch eager, on PyTorch
# exports (torch 1.13 / torchvision 0.14, seeded random weights, opset 17, dynamic batch) of
# ResNet-50, MobileNetV3-Large, EfficientNet-B0 and ViT-B/16 (224x224), a BERT-base-sized encoder
# (token ids, exported with a dynamic sequence axis, run at 128), the same BERT-base written as
# Hugging Face's modeling_bert is (separate q/k/v projections) and a 2-layer LSTM (64 steps),
# at batch 1 and 8, with 1 and 2 threads (OMP_NUM_THREADS, HG_HPU_THREADS,
# torch.set_num_threads, ORT's intraOpNumThreads).
#   bash bench/run_brought.sh [SECONDS] [BUILD_DIR] [THREADS...]
# SECONDS per (runtime, model, batch) cell (default 2; 0.2 for a smoke test; a cell makes at least
# 5 calls after its warm-up, so the batch-8 cells of ViT and BERT take longer); BUILD_DIR default
# build, with hg_zoo_bench built (`cmake --build build --target hg_zoo_bench`); THREADS default
# "1 2". BROUGHT_ROUNDS (default 2) repeats the runs; each cell keeps its fastest round's median.
# The exports (about 1.2 GB, ViT-B/16 and BERT-base the largest) go to BUILD_DIR/brought once
# (`bench/torch_zoo_bench.py prepare DIR brought`, with PyTorch's outputs, which hgraph's replay is
# checked against). Writes BUILD_DIR/brought/results.jsonl and prints the tables (markdown):
# the models with hgraph's error against PyTorch, latency per thread count, ratios to hgraph.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/zoo_lib.sh
zoo_args "$@"
rounds=${BROUGHT_ROUNDS:-2}
data=$build/brought
models=(resnet50 mobilenet_v2 mobilenet_v3_large efficientnet_b0 vit_b_16 bert_base bert_base_hf lstm)
model_list=$(IFS=,; echo "${models[*]}")
batches=1,8

cells() {  # THREADS
  "$bench" latency "$data" --models "$model_list" --batches "$batches" --seconds "$seconds" --runtimes replay
  zoo_pytorch "$data" "$1" "$seconds" "$model_list" "$batches"
  for m in "${models[@]}"; do
    zoo_ort "$data" "$m" "$1" "$batches" "$seconds"
  done
}

zoo_prepare "$data" brought
out=$data/results.jsonl
: > "$out.tmp"
zoo_rounds "$rounds" "$thread_counts" cells "$out.tmp"
mv "$out.tmp" "$out"
echo "done; $(zoo_load)" >&2
/usr/bin/python3 bench/zoo_chart.py --brought "$out" "$data/meta.json"
