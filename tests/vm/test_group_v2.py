"""Worker groups on a real cgroup v2 kernel (issues 21 and 32; run by tests/vm/run.sh):
memtrim-prefork (examples/prefork/prefork.c) with memtrim preloaded, FollowFork and one
HttpPort, in a memory.max-limited cgroup of its own (root: memtrim's pressure source is a
PSI trigger on that cgroup's memory.pressure). Its master forks 3 workers 2 s apart; each
does 4 studies of 40 MB in 1 KB blocks, 4 s apart (the absolute schedule, each worker in its
own slots), and keeps what it freed resident in its arena until something trims it. Under
100 MB (3 x 40 MB is more) the kernel kills workers unless they give the freed studies back;
two studies at once fit. The v2 twin of test_groups.py's 4-worker / 250 MB cell, sized for
TCG, whose speed follows the host's load: a 40 MB study took 0.4 s there on a quiet host and
2-3 s at load 6; 2 s apart, at most two studies overlap up to a 4 s study.

The survival cell (tests/e2e/survival_util.py): a control without memtrim that the kernel
must OOM-kill (memory.events oom_kill, the workers' SIGKILL), then 10 interleaved pairs,
malloc_trim after each study against the group, every run counted, each in its own cgroup
with its own database; the group finishes at least as many workers in total; each group
run logs psi as its pressure source and no other, and its store holds the pressure trims
of every worker but at most one. Outcomes and counts only, never a time."""
import subprocess

import pytest
import requests

from hosts_util import http_ok, wait_for
from pressure_util import SOURCE
from survival_util import control, pairs
from test_named_groups import named_runner
from test_groups import (SKIP_PAIRS, forked, group, group_trimmed, member_pids, prefork_runner,
                         start_prefork, stop_group)

MB = 1 << 20
LIMIT = 100 * MB
WORKERS = 3
PAIRS = 10
ARGS = ["--workers", str(WORKERS), "--studies", "4", "--study-mb", "40", "--pause-ms", "4000",
        "--stagger-ms", "2000", "--schedule", "absolute"]


def test_one_port_serves_the_group_under_memory_max(procs, cgroup, tmp_path):
    """One port: only the master listens and it answers for every member; the group reads
    the cgroup's usage and memory.max."""
    cg = cgroup(LIMIT)
    p, api = start_prefork(procs, tmp_path, ["--workers", str(WORKERS), "--studies", "1",
                                             "--study-mb", "8", "--stagger-ms", "0", "--hold"],
                           config={}, wrap=cg.wrap)
    info = forked(p)
    everyone = sorted([info["master"]] + info["pids"])
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == everyone, 120,
             "the workers to join the master's group")
    port = int(api.rsplit(":", 1)[1])
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    assert f"pid={info['master']}," in out and all(f"pid={w}," not in out for w in info["pids"]), out
    g = group(api)
    assert g["member_count"] == WORKERS + 1 and g["usage_source"] == "cgroup", g
    assert g["limit_bytes"] == LIMIT, g
    assert requests.get(api + "/healthz", timeout=30).status_code == 200
    stop_group(p)


def check_psi(d, finished):
    """A group run's store holds the pressure trims of every worker but one at most, and its
    log names psi as the one pressure source."""
    group_trimmed(WORKERS)(d, finished)
    sources = SOURCE.findall((d / "group.log").read_text(errors="replace"))
    assert sources and set(sources) == {"psi"}, f"{d}: pressure sources {sources}, want psi"


def test_without_memtrim_the_workers_are_oom_killed(procs, cgroup, tmp_path):
    """The cell's control: nothing trims; the kernel OOM-kills workers (memory.events
    oom_kill, their SIGKILL)."""
    control(prefork_runner(procs, tmp_path, ARGS, timeout=600), cgroup, LIMIT, WORKERS,
            f"v2: {WORKERS} workers, 100 MB")


@pytest.mark.survival
def test_the_group_survives_memory_max(procs, cgroup, tmp_path):
    """10 pairs. Measured 2026-12-03: the group 30 of 30 against 30 with the host quiet
    (15:15-15:21 UTC, 337 s), 23 against 28 with the host at load 14-33 (it fails there)."""
    pairs(prefork_runner(procs, tmp_path, ARGS, timeout=600), cgroup, LIMIT, WORKERS, PAIRS,
          f"v2: {WORKERS} workers, 100 MB", check_group=check_psi)


# The named cell (issue 32 item 4): the same studies, each worker a process of its own
# (memtrim-prefork --solo) with one GroupName, on one absolute schedule that starts 10 s
# after the processes do (they join first; TCG is slow).
NAMED_ARGS = ARGS[2:]
NAMED_PAIRS = 5


def named(procs, tmp_path):
    return named_runner(procs, tmp_path, WORKERS, NAMED_ARGS, timeout=600, start_ms=10000)


def test_without_memtrim_a_named_cell_is_oom_killed(procs, cgroup, tmp_path):
    control(named(procs, tmp_path), cgroup, LIMIT, WORKERS, f"v2 named: {WORKERS} x 100 MB")


@pytest.mark.skip(reason=SKIP_PAIRS)
def test_a_named_group_survives_memory_max(procs, cgroup, tmp_path):
    pairs(named(procs, tmp_path), cgroup, LIMIT, WORKERS, NAMED_PAIRS,
          f"v2 named: {WORKERS} x 100 MB", check_group=check_psi)
