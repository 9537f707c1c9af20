# shellcheck shell=bash
# The parts bench/run_zoo.sh and bench/run_brought.sh share; sourced from the repository's root.
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# zoo_args [SECONDS] [BUILD_DIR] [THREADS...]: the runners' arguments (defaults 2, build, "1 2")
# as seconds, build and thread_counts, and bench, BUILD_DIR's hg_zoo_bench.
# shellcheck disable=SC2034  # the runner's variables
zoo_args() {
  seconds=${1:-2}
  build=${2:-build}
  shift $(($# < 2 ? $# : 2))
  thread_counts=${*:-1 2}
  bench=$build/bench/hg_zoo_bench
}

zoo_load() { echo "load $(cut -d' ' -f1-3 /proc/loadavg)"; }

zoo_machine() {
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(zoo_load)" >&2
}

# zoo_rounds ROUNDS "THREADS..." CELLS OUT: the machine and its load, then for each round and each
# thread count T, `CELLS T` (a command printing JSON lines) with OMP_NUM_THREADS and
# HG_HPU_THREADS set to T, its lines appended to OUT.
zoo_rounds() {
  local round t
  zoo_machine
  for round in $(seq "$1"); do
    for t in $2; do
      export OMP_NUM_THREADS=$t HG_HPU_THREADS=$t
      echo "round $round, threads $t" >&2
      "$3" "$t" >> "$4"
    done
  done
}

# zoo_prepare DIR SET: the set's data (bench/torch_zoo_bench.py prepare) and ONNX Runtime.
zoo_prepare() {
  /usr/bin/python3 bench/torch_zoo_bench.py prepare "$1" "$2" 2> >(grep -v Warning >&2)
  [ -d bench/node_modules/onnxruntime-node ] || bash scripts/setup.sh --with-bench >&2
}

# zoo_pytorch DIR THREADS SECONDS [MODEL,...] [BATCH,...]: PyTorch's JSON lines.
zoo_pytorch() {
  # PyTorch without this machine's OpenBLAS core-type override (it forces a slow kernel).
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_zoo_bench.py run "$@" \
    2> >(grep -v -i warn >&2)
}

# zoo_ort DIR MODEL THREADS BATCH,... SECONDS: ONNX Runtime's JSON lines for DIR/MODEL/model.onnx.
zoo_ort() {
  NODE_PATH=bench/node_modules node bench/ort_bench.js "$1/$2/model.onnx" "$1/$2/input.npy" "$3" "$4" "$5" |
    /usr/bin/python3 -c 'import json, sys
for line in sys.stdin:
    j = json.loads(line); j["runtime"] = "ort"; j["model"] = sys.argv[1]; print(json.dumps(j))' "$2"
}
