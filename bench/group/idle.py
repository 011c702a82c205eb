#!/usr/bin/python3
"""What an idle worker group costs the host: memtrim-prefork with N workers that did
one small study and then wait (--hold), with libmemtrim.so preloaded (FollowFork, one
port), in a memory cgroup; after a settle time, the CPU time of every process of the
group (the master and its workers: utime + stime from /proc/PID/stat) over a window,
as ms of CPU per second of wall time (1000 = one core). Two placements: "below" (the
group far below its limit: the 100 ms leader tick and 250 ms reports) and "zone" (the
master holds --shared-mb, which each worker's RSS counts, so that the group sits inside
its pressure zone at rest: the 10 ms ticks and heap watches). Without --build-b it
measures one build; with it, the two builds in turn, --rounds times (read the columns
side by side: the machine's load moves both). Needs root (a memory cgroup). Usage:
  bench/group/idle.py [--build build] [--build-b other/build] [--workers 4]
                      [--seconds 20] [--settle 5] [--rounds 3] [--placements below,zone]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "e2e"))
from hosts_util import Cgroup  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, ValueError, IndexError):
        return 0


def group_pids(cg):
    try:
        return [int(x) for x in (cg.path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def one(build, workers, placement, seconds, settle, port):
    tmp = tempfile.mkdtemp(prefix="memtrim-gidle-")
    limit = 1 << 30 if placement == "below" else 300 << 20
    shared = 0 if placement == "below" else 150  # 150 MB in the master and in each worker's RSS
    cg = Cgroup(f"memtrim-gidle-{os.getpid()}-{port}", limit)
    args = [f"{build}/memtrim-prefork", "--workers", str(workers), "--studies", "1",
            "--study-mb", "8", "--shared-mb", str(shared), "--hold"]
    env = dict(os.environ)
    env["LD_PRELOAD"] = f"{build}/libmemtrim.so"
    env["MEMTRIM_CONFIG"] = json.dumps({"FollowFork": True, "HttpPort": port,
                                        "Database": os.path.join(tmp, "m.sqlite")})
    p = subprocess.Popen(cg.wrap(args), env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while len(group_pids(cg)) < workers + 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(settle)
        pids = group_pids(cg)
        before = sum(cpu_ticks(x) for x in pids)
        t0 = time.monotonic()
        time.sleep(seconds)
        after = sum(cpu_ticks(x) for x in pids)
        wall = time.monotonic() - t0
        return (after - before) * 1000.0 / TICK / wall, len(pids)
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        cg.remove()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--build-b")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--settle", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--placements", default="below,zone")
    a = ap.parse_args()
    builds = [a.build] + ([a.build_b] if a.build_b else [])
    port = 18950
    for r in range(a.rounds):
        for placement in a.placements.split(","):
            for b in builds:
                port += 1
                ms, n = one(b, a.workers, placement, a.seconds, a.settle, port)
                print(f"round {r} {placement:5} {b}: {ms:.1f} ms CPU/s ({n} processes), "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
