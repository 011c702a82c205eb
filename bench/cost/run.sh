#!/usr/bin/env bash
# What trimming costs the host, side by side in one run (docs/benchmarks.md,
# "The cost of trimming"):
#  1. the host's allocation latency (its workers' own mallocs in the churned
#     arenas, and a canary thread's small malloc+free every ms in its own
#     arena) and its throughput, with memtrim off / at its defaults /
#     aggressive / Orthanc 1.11.3's 100 ms malloc_trim(128 KiB) loop, at 2, 8
#     and 32 arenas (ROUNDS rounds, the order rotating; medians);
#  2. re-faults: a host that frees and re-allocates the same 128 MB every
#     3 s beside a 1 GB live set: a fixed 1 s gap vs the adaptive gap;
#  3. a host at full CPU: trims deferred while it is busy, or not;
#  4. the long run: off vs defaults at LONG_ARENAS arenas (8 and 32) over LONG_S seconds, where
#     the adaptive gap and the budget have reached their steady state.
# Usage: bench/cost/run.sh [build-dir] > results.md
#   ROUNDS=3 RUN_S=30 REFAULT_S=240 BUSY_S=60 BUSY_LEVEL=10 LONG_S=300 LONG_ARENAS="8 32" PARTS=1234
# BUSY_LEVEL is TrimBusyCpuPercent for the deferring run (the default is 90):
# on a shared machine the demo at full speed gets well under 90 % of the
# CPUs (12-37 % of 2 on the machine of docs/benchmarks.md). Parts 2 and 3 run
# without the budget (TrimBudgetPercent 100) to show the gap and the deferral
# alone; part 2 also runs the defaults, budget included.
set -euo pipefail
cd "$(dirname "$0")/../.."
b=${1:-build}
demo=$b/memtrim-demo
drive="python3 bench/cost/drive.py"
rounds=${ROUNDS:-3} run_s=${RUN_S:-30} refault_s=${REFAULT_S:-240} busy_s=${BUSY_S:-60}
busy_level=${BUSY_LEVEL:-10} long_s=${LONG_S:-300} parts=${PARTS:-1234}
long_arenas=${LONG_ARENAS:-8 32}
part() { [[ $parts == *$1* ]]; }
out=${OUT:-/tmp/memtrim-cost-$$.jsonl}
: > "$out"
# 32 arenas need more than glibc's default limit (8 per core) on a small machine.
export GLIBC_TUNABLES=glibc.malloc.arena_max=64

echo "# memtrim cost benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)"
echo "load average before: $(cat /proc/loadavg); $(nproc) CPUs"

aggr='{"HttpPort":0,"TrimIntervalSeconds":0.1,"TrimMinReleasableBytes":0,"TrimMinGapSeconds":0,"ProbeBudgetPercent":10,"TrimBudgetPercent":100,"TrimBusyCpuPercent":0,"TrimGapMaxFactor":1}'
mode_args() {
  case $1 in
    off) echo "--no-memtrim" ;;
    defaults) echo "--config {\"HttpPort\":0}" ;;
    aggressive) echo "--config $aggr" ;;
    orthanc) echo "--no-memtrim --trim-loop-ms 100" ;;
  esac
}
modes=(off defaults aggressive orthanc)
part 1 && for r in $(seq "$rounds"); do
  for arenas in 2 8 32; do
    for k in 0 1 2 3; do # the order rotates each round: no mode always runs first
      m=${modes[$(( (k + r) % 4 ))]}
      # shellcheck disable=SC2046
      $drive "$m/$arenas" "$demo" "$run_s" -- --canary --workers "$arenas" --concurrency 1 \
        --pause-ms 0 --study-mb 32 $(mode_args "$m") >> "$out"
    done
  done
done
echo "load average after part 1: $(cat /proc/loadavg)"
if part 2; then
live='--workers 1 --concurrency 1 --study-mb 128 --pause-ms 3000 --live-mb 1024'
# Both without the budget (TrimBudgetPercent 100), so that the fixed gap really is 1 s.
fixed='{"HttpPort":0,"TrimIntervalSeconds":1,"TrimMinGapSeconds":1,"TrimBusyCpuPercent":0,"TrimBudgetPercent":100,"TrimGapMaxFactor":1}'
adaptive='{"HttpPort":0,"TrimIntervalSeconds":1,"TrimMinGapSeconds":1,"TrimBusyCpuPercent":0,"TrimBudgetPercent":100,"TrimGapMaxFactor":32}'
# shellcheck disable=SC2086
$drive refault/fixed "$demo" "$refault_s" -- $live --config "$fixed" >> "$out"
# shellcheck disable=SC2086
$drive refault/adaptive "$demo" "$refault_s" -- $live --config "$adaptive" >> "$out"
# shellcheck disable=SC2086
$drive refault/off "$demo" "$refault_s" -- $live --no-memtrim >> "$out"
# shellcheck disable=SC2086
$drive refault/defaults "$demo" "$refault_s" -- $live --config '{"HttpPort":0}' >> "$out"
echo "load average after part 2: $(cat /proc/loadavg)"
fi

full='--workers 4 --concurrency 2 --pause-ms 0 --study-mb 32'
part 3 && for r in 1 2; do
  # shellcheck disable=SC2086
  $drive busy/defer "$demo" "$busy_s" -- $full \
    --config "{\"HttpPort\":0,\"TrimBudgetPercent\":100,\"TrimBusyCpuPercent\":$busy_level}" >> "$out"
  # shellcheck disable=SC2086
  $drive busy/nodefer "$demo" "$busy_s" -- $full \
    --config '{"HttpPort":0,"TrimBudgetPercent":100,"TrimBusyCpuPercent":0}' >> "$out"
done
echo "load average after part 3: $(cat /proc/loadavg)"
part 4 && for arenas in $long_arenas; do
  for m in off defaults; do
    # shellcheck disable=SC2046
    $drive "long-$m/$arenas" "$demo" "$long_s" -- --canary --workers "$arenas" --concurrency 1 \
      --pause-ms 0 --study-mb 32 $(mode_args "$m") >> "$out"
  done
done
echo "load average after part 4: $(cat /proc/loadavg)"
python3 bench/cost/summary.py "$out"
echo; echo "raw results: $out"
