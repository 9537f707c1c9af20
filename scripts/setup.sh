#!/usr/bin/env bash
# Installs every Debian package hgraph's build and tests need; with --with-python also the
# ones for the test-data, golden-data and peer-benchmark scripts (python3-torch,
# torchvision, onnx, sklearn, matplotlib for the benchmark chart) and nginx-light
# for the deploy/ test; the test suite generates its PyTorch data at test time. The tests and
# the training benchmarks also read Fashion-MNIST (dataset-fashion-mnist) and the fortunes
# corpus (fortunes).
# --serve installs only what building the libraries and programs needs (scripts/serve.sh), without
# GoogleTest and Google Benchmark.
# --with-fuzz adds clang and libFuzzer for scripts/fuzz.sh; --with-bench adds, on top of
# --with-python, every peer the benchmarks run: wrk, FastAPI and uvicorn (bench/serve/), jemalloc
# (bench/serve/burst_memory.py), Node.js
# and ONNX Runtime from npm (bench/package.json, installed into bench/node_modules with
# --ignore-scripts: the CPU library ships inside the package, nothing is downloaded at install).
# Safe to run again: packages already present are skipped.
set -euo pipefail
build_pkgs=(cmake g++ make pkg-config libdnnl-dev libtbb-dev libcpprest-dev libssl-dev
            nlohmann-json3-dev libboost-dev libboost-program-options-dev libspdlog-dev
            libonnx-dev libprotobuf-dev protobuf-compiler curl libgloo-dev zlib1g-dev)
test_pkgs=(libgtest-dev libgmock-dev libbenchmark-dev iproute2  # tests/ and bench/
           dataset-fashion-mnist fortunes)  # real data: Fashion-MNIST (IDX) and a text corpus
tool_pkgs=(python3 python3-numpy python3-torch python3-torchvision python3-onnx python3-sklearn python3-matplotlib
           python3-jsonschema python3-yaml libopenblas0-openmp nginx-light)
bench_pkgs=(wrk python3-fastapi python3-uvicorn nodejs libjemalloc2)
fuzz_pkgs=(clang-14 libclang-rt-14-dev libomp-14-dev)
want=("${build_pkgs[@]}")
bench=false
[[ " $* " == *" --serve "* ]] || want+=("${test_pkgs[@]}")
for arg in "$@"; do
  case "$arg" in
    --serve) ;;
    --with-python) want+=("${tool_pkgs[@]}") ;;
    --with-fuzz) want+=("${fuzz_pkgs[@]}") ;;
    --with-bench) want+=("${tool_pkgs[@]}" "${bench_pkgs[@]}"); bench=true ;;
    *) echo "setup: unknown option $arg (use --serve, --with-python, --with-fuzz, --with-bench)" >&2; exit 2 ;;
  esac
done
# Debian's npm, unless a Node.js that bundles its own npm is there already (NodeSource's).
$bench && ! command -v npm > /dev/null && want+=(npm)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # nginx's install would start the system service on port 80; the deploy test runs its own
  # nginx, so deny service starts during the install (as Debian's container images do).
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
# Node.js peers at the versions bench/package-lock.json pins (npm's registry is reachable in CI).
if $bench && ! [ -d "$(dirname "$0")/../bench/node_modules/onnxruntime-node" ]; then
  echo "setup: installing bench/package.json's npm packages (onnxruntime-node)"
  npm ci --prefix "$(dirname "$0")/../bench" --ignore-scripts --no-audit --no-fund
fi
