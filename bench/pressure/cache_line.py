#!/usr/bin/python3
"""A cgroup held at its limit by page cache (issue 38): a memory cgroup (v1 or v2) whose
limit a reader keeps full with page cache from file I/O (a file on disk, dropped from the
cache before each pass so that each pass charges this cgroup), and in it the demo host under
memtrim (the pool workload: 8 workers, studies back to back, each freeing what it took, so
each pressure trim's release comes back with the next study). Counts memtrim's pressure trims
a second, what came back, and the studies the host finished, run by run, in turn between
the arms; prints the load beside each run.

  bench/pressure/cache_line.py --build DIR [--arm NAME=CONTROL ...] [--runs N] [--seconds S]

An arm is a MEMTRIM_CONTROL value for the build (empty: none; the build needs
-DMEMTRIM_CONTROLS=ON for a control to act). Needs root and a memory cgroup. The file (twice the
limit) is made under --dir and removed at the end; cgroups are named
memtrim-cache-line-*, each removed after its run.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
from hosts_util import API_LINE, Cgroup  # noqa: E402
from pressure_util import PRESSURE_COUNT, demo_command  # noqa: E402

MB = 1 << 20
# Reads the file in 1 MiB pieces at most rate MB a second, the file dropped from the cache
# before each pass (so the pages come in anew, charged to the reader's cgroup).
READER = r"""
import os, sys, time
path, rate = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
t0, done = time.monotonic(), 0
while True:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.lseek(fd, 0, 0)
    while os.read(fd, 1 << 20):
        done += 1
        ahead = done / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
"""


def load():
    return open("/proc/loadavg").read().split()[0]


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("memtrim_") and ('trigger="pressure"' in line or
                                           line.startswith("memtrim_pressure_")):
            name, value = line.rsplit(" ", 1)
            out[name.replace('{trigger="pressure"}', "")] = float(value)
    return out


def cg_cache(cg):
    """The cgroup's page cache (v1 total_cache, v2 file)."""
    key = "total_cache" if cg.version == 1 else "file"
    for line in (cg.path / "memory.stat").read_text().splitlines():
        k, v = line.split()
        if k == key:
            return int(v)
    return -1


def cg_usage(cg):
    return int((cg.path / ("memory.usage_in_bytes" if cg.version == 1 else
                           "memory.current")).read_text())


def run(build, control, limit_mb, seconds, study_mb, rate, path, tmp, n):
    cg = Cgroup(f"memtrim-cache-line-{os.getpid()}-{n}", limit_mb * MB)
    reader = host = None
    try:
        reader = subprocess.Popen(cg.wrap([sys.executable, "-c", READER, path, str(rate)]))
        # the cache fills the limit before the host starts
        deadline = time.monotonic() + 60
        while cg_usage(cg) < limit_mb * MB * 0.95:
            if time.monotonic() > deadline:
                raise RuntimeError("the reader did not fill the cgroup with page cache")
            time.sleep(0.1)
        cfg = {"HttpPort": 0, "Database": ""}
        env = {"LD_PRELOAD": str(Path(build) / "libmemtrim.so"), "MEMTRIM_CONFIG": json.dumps(cfg)}
        if control:
            env["MEMTRIM_CONTROL"] = control
        args = demo_command(0, 0, env=env, build=build, study_mb=study_mb,
                            args=["--seconds", seconds + 5, "--quiet"])
        log = Path(tmp) / f"demo-{n}.log"
        with open(log, "ab") as f:  # appended to: this side reads it anew, never seeks it
            host = subprocess.Popen(cg.wrap(args), stdout=f, stderr=subprocess.STDOUT)
        port, t_start = 0, time.monotonic()
        while not port and host.poll() is None and time.monotonic() - t_start < 30:
            time.sleep(0.05)
            m = API_LINE.search(log.read_text(errors="replace"))
            port = int(m.group(1)) if m else 0
        time.sleep(1)  # the pool at work; count from here
        m0 = metrics(port) if port and host.poll() is None else {}
        caches = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds and host.poll() is None:
            time.sleep(0.5)
            caches.append(cg_cache(cg))
        m1 = metrics(port) if port and host.poll() is None else {}
        wall = time.monotonic() - t0
        rc = host.wait(60)
        out = log.read_text(errors="replace")
        studies = re.search(r"memtrim-demo: (\d+) studies done", out)
        whole = PRESSURE_COUNT.search(out)
        d = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
        trims = d.get("memtrim_trims_total", float("nan"))
        return {
            "rc": rc, "oom_kills": cg.oom_kills(), "wall": wall, "trims": trims,
            "per_s": trims / wall if wall else float("nan"),
            "returned": d.get("memtrim_pressure_returned_trims_total", float("nan")),
            "trim_s": d.get("memtrim_trim_seconds_total", float("nan")),
            "released_mb": d.get("memtrim_released_bytes_total", 0) / MB,
            "studies": int(studies.group(1)) if studies else None,
            "pressure_whole_run": int(whole.group(1)) if whole else None,
            "cache_mb_min": min(caches) // MB if caches else -1,
            "cache_mb_max": max(caches) // MB if caches else -1,
            "peak_mb": (cg.peak_bytes() or 0) // MB,
            "checks": d.get('memtrim_pressure_checks_total{zone="inside"}', float("nan")),
            "wakeups": d.get("memtrim_pressure_kernel_wakeups_total", float("nan")),
        }
    finally:
        for p in (host, reader):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        cg.remove()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--arm", action="append", default=None,
                    help="NAME=CONTROL (CONTROL empty: none); default fixed= and the control "
                         "eng-cache-line-nowait")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--limit-mb", type=int, default=340)
    ap.add_argument("--study-mb", type=int, default=40)
    ap.add_argument("--rate", type=float, default=200, help="the reader's MB a second")
    ap.add_argument("--dir", default="/var/tmp")
    a = ap.parse_args()
    arms = [x.split("=", 1) for x in (a.arm or ["fixed=", "nowait=eng-cache-line-nowait"])]
    why = Cgroup.unavailable()
    if why:
        sys.exit(f"cache_line: {why}")
    fd, path = tempfile.mkstemp(prefix="memtrim-cache-line-", dir=a.dir)
    try:
        with os.fdopen(fd, "wb") as f:
            chunk = os.urandom(MB)
            for _ in range(2 * a.limit_mb):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())  # clean pages: the reader's first pass drops them
        with tempfile.TemporaryDirectory() as tmp:
            n = 0
            print(f"| run | arm | load | pressure trims / s | trims (returned) | trimming s | "
                  f"released MiB | studies | exit, oom_kill | page cache MiB | peak MiB | "
                  f"readings in the zone (kernel wake-ups) |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|")
            for r in range(a.runs):
                for name, control in arms:
                    n += 1
                    before = load()
                    x = run(a.build, control, a.limit_mb, a.seconds, a.study_mb, a.rate, path,
                            tmp, n)
                    print(f"| {r + 1} | {name} | {before}-{load()} | {x['per_s']:.1f} | "
                          f"{x['trims']:.0f} ({x['returned']:.0f}) | {x['trim_s']:.2f} | "
                          f"{x['released_mb']:.0f} | {x['studies']} | {x['rc']}, "
                          f"{x['oom_kills']} | {x['cache_mb_min']}-{x['cache_mb_max']} | "
                          f"{x['peak_mb']} | {x['checks']:.0f} ({x['wakeups']:.0f}) |",
                          flush=True)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
