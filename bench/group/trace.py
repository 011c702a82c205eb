#!/usr/bin/python3
"""One run of the worker-group workload (bench.py's, 4 workers, 20 studies of 80 MB,
400 ms apart, 100 ms between workers) traced: memtrim-prefork --trace (each study's
start, end of allocation and end of freeing), the cgroup's usage every 2 ms, and, in
group mode, the group's trims from the store. Prints the workers finished, the peak
usage, and how long after its free each study's memory was trimmed (median, p90,
max over the studies trimmed before the worker's next one). -v prints the timeline.
Needs root (a memory cgroup v1 or v2). Usage:
  bench/group/trace.py [--build build] [--mode group|trim-after] [--limit-mb 250]
                       [--workers 4] [--pause-ms 400] [--schedule absolute] [-v]
                       [--study-mb 80] [--shared-mb 0 (the master's, shared by the workers)]"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "e2e"))
from hosts_util import Cgroup  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--mode", default="group", choices=("group", "trim-after"))
    ap.add_argument("--limit-mb", type=int, default=250)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--study-mb", type=int, default=80)
    ap.add_argument("--shared-mb", type=int, default=0)
    ap.add_argument("--pause-ms", type=int, default=400)
    ap.add_argument("--schedule", default="absolute", choices=("absolute", "relative"))
    ap.add_argument("--port", type=int, default=18999)
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="memtrim-gtrace-")
    trace, db = os.path.join(tmp, "studies.jsonl"), os.path.join(tmp, "m.sqlite")
    cg = Cgroup(f"memtrim-gtrace-{os.getpid()}", a.limit_mb << 20)
    args = [f"{a.build}/memtrim-prefork", "--workers", str(a.workers), "--studies", "20",
            "--study-mb", str(a.study_mb), "--shared-mb", str(a.shared_mb), "--pause-ms", str(a.pause_ms), "--stagger-ms", "100",
            "--schedule", a.schedule, "--trace", trace]
    env = dict(os.environ)
    if a.mode == "group":
        env["LD_PRELOAD"] = f"{a.build}/libmemtrim.so"
        env["MEMTRIM_CONFIG"] = json.dumps({"FollowFork": True, "Database": db,
                                            "HttpPort": a.port})
    else:
        args.append("--trim-after")
    usage, stop = [], threading.Event()
    current = cg.path / ("memory.usage_in_bytes" if cg.version == 1 else "memory.current")

    def sample():
        while not stop.is_set():
            try:
                usage.append((time.monotonic() * 1000, int(current.read_text()) >> 20))
            except (OSError, ValueError):
                pass
            time.sleep(0.002)

    th = threading.Thread(target=sample)
    th.start()
    wall_minus_mono = time.time() * 1000 - time.monotonic() * 1000
    try:
        p = subprocess.run(cg.wrap(args), env=env, capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        th.join()
        cg.remove()
    last = [l for l in p.stdout.splitlines() if l.startswith('{"workers"')]
    print(last[-1] if last else p.stderr[-500:])
    studies = [json.loads(l) for l in open(trace)] if os.path.exists(trace) else []
    trims = []
    if a.mode == "group" and os.path.exists(db):
        c = sqlite3.connect(db)
        trims = [(r[0] - wall_minus_mono, r[1], r[2], r[3] or 0, r[4] or 0) for r in c.execute(
            "SELECT start_ms, pid, trigger, released_bytes, duration_ns FROM trims "
            "ORDER BY start_ms")]
        c.close()
    lags = []
    for s in studies:
        # the first trim of the worker after its free began (a trim may come mid-way
        # through the free): how long after the free's end (0 when before it)
        began, freed = s["t0"] + s["alloc"], s["t0"] + s["freed"]
        after = [t for t in trims if t[1] == s["pid"] and t[0] >= began]
        if after and after[0][0] - freed < a.pause_ms:
            lags.append(max(after[0][0] - freed, 0.0))
    lags.sort()
    if lags:
        print(f"freed -> trimmed: {len(lags)} of {len(studies)} studies before the worker's next; "
              f"median {lags[len(lags) // 2]:.0f} ms, p90 {lags[int(len(lags) * 0.9)]:.0f} ms, "
              f"max {lags[-1]:.0f} ms")
    peak_t, peak = max(usage, key=lambda x: x[1], default=(0, 0))
    t_start = min((s["t0"] for s in studies), default=peak_t)
    print(f"peak {peak} MB at {peak_t - t_start:.0f} ms, {len(trims)} trims stored")
    if a.v:
        events = [(t, f"usage {u} MB") for t, u in usage]
        pid_w = {s["pid"]: s["w"] for s in studies}
        for s in studies:
            for k in ("start", "alloc", "freed"):
                events.append((s["t0"] + s[k], f"w{s['w']} {k}"))
        events += [(t[0], f"trim w{pid_w.get(t[1], t[1])} trigger {t[2]} released "
                          f"{t[3] >> 20} MB in {t[4] / 1e6:.1f} ms") for t in trims]
        events.sort()
        t0, prev = (events[0][0] if events else 0), None
        for t, e in events:
            if e != prev:
                print(f"{t - t0:9.1f} {e}")
            prev = e


if __name__ == "__main__":
    main()
