"""Figures a user can trust: right after a burst, /memory/stats and /metrics show the RSS of
that moment, not the cached reading (up to StatsMaxAgeMs old, older while a heap probe
waits on the host's arenas). The host is Debian's python3 with memtrim preloaded, driven
over its stdin: each step allocates 192 MiB in 4 KB strings (filled, so resident) or frees
them, and the response that follows must be within 5 % of /proc's RSS, read right after.
Trims are off, so that only the host moves RSS. Four rounds, eight counted comparisons a
route; the control rt-stats-cached-rss (the cached RSS served) fails them."""
import subprocess
from pathlib import Path

import pytest
import requests

from conftest import metric_value
from hosts_util import preload_env, procs  # noqa: F401
from wait import wait_for

PYTHON = "/usr/bin/python3"
NO_TRIMS = {"HttpPort": 0, "Database": "", "TrimIntervalSeconds": 0,
            "TrimReleasableTriggerBytes": 0, "PressureRatio": 0, "ManualTrimMinIntervalMs": 0}
HOST = r"""
import sys
held = []
for n, line in enumerate(sys.stdin, 1):
    if line.strip() == "alloc":
        held.extend(bytearray(b"x" * 4000) for _ in range(48 * 1024))  # 192 MiB, written
    else:
        held.clear()
    print(f"step {n} done", flush=True)
"""


def proc_rss(pid):
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * 4096


@pytest.mark.parametrize("route", ["/memory/stats", "/metrics"])
def test_rss_right_after_a_burst_is_the_kernels(procs, tmp_path, route):  # noqa: F811
    if not Path(PYTHON).exists():
        pytest.skip(f"{PYTHON} is not installed")
    p = procs([PYTHON, "-c", HOST], tmp_path / "host.log", env=preload_env(NO_TRIMS),
              stdin=subprocess.PIPE)
    api = f"http://127.0.0.1:{p.api_port()}"
    requests.get(api + route, timeout=10)  # a cached reading from before the bursts
    seen = []
    for step, cmd in enumerate(["alloc", "free"] * 4, 1):
        p.proc.stdin.write(f"{cmd}\n".encode())
        p.proc.stdin.flush()
        wait_for(lambda: f"step {step} done" in p.output(), 60, f"the host's step {step}",
                 interval=0.005)
        r = requests.get(api + route, timeout=10)
        kernel = proc_rss(p.pid)
        assert r.status_code == 200, r.text
        if route == "/memory/stats":
            shown = r.json()["rss_bytes"]
            assert r.json()["rss_age_ms"] <= r.json()["cheap_age_ms"], r.json()
        else:
            shown = int(metric_value(r.text, "memtrim_rss_bytes"))
        seen.append((cmd, shown >> 20, kernel >> 20))
        assert abs(shown - kernel) <= 0.05 * kernel, \
            f"{route} said {shown >> 20} MiB after {cmd}, /proc {kernel >> 20} MiB (MiB so far: {seen})"
    assert max(k for _, _, k in seen) - min(k for _, _, k in seen) >= 150, \
        f"the bursts did not move RSS by 150 MiB: {seen}"
