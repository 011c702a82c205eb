"""The memtrim command never runs its call under a real-time or idle scheduling policy (issue
37: nothing may change what the target observes). The thread the taken one clones inherits its
policy and the glibc thread that makes the call inherits the raw thread's, so a call taken in
a SCHED_FIFO thread ran in real time, holding a CPU from every fair thread of the process for
its whole call (and one taken in a SCHED_IDLE thread would hold arena locks at almost no CPU).
Only threads under SCHED_OTHER or SCHED_BATCH are taken (cli/pick.c, fair_policy).

memtrim-cli-target with 3 holders (60 MB of freed heap, each blocked in a pipe read, the thread
the pick prefers to the main one) set to SCHED_FIFO 1, its main thread (in a read of stdin)
left SCHED_OTHER: CALLS trims, each watched from a thread of the test that reads the policy of
every new thread of the target while the tool runs; none may be real-time, and the main thread
is the one taken. With every thread real-time: exit 4 naming the policy, nothing mapped.
Control cmd-unfair-policy-taken (the policy unread): a holder is taken and memtrim's threads
run SCHED_FIFO.

The nice and the CPU affinity are inherited the same way: at a nice above the process's own (a
background thread's 19) memtrim's thread holds arena locks at a sliver of a CPU while the
process's threads wait on them; pinned to a thread's own CPU (an isolated core), it takes that
CPU from it. The threads at the main thread's nice and on its CPUs are taken first: the
holders at nice 19, or pinned to CPU 1, the main thread at 0 on every CPU: CALLS trims take
the main thread, call at nice 0 and run on every CPU. Control cmd-nice-unordered: a holder is
taken, the call at nice 19 or pinned.
So are the cgroups: the holders in a v1 cpu cgroup throttled to 1 % of a CPU, the main thread
outside it: the main thread taken and memtrim's threads never seen in that cgroup; control
cmd-nice-unordered: they run in it.
"""
import json
import os
import subprocess
import threading

from pathlib import Path

import pytest

from conftest import BUILD
from wait import wait_for

TOOL = BUILD / "memtrim"
TARGET = BUILD / "memtrim-cli-target"
CALLS = 5
FIFO = os.SCHED_FIFO
CPU_V1 = Path("/sys/fs/cgroup/cpu")


def tids(pid):
    return {int(t) for t in os.listdir(f"/proc/{pid}/task")}


def policy(pid, tid):
    """The thread's policy (stat field 41), None once it is gone."""
    try:
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[38])


def target(fifo_main, niced=False, pinned=False, fifo=True):
    """The holders (and with fifo_main the main thread) SCHED_FIFO, or with niced at nice 19,
    or with pinned on CPU 1 alone."""
    p = subprocess.Popen([str(TARGET), "--holders", "3", "--hold-mb", "20"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    for t in tids(p.pid):
        if niced and t != p.pid:
            os.setpriority(os.PRIO_PROCESS, t, 19)
        elif pinned and t != p.pid:
            os.sched_setaffinity(t, {1})
        elif fifo and not niced and not pinned and (t != p.pid or fifo_main):
            os.sched_setscheduler(t, FIFO, os.sched_param(1))
    return p


def cpus(tid):
    """The thread's CPUs, None once it is gone."""
    try:
        return frozenset(os.sched_getaffinity(tid))
    except OSError:
        return None


def watched_trim(p, probe=None):
    """One trim, and probe(pid, tid) (the policy) of the target's threads born while it ran."""
    probe = probe or policy
    own, seen, done = tids(p.pid), {}, threading.Event()

    def watch():
        while not done.is_set():
            try:
                for t in tids(p.pid) - own:
                    pol = probe(p.pid, t)
                    if pol is not None:
                        seen.setdefault(t, set()).add(pol)
            except FileNotFoundError:  # the target gone: the test says so
                return
    w = threading.Thread(target=watch)
    w.start()
    try:
        r = subprocess.run([str(TOOL), "trim", str(p.pid), "--json", "--thread-wait", "1"],
                           capture_output=True, text=True, timeout=60)
    finally:
        done.set()
        w.join()
    return r, seen


def watched_trims(p, probe, wrong, what):
    """CALLS trims, each watched with probe: none of memtrim's threads may show a value for which
    wrong(values) holds, and the main thread is the one taken."""
    watched = 0
    for i in range(CALLS):
        r, seen = watched_trim(p, probe)
        assert p.poll() is None, f"call {i}: the target died"
        bad = {t: v for t, v in seen.items() if wrong(v)}
        assert not bad, f"call {i}: memtrim's threads ran {what}: {bad}"
        watched += bool(seen)
        assert r.returncode == 0, (i, r.returncode, r.stderr)
        assert json.loads(r.stdout)["thread"] == p.pid, (i, "a holder was taken")
    assert watched, "the watch never saw memtrim's threads: it proved nothing"


def test_a_real_time_thread_is_never_taken():
    p = target(fifo_main=False)
    try:
        policies = {t: policy(p.pid, t) for t in tids(p.pid)}
        watched_trims(p, policy, lambda v: v - {0, 3}, "under a policy not fair (1: SCHED_FIFO)")
        assert {t: policy(p.pid, t) for t in tids(p.pid)} == policies
    finally:
        p.kill()
        p.wait()


def test_only_real_time_threads_is_no_safe_thread():
    p = target(fifo_main=True)
    try:
        r, seen = watched_trim(p)
        assert p.poll() is None
        assert r.returncode == 4 and "real-time or idle scheduling policy" in r.stderr, \
            (r.returncode, r.stderr)
        assert not seen, f"memtrim started threads there: {seen}"
        assert not [m for m in open(f"/proc/{p.pid}/maps") if "memtrim-inject" in m]
    finally:
        p.kill()
        p.wait()


def test_a_thread_at_the_main_threads_nice_is_taken_first():
    p = target(fifo_main=False, niced=True)
    try:
        for i in range(CALLS):
            r = subprocess.run([str(TOOL), "trim", str(p.pid), "--json"], capture_output=True,
                               text=True, timeout=60)
            assert p.poll() is None, f"call {i}: the target died"
            assert r.returncode == 0, (i, r.returncode, r.stderr)
            out = json.loads(r.stdout)
            assert out["call_thread_nice"] == 0 and out["thread"] == p.pid, \
                (i, f"the call ran at nice {out['call_thread_nice']}, taken in {out['thread']}")
        assert all(os.getpriority(os.PRIO_PROCESS, t) == (0 if t == p.pid else 19)
                   for t in tids(p.pid))
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or 1 not in os.sched_getaffinity(0),
                    reason="two CPUs, CPU 1 among them")
def test_a_thread_on_the_main_threads_cpus_is_taken_first():
    p = target(fifo_main=False, pinned=True)
    every = cpus(p.pid)
    try:
        watched_trims(p, lambda pid, t: cpus(t), lambda v: v != {every},
                      f"on CPUs other than the main thread's {set(every)}")
    finally:
        p.kill()
        p.wait()


def cpu_cgroup(pid, tid):
    """The thread's v1 cpu cgroup path, None once it is gone."""
    try:
        lines = open(f"/proc/{pid}/task/{tid}/cgroup").read().splitlines()
    except OSError:
        return None
    return next((ln.split(":", 2)[2] for ln in lines if "cpu" in ln.split(":")[1].split(",")),
                None)


@pytest.mark.skipif(not (CPU_V1 / "cpu.cfs_quota_us").exists() or os.geteuid() != 0,
                    reason="a v1 cpu cgroup made as root")
def test_a_thread_in_the_main_threads_cgroups_is_taken_first():
    cg = CPU_V1 / f"memtrim throttled:{os.getpid()}"
    cg.mkdir()
    p = None
    try:
        (cg / "cpu.cfs_period_us").write_text("100000")
        (cg / "cpu.cfs_quota_us").write_text("1000")
        p = target(fifo_main=False, niced=False, pinned=False, fifo=False)
        for t in tids(p.pid) - {p.pid}:
            (cg / "tasks").write_text(str(t))
        throttled = cpu_cgroup(p.pid, max(tids(p.pid) - {p.pid}))
        assert throttled and throttled != cpu_cgroup(p.pid, p.pid)
        watched_trims(p, cpu_cgroup, lambda v: throttled in v, "in the throttled cgroup")
    finally:
        if p is not None:
            p.kill()
            p.wait()
        wait_for(lambda: not (cg / "tasks").read_text().strip(), 30, "the cgroup empty")
        cg.rmdir()
