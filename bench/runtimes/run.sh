#!/usr/bin/env bash
# The runtimes benchmark (bench/runtimes/README.md): as root, from anywhere.
#   bench/runtimes/run.sh [bench.py options]    e.g. --rounds 2 --old-build build-controls
# The build is MEMTRIM_BUILD_DIR (default: <repo>/build). Markdown on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MEMTRIM_BUILD_DIR="${MEMTRIM_BUILD_DIR:-$root/build}"
exec /usr/bin/python3 "$root/bench/runtimes/bench.py" "$@"
