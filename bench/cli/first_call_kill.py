#!/usr/bin/python3
"""The window the first call leaves (docs/command.md): memtrim trim SIGKILLed at a random
instant of a first call into a fresh process (tests/unit/cli_hazard.c, mode errno: a reader
in a 1-byte pipe read, which must return 1 once fed), RUNS times, seed 37, the instant uniform
over 1.5 x the median time of an unkilled first trim. Counts the processes harmed: dead,
stopped, traced, their reader's read returning anything but 1, or errno changed.

usage: bench/cli/first_call_kill.py BUILD_DIR [--runs N]
"""
import json
import random
import statistics
import subprocess
import sys
import time


def start(build):
    p = subprocess.Popen([f"{build}/memtrim-cli-hazard", "errno"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    return p


def report(p):
    p.stdin.write("report\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def main():
    build = sys.argv[1]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 100
    times = []
    for _ in range(5):
        p = start(build)
        t0 = time.monotonic()
        subprocess.run([f"{build}/memtrim", "trim", str(p.pid), "--json"], capture_output=True)
        times.append(time.monotonic() - t0)
        p.kill()
        p.wait()
    span = 1.5 * statistics.median(times)
    rnd = random.Random(37)
    harmed, mapped = [], 0
    for i in range(runs):
        p = start(build)
        try:
            call = subprocess.Popen([f"{build}/memtrim", "trim", str(p.pid), "--json"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rnd.uniform(0, span))
            call.kill()
            call.wait()
            deadline = time.monotonic() + 5
            while "TracerPid:\t0" not in open(f"/proc/{p.pid}/status").read():
                assert time.monotonic() < deadline, "still traced"
                time.sleep(0.01)
            mapped += any(" rwxp " in line and len(line.split()) == 5
                          for line in open(f"/proc/{p.pid}/maps"))
            p.stdin.write("feed\n")
            p.stdin.flush()
            deadline = time.monotonic() + 5
            r = report(p)
            while r["reads"] + r["bad_results"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
                r = report(p)
            if p.poll() is not None or r["reads"] != 1 or r["bad_results"] or r["changed"]:
                harmed.append((i, r))
        finally:
            p.kill()
            p.wait()
    print(f"{runs} first trims killed at random within {span * 1e3:.0f} ms: {mapped} had mapped "
          f"the page, {len(harmed)} harmed {harmed[:3]}")


main()
