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
"""
import json
import os
import subprocess
import threading

import pytest

from conftest import BUILD

TOOL = BUILD / "memtrim"
TARGET = BUILD / "memtrim-cli-target"
CALLS = 5
FIFO = os.SCHED_FIFO


def tids(pid):
    return {int(t) for t in os.listdir(f"/proc/{pid}/task")}


def policy(pid, tid):
    """The thread's policy (stat field 41), None once it is gone."""
    try:
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[38])


def target(fifo_main, niced=False, pinned=False):
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
        elif not niced and not pinned and (t != p.pid or fifo_main):
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


def test_a_real_time_thread_is_never_taken():
    p = target(fifo_main=False)
    try:
        policies = {t: policy(p.pid, t) for t in tids(p.pid)}
        watched = 0
        for i in range(CALLS):
            r, seen = watched_trim(p)
            assert p.poll() is None, f"call {i}: the target died"
            rt = {t: s for t, s in seen.items() if s - {0, 3}}
            assert not rt, f"call {i}: memtrim's threads ran under policy {rt} (1: SCHED_FIFO)"
            watched += bool(seen)
            assert r.returncode == 0, (i, r.returncode, r.stderr)
            out = json.loads(r.stdout)
            assert out["thread"] == p.pid, (i, out["thread"], "a real-time holder was taken")
        assert watched, "the watch never saw memtrim's threads: it proved nothing"
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
        watched = 0
        for i in range(CALLS):
            r, seen = watched_trim(p, lambda pid, t: cpus(t))
            assert p.poll() is None, f"call {i}: the target died"
            pinned = {t: c for t, c in seen.items() if c != {every}}
            assert not pinned, f"call {i}: memtrim's threads ran on {pinned}, not on {every}"
            watched += bool(seen)
            assert r.returncode == 0, (i, r.returncode, r.stderr)
            assert json.loads(r.stdout)["thread"] == p.pid, (i, "a pinned holder was taken")
        assert watched, "the watch never saw memtrim's threads: it proved nothing"
    finally:
        p.kill()
        p.wait()
