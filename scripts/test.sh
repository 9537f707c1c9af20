#!/usr/bin/env bash
# Installs, builds and runs every test: `bash scripts/test.sh` (Release) or
# `bash scripts/test.sh --sanitize` (ASan + UBSan build in build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-python  # PyTorch makes test data (ONNX exports, zoo goldens)
bash scripts/build.sh "$@"
dir=build
[[ "${1:-}" == --sanitize ]] && dir=build-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp  # a cpprestsdk-internal leak at exit, see the file
ctest --test-dir "$dir" --output-on-failure -j2
