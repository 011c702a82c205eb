#!/usr/bin/env bash
# The whole test suite: installs what it needs (as root), builds memtrim three
# ways (plain, ASan+UBSan, TSan) and runs the unit tests (ctest) in each, the
# unit tests under valgrind, the end-to-end tests against real hosts (pytest
# with Debian's python3), and the browser tests (Debian's chromium driven by
# playwright-core), and the controls (tests/controls.sh: each listed test must fail with its
# switch on). Set MEMTRIM_QUICK=1 for the plain build, its unit tests, the controls, the
# end-to-end files tests/e2e/slow.txt does not list and the browser tests (under 10 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
passed=0
failed=0
failures=""

# Each stage's wall time and the load average before and after it, for docs/benchmarks.md.
stage() { # stage NAME COMMAND...
  local name=$1 t0=$SECONDS load0 result=passed; shift
  load0=$(cut -d' ' -f1 /proc/loadavg)
  echo "=== $name ($(date -u +%H:%M:%S) UTC)"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures="$failures $name"; result=FAILED; fi
  echo "=== $name: $result in $((SECONDS - t0)) s (load $load0 -> $(cut -d' ' -f1 /proc/loadavg))"
}

# The options the suite needs are forced whatever DIR's cache holds (examples/run-demo.sh,
# for one, configures build/ without the tests).
build() { # build DIR [cmake args]
  local dir=$1; shift
  cmake -S "$root" -B "$root/$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRIM_TESTS=ON \
    -DMEMTRIM_SANITIZE= -DMEMTRIM_FAULT_INJECT=OFF "$@" >/dev/null &&
    cmake --build "$root/$dir" -j"$jobs" >/dev/null
}

# tests/unit/tests.txt names every unit test and the builds it runs in. The unit stage of a
# build runs exactly its names (ctest -R) and fails when tests/unit has a test_*.c or ctest
# knows a test the list does not name, when ctest does not know a name, and when ctest's
# results (its JUnit file) do not hold each name once, passed or skipped. Each skipped case
# is printed with its reason; a skip tests/skips.txt does not list for the build fails its
# binary (tests/unit/harness.h), so ctest fails.
unit_names() { # unit_names WHERE: the list's names for that build (plain, asan, tsan, valgrind)
  awk -v w="$1" '$0 !~ /^#/ && NF >= 2 { n = split($2, a, ",")
    for (i = 1; i <= n; i++) if (a[i] == w) print $1 }' "$root/tests/unit/tests.txt"
}
unit() { # unit DIR WHERE
  local dir=$1 where=$2 rc=0 want listed known n f
  want=$(unit_names "$where")
  listed=$(awk '$0 !~ /^#/ && NF >= 2 { print $1 }' "$root/tests/unit/tests.txt")
  known=$(ctest --test-dir "$root/$dir" -N | sed -n 's/^ *Test *#[0-9]*: //p')
  for f in "$root"/tests/unit/test_*.c; do
    n=$(basename "$f" .c)
    grep -qxF -- "$n" <<<"$listed" || { echo "unit: tests/unit/$n.c is not in tests/unit/tests.txt"; rc=1; }
  done
  for n in $known; do
    grep -qxF -- "$n" <<<"$listed" || { echo "unit: ctest knows $n, which tests/unit/tests.txt does not name"; rc=1; }
  done
  for n in $want; do
    grep -qxF -- "$n" <<<"$known" || { echo "unit: ctest in $dir does not know $n"; rc=1; }
  done
  rm -f "$root/$dir/unit-junit.xml"
  ${UNIT_RUNNER:-} ctest --test-dir "$root/$dir" --no-tests=error --output-on-failure \
    -R "^($(echo $want | tr ' ' '|'))\$" --output-junit "$root/$dir/unit-junit.xml" || rc=1
  grep -h '^SKIP ' "$root/$dir/Testing/Temporary/LastTest.log" 2>/dev/null | sed 's/^/  skipped: /'
  /usr/bin/python3 - "$root/$dir/unit-junit.xml" $want <<'PY' || rc=1
import sys, xml.etree.ElementTree as ET
want = sys.argv[2:]
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (OSError, ET.ParseError) as e:
    sys.exit(f"unit: no results from ctest ({e})")
seen = {}
for c in cases:
    skipped = c.find("skipped") is not None or c.get("status") in ("notrun", "disabled")
    seen.setdefault(c.get("name"), []).append(
        "skipped" if skipped else "passed" if c.get("status") == "run" else "failed")
bad = [f"{n}: {seen.get(n, ['not run'])}" for n in want if len(seen.get(n, [])) != 1]
bad += [f"{n}: not in the list" for n in seen if n not in want]
counts = {k: sum(v == [k] for v in seen.values()) for k in ("passed", "skipped", "failed")}
print(f"unit: {len(want)} expected, {counts['passed']} passed, {counts['skipped']} skipped"
      f" (listed skips), {counts['failed']} failed")
if bad:
    sys.exit("unit: results do not count each expected test once: " + "; ".join(bad))
PY
  return $rc
}

unit_asan() {
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 unit build-asan asan
}

unit_tsan() { # what tests/unit/tests.txt leaves out of TSan, with its reason, is not run
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" UNIT_RUNNER="setarch -R" \
    unit build-tsan tsan
}

fuzz() { # each parser's libFuzzer harness for a short while (longer: tests/fuzz/run.sh)
  local log=$root/build/fuzz.log want ran
  want=$(find "$root/tests/fuzz" -maxdepth 1 -name 'fuzz_*.c' | wc -l)
  if ! FUZZ_SECONDS=${FUZZ_SECONDS:-20} tests/fuzz/run.sh >"$log" 2>&1; then
    tail -n 60 "$log"
    return 1
  fi
  grep -E '^Done [0-9]+ runs' "$log"
  ran=$(grep -cE '^Done [1-9][0-9]* runs' "$log")
  if [ "$ran" -ne "$want" ]; then
    echo "fuzz: $ran of $want fuzzers reported runs (see $log)"
    return 1
  fi
}

# Every unit binary tests/unit/tests.txt lists for valgrind runs under it, MEMTRIM_VALGRIND_JOBS
# at a time (default: the cores), and test_cli_valgrind (ctest's valgrind label: the memtrim
# command under valgrind) beside them; a binary left out is listed there with its measured
# reason. 77 is a binary whose every skip tests/skips.txt lists for valgrind (an unlisted one
# exits 1, harness.h). Each run is bounded (MEMTRIM_VALGRIND_TIMEOUT seconds, default 900,
# then SIGKILL 30 s later): a guard against a hang, far above what a binary takes under
# valgrind, never a timing check.
valgrind_timeout=${MEMTRIM_VALGRIND_TIMEOUT:-900}
valgrind_one() { # valgrind_one NAME: its exit code and seconds to build/NAME.valgrind.rc
  local t=$1 s=$SECONDS code
  if [ "$t" = test_cli_valgrind ]; then
    timeout --kill-after=30 "$valgrind_timeout" ctest --test-dir build -L valgrind \
      --no-tests=error --output-on-failure >"build/$t.valgrind.log" 2>&1
  else
    timeout --kill-after=30 "$valgrind_timeout" \
      valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
      "build/$t" >"build/$t.valgrind.log" 2>&1
  fi
  code=$?
  echo "$code $((SECONDS - s))" >"build/$t.valgrind.rc"
}
valgrind_unit() {
  local t rc=0 ran=0 code secs running=0 jobs=${MEMTRIM_VALGRIND_JOBS:-$jobs} want
  want=$(unit_names valgrind)
  # the longest first (test_cli_valgrind 198 s, test_cli_bpfeval 227 s at load 13-19), so
  # the pool ends together
  want="$(grep -xF -e test_cli_valgrind -e test_cli_bpfeval <<<"$want")
$(grep -vxF -e test_cli_valgrind -e test_cli_bpfeval <<<"$want")"
  for t in $want; do
    rm -f "build/$t.valgrind.rc"
    if [ "$t" != test_cli_valgrind ] && [ ! -x "build/$t" ]; then
      echo "valgrind: build/$t is missing"; rc=1; continue
    fi
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
    valgrind_one "$t" &
    running=$((running + 1))
  done
  wait
  for t in $want; do
    [ -f "build/$t.valgrind.rc" ] || continue
    read -r code secs <"build/$t.valgrind.rc"
    ran=$((ran + 1))
    case $code in
      0) ;;
      124|137) echo "valgrind: $t still ran after ${valgrind_timeout} s (a hang?), stopped"
         tail -n 40 "build/$t.valgrind.log"; rc=1 ;;
      77) grep -h '^SKIP ' "build/$t.valgrind.log" | sed "s/^/  skipped ($t): /" ;;
      *) echo "valgrind: $t failed ($code, $secs s)"; tail -n 40 "build/$t.valgrind.log"; rc=1 ;;
    esac
  done
  echo "valgrind: $ran of $(wc -w <<<"$want") binaries ran ($jobs at a time)"
  [ "$ran" -eq "$(wc -w <<<"$want")" ] || rc=1
  return $rc
}

e2e() { # -rs: every skipped test is listed with its reason; conftest.py fails the session
  # on a skip tests/skips.txt does not list, and when no test passed. The survival cells'
  # pairs (marker survival) are the survival stage's.
  # MEMTRIM_QUICK=1 leaves out the files tests/e2e/slow.txt lists (each with its time).
  [ -d tests/e2e ] || { echo "e2e: tests/e2e is missing"; return 1; }
  local f ignore=()
  if [ -n "${MEMTRIM_QUICK:-}" ]; then
    for f in $(awk '$0 !~ /^#/ && NF { print $1 }' tests/e2e/slow.txt); do
      [ -f "$f" ] || { echo "e2e: tests/e2e/slow.txt names $f, which is missing"; return 1; }
      ignore+=("--ignore=$f")
    done
    echo "e2e (QUICK): ${#ignore[@]} slow files left out (tests/e2e/slow.txt; the full run has them)"
  fi
  MEMTRIM_BUILD_DIR="$root/build" /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider \
    -m "not survival" "${ignore[@]}" tests/e2e
}

# The cgroup v2 tests (tests/vm) on Debian's own kernel booted under qemu (TCG) with this
# machine's / shared: each memtrim case beside its control, which must be OOM-killed.
vm_cgroup2() {
  [ -x tests/vm/run.sh ] || { echo "vm-cgroup2: tests/vm/run.sh is missing"; return 1; }
  MEMTRIM_BUILD_DIR="$root/build" tests/vm/run.sh -- /usr/bin/python3 -m pytest -q -rs \
    -p no:cacheprovider -m "not survival" tests/vm
}

# The survival cells' counted pairs (marker survival: tests/e2e on this machine's cgroup v1,
# tests/vm on the v2 kernel), with survival_util's floors: the reference finishes every
# worker or its pair is void, the group every worker in each counted pair, no pair where
# both lose all, the load beside each pair. A loaded machine cannot hold them (the group lost
# a worker at load 11-13 where the reference finished all), so the stage is a measurement:
# it prints each cell's pairs and verdict and fails only when its runner could not run them
# (no cell collected, a usage error, the VM not booting), never on a cell's verdict.
survival() {
  local rc=0 code
  echo "survival: load $(cut -d' ' -f1-3 /proc/loadavg) (measured, not gating)"
  MEMTRIM_BUILD_DIR="$root/build" /usr/bin/python3 -m pytest -q -s -rs -p no:cacheprovider \
    -m survival tests/e2e 2>&1 | grep -E 'pair [0-9]+:|counted pairs|void cell|passed|failed|Error'
  code=${PIPESTATUS[0]}
  case $code in 0) echo "survival (e2e): every cell held" ;;
    1) echo "survival (e2e): NOT HELD (a cell failed or was void; not gating)" ;;
    *) echo "survival (e2e): pytest could not run the cells ($code)"; rc=1 ;; esac
  MEMTRIM_BUILD_DIR="$root/build" tests/vm/run.sh -- /usr/bin/python3 -m pytest -q -s -rs \
    -p no:cacheprovider -m survival tests/vm 2>&1 | grep -E 'pair [0-9]+:|counted pairs|void cell|passed|failed|Error'
  code=${PIPESTATUS[0]}
  case $code in 0) echo "survival (vm): every cell held" ;;
    1) echo "survival (vm): NOT HELD (a cell failed or was void; not gating)" ;;
    *) echo "survival (vm): the VM or pytest could not run the cells ($code)"; rc=1 ;; esac
  echo "survival: load $(cut -d' ' -f1-3 /proc/loadavg)"
  return $rc
}

# The browser stage knows its number of checks (EXPECTED_CHECKS in test_dashboard.mjs, which
# fails a run that makes another number): all of them passed, none failed.
browser() {
  [ -x tests/browser/run.sh ] || { echo "browser: tests/browser/run.sh is missing"; return 1; }
  local want log=$root/build/browser.log rc=0
  want=$(sed -n 's/^const EXPECTED_CHECKS = \([0-9][0-9]*\);.*/\1/p' tests/browser/test_dashboard.mjs)
  MEMTRIM_BUILD_DIR="$root/build" tests/browser/run.sh 2>&1 | tee "$log" || rc=1
  if [ -z "$want" ] || ! grep -qx "$want passed, 0 failed ($want expected)" "$log"; then
    echo "browser: not ${want:-the expected number of} checks passed (see $log)"; rc=1
  fi
  return $rc
}

tests/install-deps.sh all || exit 1
stage build build build
stage unit unit build plain
# each test of tests/controls.txt against its switch (build-controls): it must fail
stage controls tests/controls.sh
if [ -z "${MEMTRIM_QUICK:-}" ]; then
  # with allocation-failure injection: ctest runs fault_inject there (every allocation of
  # memtrim's start, stop, configuration and requests failed in turn, LeakSanitizer after)
  stage build-asan build build-asan -DMEMTRIM_SANITIZE=address -DMEMTRIM_FAULT_INJECT=ON
  stage unit-asan unit_asan
  stage build-tsan build build-tsan -DMEMTRIM_SANITIZE=thread
  stage unit-tsan unit_tsan
  stage valgrind valgrind_unit
  stage fuzz fuzz
  # 2 min: 64 pollers, trims and a slowloris client against the ASan demo host, with
  # baseline windows around it for the host's throughput (tests/soak/soak.py)
  stage soak tests/soak/run.sh "$root/build-asan"
fi
stage e2e e2e
if [ -z "${MEMTRIM_QUICK:-}" ]; then
  stage vm-cgroup2 vm_cgroup2
  stage survival survival
fi
stage browser browser

echo
[ -n "$failures" ] && echo "failed stages:$failures"
echo "stages: $passed passed, $failed failed, in $((SECONDS / 60)) min $((SECONDS % 60)) s (load now $(cut -d' ' -f1-3 /proc/loadavg))"
[ "$failed" = 0 ]
