#!/usr/bin/env bash
# Build the libFuzzer harnesses with clang (libFuzzer + ASan + UBSan over the
# whole core, through CMake's MEMTRIM_FUZZ option) and run each for
# FUZZ_SECONDS (default 60) on its seed corpus:
#   fuzz_request  the whole request path: target, headers, body through the
#                 Host/cross-site checks, the route table and every handler,
#                 against a real instance (server/request.c and all of api/)
#   fuzz_query    the query-string parser and typed getters (server/query.c)
#   fuzz_config   the configuration parser (core/config/config.c)
#   fuzz_arenas   the malloc_info parser (core/measure/arenas.c)
#   fuzz_group_msg  a worker group's wire message as its leader checks it (group_msg_check,
#                 core/group/group_chan.c), then the sums and JSON the leader makes of it
#   fuzz_cli_elf, fuzz_cli_maps, fuzz_cli_status, fuzz_cli_syscall, fuzz_cli_bpf
#                 what the memtrim command reads of a target as root: its ELF files
#                 (cli/elfsym.c), /proc/PID/maps, status and stat, syscall, a cgroup's
#                 memory.stat (cli/target*.c),
#                 and its seccomp filters (cli/bpfeval.c)
# Fails when a harness finds something, or runs nothing ("Done 0 runs" or no
# summary at all). Usage: tests/fuzz/run.sh [seconds]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
secs="${1:-${FUZZ_SECONDS:-60}}"
fuzzers=(fuzz_request fuzz_query fuzz_config fuzz_arenas fuzz_group_msg fuzz_cli_elf fuzz_cli_maps
  fuzz_cli_status fuzz_cli_syscall fuzz_cli_bpf)

CC=clang cmake -S "$root" -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRIM_FUZZ=ON \
  -DMEMTRIM_SANITIZE=address -DMEMTRIM_TESTS=OFF >/dev/null
cmake --build "$out" -j"$(nproc)" --target "${fuzzers[@]}" >/dev/null

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# FUZZ_JOBS harnesses at a time (default: the cores): each runs its own FUZZ_SECONDS, so the
# stage takes about ceil(10 / jobs) x that instead of 10 x.
jobs=${FUZZ_JOBS:-$(nproc)}
run_one() { # run_one FUZZER: its exit code to $out/FUZZER.rc
  local f=$1 name=${1#fuzz_} code=0
  mkdir -p "$out/corpus-$name"
  "$out/$f" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=4096 \
    "$out/corpus-$name" "$here/corpus/$name" >"$out/$f.log" 2>&1 || code=$?
  echo "$code" >"$out/$f.rc"
}
running=0
for f in "${fuzzers[@]}"; do
  rm -f "$out/$f.rc"
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run_one "$f" &
  running=$((running + 1))
done
wait || true
status=0
for f in "${fuzzers[@]}"; do
  log="$out/$f.log"
  echo "--- $f ($secs s)"
  code=$(cat "$out/$f.rc" 2>/dev/null || echo missing)
  if [ "$code" != 0 ]; then
    echo "$f exited $code:"
    tail -n 60 "$log"
    status=1
    continue
  fi
  runs=$(grep -Eo '^Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' || true)
  if [ -z "$runs" ] || [ "$runs" -eq 0 ]; then
    echo "$f ran nothing:"
    tail -n 20 "$log"
    status=1
    continue
  fi
  grep -E '^Done [0-9]+ runs' "$log"
done
exit $status
