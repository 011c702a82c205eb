#!/usr/bin/env bash
# The main job: build memtrim and run the demo host with memtrim loaded on its
# default configuration (API on http://127.0.0.1:8043/). Ctrl-C stops it.
# Extra arguments go to memtrim-demo (see: memtrim-demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."
tests/install-deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRIM_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "memtrim: open http://127.0.0.1:8043/ in a browser, or: curl http://127.0.0.1:8043/memory/stats"
exec build/memtrim-demo "$@"
