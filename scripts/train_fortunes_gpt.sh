#!/usr/bin/env bash
# Reproduces the bundled text generation model models/repository/fortunes_gpt: hgraph-train runs
# training/configs/fortunes_gpt_served.json (the byte-level GPT, d_model 128, 4 layers, 4 heads,
# max_len 128, on Debian's fortunes corpus, 3,000 steps of 32 blocks of 128 bytes) and exports it;
# the export replaces the bundled model (written next to it, then renamed into place).
#   bash scripts/train_fortunes_gpt.sh [BUILD_DIR] [THREADS]
# BUILD_DIR default build (hgraph-train built: bash scripts/build.sh); THREADS default 2. The
# bundled export: fit 761 s with 1 thread on an AMD EPYC core, held-out loss 1.654 nats per byte
# (2.387 bits); another thread count gives an equally good model, not the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-2}
[ -d /usr/share/games/fortunes ] || bash scripts/setup.sh  # the corpus: Debian's fortunes
export OMP_NUM_THREADS=$threads HG_HPU_THREADS=$threads
work=$(mktemp -d "${TMPDIR:-/tmp}/fortunes_gpt.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$build/training/hgraph-train" --config training/configs/fortunes_gpt_served.json \
  --set trainer.default_root_dir="$work/run" --set export.dir="$work/repo" --set trainer.enable_progress_bar=false
rm -rf models/repository/fortunes_gpt.new
mv "$work/repo/fortunes_gpt" models/repository/fortunes_gpt.new
rm -rf models/repository/fortunes_gpt
mv models/repository/fortunes_gpt.new models/repository/fortunes_gpt
echo "bundled: models/repository/fortunes_gpt"
