#!/usr/bin/python3
"""The pressure benchmark (issue 9): the demo's pool workload (8 long-lived
workers, studies of 150 MB in 1-64 KB blocks, one at a time, 2 % kept) in a
memory cgroup, for every limit x pause x mode; then memtrim's own CPU on an
idle host, outside the pressure zone and inside it with RSS steady, woken by the
kernel as it finds it (v1 thresholds, v2 PSI), from a read-only cgroup2 mount
(memory.events; v2 only) and by the poll.

Run through bench/pressure/run.sh (root; cgroup v1 memory controller or v2; the v2
figures from the VM: tests/vm/run.sh -- bench/pressure/run.sh ...).
Cgroups (tests/e2e/hosts_util.py) are named memtrim-pressure-bench-*; each is
removed after its run.
Prints a Markdown report on stdout.
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
from hosts_util import Cgroup  # noqa: E402  (the e2e tests' cgroups: v1 or v2, removed whole)
# the workload, shared with the tests
from pressure_util import Outcome, demo_command, docker_like  # noqa: E402

LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
TCMALLOC = LIBDIR / "libtcmalloc_minimal.so.4"
JEMALLOC = LIBDIR / "libjemalloc.so.2"
PORT = int(os.environ.get("BENCH_PORT", "19050"))  # the pressure helper's range


def make_cgroup(limit):
    """A memory cgroup with this limit and no swap, named for this benchmark."""
    make_cgroup.count += 1
    return Cgroup(f"memtrim-pressure-bench-{os.getpid()}-{make_cgroup.count}", limit)


make_cgroup.count = 0


def make_cgroup_version():
    """1 or 2: the hierarchy make_cgroup creates its cgroups in."""
    cg = make_cgroup(64 << 20)
    try:
        return cg.version
    finally:
        cg.remove()


def memtrim_env(build, tmp, limit=None, poll=False, port=0):
    cfg = {"HttpPort": port, "Database": ""}
    if poll:
        cfg["MemoryLimitBytes"] = limit
    path = Path(tmp) / f"memtrim-{os.getpid()}-{port}-{int(poll)}.json"
    path.write_text(json.dumps(cfg))
    env = {"LD_PRELOAD": str(build / "libmemtrim.so"), "MEMTRIM_CONFIG": str(path)}
    if poll:  # no cgroup files at all: the statm poll, the fallback of a read-only cgroup fs
        env["MEMTRIM_CGROUP_ROOT"] = "/nonexistent-memtrim-pressure-bench"
    return env, []


MODES = {
    "none": lambda b, t, lim: ({}, []),
    "memtrim": lambda b, t, lim: memtrim_env(b, t),
    "memtrim-poll": lambda b, t, lim: memtrim_env(b, t, lim, poll=True),
    "trim-each": lambda b, t, lim: ({}, ["--trim-each"]),
    "tcmalloc": lambda b, t, lim: ({"LD_PRELOAD": str(TCMALLOC)}, []),
    "jemalloc-bg": lambda b, t, lim: ({"LD_PRELOAD": str(JEMALLOC),
                                       "MALLOC_CONF": "background_thread:true"}, []),
    "arena-max-2": lambda b, t, lim: ({"MALLOC_ARENA_MAX": "2"}, []),
}
TITLES = {
    "none": "no memtrim", "memtrim": "memtrim", "memtrim-poll": "memtrim, poll fallback",
    "trim-each": "`malloc_trim` after every study", "tcmalloc": "tcmalloc",
    "jemalloc-bg": "jemalloc + background thread", "arena-max-2": "`MALLOC_ARENA_MAX=2`",
}


def run_cell(build, tmp, limit_mb, pause, mode, studies, timeout):
    limit = limit_mb << 20
    extra_env, extra_args = MODES[mode](build, tmp, limit)
    cg = make_cgroup(limit)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # The mode's environment reaches the demo alone, not the shell that joins the cgroup.
    args = demo_command(pause, studies, env=extra_env, args=extra_args, build=build)
    log = Path(tmp) / f"cell-{limit_mb}-{pause}-{mode}.log"
    t0 = time.monotonic()
    try:
        with open(log, "w") as f:
            p = subprocess.Popen(cg.wrap(args), stdout=f, stderr=subprocess.STDOUT, env=env)
            try:
                rc = p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
        wall = time.monotonic() - t0
        peak = cg.peak_bytes()
    finally:
        cg.remove()  # also when the benchmark itself is stopped
    r = Outcome(rc, log.read_text(errors="replace"))
    return {"limit_mb": limit_mb, "pause_ms": pause, "mode": mode, "rc": rc,
            "completed": r.completed, "ok": r.ok,
            "peak_mb": (peak >> 20) if peak else None, "wall_s": round(wall, 2),
            "pressure_trims": r.pressure_trims, "source": r.source,
            "reaction_ms_max": max(r.reactions) if r.reactions else None,
            "reaction_ms_median": r.reaction_median()}


# The two modes the issue compares (wall time within 5 %) run --repeat times.
REPEATED = ("memtrim", "trim-each")


def summarize(rs):
    """Several runs of one cell: the worst outcome, the highest peak, the median wall time."""
    worst = min(rs, key=lambda r: (r["ok"], r["completed"]))
    walls = sorted(r["wall_s"] for r in rs)
    out = dict(worst)
    out["wall_s"] = walls[len(walls) // 2]
    out["walls"] = walls
    out["peak_mb"] = max((r["peak_mb"] or 0) for r in rs) or None
    out["runs"] = len(rs)
    return out


def cell_text(r, studies):
    peak = f"{r['peak_mb']} MB" if r["peak_mb"] is not None else "?"
    if r["ok"] and r["completed"] == studies:
        return f"{studies}/{studies} · {peak} · {r['wall_s']:.2f} s"
    if r["rc"] == -9:
        return f"**killed at {r['completed'] + 1}** · {peak}"
    return f"**exit {r['rc']} after {r['completed']}** · {peak}"


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def thread_cpu_ns(pid):
    """CPU time (schedstat, ns) of memtrim's threads, by thread name."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if name.startswith("memtrim-"):
            out[name] = out.get(name, 0) + ns
    return out


# How the idle host's memtrim is woken: "kernel" as it finds it (v1 thresholds, v2 PSI as
# root), "read-only" in a Docker-like container (cgroup2 read-only: memory.events; v2 only),
# "poll" with no cgroup files at all (the statm poll).
IDLE_HOW = ("kernel", "read-only", "poll")


def idle_cost(build, tmp, limit_mb, study_mb, how, seconds):
    """memtrim's threads' CPU on a host that did one study, keeps it all and idles."""
    limit = limit_mb << 20
    poll = how == "poll"
    port = PORT + IDLE_HOW.index(how)
    extra_env, _ = memtrim_env(build, tmp, limit, poll=poll, port=port)
    cg = make_cgroup(limit)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    args = ["/usr/bin/env", *[f"{k}={v}" for k, v in extra_env.items()],
            build / "memtrim-demo", "--no-memtrim", "--workers", "8", "--study-mb", str(study_mb),
            "--keep-percent", "100", "--pause-ms", "3600000", "--studies", "0"]
    if how == "read-only":  # as root: the case is the read-only mount, not the user
        args = docker_like(args, uid=None)
    log = Path(tmp) / f"idle-{study_mb}-{how}.log"
    with open(log, "w") as f:
        p = subprocess.Popen(cg.wrap(args), stdout=f, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + 30
        while "study 1 on worker" not in log.read_text(errors="replace"):
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"idle host did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        time.sleep(5)  # settle: the first trims, the first probes
        m0, c0, t0 = metrics(port), thread_cpu_ns(p.pid), time.monotonic()
        time.sleep(seconds)
        m1, c1, t1 = metrics(port), thread_cpu_ns(p.pid), time.monotonic()
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        cg.remove()
    wall = t1 - t0
    out = log.read_text(errors="replace")
    src = re.search(r"pressure source: (\S+)", out)
    pct = {k: (c1.get(k, 0) - c0.get(k, 0)) / 1e9 / wall * 100 for k in c1}
    delta = lambda k: m1.get(k, 0) - m0.get(k, 0)
    return {"how": how, "zone": "inside" if study_mb * 2 >= limit_mb else "outside",
            "source": src.group(1) if src else "?",
            "rss_mb": int(m1.get("memtrim_rss_bytes", 0)) >> 20, "seconds": round(wall, 1),
            "hk_pct": pct.get("memtrim-hk", 0.0), "press_pct": pct.get("memtrim-press", 0.0),
            "hk_metric_pct": delta("memtrim_housekeeper_cpu_seconds_total") / wall * 100,
            "press_metric_pct": delta("memtrim_pressure_cpu_seconds_total") / wall * 100,
            "pressure_trims": delta('memtrim_trims_total{trigger="pressure"}')}


def reactions_table(results, repeat):
    print(f"\nmemtrim's pressure trims (median / max reaction, ms, from the log of the worst "
          f"run); wall times of the {repeat} runs of memtrim and trim-each:\n")
    print("| limit | pause | mode | pressure trims | reaction median | reaction max | "
          "walls (s) | median wall vs trim-each |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        if not r["mode"].startswith("memtrim"):
            continue
        ideal = next((x for x in results if x["mode"] == "trim-each" and
                      x["limit_mb"] == r["limit_mb"] and x["pause_ms"] == r["pause_ms"]), None)
        vs = (f"{(r['wall_s'] / ideal['wall_s'] - 1) * 100:+.1f} %"
              if ideal and ideal["ok"] and r["ok"] else "–")
        print(f"| {r['limit_mb']} MB | {r['pause_ms']} ms | {r['mode']} | {r['pressure_trims']} | "
              f"{r['reaction_ms_median'] if r['reaction_ms_median'] is not None else '–'} | "
              f"{r['reaction_ms_max'] if r['reaction_ms_max'] is not None else '–'} | "
              f"{' / '.join(f'{w:.2f}' for w in r['walls'])} "
              f"(trim-each {' / '.join(f'{w:.2f}' for w in ideal['walls']) if ideal else '–'}) | "
              f"{vs} |")


def main():
    # SIGTERM ends the benchmark like ^C: the running cell's cgroup is removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--limits", default="250,300,400")
    ap.add_argument("--pauses", default="0,50,100,250,1000")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--studies", type=int, default=24)
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--idle-repeat", type=int, default=1, help="runs of each idle case")
    ap.add_argument("--no-cells", action="store_true", help="the idle host's cost alone")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the memtrim and trim-each cells (median wall time)")
    ap.add_argument("--json", help="also write every result here")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    limits = [int(x) for x in a.limits.split(",")]
    pauses = [int(x) for x in a.pauses.split(",")]
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            sys.exit(f"unknown mode {m} (known: {', '.join(MODES)})")
    for lib in (TCMALLOC, JEMALLOC):
        if not lib.exists():
            sys.exit(f"{lib} is missing (libtcmalloc-minimal4, libjemalloc2)")
    tmp = tempfile.mkdtemp(prefix="memtrim-pressure-bench-")
    results = []
    if a.no_cells:
        limits = []
    else:
        print(f"| limit | pause | " + " | ".join(TITLES[m] for m in modes) + " |")
        print("|---|---|" + "---|" * len(modes))
    for limit in sorted(limits, reverse=True):
        for pause in sorted(pauses, reverse=True):
            runs = {m: [] for m in modes}
            # Rounds, every mode once per round: a busy moment hits all of them alike.
            for rnd in range(a.repeat):
                for mode in modes:
                    if rnd == 0 or mode in REPEATED:
                        runs[mode].append(run_cell(build, tmp, limit, pause, mode, a.studies,
                                                   timeout=300))
            row = []
            for mode in modes:
                r = summarize(runs[mode])
                results.append(r)
                row.append(cell_text(r, a.studies))
            print(f"| {limit} MB | {pause} ms | " + " | ".join(row) + " |", flush=True)

    if results:
        reactions_table(results, a.repeat)

    idle = []
    if a.idle_seconds > 0:
        hows = [h for h in IDLE_HOW if h != "read-only" or make_cgroup_version() == 2]
        for how in hows:
            for study_mb in (50, 250):  # RSS ~55 MB (outside) / ~255 MB (inside) of 400 MB
                for _ in range(a.idle_repeat):
                    idle.append(idle_cost(build, tmp, 400, study_mb, how, a.idle_seconds))
        print(f"\nIdle host (400 MB limit, one study kept whole, then {a.idle_seconds:.0f} s "
              "of nothing): memtrim's CPU, % of one core (schedstat; the /metrics counters "
              "in brackets)\n")
        print("| cgroup files | pressure source | zone | RSS | housekeeper | pressure thread | "
              "both | pressure trims in the window |")
        print("|---|---|---|---|---|---|---|---|")
        for r in idle:
            print(f"| {r['how']} | {r['source']} | {r['zone']} | {r['rss_mb']} MB | "
                  f"{r['hk_pct']:.4f} % "
                  f"({r['hk_metric_pct']:.4f}) | {r['press_pct']:.4f} % "
                  f"({r['press_metric_pct']:.4f}) | {r['hk_pct'] + r['press_pct']:.4f} % | "
                  f"{r['pressure_trims']:.0f} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"cells": results, "idle": idle}, indent=1))


if __name__ == "__main__":
    main()
