#!/usr/bin/env bash
# The main job: build memtrim and run the demo host with memtrim loaded on its
# default configuration. Once memtrim listens, the demo prints the address it
# actually bound (with "HttpPort": 0 or another port, that one); when memtrim
# cannot start it prints the reason and nothing else. Ctrl-C stops it.
#
# State: memtrim's store (memtrim.sqlite) lives in build/demo-state/ and keeps
# the history across runs (delete the folder to start afresh); --state-dir DIR
# puts it elsewhere. Extra arguments go to memtrim-demo (memtrim-demo --help):
# the default workload swings between about 60 MB and 1.2 GB of RSS;
# "--workers 2 --study-mb 50" peaks near 110 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
tests/install-deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRIM_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec build/memtrim-demo --state-dir build/demo-state "$@"
