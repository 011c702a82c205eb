#!/usr/bin/env bash
# The soak (tests/soak/soak.py) against the ASan+UBSan build: builds the
# allocation counter (memcount.so) and runs the demo host with it preloaded
# after libasan. Usage: tests/soak/run.sh [build dir, default build-asan]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$(cd "${1:-$root/build-asan}" && pwd)"
cc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$build/memcount.so" "$here/memcount.c" -lpthread
libasan="$(cc -print-file-name=libasan.so)"
[ -e "$libasan" ] || { echo "soak: no libasan.so ($libasan)"; exit 1; }
MEMTRIM_BUILD_DIR="$build" MEMCOUNT_SO="$build/memcount.so" LIBASAN_SO="$libasan" \
  /usr/bin/python3 "$here/soak.py"
