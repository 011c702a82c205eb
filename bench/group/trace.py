#!/usr/bin/python3
"""One run of the worker-group workload (bench.py's, 4 workers, 20 studies of 80 MB,
400 ms apart, 100 ms between workers) traced: memtrim-prefork --trace (each study's
start, end of allocation and end of freeing), the cgroup's usage every 2 ms, and, in
group mode, the group's trims from the store. Prints the workers finished, the peak
usage, and how long after its free each study's memory was trimmed (median, p90,
max over the studies trimmed before the worker's next one; how many of those first
trims the member ran on its own, GroupTrimSlotMs). -v prints the timeline.
Needs root (a memory cgroup v1 or v2). Usage:
  bench/group/trace.py [--build build] [--mode group|trim-after] [--limit-mb 250]
                       [--workers 4] [--pause-ms 400] [--schedule absolute] [-v]
                       [--study-mb 80] [--shared-mb 0 (the master's, shared by the workers)]
                       [--config '{"GroupTrimSlotMs": 0}' (more MEMTRIM_CONFIG keys)]
                       [--stall-leader 200/400 (the leader SIGSTOPped 200 ms of every 400)]"""
import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "e2e"))
from hosts_util import Cgroup  # noqa: E402


def stall_leader(p, off_ms, period_ms, stop):
    """SIGSTOP the leader for off_ms of every period_ms until it ends (a leader that
    cannot answer: what a member acting on its own does without it)."""
    while not stop.is_set() and p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGSTOP)
            time.sleep(off_ms / 1000)
        finally:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
        time.sleep(max(period_ms - off_ms, 1) / 1000)


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
    ap.add_argument("--config", default="{}", help="more MEMTRIM_CONFIG keys (JSON), e.g. "
                    "'{\"GroupTrimSlotMs\": 0}'")
    ap.add_argument("--stall-leader", help="OFF/PERIOD: the leader SIGSTOPped OFF ms of "
                    "every PERIOD ms (e.g. 200/400)")
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
                                            "HttpPort": a.port, **json.loads(a.config)})
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
        p = subprocess.Popen(cg.wrap(args), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        stall = None
        if a.stall_leader:
            # the master (the group's leader: the cgroup's shell execs it) stopped for the
            # first number of ms of every period of the second, from its start on
            off_ms, period_ms = (int(x) for x in a.stall_leader.split("/"))
            stall = threading.Thread(target=stall_leader, args=(p, off_ms, period_ms, stop))
            stall.start()
        out, err = p.communicate(timeout=600)
        p.stdout_text, p.stderr = out, err
    finally:
        stop.set()
        th.join()
        if stall:
            stall.join()
        cg.remove()
    last = [l for l in p.stdout_text.splitlines() if l.startswith('{"workers"')]
    print(last[-1] if last else p.stderr[-500:])
    studies = [json.loads(l) for l in open(trace)] if os.path.exists(trace) else []
    trims = []
    if a.mode == "group" and os.path.exists(db):
        c = sqlite3.connect(db)
        # reaction_seconds: a member's trim of its own (GroupTrimSlotMs) carries it, from
        # when it saw the freed memory; one its leader asked for does not
        trims = [(r[0] - wall_minus_mono, r[1], r[2], r[3] or 0, r[4] or 0, r[5])
                 for r in c.execute("SELECT start_ms, pid, trigger, released_bytes, duration_ns, "
                                    "reaction_seconds FROM trims ORDER BY start_ms")]
        c.close()
    lags, own_first = [], 0
    for s in studies:
        # the first trim of the worker after its free began (a trim may come mid-way
        # through the free): how long after the free's end (0 when before it)
        began, freed = s["t0"] + s["alloc"], s["t0"] + s["freed"]
        after = [t for t in trims if t[1] == s["pid"] and t[0] >= began]
        if after and after[0][0] - freed < a.pause_ms:
            lags.append(max(after[0][0] - freed, 0.0))
            own_first += after[0][2] == 2 and after[0][5] is not None
    lags.sort()
    if lags:
        print(f"freed -> trimmed: {len(lags)} of {len(studies)} studies before the worker's next; "
              f"median {lags[len(lags) // 2]:.0f} ms, p90 {lags[int(len(lags) * 0.9)]:.0f} ms, "
              f"max {lags[-1]:.0f} ms; {own_first} of them first by the member on its own")
    own = [t for t in trims if t[2] == 2 and t[5] is not None and t[1] in {s["pid"] for s in studies}]
    if own:
        waits = sorted(t[5] * 1000 for t in own)
        print(f"members' own trims: {len(own)}, seen -> trimmed median {waits[len(waits) // 2]:.1f} ms, "
              f"max {waits[-1]:.1f} ms")
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
                          f"{t[3] >> 20} MB in {t[4] / 1e6:.1f} ms"
                          + (" (its own)" if t[5] is not None and t[1] in pid_w else ""))
                   for t in trims]
        events.sort()
        t0, prev = (events[0][0] if events else 0), None
        for t, e in events:
            if e != prev:
                print(f"{t - t0:9.1f} {e}")
            prev = e


if __name__ == "__main__":
    main()
