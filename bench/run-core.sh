#!/usr/bin/env bash
# Core benchmarks, side by side in one run (medians of several runs):
# probe and trim costs, idle cost, burst return time vs jemalloc's background
# thread, and the host's throughput without and with memtrim.
# Usage: bench/run-core.sh [build-dir]   (installs libjemalloc2 when root)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
runs=${RUNS:-5}
jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[ -e $jemalloc ] || { [ "$(id -u)" = 0 ] && apt-get install -y -qq libjemalloc2 >/dev/null; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "## probe and trim costs"
"$b/bench_probe"

echo; echo "## idle host, 10 s (x$runs)"
for i in $(seq "$runs"); do "$b/bench_host" idle 2>/dev/null; done | tee /tmp/idle.$$
echo "median naive CPU ms: $(sed -E 's/.* ([0-9.]+) ms CPU.*/\1/' /tmp/idle.$$ | median)"
echo "median memtrim CPU ms: $(sed -E 's/.* ([0-9.]+) ms housekeeper CPU.*/\1/' /tmp/idle.$$ | median)"

echo; echo "## burst return time (x$runs, alternating)"
for i in $(seq "$runs"); do
  "$b/bench_host" burst 2>/dev/null
  [ -e $jemalloc ] && LD_PRELOAD=$jemalloc MALLOC_CONF=background_thread:true \
    "$b/bench_host" burst none 2>/dev/null | sed 's/burst none/burst jemalloc-bg/'
done | tee /tmp/burst.$$
for who in memtrim jemalloc-bg; do
  echo "median $who s: $(grep "burst $who" /tmp/burst.$$ | sed -E 's/.* in ([0-9.-]+) s$/\1/' | median)"
done

echo; echo "## host throughput (x$runs, alternating)"
aggr='{"HttpPort":0,"Database":"","TrimIntervalSeconds":0.1,"TrimMinReleasableBytes":0,"TrimMinGapSeconds":0,"ProbeBudgetPercent":10}'
tp_none() { "$b/bench_host" throughput none 2>/dev/null; }
tp_defaults() { "$b/bench_host" throughput 2>/dev/null | sed 's/throughput memtrim/throughput defaults/'; }
tp_aggressive() { "$b/bench_host" throughput "$aggr" 2>/dev/null | sed 's/throughput memtrim/throughput aggressive/'; }
for i in $(seq "$runs"); do # the order rotates each round: no mode always runs first
  case $((i % 3)) in
    0) tp_none; tp_defaults; tp_aggressive ;;
    1) tp_defaults; tp_aggressive; tp_none ;;
    2) tp_aggressive; tp_none; tp_defaults ;;
  esac
done | tee /tmp/tp.$$
for who in none defaults aggressive; do
  echo "median $who studies/s: $(grep "throughput $who" /tmp/tp.$$ | sed -E 's/.*: ([0-9.]+) studies.*/\1/' | median)," \
    "CPU ms per study: $(grep "throughput $who" /tmp/tp.$$ | sed -E 's/.* ([0-9.]+) ms CPU per study.*/\1/' | median)"
done
rm -f /tmp/idle.$$ /tmp/burst.$$ /tmp/tp.$$
