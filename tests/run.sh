#!/usr/bin/env bash
# The whole test suite: installs what it needs (as root), builds memtrim three
# ways (plain, ASan+UBSan, TSan) and runs the unit tests (ctest) in each, the
# unit tests under valgrind, the end-to-end tests against real hosts (pytest
# with Debian's python3), and the browser tests (Debian's chromium driven by
# playwright-core), and the controls (tests/controls.sh: each listed test must fail with its
# switch on). Set MEMTRIM_QUICK=1 to run the plain build's stages only.
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

# ctest over every tests/unit/test_*.c: fails when it finds fewer tests than there are
# files (or none), prints each skipped case with its reason. A skip that tests/skips.txt
# does not list for the build fails its binary (tests/unit/harness.h), so ctest fails.
unit() { # unit DIR [ctest args]
  local dir=$1; shift
  local want have rc=0
  want=$(find "$root/tests/unit" -maxdepth 1 -name 'test_*.c' | wc -l)
  have=$(ctest --test-dir "$root/$dir" -N | sed -n 's/^Total Tests: //p')
  # -LE valgrind: what runs under valgrind (test_cli_valgrind) is the valgrind stage's
  ${UNIT_RUNNER:-} ctest --test-dir "$root/$dir" --no-tests=error --output-on-failure -LE valgrind \
    "$@" || rc=1
  grep -h '^SKIP ' "$root/$dir/Testing/Temporary/LastTest.log" 2>/dev/null | sed 's/^/  skipped: /'
  if [ "${have:-0}" -lt "$want" ]; then
    echo "unit: ctest knows ${have:-0} tests in $dir, tests/unit has $want"
    rc=1
  fi
  return $rc
}

unit_asan() {
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 unit build-asan
}

unit_tsan() { # test_db_faults is single-threaded (nothing for TSan); it runs in the other builds
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" UNIT_RUNNER="setarch -R" \
    unit build-tsan -E 'db_faults'
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

# Each of these must exist and run under valgrind. 77 is a binary whose every skip
# tests/skips.txt lists for valgrind (an unlisted one exits 1, harness.h). Each run is
# bounded (MEMTRIM_VALGRIND_TIMEOUT seconds, default 900, then SIGKILL 30 s later): a
# guard against a hang, far above what a binary takes under valgrind, never a timing check.
valgrind_timeout=${MEMTRIM_VALGRIND_TIMEOUT:-900}
valgrind_unit() {
  local t rc=0 ran=0 code
  local tests="test_config test_probe test_trim test_housekeeper test_pressure test_abi test_db test_query
    test_server_dispatch test_policy test_store"
  for t in $tests; do
    if [ ! -x "build/$t" ]; then
      echo "valgrind: build/$t is missing"
      rc=1
      continue
    fi
    timeout --kill-after=30 "$valgrind_timeout" \
      valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
      "build/$t" >"build/$t.valgrind.log" 2>&1
    code=$?
    case $code in
      0) ;;
      124|137) echo "valgrind: $t still ran after ${valgrind_timeout} s (a hang?), stopped"
         tail -n 40 "build/$t.valgrind.log"; rc=1 ;;
      77) grep -h '^SKIP ' "build/$t.valgrind.log" | sed "s/^/  skipped ($t): /" ;;
      *) echo "valgrind: $t failed ($code)"; tail -n 40 "build/$t.valgrind.log"; rc=1 ;;
    esac
    ran=$((ran + 1))
  done
  # ctest's valgrind-labelled cases (the memtrim command under valgrind, test_cli_valgrind)
  if ! timeout --kill-after=30 "$valgrind_timeout" ctest --test-dir build -L valgrind \
      --no-tests=error --output-on-failure >build/ctest-valgrind.log 2>&1; then
    echo "valgrind: ctest -L valgrind failed"; tail -n 60 build/ctest-valgrind.log; rc=1
  fi
  grep -E '^[0-9]+% tests passed' build/ctest-valgrind.log
  ran=$((ran + 1))
  echo "valgrind: $ran binaries ran"
  return $rc
}

e2e() { # -rs: every skipped test is listed with its reason; conftest.py fails the session
  # on a skip tests/skips.txt does not list, and when no test passed
  [ -d tests/e2e ] || { echo "e2e: tests/e2e is missing"; return 1; }
  MEMTRIM_BUILD_DIR="$root/build" /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider tests/e2e
}

# The cgroup v2 tests (tests/vm) on Debian's own kernel booted under qemu (TCG) with this
# machine's / shared: each memtrim case beside its control, which must be OOM-killed.
vm_cgroup2() {
  [ -x tests/vm/run.sh ] || { echo "vm-cgroup2: tests/vm/run.sh is missing"; return 1; }
  MEMTRIM_BUILD_DIR="$root/build" tests/vm/run.sh -- /usr/bin/python3 -m pytest -q -rs \
    -p no:cacheprovider tests/vm
}

browser() {
  [ -x tests/browser/run.sh ] || { echo "browser: tests/browser/run.sh is missing"; return 1; }
  MEMTRIM_BUILD_DIR="$root/build" tests/browser/run.sh
}

tests/install-deps.sh all || exit 1
stage build build build
stage unit unit build
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
stage vm-cgroup2 vm_cgroup2
stage browser browser

echo
[ -n "$failures" ] && echo "failed stages:$failures"
echo "stages: $passed passed, $failed failed"
[ "$failed" = 0 ]
