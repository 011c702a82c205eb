#!/usr/bin/env bash
# Other allocators, side by side in one run (docs/benchmarks.md, "Other allocators"):
#  1. the burst (bench_alloc: 4 pool threads churn 128 MB each, keep 10 %, stay idle)
#     under glibc, jemalloc (default and background_thread:true), tcmalloc and
#     mimalloc, without and with memtrim on its defaults;
#  2. the issue's pool workload (memtrim-demo: 8 workers, 150 MB studies, 2 % kept,
#     1 s apart, 24 studies) in a memory cgroup of 300 and 400 MB, without and
#     with memtrim preloaded: studies completed, or killed.
# Usage (root, cgroup v1 or v2): bench/run-alloc.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
b=$(cd "${1:-build}" && pwd)
seconds=${SECONDS_MAX:-30}
studies=${STUDIES:-24}
libdir=$(dirname "$(ldd "$b/bench_alloc" | awk '/libc\.so/ {print $3}')")
declare -A lib=([glibc]="" [jemalloc]=$libdir/libjemalloc.so.2 [jemalloc-bg]=$libdir/libjemalloc.so.2
                [tcmalloc]=$libdir/libtcmalloc_minimal.so.4 [mimalloc]=$libdir/libmimalloc.so.2)
conf() { [ "$1" = jemalloc-bg ] && echo "MALLOC_CONF=background_thread:true" || echo "MALLOC_CONF="; }

echo "date: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), load average: $(cat /proc/loadavg)"
echo
echo "## burst: RSS after the frees, time to within 1.1x / 1.25x the floor (live heap), RSS after ${seconds} s"
echo
echo "| allocator | memtrim | RSS after the burst | floor (live) | within 1.1x | within 1.25x | RSS at the end |"
echo "|---|---|---|---|---|---|---|"
for a in glibc jemalloc jemalloc-bg tcmalloc mimalloc; do
  for m in none memtrim; do
    line=$(env "$(conf $a)" LD_PRELOAD="${lib[$a]}" "$b/bench_alloc" $m "$seconds" 2>/dev/null)
    echo "$line" | sed -E "s/.*after the frees ([0-9]+) MB, floor ([0-9]+) MB \(live ([0-9]+) MB\), within 1.1x floor in ([-0-9.]+) s, within 1.25x in ([-0-9.]+) s, RSS at the end ([0-9]+) MB \(([0-9.]+)x floor\)/| $a | $m | \1 MB | \2 MB (\3) | \4 s | \5 s | \6 MB (\7x) |/; s/-1.00 s/not in ${seconds} s/g"
  done
done
echo "load average: $(cat /proc/loadavg)"

echo
echo "## cgroup: studies completed of $studies (8 workers, 150 MB studies, 1 s apart)"
echo
echo "| allocator | limit | without memtrim | with memtrim |"
echo "|---|---|---|---|"
if [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then v=1; else v=2; fi
cg_run() { # allocator limit_mb mode -> "N (exit X, peak Y MB)"
  local a=$1 mb=$2 m=$3 cg pre log peak rc
  if [ $v = 1 ]; then cg=/sys/fs/cgroup/memory/memtrim-alloc-bench-$$; else cg=/sys/fs/cgroup/memtrim-alloc-bench-$$; fi
  mkdir "$cg"
  if [ $v = 1 ]; then
    echo $((mb << 20)) > "$cg/memory.limit_in_bytes"
    [ -e "$cg/memory.memsw.limit_in_bytes" ] && echo $((mb << 20)) > "$cg/memory.memsw.limit_in_bytes"
  else
    echo $((mb << 20)) > "$cg/memory.max"; [ -e "$cg/memory.swap.max" ] && echo 0 > "$cg/memory.swap.max"
  fi
  pre=${lib[$a]}
  [ $m = memtrim ] && pre="${pre:+$pre:}$b/libmemtrim.so"
  log=$(mktemp)
  set +e
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" env "$(conf $a)" LD_PRELOAD="$pre" \
    MEMTRIM_CONFIG='{"HttpPort":0,"Database":""}' "$b/memtrim-demo" --no-memtrim --workers 8 \
    --study-mb 150 --keep-percent 2 --concurrency 1 --pause-ms 1000 --studies "$studies" >"$log" 2>&1
  rc=$?
  set -e
  if [ $v = 1 ]; then peak=$(( $(cat "$cg/memory.max_usage_in_bytes") >> 20 )); else peak=$(( $(cat "$cg/memory.peak" 2>/dev/null || echo 0) >> 20 )); fi
  echo "$(grep -c '^study ' "$log") ($([ $rc = 0 ] && echo done || echo "killed, exit $rc"), peak $peak MB)"
  rm -f "$log"
  rmdir "$cg"
}
for a in glibc jemalloc-bg tcmalloc mimalloc; do
  for mb in 300 400; do
    echo "| $a | $mb MB | $(cg_run $a $mb none) | $(cg_run $a $mb memtrim) |"
  done
done
echo
echo "load average: $(cat /proc/loadavg)"
