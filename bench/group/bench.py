#!/usr/bin/python3
"""The worker-group benchmark (issue 21): memtrim-prefork's 4 workers (20
studies of 80 MB in 1 KB blocks each, one long-lived worker thread per
worker, the workers 100 ms apart) in one memory cgroup v1/v2, by limit x
pause x mode: none, malloc_trim after every study, per-process memtrim
(FollowFork, HttpPort 0: an instance per worker), the group (FollowFork, one
port). Prints workers finished (per run and the median), the cgroup's peak
(per run and the median) and the wall time per run, and the load average
before each run (min-max per cell). The modes of a cell take turns run by
run (none, trim-after, per-process, group, none, ...), so they see the same
load. --schedule is memtrim-prefork's (absolute: each worker's studies in
fixed slots, the workers stagger-ms apart; relative: the pause after each
study's end). Needs root. Usage:
  bench/group/bench.py [--build build] [--limits 250,300] [--pauses 0,250,500] [--runs 3]
                       [--workers 4] [--schedule absolute|relative]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "e2e"))
from hosts_util import Cgroup  # noqa: E402


def run(build, limit_mb, pause, mode, n, workers, schedule):
    cg = Cgroup(f"memtrim-gbench-{os.getpid()}-{n}", limit_mb << 20)
    try:
        args = [f"{build}/memtrim-prefork", "--workers", str(workers), "--studies", "20", "--study-mb",
                "80", "--pause-ms", str(pause), "--stagger-ms", "100", "--schedule", schedule]
        env = dict(os.environ)
        if mode == "trim-after":
            args.append("--trim-after")
        elif mode in ("per-process", "group"):
            cfg = {"FollowFork": True, "Database": ""}
            cfg["HttpPort"] = 0 if mode == "per-process" else 18000 + n % 1000
            env["LD_PRELOAD"] = f"{build}/libmemtrim.so"
            env["MEMTRIM_CONFIG"] = json.dumps(cfg)
        t = time.monotonic()
        p = subprocess.run(cg.wrap(args), env=env, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - t
        last = [l for l in p.stdout.splitlines() if l.startswith('{"workers"')]
        done = json.loads(last[-1])["finished"] if last else 0
        return done, (cg.peak_bytes() or 0) >> 20, wall
    finally:
        cg.remove()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--limits", default="250,300")
    ap.add_argument("--pauses", default="0,250,500")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--modes", default="none,trim-after,per-process,group")
    ap.add_argument("--schedule", default="absolute", choices=("absolute", "relative"))
    a = ap.parse_args()
    n = 0
    print("| limit | pause | mode | workers finished (per run) | median | peak MB | median peak "
          "| wall s | load before |")
    print("|---|---|---|---|---|---|---|---|---|")
    for limit in map(int, a.limits.split(",")):
        for pause in map(int, a.pauses.split(",")):
            modes = a.modes.split(",")
            res = {m: [] for m in modes}
            loads = []
            for _ in range(a.runs):  # the modes take turns: they see the same load
                for mode in modes:
                    loads.append(float(open("/proc/loadavg").read().split()[0]))
                    n += 1
                    res[mode].append(run(a.build, limit, pause, mode, n, a.workers, a.schedule))
            load = f"{min(loads):.2f}-{max(loads):.2f}"
            w = a.workers
            for mode in modes:
                r = res[mode]
                print(f"| {limit} MB | {pause} ms | {mode} | "
                      f"{', '.join(f'{d}/{w}' for d, _, _ in r)} | "
                      f"{statistics.median(d for d, _, _ in r):g}/{w} | "
                      f"{', '.join(str(pk) for _, pk, _ in r)} | "
                      f"{statistics.median(pk for _, pk, _ in r):g} | "
                      f"{', '.join(f'{x:.1f}' for _, _, x in r)} | {load} |", flush=True)


if __name__ == "__main__":
    main()
