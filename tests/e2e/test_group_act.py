"""Members that act at once (issue 32 item 2, docs/groups.md "Members that act at once"):
inside the group's pressure zone a member trims the study it freed on its own, in its slot
of the leader's stagger (GroupTrimSlotMs), without the leader's round trip. Proven with the
leader SIGSTOPped: a member granted the zone trims its next freed study while its leader
cannot answer anything; the control (GroupTrimSlotMs 0: members trim only when asked)
keeps that study resident for as long as the leader is stopped, and trims it once the
leader runs again. memtrim-prefork (one worker) in its own memory cgroup: the usage is
the two processes' alone (the cgroup's limit is far above; MemoryLimitBytes sets the
group's), and needs root (it skips with the reason otherwise)."""
import json
import os
import signal
import time

import requests

from hosts_util import (all_threads_stopped, build_file, cgroup, free_port,  # noqa: F401
                        preload_env, procs, rss_bytes, wait_for)

MB = 1 << 20
PAUSE_MS = 3000  # between a worker's studies (the absolute schedule)
STUDY_MB = 60
# 120 MB the master touches before its fork, which the worker shares: the two processes'
# usage at rest about 135 MB, above the line (PressureRatio 0.5 of 200 MB: 100 MB), so
# that the leader's grant asks a member to hold TrimMinReleasableBytes only
SHARED_MB = 120
CONFIG = {"MemoryLimitBytes": 200 * MB, "PressureRatio": 0.5, "TrimIntervalSeconds": 0,
          "TrimReleasableTriggerBytes": 0, "SampleIntervalSeconds": 0}


def worker_entry(api, pid):
    g = requests.get(api + "/memory/stats", timeout=10).json().get("group") or {}
    return next((m for m in g.get("members", []) if m["pid"] == pid), None), g


def studies(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def run_stopped_leader(procs, cgroup, tmp_path, slot_ms):
    """One worker; its leader stopped before the worker's next study. Returns the worker's
    RSS right after that study's free, its lowest RSS in the 1.5 s the leader stays stopped
    after it, and its lowest RSS within 10 s once the leader runs again."""
    cg = cgroup(1 << 30)
    port, trace = free_port(), tmp_path / "studies.jsonl"
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite"),
           "GroupTrimSlotMs": slot_ms, **CONFIG}
    p = procs(cg.wrap([build_file("memtrim-prefork"), "--workers", "1", "--studies", "6",
                       "--study-mb", str(STUDY_MB), "--shared-mb", str(SHARED_MB),
                       "--pause-ms", str(PAUSE_MS), "--schedule", "absolute", "--hold",
                       "--trace", trace]),
              tmp_path / "prefork.log", env=preload_env(cfg))
    api = f"http://127.0.0.1:{port}"
    first = wait_for(lambda: studies(trace), 30, "the worker's first study")[0]
    pid = first["pid"]
    # The worker joined, the group is in its zone, and the study it freed before joining
    # went back (the leader asked for it): from here on its RSS is its floor.
    wait_for(lambda: (lambda e, g: e and g.get("pressure_zone") and e["pressure_trims"] >= 1 and
                      rss_bytes(pid) < (SHARED_MB + STUDY_MB // 2) * MB)(*worker_entry(api, pid)),
             30, "the worker to join, the zone, and its first study trimmed")
    floor = rss_bytes(pid)
    # The next study at least 0.8 s from now (the absolute schedule: PAUSE_MS after the
    # first one's start): stop the leader 0.6 s before it starts (its grant, sent again
    # every 0.5 s, lasts 2 s).
    now_ms = time.monotonic() * 1000
    k = next(k for k in range(1, 6) if first["t0"] + first["start"] + k * PAUSE_MS - now_ms > 800)
    start_ms = first["t0"] + first["start"] + k * PAUSE_MS
    wait_for(lambda: time.monotonic() * 1000 >= start_ms - 600, 10, "0.6 s before the study",
             interval=0.005)
    leader = p.pid  # the cgroup's shell execs memtrim-prefork: the master, the leader
    os.kill(leader, signal.SIGSTOP)
    try:
        wait_for(lambda: all_threads_stopped(leader), 10, "the leader to stop")
        stopped_ms = time.monotonic() * 1000
        done = wait_for(lambda: len(studies(trace)) > k and studies(trace)[k], 10,
                        f"study {k} to end")
        after_free = rss_bytes(pid)
        assert first["t0"] + done["start"] > stopped_ms, (done, stopped_ms)
        low, until = after_free, time.monotonic() + 1.5
        while time.monotonic() < until:  # a fixed window: the leader stays stopped in it
            low = min(low, rss_bytes(pid))
            time.sleep(0.005)
    finally:
        os.kill(leader, signal.SIGCONT)
    resumed = wait_for(lambda: (lambda r: r if r < floor + STUDY_MB * MB // 2 else None)(
        rss_bytes(pid)), 10, "the worker trimmed once the leader runs again")
    return floor, after_free, low, resumed


def test_a_member_trims_its_freed_study_while_the_leader_is_stopped(procs, cgroup, tmp_path):
    """At GroupTrimSlotMs 10 (the default): with the leader SIGSTOPped, the worker's freed
    60 MB study goes back within 1.5 s (its RSS falls to within 30 MB of its floor), by
    the worker alone. Control below: the same with GroupTrimSlotMs 0 keeps it."""
    floor, after_free, low, _ = run_stopped_leader(procs, cgroup, tmp_path, 10)
    assert low < floor + STUDY_MB * MB // 2, (
        f"with the leader stopped the worker kept its freed study: floor {floor >> 20} MB, "
        f"after the free {after_free >> 20} MB, lowest {low >> 20} MB")


def test_control_without_acting_alone_the_study_waits_for_the_leader(procs, cgroup, tmp_path):
    """GroupTrimSlotMs 0: the worker only reports its freed study; with its leader stopped
    nobody trims it (its RSS stays within 10 MB of what it was after the free for the 1.5 s
    the leader is stopped), and once the leader runs again it asks, and the study goes
    back. If this failed, the case above would prove nothing."""
    floor, after_free, low, resumed = run_stopped_leader(procs, cgroup, tmp_path, 0)
    assert after_free > floor + STUDY_MB * MB // 2, (floor, after_free)
    assert low > after_free - 10 * MB, (
        f"trimmed with the leader stopped and GroupTrimSlotMs 0: floor {floor >> 20} MB, "
        f"after the free {after_free >> 20} MB, lowest {low >> 20} MB")
    assert resumed < floor + STUDY_MB * MB // 2, (floor, resumed)
