#!/usr/bin/python3
"""memtrim trim PID against gdb -batch -p PID -ex 'call (int) malloc_trim(0)', side by side.

Each run starts a fresh memtrim-cli-target (tests/unit/cli_target.c) whose holder threads
leave about 370 MB of freed heap in glibc's arenas and whose churn threads malloc, check and
free blocks in a loop and timestamp every iteration; then one of: memtrim, gdb, nothing (the
machine's own noise), interleaved run by run. Measured per run: RSS released, the longest
gap of the churn threads while the tool ran (the stall it caused), the tool's wall time.
Prints the medians per arm and thread count, and the ratios the issue asks for.

usage: bench/cli/vs_gdb.py BUILD_DIR [--runs N] [--threads 8,64] [--arms memtrim,gdb,none]
(Debian 12's gdb 13.1 cannot call a function on a CPU with AMX: "Couldn't write extended
state status: Bad address"; there run it in the test VM, tests/vm/run.sh, or with
--arms memtrim,none.)
"""
import json
import statistics
import subprocess
import sys
import time

FREED_MB = 370


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


def one(build, threads, arm):
    p = start(build, threads)
    try:
        time.sleep(0.5)  # the churn threads at their pace
        ask(p, "reset")
        before = rss(p.pid)
        t0 = time.monotonic()
        if arm == "memtrim":
            r = subprocess.run([f"{build}/memtrim", "trim", str(p.pid), "--json", "--timeout", "900"],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            print(f"  memtrim: thread {out['thread_syscall']}, stopped "
                  f"{out['thread_stopped_seconds'] * 1e3:.1f} ms, call {out['call_seconds']:.3f} s, "
                  f"tool {out['duration_seconds']:.3f} s", flush=True)
        elif arm == "gdb":
            r = subprocess.run(["gdb", "-batch", "-nx", "-p", str(p.pid), "-ex",
                                "call (int) malloc_trim(0)"], capture_output=True, text=True)
            assert r.returncode == 0 and "$1 = 1" in r.stdout, (r.stdout, r.stderr)
        else:
            time.sleep(0.3)
        wall = time.monotonic() - t0
        after = rss(p.pid)
        rep = json.loads(ask(p, "report"))
        assert rep["corrupt"] == 0
        return {"released": (before - after) / 2**20, "stall": rep["max_gap_seconds"] * 1e3,
                "wall": wall}
    finally:
        p.kill()
        p.wait()


def main():
    build = sys.argv[1]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    tlist = [8, 64]
    if "--threads" in sys.argv:
        tlist = [int(x) for x in sys.argv[sys.argv.index("--threads") + 1].split(",")]
    arms = ("memtrim", "gdb", "none")
    if "--arms" in sys.argv:
        arms = tuple(sys.argv[sys.argv.index("--arms") + 1].split(","))
    print(f"load before: {open('/proc/loadavg').read().strip()}")
    for threads in tlist:
        res = {a: [] for a in arms}
        for _ in range(runs):
            for arm in arms:
                res[arm].append(one(build, threads, arm))
                print(f"  {threads} {arm}: {res[arm][-1]}", flush=True)
        med = {a: {k: statistics.median(r[k] for r in res[a]) for k in ("released", "stall", "wall")}
               for a in res}
        for a in res:
            print(f"{threads} threads {a:8s} released {med[a]['released']:6.1f} MB  stall "
                  f"{med[a]['stall']:7.1f} ms  wall {med[a]['wall']:.3f} s   runs: "
                  + ", ".join(f"{r['released']:.0f}MB/{r['stall']:.0f}ms/{r['wall']:.2f}s"
                              for r in res[a]))
        if "gdb" not in med or "memtrim" not in med:
            continue
        m, g = med["memtrim"], med["gdb"]
        print(f"{threads} threads: released memtrim/gdb {m['released'] / g['released']:.3f}, "
              f"stall memtrim/gdb {m['stall'] / g['stall']:.3f}, wall memtrim/gdb "
              f"{m['wall'] / g['wall']:.3f}")
    print(f"load after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
