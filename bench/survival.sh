#!/usr/bin/env bash
# The survival cells' counted pairs (pytest marker survival: tests/e2e on this machine's
# cgroup v1, tests/vm on the v2 kernel under qemu), with survival_util's floors: the
# reference finishes every worker or its pair is void, the group every worker in each
# counted pair, no pair where both lose all, the load beside each pair. A measurement, not
# a CI stage: a loaded machine cannot hold the cells (the group lost a worker at load 11-13
# where the reference finished all), so this prints each cell's pairs and verdict with the
# load, and exits non-zero only when its runner could not run them (no cell collected, a
# usage error, the VM not booting), never on a cell's verdict. About 13 min on a quiet
# machine (docs/benchmarks.md, "The test suite").
#   bench/survival.sh [build dir, default build]     needs root (cgroups, the VM)
# MEMTRIM_SURVIVAL=1 tests/run.sh runs it as a last, non-gating stage.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd) || { echo "survival: no build directory ${1:-build}"; exit 2; }
rc=0
pairs='pair [0-9]+:|counted pairs|void cell|passed|failed|Error'
verdict() { # verdict WHERE PYTEST-EXIT-CODE
  case $2 in
    0) echo "survival ($1): every cell held" ;;
    1) echo "survival ($1): NOT HELD (a cell failed or was void)" ;;
    *) echo "survival ($1): could not run the cells (exit $2)"; rc=1 ;;
  esac
}
echo "survival: load $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC)"
MEMTRIM_BUILD_DIR="$build" /usr/bin/python3 -m pytest -q -s -rs -p no:cacheprovider \
  -m survival tests/e2e 2>&1 | grep -E "$pairs"
verdict e2e "${PIPESTATUS[0]}"
MEMTRIM_BUILD_DIR="$build" tests/vm/run.sh -- /usr/bin/python3 -m pytest -q -s -rs \
  -p no:cacheprovider -m survival tests/vm 2>&1 | grep -E "$pairs"
verdict vm "${PIPESTATUS[0]}"
echo "survival: load $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC)"
exit $rc
