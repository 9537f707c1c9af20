#!/usr/bin/env bash
# Installs, builds and runs every test: `bash scripts/test.sh` (Release, then the clang fuzz
# build with each fuzz target run for a few seconds) or `bash scripts/test.sh --sanitize`
# (ASan + UBSan build in build-asan/, no fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=false
[[ "${1:-}" == --sanitize ]] && sanitize=true
setup=(--with-python)  # PyTorch makes test data (ONNX exports, zoo goldens)
$sanitize || setup+=(--with-fuzz)  # clang and libFuzzer for scripts/fuzz.sh below
bash scripts/setup.sh "${setup[@]}"
bash scripts/build.sh "$@"
dir=build
$sanitize && dir=build-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp  # a cpprestsdk-internal leak at exit, see the file
ctest --test-dir "$dir" --output-on-failure -j2
# The fuzz build compiles only with clang: build it here so that it cannot rot, and fuzz each
# target briefly (a crash in the seeds or within seconds fails the run).
$sanitize || bash scripts/fuzz.sh 3
