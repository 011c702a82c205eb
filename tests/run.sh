#!/usr/bin/env bash
# The whole test suite: installs what it needs (as root), builds memtrim three
# ways (plain, ASan+UBSan, TSan) and runs the unit tests (ctest) in each, the
# unit tests under valgrind, the fuzzers, the soak, the end-to-end tests against real hosts
# (pytest with Debian's python3), the cgroup v2 tests in a VM (tests/vm), the browser tests
# (Debian's chromium driven by playwright-core), and the controls (tests/controls.sh: each
# listed test must fail with its switch on).
# After the plain build and its unit tests the stages run in four lanes side by side (e2e then
# browser; controls then fuzz; the VM; the ASan build, its unit tests and the soak, the TSan
# build and its unit tests, valgrind), each lane's output printed whole when it ends; each
# stage keeps its "=== NAME: passed/FAILED in N s" line, and the run fails when any stage fails
# or does not run. All four at the suite's own priority: the batch lanes 10 nice levels below
# the timed ones were tried (83bcdfe) and, beside two busy loops at nice 0, starved once the
# timed lanes ended (build-asan 806 s against 142 quiet: the run passed its 40 minutes), and
# the e2e cells that lost under load lost there too (docs/benchmarks.md, "The test suite").
# MEMTRIM_LANES=one runs the lanes one after another instead, their output as it comes.
# MEMTRIM_QUICK=1: the plain build, its unit tests, the controls, the end-to-end files
# tests/e2e/slow.txt does not list and the browser tests (under 10 minutes).
# MEMTRIM_SURVIVAL=1: also the survival cells' measurement (bench/survival.sh, about 13 min,
# reports each cell's pairs and verdict, fails only when it cannot run them).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)

# Each stage's wall time and the load average before and after it, for docs/benchmarks.md.
# Its result also goes to build/lanes/results (one line a stage): stages run in lanes
# (below), subshells whose counts the main shell does not see.
lanes=$root/build/lanes
rm -rf "$lanes" && mkdir -p "$lanes"
stage() { # stage NAME COMMAND...
  local name=$1 t0=$SECONDS load0 result=passed; shift
  load0=$(cut -d' ' -f1 /proc/loadavg)
  echo "=== $name ($(date -u +%H:%M:%S) UTC)"
  if ! "$@"; then result=FAILED; fi
  echo "$name $result" >>"$lanes/results"
  echo "=== $name: $result in $((SECONDS - t0)) s (load $load0 -> $(cut -d' ' -f1 /proc/loadavg))"
  [ "$result" = passed ]
}

# A lane: stages one after another in the background, beside the other lanes, its output
# kept in build/lanes/NAME.log and printed whole when the lane ends (so no two stages'
# lines interleave). The stages of different lanes share nothing they could collide on:
# each build has its own directory, the tests their own cgroups, ports (0, or the first
# free one) and temporary directories, the VM its own kernel.
lane_names=()
lane() { # lane NAME FUNCTION: its exit code to build/lanes/NAME.rc as it ends
  local name=$1; shift
  echo "--- lane $name starts ($(date -u +%H:%M:%S) UTC): $*"
  if [ "${MEMTRIM_LANES:-all}" = one ]; then # one after another, its output as it comes
    { "$@"; echo $? >"$lanes/$name.rc"; } </dev/null 2>&1 | tee "$lanes/$name.log"
    echo "--- lane $name ended ($(date -u +%H:%M:%S) UTC)"
    return
  fi
  { "$@"; echo $? >"$lanes/$name.rc"; } >"$lanes/$name.log" 2>&1 </dev/null &
  lane_names+=("$name")
}
join_lanes() { # prints each lane's output as it ends; a lane that died without its .rc fails
  local left=("${lane_names[@]}") rest n
  while [ "${#left[@]}" -gt 0 ]; do
    wait -n 2>/dev/null # a lane ended (at once when none is left)
    rest=()
    for n in "${left[@]}"; do
      if [ -f "$lanes/$n.rc" ]; then
        echo "--- lane $n ended ($(date -u +%H:%M:%S) UTC), its output:"
        cat "$lanes/$n.log"
        echo "--- lane $n: end of its output"
      else rest+=("$n"); fi
    done
    left=("${rest[@]}")
    if [ "${#left[@]}" -gt 0 ] && [ -z "$(jobs -pr)" ]; then
      for n in "${left[@]}"; do
        echo "--- lane $n died without its result, its output:"; cat "$lanes/$n.log"
        echo "$n-lane died" >>"$lanes/results"
      done
      left=()
    fi
  done
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
  # pairs (marker survival) are bench/survival.sh's.
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

# The cgroup v2 tests (tests/vm) on Debian's own kernel booted under qemu (TCG: this
# machine's KVM cannot boot it, tests/vm/run.sh) with this machine's / shared: each memtrim
# case beside its control, which must be OOM-killed. The survival pairs are bench/survival.sh's.
vm_cgroup2() {
  [ -x tests/vm/run.sh ] || { echo "vm-cgroup2: tests/vm/run.sh is missing"; return 1; }
  MEMTRIM_BUILD_DIR="$root/build" tests/vm/run.sh -- /usr/bin/python3 -m pytest -q -rs \
    -p no:cacheprovider -m "not survival" tests/vm
}

# The survival cells' counted pairs are a measurement, not a gate: bench/survival.sh (about
# 13 min quiet), run last here only when MEMTRIM_SURVIVAL=1.

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

# Lanes, after the plain build and its unit tests (every other stage needs them or nothing):
# on 2 cores the CPU-bound stages (builds, valgrind, fuzzers, controls) fill the time the
# e2e tests and the VM spend waiting on their workloads. Each lane's stages run in order.
lane_e2e() { stage e2e e2e; stage browser browser; }
lane_vm() { stage vm-cgroup2 vm_cgroup2; }
lane_controls() { # each test of tests/controls.txt against its switch (build-controls): it must fail
  stage controls tests/controls.sh
  [ -n "${MEMTRIM_QUICK:-}" ] || stage fuzz fuzz
}
lane_sanitizers() {
  # with allocation-failure injection: ctest runs fault_inject there (every allocation of
  # memtrim's start, stop, configuration and requests failed in turn, LeakSanitizer after)
  if stage build-asan build build-asan -DMEMTRIM_SANITIZE=address -DMEMTRIM_FAULT_INJECT=ON; then
    stage unit-asan unit_asan
    # 2 min: 64 pollers, trims and a slowloris client against the ASan demo host, with
    # baseline windows around it for the host's throughput (tests/soak/soak.py)
    stage soak tests/soak/run.sh "$root/build-asan"
  fi
  stage build-tsan build build-tsan -DMEMTRIM_SANITIZE=thread && stage unit-tsan unit_tsan
  stage valgrind valgrind_unit
}

tests/install-deps.sh all || exit 1
if stage build build build; then
  stage unit unit build plain
  lane e2e lane_e2e
  lane controls lane_controls
  if [ -z "${MEMTRIM_QUICK:-}" ]; then
    lane vm lane_vm
    lane sanitizers lane_sanitizers
  fi
  join_lanes
fi
if [ -n "${MEMTRIM_SURVIVAL:-}" ]; then
  stage survival bench/survival.sh "$root/build"
fi

# every stage of this mode reports once; one a failed stage before it left out (or a lane
# that died) counts as failed
want="build unit e2e browser controls"
[ -n "${MEMTRIM_QUICK:-}" ] || want="$want fuzz vm-cgroup2 build-asan unit-asan soak build-tsan unit-tsan valgrind"
[ -z "${MEMTRIM_SURVIVAL:-}" ] || want="$want survival"
for n in $want; do
  grep -q "^$n " "$lanes/results" || echo "$n not-run" >>"$lanes/results"
done
passed=$(grep -c ' passed$' "$lanes/results")
failed=$(grep -vc ' passed$' "$lanes/results")
failures=$(grep -v ' passed$' "$lanes/results" | tr '\n' ',' | sed 's/,$//; s/,/, /g')
echo
[ -n "$failures" ] && echo "failed stages: $failures"
echo "stages: $passed passed, $failed failed, in $((SECONDS / 60)) min $((SECONDS % 60)) s (load now $(cut -d' ' -f1-3 /proc/loadavg))"
[ "$failed" = 0 ]
