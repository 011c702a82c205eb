#!/usr/bin/python3
"""What memtrim saved, held against reality (issue 30): each workload runs without
memtrim and with it, interleaved (A, B, A, B, ...), in one sitting. The run without
memtrim is the truth: its RSS over time, at its end and its peak (VmHWM). The run with
memtrim reports its counterfactual (`rss_without_memtrim_bytes`, and the peak
`rss_without_memtrim_peak_bytes`) in /memory/stats, polled every 100 ms.

Prints a Markdown table on stdout: per workload and host allocator, the medians over the
runs of the end and peak figures, the counterfactual's error against the run without
memtrim at both, and the median error over time (the runs aligned on their start).

  bench/saved/run.py --build build --runs 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
# host: (LD_PRELOAD, extra environment); jemalloc-bg: jemalloc with its background threads,
# whose decay returns dirty pages within dirty_decay_ms (10 s) whether the host allocates or not
ALLOCATORS = {"glibc": (None, {}), "jemalloc": (LIBDIR / "libjemalloc.so.2", {}),
              "jemalloc-bg": (LIBDIR / "libjemalloc.so.2",
                              {"MALLOC_CONF": "background_thread:true"}),
              "tcmalloc": (LIBDIR / "libtcmalloc_minimal.so.4", {})}
MB = 1 << 20

# name, what it is, the demo's arguments (each ends idle: --linger keeps the process, and
# memtrim, running with what the workload kept)
WORKLOADS = [
    ("burst-idle", "4 workers take a 150 MB study each at once, then idle",
     ["--workers", "4", "--concurrency", "4", "--study-mb", "150", "--studies", "4",
      "--pause-ms", "0", "--linger", "8"]),
    ("pool-pauses", "8 workers, 24 studies of 100 MB one at a time, 200 ms apart, then idle",
     ["--workers", "8", "--study-mb", "100", "--studies", "24", "--pause-ms", "200",
      "--linger", "6"]),
    ("comes-back", "1 worker, 8 studies of 200 MB, 1.5 s apart: what a trim released comes back",
     ["--workers", "1", "--study-mb", "200", "--studies", "8", "--pause-ms", "1500",
      "--linger", "4"]),
    ("burst-long-idle", "the burst, then 30 s idle: longer than jemalloc's decay (only by --only)",
     ["--workers", "4", "--concurrency", "4", "--study-mb", "150", "--studies", "4",
      "--pause-ms", "0", "--linger", "30"]),
    ("stays-live", "8 workers, one 60 MB study each, all of it kept live: nothing to save",
     ["--workers", "8", "--study-mb", "60", "--studies", "8", "--keep-percent", "100",
      "--pause-ms", "200", "--linger", "6"]),
]


def status_kb(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def get_stats(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/memory/stats", timeout=2) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def run_once(build, args, allocator, with_memtrim, tmp):
    """One run: [(t, rss, cf)], its last RSS, its VmHWM, and (with memtrim) the last stats."""
    cmd = [str(Path(build) / "memtrim-demo"), "--quiet"] + args
    env = dict(os.environ)
    lib, extra = ALLOCATORS[allocator]
    if lib:
        env["LD_PRELOAD"] = str(lib)
    env.update(extra)
    port_file = Path(tmp) / f"port-{time.monotonic_ns()}"
    if with_memtrim:
        cfg = {"HttpPort": 0, "Database": ":memory:"}
        cmd += ["--config", json.dumps(cfg), "--port-file", str(port_file)]
    else:
        cmd += ["--no-memtrim"]
    linger = float(args[args.index("--linger") + 1])
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    t0 = time.monotonic()
    done = []  # when the workload ended: the idle --linger seconds start

    def read_out():
        for line in p.stdout:
            if "workload done" in line:
                done.append(time.monotonic())

    threading.Thread(target=read_out, daemon=True).start()
    trace, last_rss, hwm, stats, port = [], None, None, None, None
    while p.poll() is None:
        if done and time.monotonic() > done[0] + linger - 0.5:
            break  # the end: idle, before the demo's teardown frees what it kept
        t = time.monotonic() - t0
        rss = status_kb(p.pid, "VmRSS:")
        peak = status_kb(p.pid, "VmHWM:")
        if with_memtrim and port is None and port_file.exists():
            text = port_file.read_text().strip()
            port = int(text) if text.isdigit() else None
        cf = None
        if port is not None:
            s = get_stats(port)
            if s is not None:
                stats, cf = s, s["rss_without_memtrim_bytes"]
                rss = s["rss_bytes"]
        if rss is not None:
            last_rss, hwm = rss, peak if peak is not None else hwm
            trace.append((t, rss, cf))
            if TRACE is not None:
                TRACE.append({"t": round(t, 2), "rss": rss, "cf": cf, "memtrim": with_memtrim,
                              "allocator": (stats or {}).get("allocator", {}).get("stats")
                              if cf is not None else None})
        time.sleep(0.1)
    p.wait()
    return trace, last_rss, hwm, stats


TRACE = None  # --trace: every reading of every run, written as JSON lines


def at(trace, t):
    """The RSS of the trace nearest to time t."""
    return min(trace, key=lambda x: abs(x[0] - t))[1]


def err(est, truth):
    return 100.0 * (est - truth) / truth if truth else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", help="workload names, comma-separated")
    ap.add_argument("--allocators", default="glibc,jemalloc")
    ap.add_argument("--trace", help="a directory: each run's readings as <host>-<workload>-<n>.json")
    a = ap.parse_args()
    global TRACE
    only = set(a.only.split(",")) if a.only else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for alloc in a.allocators.split(","):
            for name, what, args in WORKLOADS:
                if (only and name not in only) or (not only and name == "burst-long-idle"):
                    continue
                res = {k: [] for k in ("end0", "peak0", "end1", "cf_end", "peak1", "cf_peak",
                                       "e_end", "e_peak", "e_time", "saved_end")}
                for n in range(a.runs):
                    TRACE = [] if a.trace else None
                    base, end0, hwm0, _s = run_once(a.build, args, alloc, False, tmp)
                    tr, end1, hwm1, st = run_once(a.build, args, alloc, True, tmp)
                    if a.trace:
                        out = Path(a.trace) / f"{alloc}-{name}-{n}.json"
                        out.write_text("\n".join(json.dumps(x) for x in TRACE) + "\n")
                    if not base or not st:
                        print(f"{alloc} {name}: a run failed", file=sys.stderr)
                        continue
                    cf_end = st["rss_without_memtrim_bytes"]
                    cf_peak = st["rss_without_memtrim_peak_bytes"]
                    over_time = [abs(err(cf, at(base, t))) for t, _r, cf in tr if cf is not None]
                    for k, v in (("end0", end0), ("peak0", hwm0), ("end1", st["rss_bytes"]),
                                 ("cf_end", cf_end), ("peak1", st["rss_peak_bytes"]),
                                 ("cf_peak", cf_peak), ("e_end", err(cf_end, end0)),
                                 ("e_peak", err(cf_peak, hwm0)),
                                 ("e_time", statistics.median(over_time) if over_time else 0),
                                 ("saved_end", st["saved_bytes"])):
                        res[k].append(v)
                    print(f"{alloc} {name}: without {end0 / MB:.0f} MB (peak {hwm0 / MB:.0f}),"
                          f" with {st['rss_bytes'] / MB:.0f} MB, counterfactual "
                          f"{cf_end / MB:.0f} (peak {cf_peak / MB:.0f})", file=sys.stderr)
                if res["end0"]:
                    rows.append((alloc, name, what, {k: statistics.median(v)
                                                     for k, v in res.items()}, len(res["end0"])))
    print("| host | workload | without memtrim: end / peak MB | with: RSS end / peak MB |"
          " counterfactual: end / peak MB | error at end / peak | median error over time |"
          " runs |")
    print("|---|---|---|---|---|---|---|---|")
    for alloc, name, what, m, n in rows:
        print(f"| {alloc} | {name}: {what} | {m['end0'] / MB:.0f} / {m['peak0'] / MB:.0f} |"
              f" {m['end1'] / MB:.0f} / {m['peak1'] / MB:.0f} |"
              f" {m['cf_end'] / MB:.0f} / {m['cf_peak'] / MB:.0f} |"
              f" {m['e_end']:+.1f} % / {m['e_peak']:+.1f} % | {m['e_time']:.1f} % | {n} |")


if __name__ == "__main__":
    main()
