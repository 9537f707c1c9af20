#!/usr/bin/env bash
# Installs the dependencies and builds hgraph (Release) into build/, or with --sanitize an
# AddressSanitizer + UndefinedBehaviorSanitizer build into build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dir=build
opts=(-DCMAKE_BUILD_TYPE=Release -DHG_BUILD_TESTS=ON -DHG_BUILD_BENCH=ON)  # scripts/serve.sh turns both off
if [[ "${1:-}" == --sanitize ]]; then
  dir=build-asan
  opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DHG_SANITIZE=ON -DHG_BUILD_TESTS=ON -DHG_BUILD_BENCH=OFF)
fi
cmake -S . -B "$dir" "${opts[@]}" > /dev/null
cmake --build "$dir" -j2
