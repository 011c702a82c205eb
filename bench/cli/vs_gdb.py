#!/usr/bin/python3
"""memtrim trim PID against gdb -batch -p PID -ex 'call (int) malloc_trim(0)', side by side.

Each run starts a fresh memtrim-cli-target (tests/unit/cli_target.c) whose holder threads
leave about 370 MB of freed heap in glibc's arenas and whose churn threads malloc, check and
free blocks in a loop and timestamp every iteration; then one of: memtrim, gdb, nothing (the
machine's own noise, over as long a window as the round's memtrim run), the arms in turn run
by run. Measured per run: RSS released; the churn threads' longest gap while the tool ran,
and where it began (ms after the tool started); the tool's wall time; the 1-minute load.
memtrim also reports the taken thread's stop (from its seize until it is back in its system
call: thread_stopped_seconds) and its own threads' life: at most the stop plus
call_threads_seconds (from that release until both of memtrim's threads have exited; the raw
thread is cloned during the stop).

With --raise N the memtrim arm raises its glibc thread N nice levels for its call
(docs/command.md, "The call's weight"; the command's default is 0); the arm "unraised" is the
same command with --raise 0, for an A/B in turn in one run: --arms memtrim,unraised,gdb,none
--raise 10. Each run shows the nice its call ran at.

The stall a tool causes: for gdb, the churners' longest gap (gdb stops every thread from its
attach to its detach, and the churners run during the call itself); for memtrim, the larger
of the churners' longest gap and the taken thread's stop (the one thread it stops).

usage: bench/cli/vs_gdb.py BUILD_DIR [--runs N] [--threads 8,64] [--arms memtrim,unraised,gdb,none]
                           [--raise N]
                           [--check-ratio R]
--check-ratio R: exit 1 when, at any thread count, memtrim's median stall is above R times
gdb's or it released less than 0.95 of what gdb released; 77 when gdb never called at a thread
count (no ratio: nothing judged); 2 when a run failed (memtrim's exit, a corrupt block); 127
without gdb. tests/controls.txt runs it with the call held on the taken thread
(cmd-call-on-taken-thread), where it must exit 1.
A gdb run that cannot call (Debian 12's gdb 13.1 on a CPU with AMX: "Couldn't write extended
state status: Bad address") is counted as a gdb failure and listed, not measured.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback

FREED_MB = 370
MEMTRIM_ARMS = ("memtrim", "unraised")  # the same command, its thread raised or not
RAISE = []  # --raise N for the memtrim arm (main)


def start(build, threads):
    churn = 2 if threads <= 8 else 8
    holders = threads - churn
    p = subprocess.Popen([f"{build}/memtrim-cli-target", "--holders", str(holders), "--hold-mb",
                          str(FREED_MB * 10 // 9 // holders), "--churn", str(churn)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    return p


def ask(p, cmd):
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    return p.stdout.readline()


def rss(pid):
    return int(open(f"/proc/{pid}/statm").read().split()[1]) * 4096


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def one(build, threads, arm, window):
    p = start(build, threads)
    try:
        time.sleep(0.5)  # the churn threads at their pace
        ask(p, "reset")
        before = rss(p.pid)
        run = {"arm": arm, "load": load1()}
        t0 = time.monotonic()
        if arm in MEMTRIM_ARMS:
            raise_ = ["--raise", "0"] if arm == "unraised" else RAISE
            r = subprocess.run([f"{build}/memtrim", "trim", str(p.pid), "--json", "--timeout",
                                "900", *raise_], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            stop = out["thread_stopped_seconds"]
            run.update(stop=stop * 1e3, call=out["call_seconds"] * 1e3,
                       life=(out["call_threads_seconds"] + stop) * 1e3,
                       syscall=out["thread_syscall"], nice=out["call_thread_nice"],
                       raised=out["call_thread_raised"])
        elif arm == "gdb":
            r = subprocess.run(["gdb", "-batch", "-nx", "-p", str(p.pid), "-ex",
                                "call (int) malloc_trim(0)"], capture_output=True, text=True)
            if r.returncode != 0 or "$1 = 1" not in r.stdout:
                why = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
                run["failed"] = next((ln for ln in why if "Couldn't" in ln or "rror" in ln),
                                     why[-1] if why else f"exit {r.returncode}")
        else:
            time.sleep(window)
        run["wall"] = time.monotonic() - t0
        after = rss(p.pid)
        rep = json.loads(ask(p, "report"))
        assert rep["corrupt"] == 0
        run.update(released=(before - after) / 2**20, gap=rep["max_gap_seconds"] * 1e3,
                   gap_at=(rep["max_gap_at_seconds"] - t0) * 1e3)
        run["stall"] = max(run["gap"], run.get("stop", 0.0))
        if "life" in run:  # how much of the gap memtrim's threads were alive for (their life
            # ends about when the tool does; they are cloned during the taken thread's stop)
            wall_ms = run["wall"] * 1e3
            first = wall_ms - run["life"]
            both = min(run["gap_at"] + run["gap"], wall_ms) - max(run["gap_at"], first)
            run["in_life"] = max(0.0, both) / run["gap"] if run["gap"] else 0.0
        return run
    finally:
        p.kill()
        p.wait()


def show(threads, r):
    if "failed" in r:
        return f"{threads} {r['arm']:7s} load {r['load']:5.2f}  FAILED: {r['failed']}"
    s = (f"{threads} {r['arm']:7s} load {r['load']:5.2f}  released {r['released']:6.1f} MB  "
         f"stall {r['stall']:7.1f} ms (gap {r['gap']:.1f} ms from +{r['gap_at']:.0f} ms)  "
         f"wall {r['wall']:.3f} s")
    if r["arm"] in MEMTRIM_ARMS:
        s += (f"  taken thread ({r['syscall']}) stopped {r['stop']:.1f} ms, call "
              f"{r['call']:.1f} ms at nice {r['nice']}, memtrim's threads at most "
              f"{r['life']:.1f} ms (the gap {100 * r['in_life']:.0f} % inside their life)")
    return s


def commit():
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run(["git", "-C", here, "describe", "--always", "--dirty"], capture_output=True,
                       text=True)
    return r.stdout.strip() or "unknown"


def main():
    build = sys.argv[1]
    arg = lambda name, dflt: sys.argv[sys.argv.index(name) + 1] if name in sys.argv else dflt
    runs = int(arg("--runs", "5"))
    tlist = [int(x) for x in arg("--threads", "8,64").split(",")]
    arms = tuple(arg("--arms", "memtrim,gdb,none").split(","))
    check = float(arg("--check-ratio", "0")) or None
    if "--raise" in sys.argv:
        RAISE.extend(["--raise", arg("--raise", "10")])
    if "gdb" in arms and not shutil.which("gdb"):
        print("no gdb (Debian's gdb package: tests/install-deps.sh all)", file=sys.stderr)
        return 127
    print(f"commit {commit()}, {runs} runs per arm, arms in turn: {', '.join(arms)}; "
          f"load before: {open('/proc/loadavg').read().strip()}", flush=True)
    verdict = 0
    for threads in tlist:
        res = {a: [] for a in arms}
        for _ in range(runs):
            window = 0.3
            for arm in arms:
                res[arm].append(one(build, threads, arm, window))
                if arm == "memtrim" or (arm == "unraised" and "memtrim" not in arms):
                    window = res[arm][-1]["wall"]
                print("  " + show(threads, res[arm][-1]), flush=True)
        med = {}
        for a, rs in res.items():
            ok = [r for r in rs if "failed" not in r]
            keys = ("released", "stall", "gap", "wall", "load") + (
                ("stop", "call", "life") if a in MEMTRIM_ARMS else ())
            med[a] = {k: statistics.median(r[k] for r in ok) for k in keys} if ok else None
            fails = len(rs) - len(ok)
            if not ok:
                print(f"{threads} threads {a:8s} no run called ({fails} failed)")
                continue
            m = med[a]
            line = (f"{threads} threads {a:8s} median of {len(ok)}: released "
                    f"{m['released']:6.1f} MB  stall {m['stall']:7.1f} ms  wall {m['wall']:.3f} s  "
                    f"load {m['load']:.2f}")
            if a in MEMTRIM_ARMS:
                outside = sum(1 for r in ok if r["in_life"] == 0)
                line += (f"  taken thread stopped {m['stop']:.1f} ms, memtrim's threads at most "
                         f"{m['life']:.1f} ms; the longest gap before or after their life in "
                         f"{outside} of {len(ok)}")
            print(line + (f"  ({fails} failed)" if fails else ""))
        if "unraised" in med and "memtrim" in med and med["unraised"] and med["memtrim"]:
            m, u = med["memtrim"], med["unraised"]
            print(f"{threads} threads: memtrim/unraised: stall {m['stall'] / u['stall']:.3f}, "
                  f"call {m['call'] / u['call']:.3f}")
            if "gdb" in med and med["gdb"]:
                print(f"{threads} threads: stall unraised/gdb "
                      f"{u['stall'] / med['gdb']['stall']:.3f}")
        if "gdb" not in med or "memtrim" not in med:
            continue
        m, g = med["memtrim"], med["gdb"]
        if not m or not g:
            print(f"{threads} threads: no ratio (memtrim or gdb never called)")
            verdict = verdict or 77
            continue
        stall = m["stall"] / g["stall"]
        released = m["released"] / g["released"] if g["released"] else 0.0
        print(f"{threads} threads: released memtrim/gdb {released:.3f}, stall memtrim/gdb "
              f"{stall:.3f}, wall memtrim/gdb {m['wall'] / g['wall']:.3f}")
        if check and (stall > check or released < 0.95):
            print(f"{threads} threads: FAILS the check (stall ratio above {check} or released "
                  f"under 0.95)")
            verdict = 1
    print(f"load after: {open('/proc/loadavg').read().strip()}")
    return verdict if check else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # a failed run (memtrim's exit, a corrupt block) is no verdict: not 1
        traceback.print_exc()
        sys.exit(2)
