"""`"MallocArenaMax": "auto"` (issue 30): the arena cap comes from the CPUs the container
allows, set in the LD_PRELOAD constructor before the host's threads exist. The demo host
with 8 workers (each would get an arena of its own) runs preloaded in a cgroup v1 with a
CPU limit of half a CPU, and beside it, the control, the same host outside that cgroup,
capped by its affinity mask: the first must stay at the quota's 2 arenas while the
control reaches its cap of 2 per CPU of the mask."""
import os
from pathlib import Path

import pytest
import requests

from hosts_util import build_file, preload_env, procs  # noqa: F401  (a fixture)
from wait import wait_for

V1_CPU_MOUNTS = ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu")


def v1_cpu_root():
    for p in V1_CPU_MOUNTS:
        if (Path(p) / "cpu.cfs_quota_us").exists():
            return Path(p)
    raise AssertionError(f"no cgroup v1 cpu controller at {V1_CPU_MOUNTS} (the v2 case runs "
                         "in tests/vm)")


@pytest.fixture
def cpu_cgroup():
    """A v1 cpu cgroup limited to half a CPU (50 ms of each 100 ms), removed at the end."""
    d = v1_cpu_root() / f"memtrim-arena-auto-{os.getpid()}"
    d.mkdir()
    (d / "cpu.cfs_period_us").write_text("100000")
    (d / "cpu.cfs_quota_us").write_text("50000")
    yield d
    for pid in (d / "cgroup.procs").read_text().split():  # none left: the hosts were stopped
        (d.parent / "cgroup.procs").write_text(pid)
    d.rmdir()


def start(procs, tmp_path, name, cgroup=None):  # noqa: F811
    cfg = {"HttpPort": 0, "Database": ":memory:", "MallocArenaMax": "auto"}

    def enter():  # in the child, before exec: the constructor runs inside the cgroup
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    p = procs([build_file("memtrim-demo"), "--no-memtrim", "--workers", "8", "--study-mb", "8",
               "--pause-ms", "20", "--quiet"], tmp_path / f"{name}.log",
              env=preload_env(cfg), preexec_fn=enter if cgroup else None)
    return p, f"http://127.0.0.1:{p.api_port()}/"


def stats(base):
    return requests.get(base + "memory/stats", timeout=10).json()


def test_auto_takes_the_cgroup_cpu_quota(procs, tmp_path, cpu_cgroup):  # noqa: F811
    limited, lbase = start(procs, tmp_path, "limited", cpu_cgroup)
    control, cbase = start(procs, tmp_path, "control")
    ls, cs = stats(lbase), stats(cbase)
    cap_control = 2 * len(os.sched_getaffinity(0))
    assert ls["malloc_tunables"]["arena_max"] == 2, ls["malloc_tunables"]
    auto = ls["malloc_tunables"]["arena_max_auto"]
    assert auto["cpus"] == 0.5, auto
    assert auto["source"] == f"{cpu_cgroup}/cpu.cfs_quota_us: 50000 (cpu.cfs_period_us 100000)"
    assert (f"MallocArenaMax auto: 2 arenas for 0.50 CPUs ({cpu_cgroup}/cpu.cfs_quota_us"
            in limited.output()), limited.output()[-2000:]
    assert cs["malloc_tunables"]["arena_max"] == cap_control, cs["malloc_tunables"]
    assert cs["malloc_tunables"]["arena_max_auto"]["source"].startswith("affinity mask: ")
    # glibc honours it: the control's 8 workers reach its cap, the limited host's stay at 2
    # (each counted by a fresh malloc_info: /memory/arenas, 503 while the budget is spent)
    want = min(cap_control, 8)
    wait_for(lambda: (arenas(cbase) or 0) >= want, 60, f"the control's arenas to reach {want}")
    wait_for(lambda: arenas(lbase) == 2, 60, "the limited host's arenas to reach 2")
    # and stay there: 3 counted readings (each waited for past the budget), each exactly 2
    counts = [wait_for(lambda: arenas(lbase), 60, "a counted reading") for _ in range(3)]
    assert counts == [2, 2, 2], counts
    assert limited.stop() == 0 and control.stop() == 0


def arenas(base):
    """The arena count of a fresh malloc_info (200); None when the probe budget said wait
    (503 probe_budget); any other answer fails the test."""
    r = requests.get(base + "memory/arenas", timeout=10)
    if r.status_code == 503 and r.json()["error"]["code"] == "probe_budget":
        return None
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()["arena_count"]
