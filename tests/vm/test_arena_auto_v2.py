"""`"MallocArenaMax": "auto"` on cgroup v2 (issue 30): the demo host with 8 workers runs
preloaded in a v2 cgroup whose cpu.max allows one CPU (100 ms of each 100 ms); it must
say so in /memory/stats (arena_max_auto: 1 CPU, from that cgroup's cpu.max) and its
workers stay within 2 arenas. The control, the same host outside the quota, is capped
by its affinity mask (2 per CPU of the guest's) and its 8 workers get more arenas.
The v1 case is tests/e2e/test_arena_auto.py, whose host and readings this shares."""
import os

from test_arena_auto import arenas, start, stats  # tests/e2e (conftest's path)
from wait import wait_for


def cpu_quota(cg, quota_us, period_us):
    """cpu.max on cg (a Cgroup of hosts_util), the cpu controller enabled above it."""
    subtree = cg.path.parent / "cgroup.subtree_control"
    if "cpu" not in subtree.read_text().split():
        subtree.write_text("+cpu")
    (cg.path / "cpu.max").write_text(f"{quota_us} {period_us}")
    return cg.path


def test_auto_takes_the_v2_cpu_max(procs, cgroup, tmp_path):  # noqa: F811
    path = cpu_quota(cgroup(None), 100000, 100000)
    limited, lbase = start(procs, tmp_path, "limited", path)
    control, cbase = start(procs, tmp_path, "control")
    ls, cs = stats(lbase), stats(cbase)
    cap_control = 2 * len(os.sched_getaffinity(0))
    assert cap_control > 2, f"the guest allows {cap_control // 2} CPU: no control to tell apart"
    assert ls["malloc_tunables"]["arena_max"] == 2, ls["malloc_tunables"]
    auto = ls["malloc_tunables"]["arena_max_auto"]
    assert auto["cpus"] == 1, auto
    assert auto["source"] == f"{path}/cpu.max: 100000 100000", auto
    assert f"MallocArenaMax auto: 2 arenas for 1.00 CPUs ({path}/cpu.max" in limited.output(), \
        limited.output()[-2000:]
    assert cs["malloc_tunables"]["arena_max"] == cap_control, cs["malloc_tunables"]
    assert cs["malloc_tunables"]["arena_max_auto"]["source"].startswith("affinity mask: ")
    # glibc honours it: the control's 8 workers pass 2 arenas, the limited host's stay at 2
    # (each counted by a fresh malloc_info: /memory/arenas; None while the budget says wait)
    want = min(cap_control, 8)
    wait_for(lambda: (arenas(cbase) or 0) >= want, 300, f"the control's arenas to reach {want}")
    wait_for(lambda: arenas(lbase) == 2, 300, "the limited host's arenas to reach 2")
    counts = [wait_for(lambda: arenas(lbase), 300, "a counted reading") for _ in range(3)]
    assert counts == [2, 2, 2], counts
    assert limited.stop() == 0 and control.stop() == 0
