#!/usr/bin/env bash
# Every program answers --help and --version with status 0, and --version prints
# "<program> <version>", the CMake project version (ctest: program_help_version, and the
# install test on the installed copies).
#   tests/program_version_test.sh 0.1.0 build/server/hgraph-serve build/training/hgraph-train ...
set -euo pipefail
version=$1
shift
for program in "$@"; do
  name=$(basename "$program")
  help=$(timeout 60 "$program" --help) || { echo "FAIL: $name --help exited with status $?" >&2; exit 1; }
  [[ $help == *--version* ]] || { echo "FAIL: $name --help does not list --version" >&2; exit 1; }
  got=$(timeout 60 "$program" --version) || { echo "FAIL: $name --version exited with status $?" >&2; exit 1; }
  [[ $got == "$name $version" ]] || { echo "FAIL: $name --version printed '$got', expected '$name $version'" >&2; exit 1; }
  echo "ok: $got"
done
