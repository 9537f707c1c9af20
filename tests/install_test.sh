#!/usr/bin/env bash
# The install test (ctest -L install): `cmake --install` of a build tree into a temporary prefix,
# then what a user of that prefix does. Every installed header includes only installed headers;
# the installed programs answer --help and --version; examples/train_and_serve, copied out of
# the source tree, configures and builds against the prefix alone (CMAKE_PREFIX_PATH), and runs
# against the installed hgraph-serve on a free loopback port. Every wait is bounded; the server
# is stopped and the temporary directory removed on every exit.
#   tests/install_test.sh BUILD_DIR VERSION
set -euo pipefail
build=$(cd "$1" && pwd)
version=$2
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hgraph-install-test.XXXXXX")
server=""
cleanup() {
  if [[ -n $server ]] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server"
    for _ in $(seq 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"

# Installed headers include each other as "engine/tensor.h": each such include must be installed.
while read -r header include; do
  [[ -f $prefix/include/hgraph/$include ]] || fail "$header includes $include, which is not installed"
done < <(cd "$prefix/include/hgraph" && grep -oE '^#include "[a-z_]+/[a-z_]+\.h"' -r . | sed -E 's/:#include "(.*)"/ \1/')

bash "$src/tests/program_version_test.sh" "$version" "$prefix"/bin/hgraph-{serve,capture,train,convert}

# The example, out of the source tree, against the prefix only.
cp -r "$src/examples/train_and_serve" "$tmp/example-src"
cmake -S "$tmp/example-src" -B "$tmp/example" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > "$tmp/configure.log" ||
  { cat "$tmp/configure.log"; fail "configuring the example"; }
grep -qx "hgraph_DIR:PATH=$prefix/lib/cmake/hgraph" "$tmp/example/CMakeCache.txt" ||
  fail "the example found hgraph elsewhere: $(grep hgraph_DIR "$tmp/example/CMakeCache.txt")"
timeout 900 cmake --build "$tmp/example" -j2 > "$tmp/build.log" || { cat "$tmp/build.log"; fail "building the example"; }
! grep -qe "$src" -e "$build" "$tmp/example/compile_commands.json" || fail "the example compiles with paths into $src or $build"

mkdir "$tmp/repo"
"$prefix/bin/hgraph-serve" --model-repository "$tmp/repo" --model-control-mode explicit --host 127.0.0.1 --port 0 \
  > "$tmp/serve.log" 2>&1 &
server=$!
url=""
for _ in $(seq 600); do  # 60 s
  url=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$tmp/serve.log" | sed 's/listening on //') || true
  [[ -n $url ]] && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/serve.log"; fail "hgraph-serve exited before listening"; }
  sleep 0.1
done
[[ -n $url ]] || { cat "$tmp/serve.log"; fail "hgraph-serve did not print 'listening' within 60 s"; }

timeout 600 "$tmp/example/train_and_serve" "$tmp/repo" "$url" > "$tmp/example.log" 2>&1 ||
  { tail -20 "$tmp/example.log"; tail -20 "$tmp/serve.log"; fail "train_and_serve against $url"; }
result=$(grep "^held-out accuracy" "$tmp/example.log") || fail "train_and_serve printed no result"
echo "$result"
