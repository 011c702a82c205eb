"""The pressure issue's workload on a real cgroup v2 kernel (issue 20; run by tests/vm/run.sh):
8 worker threads take studies of 150 MB back to back (pause 0), each keeping 2 % until its
next (tests/e2e/pressure_util.py). Freed memory stays resident in the workers' arenas, so
under a 300 MB limit the kernel kills the host unless something gives it back.

Each placement of the limit runs three ways: without memtrim (the control: it must be
OOM-killed, else the case proves nothing), with memtrim preloaded at its defaults (it must
complete every study and say which source woke it), and with malloc_trim after every study
(the reference: it must complete too). The placements:
  own      the process's own cgroup has memory.max
  parent   only its parent has memory.max; the leaf says "max" (a systemd slice, a pod)
  docker   Docker-like: its own cgroup namespace (/proc/self/cgroup reads 0::/), cgroup2
           mounted read-only in its own mount namespace, uid nobody
memory.high (300 MB, memory.max 600 MB) does not kill: the kernel throttles the cgroup. There
the control must be throttled (memory.events "high" climbs), memtrim must complete every study
with a tenth of the control's events or fewer, and so must malloc_trim after each study.
TCG is slow: the tests assert outcomes and counts, never a time.
"""
import re

import pytest

from hosts_util import readable_build
from pressure_util import NOBODY, STUDIES, Outcome, demo_command, docker_like, memtrim_vars

MB = 1 << 20
LIMIT = 300 * MB
PAUSE_MS = 0
PLACEMENTS = ["own", "parent", "docker"]
# What must wake memtrim in each placement (core/pressure/kernel.c, arm_v2): root may write a
# PSI trigger into its own cgroup's memory.pressure (the limit read from the parent's
# memory.max, or from memory.high, changes nothing there); uid nobody in the Docker-like
# namespace opens memory.pressure on a read-only mount (EROFS) and is woken by the
# notifications of memory.events alone. Each run logs that one source, and no other.
SOURCE = {"own": "psi", "parent": "psi", "docker": "memory-events", "high": "psi"}


def assert_source(r, placement):
    want = SOURCE[placement]
    assert r.sources and all(s == want for s in r.sources), \
        f"pressure sources {r.sources}, want only {want}\n{memtrim_said(r.out)}"


def place(cgroup, placement):
    """(the cgroup with the limit, a function that wraps a command to run under it)."""
    if placement == "own":
        cg = cgroup(LIMIT)
        return cg, cg.wrap
    if placement == "parent":
        parent = cgroup(LIMIT)
        leaf = cgroup(None, parent=parent)
        return parent, leaf.wrap
    cg = cgroup(LIMIT)
    return cg, lambda args: cg.wrap(docker_like(args))


def build_for(placement):
    """Where the placement's host runs from: uid nobody (docker) cannot reach into a build
    folder in a checkout under /root (0700), so it runs copies (hosts_util.readable_build)."""
    return readable_build("memtrim-demo", "libmemtrim.so") if placement == "docker" else None


def mode_command(mode, tmp_path, studies=STUDIES, build=None):
    if mode == "none":
        return demo_command(PAUSE_MS, studies, build=build)
    if mode == "trim-each":
        return demo_command(PAUSE_MS, studies, args=["--trim-each"], build=build)
    # memtrim at its defaults; no store (uid nobody may not write tmp_path), API on loopback
    return demo_command(PAUSE_MS, studies, build=build,
                        env=memtrim_vars({"HttpPort": 0, "Database": ""}, build))


def run(procs, tmp_path, wrap, mode, studies=STUDIES, timeout=900, build=None):
    p = procs(wrap(mode_command(mode, tmp_path, studies, build)), tmp_path / f"{mode}.log")
    return Outcome(p.wait(timeout), p.output())


def report(what, run, cg):
    ev = cg.events()
    print(f"\n{what}: {run.describe()}; memory.events of {cg.path.name}: "
          f"high {ev['high']}, max {ev['max']}, oom {ev['oom']}, oom_kill {ev['oom_kill']}")
    return ev


def memtrim_said(out):
    """memtrim's own lines about the cgroup and the limit it found (for the failure text)."""
    return "\n".join(ln for ln in out.splitlines()
                     if re.search(r"memtrim/\S+: .*(cgroup|limit|pressure source)", ln))[:3000]


def test_docker_like_is_a_read_only_namespace_as_nobody(procs, cgroup, tmp_path):
    cg, wrap = place(cgroup, "docker")
    look = ("cat /proc/self/cgroup; id -u; grep cgroup2 /proc/self/mounts; "
            "cat /sys/fs/cgroup/memory.max; echo x > /sys/fs/cgroup/memory.high")
    p = procs(wrap(["/bin/sh", "-c", look]), tmp_path / "docker.log")
    rc, out = p.wait(60), p.output()
    lines = out.splitlines()
    assert lines[:2] == ["0::/", str(NOBODY)], out
    mount = lines[2].split()
    assert mount[1:3] == ["/sys/fs/cgroup", "cgroup2"] and mount[3].startswith("ro,"), out
    assert lines[3] == str(LIMIT), out
    assert rc != 0 and "Read-only file system" in out, out


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_without_memtrim_the_kernel_kills_it(procs, cgroup, tmp_path, placement):
    cg, wrap = place(cgroup, placement)
    r = run(procs, tmp_path, wrap, "none", build=build_for(placement))
    ev = report(f"{placement}, without memtrim", r, cg)
    assert r.killed, f"the control was not OOM-killed ({r.describe()}): the case is void\n" \
        f"{r.out[-2000:]}"
    assert r.completed < STUDIES and ev["oom_kill"] >= 1


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_malloc_trim_after_each_study_completes(procs, cgroup, tmp_path, placement):
    cg, wrap = place(cgroup, placement)
    r = run(procs, tmp_path, wrap, "trim-each", build=build_for(placement))
    ev = report(f"{placement}, malloc_trim after each study", r, cg)
    assert r.ok and r.completed == STUDIES, r.out[-2000:]
    assert ev["oom_kill"] == 0


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_memtrim_completes_every_study(procs, cgroup, tmp_path, placement):
    cg, wrap = place(cgroup, placement)
    r = run(procs, tmp_path, wrap, "memtrim", build=build_for(placement))
    ev = report(f"{placement}, memtrim at its defaults", r, cg)
    said = memtrim_said(r.out)
    assert r.ok and r.completed == STUDIES, f"{r.describe()}\n{said}\n{r.out[-1500:]}"
    assert ev["oom_kill"] == 0
    assert_source(r, placement)


# ---- memory.high: throttled, not killed -----------------------------------
HIGH = 300 * MB
HIGH_MAX = 600 * MB
# The control crawls (the kernel's penalty sleeps, up to 2 s an allocation): under TCG its
# second study alone takes minutes. It runs this long (a budget, not an assertion), then the
# demo stops itself; the memtrim case must stay far below the events it collected.
HIGH_CONTROL_SECONDS = 60


def high_cgroup(cgroup):
    return cgroup(HIGH_MAX, high_bytes=HIGH)


@pytest.fixture(scope="module")
def high_control(tmp_path_factory):
    """The host without memtrim under memory.high: its memory.events after the budget."""
    import os

    from hosts_util import Cgroup, Proc
    tmp = tmp_path_factory.mktemp("high-control")
    cg = Cgroup(f"memtrim-vm-high-control-{os.getpid()}", HIGH_MAX, high_bytes=HIGH)
    try:
        cmd = demo_command(PAUSE_MS, STUDIES, args=["--seconds", HIGH_CONTROL_SECONDS])
        p = Proc(cg.wrap(cmd), tmp / "none.log")
        try:
            r = Outcome(p.wait(HIGH_CONTROL_SECONDS + 600), p.output())
        finally:
            p.stop(grace=5)
        ev = report(f"memory.high, without memtrim ({HIGH_CONTROL_SECONDS} s)", r, cg)
    finally:
        cg.remove()
    return r, ev


def test_memory_high_throttles_the_host_without_memtrim(high_control):
    r, ev = high_control
    # Throttled, not killed: the kernel reclaimed at memory.high again and again.
    assert ev["oom_kill"] == 0, ev
    assert ev["high"] >= 100, f"the control was hardly throttled ({ev}): the case is void"
    assert r.completed < STUDIES, r.describe()


def assert_far_below_the_control(ev, high_control, out):
    control = high_control[1]["high"]
    assert ev["high"] * 10 <= control, \
        f"{ev['high']} high events in {STUDIES} studies, the control {control} in " \
        f"{HIGH_CONTROL_SECONDS} s\n{memtrim_said(out)}"


def test_memory_high_malloc_trim_after_each_study(procs, cgroup, tmp_path, high_control):
    cg = high_cgroup(cgroup)
    r = run(procs, tmp_path, cg.wrap, "trim-each")
    ev = report("memory.high, malloc_trim after each study", r, cg)
    assert r.ok and r.completed == STUDIES, r.out[-2000:]
    assert_far_below_the_control(ev, high_control, r.out)


def test_memory_high_memtrim_keeps_the_host_below_it(procs, cgroup, tmp_path, high_control):
    cg = high_cgroup(cgroup)
    r = run(procs, tmp_path, cg.wrap, "memtrim")
    ev = report("memory.high, memtrim at its defaults", r, cg)
    assert r.ok and r.completed == STUDIES, f"{r.describe()}\n{memtrim_said(r.out)}"
    assert ev["oom_kill"] == 0
    assert_source(r, "high")
    assert_far_below_the_control(ev, high_control, r.out)
