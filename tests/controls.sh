#!/usr/bin/env bash
# The controls stage (tests/controls.txt): every test named there must FAIL when its
# switch brings the old defect back. Builds build-controls with -DMEMTRIM_CONTROLS=ON once,
# then runs the listed controls, MEMTRIM_CONTROLS_JOBS at a time (default: the cores).
#   tests/controls.sh            the whole list; fails when fewer than the floor are listed
#   tests/controls.sh NAME...    only those (no floor)
# A control fails the stage when its test passes (0, or 77: every case skipped), when it
# runs out of time (MEMTRIM_CONTROL_TIMEOUT s, default 300: a hang guard, not a timing
# check; a line that boots the VM, tests/vm/run.sh, has that script's own guard, 3600 s,
# since under TCG beside the suite's other lanes a boot and its case took over 300 s), when its command cannot run (126, 127), when its name appears nowhere in the
# code as a quoted switch ("NAME" or 'NAME': mt_control or a test's own hook), or when a
# line is listed twice. A switch may be listed on several lines, one a test it must break
# (NAME#2... in the output). Each control's output: build-controls/controls/NAME.log.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=$root/build-controls
list=$root/tests/controls.txt
# The floor: the number of controls listed when it was last raised. Raise it with each
# control added; a line lost in a merge then fails the stage instead of going unseen.
floor=108
jobs=${MEMTRIM_CONTROLS_JOBS:-$(nproc)}
limit=${MEMTRIM_CONTROL_TIMEOUT:-300}

t0=$(date +%s)
echo "controls: load at start $(cut -d' ' -f1-3 /proc/loadavg)"
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRIM_TESTS=ON \
  -DMEMTRIM_SANITIZE= -DMEMTRIM_FAULT_INJECT=OFF -DMEMTRIM_CONTROLS=ON >/dev/null &&
  cmake --build "$dir" -j"$(nproc)" >/dev/null || { echo "controls: build failed"; exit 1; }
echo "controls: build-controls built in $(( $(date +%s) - t0 )) s"

# ids: NAME, or NAME#2, NAME#3... for a switch listed again with another test's command
names=() ids=() cmds=() bad=0
declare -A seen=() lines=()
while read -r name cmd; do
  case $name in ''|'#'*) continue ;; esac
  seen[$name]=$(( ${seen[$name]:-0} + 1 ))
  id=$name; [ "${seen[$name]}" -gt 1 ] && id="$name#${seen[$name]}"
  if [ -n "${lines[$name $cmd]:-}" ]; then
    echo "control $id: the same line twice in tests/controls.txt"; bad=$((bad + 1)); continue
  fi
  lines[$name $cmd]=1
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF -- "$name"; then continue; fi
  if [ -z "$cmd" ]; then echo "control $id: no command"; bad=$((bad + 1)); continue; fi
  # the switch must exist: a name no code asks for would "fail" for any other reason
  if ! grep -rqE --include='*.[ch]' --include='*.py' --include='*.mjs' --include='*.sh' \
      --include='*.cmake' \
      -- "[\"']$name[\"']" common core server api cli plugin db examples tests bench agent \
      cmake 2>/dev/null; then
    echo "control $id: no code names this switch (\"$name\")"; bad=$((bad + 1)); continue
  fi
  names+=("$name") ids+=("$id") cmds+=("$cmd")
done < "$list"
for want in "$@"; do
  [ -n "${seen[$want]:-}" ] || { echo "control $want: not in tests/controls.txt"; bad=$((bad + 1)); }
done

rm -rf "$dir/controls" && mkdir -p "$dir/controls"
run_one() { # run_one NAME ID COMMAND: its exit code and seconds to controls/ID.rc
  local name=$1 id=$2 cmd=$3 s=$SECONDS code guard=$limit
  case $cmd in tests/vm/run.sh*) guard=3600 ;; esac
  MEMTRIM_CONTROL=$name MEMTRIM_BUILD_DIR=$dir \
    timeout --kill-after=30 "$guard" bash -c "$cmd" >"$dir/controls/$id.log" 2>&1 </dev/null
  code=$?
  echo "$code $((SECONDS - s))" >"$dir/controls/$id.rc"
}
running=0
for i in "${!names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  run_one "${names[$i]}" "${ids[$i]}" "${cmds[$i]}" 2>/dev/null & # (bash's "Segmentation fault" notes)
  running=$((running + 1))
done
wait

ran=0 good=0
for name in "${ids[@]}"; do
  read -r code secs <"$dir/controls/$name.rc" || code=missing secs=?
  ran=$((ran + 1))
  case $code in
    0|77) echo "control $name: its test PASSED (exit $code, ${secs} s) with the defect back: it cannot see it"
          tail -n 20 "$dir/controls/$name.log"; bad=$((bad + 1)) ;;
    124|137) echo "control $name: its test ran out of time (exit $code, ${secs} s): a hang, not a failure"
          tail -n 20 "$dir/controls/$name.log"; bad=$((bad + 1)) ;;
    126|127|missing) echo "control $name: its command did not run (exit $code)"
          tail -n 20 "$dir/controls/$name.log"; bad=$((bad + 1)) ;;
    *) echo "control $name: fails as it must (exit $code, ${secs} s)"; good=$((good + 1)) ;;
  esac
done
if [ $# -eq 0 ] && [ "$ran" -lt "$floor" ]; then
  echo "controls: $ran listed, fewer than the floor of $floor (a control lost?)"; bad=$((bad + 1))
fi
echo "controls: $ran run ($jobs at a time), $good failed as they must, $bad problems, in" \
  "$(( $(date +%s) - t0 )) s;" \
  "load at end $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$ran" -gt 0 ] && [ "$bad" -eq 0 ]
