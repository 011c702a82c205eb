#!/usr/bin/env bash
# Build each parser's libFuzzer harness with clang (libFuzzer + ASan + UBSan)
# and run it for FUZZ_SECONDS (default 60) on its seed corpus: the query-string
# parser (server/query.c) and the configuration parser (core/config.c).
# Usage: tests/fuzz/run.sh [seconds]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
secs="${1:-${FUZZ_SECONDS:-60}}"
cflags=(-g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
mkdir -p "$out/corpus-query" "$out/corpus-config"
clang "${cflags[@]}" -I"$root/server" "$here/fuzz_query.c" "$root/server/query.c" \
  -o "$out/fuzz_query"
clang "${cflags[@]}" -I"$root/core" "$here/fuzz_config.c" "$root/core/config.c" \
  $(pkg-config --cflags --libs libcjson) -lm -o "$out/fuzz_config"
"$out/fuzz_query" -max_total_time="$secs" -max_len=4096 -timeout=5 \
  "$out/corpus-query" "$here/corpus/query"
"$out/fuzz_config" -max_total_time="$secs" -max_len=4096 -timeout=5 \
  "$out/corpus-config" "$here/corpus/config"
