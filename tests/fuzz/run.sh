#!/usr/bin/env bash
# Build the query-string fuzzer with clang (libFuzzer + ASan + UBSan) and run
# it for FUZZ_SECONDS (default 60) on the seed corpus. Usage: tests/fuzz/run.sh [seconds]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
secs="${1:-${FUZZ_SECONDS:-60}}"
mkdir -p "$out" "$out/corpus-query"
clang -g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/server" "$here/fuzz_query.c" "$root/server/query.c" -o "$out/fuzz_query"
"$out/fuzz_query" -max_total_time="$secs" -max_len=4096 -timeout=5 \
  "$out/corpus-query" "$here/corpus/query"
