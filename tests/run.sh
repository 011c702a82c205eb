#!/usr/bin/env bash
# The whole test suite: installs what it needs (as root), builds memtrim three
# ways (plain, ASan+UBSan, TSan) and runs the unit tests (ctest) in each, the
# unit tests under valgrind, the end-to-end tests against real hosts (pytest
# with Debian's python3), and the browser tests (Debian's chromium driven by
# playwright-core). Set MEMTRIM_QUICK=1 to run the plain build's stages only.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
passed=0
failed=0
failures=""

stage() { # stage NAME COMMAND...
  local name=$1; shift
  echo "=== $name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures="$failures $name"; fi
}

build() { # build DIR [cmake args]
  local dir=$1; shift
  cmake -S "$root" -B "$root/$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null &&
    cmake --build "$root/$dir" -j"$jobs" >/dev/null
}

unit() { # unit DIR [ctest args]
  local dir=$1; shift
  ctest --test-dir "$root/$dir" --output-on-failure "$@"
}

unit_asan() {
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 unit build-asan
}

fuzz() { # each parser's libFuzzer harness for a short while (longer: tests/fuzz/run.sh)
  local log=$root/build/fuzz.log
  if FUZZ_SECONDS=${FUZZ_SECONDS:-20} tests/fuzz/run.sh >"$log" 2>&1; then
    grep -E '^Done [0-9]+ runs' "$log"
  else
    tail -n 60 "$log"
    return 1
  fi
}

valgrind_unit() {
  local t rc=0
  for t in test_config test_probe test_trim test_housekeeper test_abi test_db test_query \
    test_server_dispatch; do
    [ -x "build/$t" ] || continue
    valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
      "build/$t" >/dev/null || rc=1
  done
  return $rc
}

e2e() {
  [ -d tests/e2e ] || return 0
  MEMTRIM_BUILD_DIR="$root/build" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/e2e
}

browser() {
  [ -x tests/browser/run.sh ] || return 0
  MEMTRIM_BUILD_DIR="$root/build" tests/browser/run.sh
}

tests/install-deps.sh all || exit 1
stage build build build
stage unit unit build
if [ -z "${MEMTRIM_QUICK:-}" ]; then
  stage build-asan build build-asan -DMEMTRIM_SANITIZE=address
  stage unit-asan unit_asan
  stage build-tsan build build-tsan -DMEMTRIM_SANITIZE=thread
  stage unit-tsan env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" setarch -R \
    ctest --test-dir "$root/build-tsan" --output-on-failure -E 'db_faults'
  stage valgrind valgrind_unit
  stage fuzz fuzz
fi
stage e2e e2e
stage browser browser

echo
[ -n "$failures" ] && echo "failed stages:$failures"
echo "stages: $passed passed, $failed failed"
[ "$failed" = 0 ]
