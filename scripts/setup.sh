#!/usr/bin/env bash
# Installs every Debian package hgraph's build and tests need; with --with-python also the
# ones for the test-data, golden-data and peer-benchmark scripts (python3-torch,
# torchvision, onnx, sklearn, matplotlib for the benchmark chart); the test suite
# generates its PyTorch data at test time.
# --serve installs only what building the libraries and programs needs (scripts/serve.sh), without
# GoogleTest and Google Benchmark.
# --with-fuzz adds clang and libFuzzer for scripts/fuzz.sh; --with-bench adds wrk, FastAPI and
# uvicorn for the serving benchmark (bench/serve/) on top of --with-python.
# Safe to run again: packages already present are skipped.
set -euo pipefail
build_pkgs=(cmake g++ make pkg-config libdnnl-dev libtbb-dev libcpprest-dev libssl-dev
            nlohmann-json3-dev libboost-dev libboost-program-options-dev libspdlog-dev
            libonnx-dev libprotobuf-dev protobuf-compiler curl libgloo-dev)
test_pkgs=(libgtest-dev libgmock-dev libbenchmark-dev iproute2)  # tests/ and bench/
tool_pkgs=(python3 python3-numpy python3-torch python3-torchvision python3-onnx python3-sklearn python3-matplotlib
           python3-jsonschema python3-yaml libopenblas0-openmp)
bench_pkgs=(wrk python3-fastapi python3-uvicorn)
fuzz_pkgs=(clang-14 libclang-rt-14-dev libomp-14-dev)
want=("${build_pkgs[@]}")
[[ " $* " == *" --serve "* ]] || want+=("${test_pkgs[@]}")
for arg in "$@"; do
  case "$arg" in
    --serve) ;;
    --with-python) want+=("${tool_pkgs[@]}") ;;
    --with-fuzz) want+=("${fuzz_pkgs[@]}") ;;
    --with-bench) want+=("${tool_pkgs[@]}" "${bench_pkgs[@]}") ;;
    *) echo "setup: unknown option $arg (use --serve, --with-python, --with-fuzz, --with-bench)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
