#!/usr/bin/python3
"""The node agent's cost at rest (docs/benchmarks.md, "The node agent"): N memory cgroups with a
limit, P processes in each (sleep(1), glibc, never near their limit), `memtrim agent` beside
them allowed on those cgroups alone. Once it watches them all, its own CPU (utime + stime from
/proc/PID/stat, no command runs at rest), RSS and descriptors over a window, and its last scan's
duration. Needs root and a memory cgroup controller.

    sudo bench/agent/rest.py BUILD_DIR [--cgroups 100] [--procs 10] [--seconds 60]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


def make_cgroup(name, limit):
    if (V1 / "memory.limit_in_bytes").exists():
        path = V1 / name
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit))
        return path
    path = V2 / name
    path.mkdir()
    (path / "memory.max").write_text(str(limit))
    return path


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid):
    m = re.search(r"^VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cgroups", type=int, default=100)
    ap.add_argument("--procs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--config", default="{}", help="more of the agent's configuration (JSON)")
    a = ap.parse_args()
    prefix = f"memtrim-bench-agent-{os.getpid()}"
    cgroups, sleepers, agent = [], [], None
    try:
        for i in range(a.cgroups):
            cg = make_cgroup(f"{prefix}-{i}", 1 << 30)
            cgroups.append(cg)
            for _ in range(a.procs):
                sleepers.append(subprocess.Popen(
                    ["/bin/sh", "-c", f'echo $$ > "{cg}/cgroup.procs" && exec sleep 3600']))
        cfg = {"HttpPort": 0, "AllowCgroups": [f"/{prefix}-*"]}
        cfg.update(json.loads(a.config))
        log = open(f"/tmp/{prefix}.log", "w")
        agent = subprocess.Popen([str(Path(a.build) / "memtrim"), "agent", "--config", json.dumps(cfg)],
                                 stdout=log, stderr=subprocess.STDOUT)
        address = None
        t0 = time.monotonic()
        while not address and time.monotonic() - t0 < 30:
            m = re.search(r"listening on (\S+)", Path(log.name).read_text())
            address = m and m.group(1)
            time.sleep(0.05)

        def get(path):
            with urllib.request.urlopen(f"http://{address}{path}", timeout=30) as r:
                return json.loads(r.read())
        want = a.cgroups * a.procs
        while True:
            cgs = get("/agent/cgroups")["cgroups"]
            seen = sum(len(c["processes"]) for c in cgs)
            if len(cgs) >= a.cgroups and seen >= want:
                break
            if time.monotonic() - t0 > 300:
                sys.exit(f"the agent saw {len(cgs)} cgroups and {seen} processes in 300 s")
            time.sleep(0.2)
        settle = time.monotonic() - t0
        c0, w0 = cpu_seconds(agent.pid), time.monotonic()
        time.sleep(a.seconds)
        c1, w1 = cpu_seconds(agent.pid), time.monotonic()
        health = get("/healthz")
        fds = len(os.listdir(f"/proc/{agent.pid}/fd"))
        load = open("/proc/loadavg").read().split()[0]
        print(f"| {a.cgroups} | {want} | {100 * (c1 - c0) / (w1 - w0):.3f} % | {rss_kb(agent.pid) / 1024:.1f} MiB "
              f"| {fds} | {health['last_scan_ms']:.1f} ms | {settle:.1f} s | {load} |")
    finally:
        if agent:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()
        for cg in cgroups:
            for _ in range(50):
                try:
                    cg.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


if __name__ == "__main__":
    main()
