#!/usr/bin/env bash
# The controls stage (tests/controls.txt): every test named there must FAIL when its
# switch brings the old defect back. Builds build-controls with -DMEMTRIM_CONTROLS=ON.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=$root/build-controls
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRIM_TESTS=ON \
  -DMEMTRIM_SANITIZE= -DMEMTRIM_FAULT_INJECT=OFF -DMEMTRIM_CONTROLS=ON >/dev/null &&
  cmake --build "$dir" -j"$(nproc)" >/dev/null || { echo "controls: build failed"; exit 1; }
ran=0 bad=0
mkdir -p "$dir/controls"
while read -r name cmd; do
  case $name in ''|'#'*) continue ;; esac
  log=$dir/controls/$name.log
  MEMTRIM_CONTROL=$name MEMTRIM_BUILD_DIR=$dir timeout --kill-after=30 900 bash -c "$cmd" >"$log" 2>&1
  code=$?
  ran=$((ran + 1))
  case $code in
    0|77) echo "control $name: its test PASSED (exit $code) with the defect back: it cannot see it"
          tail -n 20 "$log"; bad=$((bad + 1)) ;;
    124|137) echo "control $name: its test ran out of time (exit $code): a hang, not a failure"
          tail -n 20 "$log"; bad=$((bad + 1)) ;;
    *) echo "control $name: fails as it must (exit $code)" ;;
  esac
done < tests/controls.txt
echo "controls: $ran run, $((ran - bad)) failed as they must, $bad did not"
[ "$ran" -gt 0 ] && [ "$bad" -eq 0 ]
