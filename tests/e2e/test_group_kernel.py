"""The leader's kernel wake-ups drive the group's decision (issue 38, item 4): a worker
group's leader runs one pressure engine, whose thread the kernel wakes (a cgroup v1 usage
threshold, a PSI trigger, memory.events); each such wake-up also wakes the group thread,
which looks at the set at once instead of at its next tick (100 ms, 10 ms inside the zone).

Counted, not timed: memtrim-prefork's workers climb through their own memory cgroup's
zone (2 workers, 6 studies of 80 MB each, 100 ms apart, over 100 MB the master touched
before its fork, in 300 MB, where they fit without trims: each study crosses lines of the
v1 threshold ladder from 150 MB),
and /metrics must show kernel wake-ups of the leader's engine and, for them, looks of the
group's decision run at once (memtrim_group_kernel_looks_total; those that picked a member
to trim, memtrim_group_kernel_picks_total, are printed). Control
eng-group-tick-only (the engine does not wake the group; the group decides on its tick
alone): no look is counted and the case fails. Needs root and a memory cgroup (it skips
with the reason otherwise)."""
import re

import pytest
import requests

from hosts_util import cgroup, procs, wait_for  # noqa: F401
from test_groups import start_prefork, stop_group

MB = 1 << 20
STUDIES = 6
WORKERS = 2


def metrics(api):
    text = requests.get(api + "/metrics", timeout=10).text
    out = {}
    for name in ("memtrim_pressure_kernel_wakeups_total", "memtrim_group_kernel_looks_total",
                 "memtrim_group_kernel_picks_total", "memtrim_group_pressure_trims_total"):
        m = re.search(rf"^{name} (\d+)$", text, re.M)
        out[name] = int(m.group(1)) if m else None
    src = re.search(r'^memtrim_pressure_source_info\{source="([^"]+)"\} 1$', text, re.M)
    out["source"] = src.group(1) if src else None
    return out


def test_the_kernel_wakes_the_groups_decision(procs, cgroup, tmp_path):  # noqa: F811
    cg = cgroup(300 * MB)
    pids = tmp_path / "done"
    pids.mkdir()
    p, api = start_prefork(procs, tmp_path, [
        "--workers", str(WORKERS), "--studies", str(STUDIES), "--study-mb", "80",
        "--pause-ms", "400", "--stagger-ms", "100", "--shared-mb", "100", "--hold",
        "--pid-dir", str(pids)], config={"TrimIntervalSeconds": 0}, wrap=cg.wrap)
    first = wait_for(lambda: (lambda m: m if m["source"] else None)(metrics(api)), 30,
                     "the leader's pressure source")
    if first["source"] not in ("cgroup-v1-threshold", "psi", "memory-events"):
        pytest.skip(f"the leader's engine is not woken by the kernel here: {first['source']}")
    last = {}

    def looked():
        last.update(metrics(api))
        return last["memtrim_group_kernel_looks_total"]
    wait_for(looked, 60, "a look of the group's decision at a kernel wake-up")
    wait_for(lambda: len(list(pids.iterdir())) == WORKERS, 60, "the workers' studies")
    seen = metrics(api)
    wakeups = seen["memtrim_pressure_kernel_wakeups_total"]
    looks = seen["memtrim_group_kernel_looks_total"]
    print(seen)
    assert wakeups >= 1 and looks >= 1, seen
    stop_group(p)
