#!/usr/bin/env bash
# The pressure benchmark (issue 9) in one run: the demo's pool workload in a
# memory cgroup for limits 250/300/400 MB x pauses 0/50/100/250/1000 ms x
# modes (no memtrim, memtrim, memtrim's poll fallback, malloc_trim after
# every study, tcmalloc, jemalloc + background thread, MALLOC_ARENA_MAX=2):
# studies completed, peak (cgroup max usage), wall time; then memtrim's CPU
# on an idle host outside the pressure zone and inside it with RSS steady.
# Needs root and a memory cgroup controller (v1 or v2).
# Usage: bench/pressure/run.sh [build-dir] [bench.py options, e.g. --limits 300 --pauses 0]
set -euo pipefail
cd "$(dirname "$0")/../.."
b=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then b=$1; shift; fi
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (memory cgroups)" >&2; exit 1; }
[ -x "$b/memtrim-demo" ] && [ -e "$b/libmemtrim.so" ] || { echo "run.sh: build $b first" >&2; exit 1; }
echo "# pressure benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)"
echo "# command: bench/pressure/run.sh $b $*"
echo "# load average before: $(cat /proc/loadavg); $(nproc) cores; kernel $(uname -r)"
echo
/usr/bin/python3 bench/pressure/bench.py --build "$b" "$@"
echo
echo "# load average after: $(cat /proc/loadavg)"
