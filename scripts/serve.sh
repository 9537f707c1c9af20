#!/usr/bin/env bash
# Installs what serving needs, builds only hgraph-serve and the libraries it links (no tests,
# benchmarks or training) into build/, and starts it on the bundled repository at
# http://127.0.0.1:${PORT:-8000}: digits_mlp (the default model of the README's curl) and
# fortunes_gpt (text generation). Extra arguments go to hgraph-serve.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --serve
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHG_BUILD_TESTS=OFF -DHG_BUILD_BENCH=OFF > /dev/null
cmake --build build -j2 --target hgraph-serve
exec ./build/server/hgraph-serve --host 127.0.0.1 --port "${PORT:-8000}" "$@"
