#!/usr/bin/python3
"""MallocArenaMax "auto" against glibc's default (issue 30): the demo host with more
threads than its cgroup's CPU quota, preloaded with memtrim, in a v1 cpu cgroup
(cpu.cfs_quota_us/cfs_period_us), the two configurations interleaved (the order
alternating pair by pair); peak RSS (the demo's VmHWM) and studies a second, medians.
memtrim's own trims are off in both (no periodic, burst or pressure trim): the arena cap
is the one difference.

    sudo bench/arena_auto/run.py [--pairs 3] [--cpus 1] [--workers 8] [--studies 32]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"memtrim-demo: (\d+) studies done, peak RSS (\d+) MB")
QUIET = {"HttpPort": 0, "Database": ":memory:", "TrimIntervalSeconds": 0,
         "TrimReleasableTriggerBytes": 0, "PressureRatio": 0}


def cgroup(cpus):
    for root in ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"):
        if Path(root, "cpu.cfs_quota_us").exists():
            d = Path(root, f"memtrim-bench-arena-auto-{os.getpid()}")
            d.mkdir()
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)))
            return d
    sys.exit("no cgroup v1 cpu controller")


def run(build, cg, arena_auto, a):
    cfg = dict(QUIET, **({"MallocArenaMax": "auto"} if arena_auto else {}))
    env = dict(os.environ, LD_PRELOAD=str(build / "libmemtrim.so"), MEMTRIM_CONFIG=json.dumps(cfg))
    args = [str(build / "memtrim-demo"), "--no-memtrim", "--workers", str(a.workers),
            "--concurrency", str(a.workers), "--study-mb", str(a.study_mb), "--keep-percent", "2",
            "--pause-ms", "0", "--studies", str(a.studies), "--quiet"]

    def enter():
        (cg / "cgroup.procs").write_text(str(os.getpid()))

    t0 = time.monotonic()
    p = subprocess.run(args, env=env, preexec_fn=enter, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    m = SUMMARY.search(p.stdout + p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"run failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
    arenas = re.search(r"MallocArenaMax auto: (\d+) arenas", p.stdout + p.stderr)
    return {"peak_mb": int(m.group(2)), "studies_per_s": int(m.group(1)) / wall, "wall_s": wall,
            "cap": int(arenas.group(1)) if arenas else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--cpus", type=float, default=1)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--studies", type=int, default=32)
    ap.add_argument("--study-mb", type=int, default=32)
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    build = Path(a.build)
    cg = cgroup(a.cpus)
    res = {"default": [], "auto": []}
    try:
        for i in range(a.pairs):
            order = ["default", "auto"] if i % 2 == 0 else ["auto", "default"]
            for mode in order:
                r = run(build, cg, mode == "auto", a)
                res[mode].append(r)
                print(f"pair {i + 1} {mode:7s}: peak {r['peak_mb']} MB, "
                      f"{r['studies_per_s']:.2f} studies/s ({r['wall_s']:.1f} s)", flush=True)
    finally:
        cg.rmdir()
    for mode, rs in res.items():
        print(f"{mode:7s} median: peak {statistics.median(r['peak_mb'] for r in rs)} MB, "
              f"{statistics.median(r['studies_per_s'] for r in rs):.2f} studies/s")
    pk = [b["peak_mb"] / d["peak_mb"] for d, b in zip(res["default"], res["auto"])]
    tp = [b["studies_per_s"] / d["studies_per_s"] for d, b in zip(res["default"], res["auto"])]
    print(f"auto/default per pair: peak {', '.join(f'{x:.2f}' for x in pk)}; "
          f"throughput {', '.join(f'{x:.2f}' for x in tp)}")


if __name__ == "__main__":
    main()
