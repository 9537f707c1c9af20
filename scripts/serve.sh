#!/usr/bin/env bash
# Installs, builds and starts hgraph-serve on the bundled default model (digits_mlp) at
# http://127.0.0.1:${PORT:-8000}. Extra arguments go to hgraph-serve.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/server/hgraph-serve --host 127.0.0.1 --port "${PORT:-8000}" "$@"
