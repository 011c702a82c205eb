#!/usr/bin/python3
"""The runtimes benchmark (issue 41, README.md beside this file): Debian's python3, ruby +
puma, nodejs and Orthanc, each serving its burst (tests/e2e/runtimes_util.py), in every mode
side by side, interleaved (the order of the modes rotates each round):

  idle   peak RSS, RSS 5 s and 30 s after the burst, req/s and p99 of the burst; then a
         `memtrim trim PID` (malloc_trim(0) in the server) as the reference at 30 s.
  limit  the same burst in a v1/v2 memory cgroup, glibc against memtrim preloaded (and,
         with --old-build, memtrim's pressure before the back-off: a -DMEMTRIM_CONTROLS=ON
         build run with MEMTRIM_CONTROL=rt-no-backoff): survived or OOM-killed, req/s, p99,
         pressure trims, their time and what of their release came back.

Run as root from the repository: bench/runtimes/run.sh. Prints Markdown on stdout."""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
import runtimes_util as ru  # noqa: E402
from hosts_util import Cgroup  # noqa: E402

MB = 1 << 20
# (runtime, limit MiB, requests, MB a request or None): where glibc survives the burst (node)
# and where it dies (ruby, Orthanc).
LIMITS = [("node", 560, 1200, 16), ("ruby", 300, 240, None), ("orthanc", 340, 240, None)]


def load():
    return open("/proc/loadavg").read().split()[0]


def mb(v):
    return "–" if v is None else f"{v / MB:.0f}"


def wait_until(t):
    while time.monotonic() < t:
        time.sleep(min(0.2, max(0.0, t - time.monotonic())))


def idle_run(name, mode, bodies):
    tmp = tempfile.mkdtemp(prefix=f"memtrim-rt-{name}-{mode}-")
    row = {"runtime": name, "mode": mode, "load": load()}
    s = ru.Server(name, tmp, env=ru.mode_env(mode))
    try:
        if mode == "load":
            rc, out = ru.cli("load", s.pid, "--config", json.dumps(ru.memtrim_config()))
            row["load_rc"] = rc
        b = ru.burst(s, bodies=bodies)
        end = time.monotonic()
        row.update(rate=b.rate, p99=b.p99(), errors=len(b.errors), peak=s.peak())
        if mode == "trim":
            rc, out = ru.cli("trim", s.pid)
            row["trim_rc"] = rc
        wait_until(end + 5)
        row["idle5"] = s.rss()
        wait_until(end + 30)
        row["idle30"] = s.rss()
        rc, out = ru.cli("trim", s.pid)
        row["ref"] = out.get("rss_after_bytes") if isinstance(out, dict) else None
        row["ref_rc"] = rc
    finally:
        s.stop()
        shutil.rmtree(tmp, True)
    return row


def limit_run(name, mode, limit_mb, count, request_mb, bodies, old_build):
    tmp = tempfile.mkdtemp(prefix=f"memtrim-rt-{name}-{mode}-")
    cg = Cgroup(f"memtrim-rt-bench-{os.getpid()}-{time.monotonic_ns()}", limit_mb * MB)
    row = {"runtime": name, "mode": mode, "limit": limit_mb, "load": load()}
    env = ru.mode_env("plain" if mode == "plain" else "memtrim")
    if mode == "old":
        env["LD_PRELOAD"] = str(Path(old_build).resolve() / "libmemtrim.so")
        env["MEMTRIM_CONTROL"] = "rt-no-backoff"
    s = None
    try:
        s = ru.Server(name, tmp, env=env, wrap=cg.wrap)
        b = ru.burst(s, count=count, mb=request_mb, bodies=bodies,
                     deadline=time.monotonic() + 300)
        alive = s.proc.poll() is None
        row.update(rate=b.rate, p99=b.p99(), done=len(b.latencies), errors=len(b.errors),
                   alive=alive, kills=cg.oom_kills(), peak=cg.peak_bytes())
        if alive and mode != "plain":
            m = s.metrics() or {}
            row["trims"] = m.get('memtrim_trims_total{trigger="pressure"}')
            row["trim_s"] = m.get('memtrim_trim_seconds_total{trigger="pressure"}')
            row["released"] = m.get('memtrim_released_bytes_total{trigger="pressure"}')
            row["judged"] = m.get("memtrim_pressure_judged_released_bytes_total")
            row["returned"] = m.get("memtrim_pressure_returned_bytes_total")
    except AssertionError as e:  # it died before it answered
        row.update(alive=False, kills=cg.oom_kills(), error=str(e)[:200])
    finally:
        if s:
            s.stop()
        cg.remove()
        shutil.rmtree(tmp, True)
    return row


def fmt_idle(rows):
    out = ["| runtime | mode | peak | idle 5 s | idle 30 s | malloc_trim(0) at 30 s | "
           "idle 30 s / reference | req/s | p99 ms | load |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['idle30'] / r['ref']:.2f}" if r.get("ref") and r.get("idle30") else "–"
        p99 = f"{r['p99'] * 1000:.0f}" if r.get("p99") else "–"
        err = f" ({r['errors']} errors)" if r.get("errors") else ""
        out.append(f"| {r['runtime']} | {r['mode']} | {mb(r.get('peak'))} | {mb(r.get('idle5'))} | "
                   f"{mb(r.get('idle30'))} | {mb(r.get('ref'))} | {ratio} | "
                   f"{r.get('rate', 0):.0f}{err} | {p99} | {r['load']} |")
    return "\n".join(out)


def fmt_limit(rows):
    out = ["| runtime | limit MiB | mode | outcome | requests done | req/s | p99 ms | "
           "pressure trims | their time s | released MiB | came back | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        outcome = "survived" if r.get("alive") and not r.get("kills") else \
            f"OOM-killed ({r.get('kills')})"
        p99 = f"{r['p99'] * 1000:.0f}" if r.get("p99") else "–"
        back = f"{100 * r['returned'] / r['judged']:.0f} %" if r.get("judged") else "–"
        trims = "–" if r.get("trims") is None else f"{r['trims']:.0f}"
        ts = "–" if r.get("trim_s") is None else f"{r['trim_s']:.2f}"
        out.append(f"| {r['runtime']} | {r['limit']} | {r['mode']} | {outcome} | "
                   f"{r.get('done', 0)} | {r.get('rate', 0):.0f} | {p99} | {trims} | {ts} | "
                   f"{mb(r.get('released'))} | {back} | {r['load']} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the idle table")
    ap.add_argument("--limit-rounds", type=int, default=2, help="rounds of the limit table")
    ap.add_argument("--runtimes", default=",".join(ru.RUNTIMES))
    ap.add_argument("--modes", default=",".join(ru.MODES))
    ap.add_argument("--old-build", help="a -DMEMTRIM_CONTROLS=ON build: memtrim before the "
                    "pressure back-off (MEMTRIM_CONTROL=rt-no-backoff) as a third limit mode")
    ap.add_argument("--skip", default="", help="idle,limit: parts to leave out")
    a = ap.parse_args()
    names = [n for n in a.runtimes.split(",") if n]
    for n in names:
        why = ru.available(n)
        if why:
            sys.exit(why)
    modes = [m for m in a.modes.split(",") if m]
    bodies = ru.orthanc_bodies(80) if "orthanc" in names else None
    print(f"# Runtimes benchmark\n\nload at start {load()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    if "idle" not in a.skip:
        rows = []
        for k in range(a.rounds):
            for name in names:
                order = modes[k % len(modes):] + modes[:k % len(modes)]
                for mode in order:
                    r = idle_run(name, mode, bodies)
                    print(f"<!-- {json.dumps(r)} -->", flush=True)
                    rows.append(r)
        rows.sort(key=lambda r: (names.index(r["runtime"]), modes.index(r["mode"])))
        print("\n## Idle after the burst\n\n" + fmt_idle(rows) + "\n", flush=True)
    if "limit" not in a.skip:
        rows = []
        lmodes = ["plain", "memtrim"] + (["old"] if a.old_build else [])
        for k in range(a.limit_rounds):
            for name, limit_mb, count, request_mb in LIMITS:
                if name not in names:
                    continue
                order = lmodes if k % 2 == 0 else lmodes[::-1]
                for mode in order:
                    r = limit_run(name, mode, limit_mb, count, request_mb, bodies, a.old_build)
                    print(f"<!-- {json.dumps(r)} -->", flush=True)
                    rows.append(r)
        rows.sort(key=lambda r: ([x[0] for x in LIMITS].index(r["runtime"]),
                                 lmodes.index(r["mode"])))
        print("\n## Under a memory limit\n\n" + fmt_limit(rows) + "\n")
    print(f"load at the end {load()}")


if __name__ == "__main__":
    main()
