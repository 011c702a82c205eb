"""The memtrim command never takes the tasks a target's pids cgroup leaves it (issue 37: nothing
may change what the target observes). A call starts two threads of memtrim's in the target (the
raw thread and the glibc thread); the pids controller counts them as the target's own, so a
target at its limit would see its own pthread_create or fork fail with EAGAIN while they live
(Go's runtime dies of that). memtrim-cli-target --spawner starts two threads and joins them every
millisecond and counts the starts that failed; with a holder thread (45 MB of freed heap: a
call of some milliseconds) it runs in a v1 pids cgroup whose pids.max is 5: its main thread, the
holder, the spawner and the two spawned threads fit, so it never fails alone. Each of CALLS trims must be refused
by name (exit 2, "may start only", the file that binds), the target alive and its spawner
never failed. Control cmd-pids-room (the check off): memtrim's threads take the cgroup's last
tasks and the spawner's starts fail.
load starts memtrim's engine there too, whose threads stay (7 with the defaults, HttpThreads 2):
in the same cgroup with room for the call's threads alone (pids.max 9), load is refused naming
the threads it would start; the engine's count is held against a real load's threads. Control
cmd-load-pids-engine (load counted as the call's two threads): the engine takes the cgroup's
last tasks.
The command may run in a cgroup namespace of its own (a container's, a DaemonSet's): the
process's cgroup is then printed relative to it ("/../../x") and the mounts' roots say which
cgroup each shows (mountinfo). From one, the cgroup is found through the mount that shows it
and the trim is refused as from the host; where no mount shows it (the namespace's own mount),
refused as unreadable. Control cmd-cgroupns-unresolved (the mount point joined to the path as
printed, the old walk): no limit read, the trim runs and the spawner's starts fail.
A thread may sit in a pids cgroup of its own (v1's tasks, v2's threaded cgroups), and
memtrim's threads join the taken thread's: every thread's cgroups are read (control
cmd-pids-thread-cgroups: the process's alone).
RLIMIT_NPROC binds the same way: every task of the target's real uid counts against it at each
clone of the target's (memtrim's two included) unless that uid is root or the target holds
CAP_SYS_RESOURCE or CAP_SYS_ADMIN. The same target run as a uid of its own with RLIMIT_NPROC 5:
refused naming the limit; control cmd-nproc-room: its starts fail.
"""
import resource
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD
from hosts_util import readable_build
from wait import wait_for

TOOL = BUILD / "memtrim"
TARGET = BUILD / "memtrim-cli-target"
PIDS_V1 = Path("/sys/fs/cgroup/pids")
CALLS = 20
LIMIT = 5  # main + holder + spawner + two spawned threads: 5 at most of the target's own


def spawner(cg=None, uid=None):
    """The target: in cg (a v1 pids cgroup), or as uid with RLIMIT_NPROC at its own peak."""
    def drop():
        resource.setrlimit(resource.RLIMIT_NPROC, (LIMIT, LIMIT))
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    # as another uid, a copy it may run: the build folder may sit in a checkout other users
    # cannot enter (a clone under /root, mode 0700: r17's "Permission denied")
    target = TARGET if uid is None else readable_build(TARGET.name) / TARGET.name
    argv = [str(target), "--spawner", "--holders", "1", "--hold-mb", "50"]
    if cg is not None:
        argv = ["/bin/sh", "-c", f'echo $$ > "{cg}/cgroup.procs" && exec "$@"',
                "memtrim-cgroup", *argv]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         preexec_fn=drop if uid is not None else None)
    assert p.stdout.readline().startswith("ready")
    return p


def calls(p, binds):
    """CALLS trims, each refused naming what binds, the target's starts never failed."""
    for i in range(CALLS):
        r = subprocess.run([str(TOOL), "trim", str(p.pid), "--json"], capture_output=True,
                           text=True, timeout=60)
        assert p.poll() is None, f"call {i}: the target died ({p.returncode})"
        rep = json.loads(ask(p, "report"))
        assert rep["spawn_failures"] == 0, \
            (f"call {i}: the target's own thread starts failed {rep['spawn_failures']} "
             f"times (memtrim's threads took its last tasks)", r.returncode, r.stderr)
        assert r.returncode == 2 and "may start only" in r.stderr and binds in r.stderr, \
            (i, r.returncode, r.stdout, r.stderr)
        assert json.loads(r.stdout)["error"]["code"] == "refused"
    assert json.loads(ask(p, "report"))["spawns"] > 0  # it ran all along
    assert not [m for m in open(f"/proc/{p.pid}/maps") if "memtrim-inject" in m]


def ask(p, cmd):
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    return p.stdout.readline()


@pytest.mark.skipif(not (PIDS_V1 / "cgroup.procs").exists() or os.geteuid() != 0,
                    reason="a v1 pids cgroup made as root")
def test_trim_is_refused_without_room_for_its_threads():
    cg = PIDS_V1 / f"memtrim pids:{os.getpid()}"  # /proc/PID/cgroup prints the name as it is
    cg.mkdir()
    p = None
    try:
        (cg / "pids.max").write_text(str(LIMIT))
        p = spawner(cg=cg)
        calls(p, "pids.max")
    finally:
        if p is not None:
            if p.poll() is None:
                p.kill()
            p.wait()
        wait_for(lambda: not (cg / "cgroup.procs").read_text().strip(), 30,
                 "the cgroup empty")  # its tasks' exit is seen there a moment later
        cg.rmdir()


@pytest.mark.skipif(not (PIDS_V1 / "cgroup.procs").exists() or os.geteuid() != 0,
                    reason="a v1 pids cgroup made as root")
def test_trim_from_another_cgroup_namespace_is_refused():
    cg = PIDS_V1 / f"memtrim pids ns:{os.getpid()}"
    tool_cg = PIDS_V1 / f"memtrim-tool-{os.getpid()}"
    cg.mkdir()
    (tool_cg / "sub").mkdir(parents=True)
    p = None
    try:
        (cg / "pids.max").write_text(str(LIMIT))
        p = spawner(cg=cg)
        # the tool's pids cgroup another's (its namespace's root below the mounts' roots);
        # its memory cgroup the hierarchy's root, where the mounts' root is its namespace's
        enter = (f'echo $$ > "{tool_cg}/sub/cgroup.procs" && '
                 f'echo $$ > /sys/fs/cgroup/memory/cgroup.procs && ')
        for how, script, says in (
                ("resolved", enter + 'exec unshare -C "$@"', str(cg / "pids.max")),
                ("hidden", enter + 'exec unshare -C -m --propagation private sh -c \''
                 f'umount "{PIDS_V1}" && mount -t cgroup -o pids memtrim-ns "{PIDS_V1}" && '
                 'exec "$@"\' sh "$@"',
                 "no cgroup mount of this command shows")):
            seen = open(f"/proc/{p.pid}/cgroup").read()
            r = subprocess.run(["/bin/sh", "-c", script, "sh", str(TOOL), "trim", str(p.pid),
                                "--json"], capture_output=True, text=True, timeout=60)
            assert p.poll() is None, f"{how}: the target died ({p.returncode})"
            rep = json.loads(ask(p, "report"))
            assert rep["spawn_failures"] == 0, \
                (f"{how}: its own thread starts failed {rep['spawn_failures']} times",
                 r.returncode, r.stderr)
            assert r.returncode == 2 and "may start only" in r.stderr and says in r.stderr, \
                (how, r.returncode, r.stderr, seen)
        assert not [m for m in open(f"/proc/{p.pid}/maps") if "memtrim-inject" in m]
    finally:
        if p is not None:
            if p.poll() is None:
                p.kill()
            p.wait()
        wait_for(lambda: not (cg / "cgroup.procs").read_text().strip(), 30, "the cgroup empty")
        wait_for(lambda: not (tool_cg / "sub" / "cgroup.procs").read_text().strip(), 30,
                 "the tool's cgroup empty")
        cg.rmdir()
        (tool_cg / "sub").rmdir()
        tool_cg.rmdir()


@pytest.mark.skipif(not (PIDS_V1 / "cgroup.procs").exists() or os.geteuid() != 0,
                    reason="a v1 pids cgroup made as root")
def test_a_threads_own_pids_cgroup_is_read():
    """memtrim's threads join the taken thread's cgroups, and v1's pids tasks place a thread
    apart from its process: the spawner and holder threads alone in a pids cgroup at their
    own peak (4: themselves and the two spawned), the main thread outside it and busy (no
    safe thread but those two). Each trim is refused naming that cgroup, nothing mapped.
    Control cmd-pids-thread-cgroups (the process's cgroup alone, the main thread's): no
    limit read, the trims run, their threads in the spawner's cgroup."""
    cg = PIDS_V1 / f"memtrim pids threads:{os.getpid()}"
    cg.mkdir()
    p = subprocess.Popen([str(TARGET), "--spawner", "--holders", "1", "--hold-mb", "50",
                          "--busy-main"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("ready")
        (cg / "pids.max").write_text("4")
        # the holder and the spawner (its spawned threads follow it); a spawned thread of the
        # moment may end before it is moved
        for t in sorted(int(t) for t in os.listdir(f"/proc/{p.pid}/task")):
            if t != p.pid:
                try:
                    (cg / "tasks").write_text(str(t))
                except OSError:
                    pass
        wait_for(lambda: all(str(cg.name) in open(f"/proc/{p.pid}/task/{t}/cgroup").read()
                             for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid),
                 30, "every thread but the main one in the cgroup", retry_on=(OSError,))
        for i in range(CALLS // 4):
            r = subprocess.run([str(TOOL), "trim", str(p.pid), "--json"], capture_output=True,
                               text=True, timeout=60)
            assert p.poll() is None, f"call {i}: the target died ({p.returncode})"
            assert r.returncode == 2 and "may start only" in r.stderr and \
                str(cg / "pids.max") in r.stderr, (i, r.returncode, r.stdout, r.stderr)
        assert not [m for m in open(f"/proc/{p.pid}/maps") if "memtrim-inject" in m]
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        wait_for(lambda: not (cg / "tasks").read_text().strip(), 30, "the cgroup empty")
        cg.rmdir()


def load_threads(rc, err):
    """The threads a refused load says it starts there."""
    m = re.search(r"load \(the call and memtrim's engine\) starts (\d+) threads", err)
    assert rc == 2 and m and "pids.max" in err, (rc, err)
    return int(m.group(1))


@pytest.mark.skipif(not (PIDS_V1 / "cgroup.procs").exists() or os.geteuid() != 0,
                    reason="a v1 pids cgroup made as root")
@pytest.mark.parametrize("config,threads", [({}, 9), ({"HttpThreads": 4}, 11),
                                            ({"GroupName": f"memtrim-pids-{os.getpid()}"}, 11)],
                         ids=["defaults", "http4", "group"])
def test_load_is_refused_without_room_for_its_engine(config, threads):
    cg = PIDS_V1 / f"memtrim pids load:{os.getpid()}"
    cg.mkdir()
    p = q = None
    try:
        (cg / "pids.max").write_text(str(LIMIT + 2 * 2))  # room for a trim's threads alone
        p = spawner(cg=cg)
        config = dict(config, HttpPort=0)
        r = subprocess.run([str(TOOL), "load", str(p.pid), "--json", "--config",
                            json.dumps(config)], capture_output=True, text=True, timeout=60)
        assert p.poll() is None, f"the target died ({p.returncode})"
        rep = json.loads(ask(p, "report"))
        assert rep["spawn_failures"] == 0, \
            (f"its own thread starts failed {rep['spawn_failures']} times", r.returncode, r.stderr)
        need = load_threads(r.returncode, r.stderr)
        assert need == threads, (need, threads)
        assert not [m for m in open(f"/proc/{p.pid}/maps")
                    if "libmemtrim" in m or "memtrim-inject" in m]
        # the count held against a real load's threads, outside any limit
        q = subprocess.Popen([str(TARGET), "--holders", "1", "--hold-mb", "10"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert q.stdout.readline().startswith("ready")
        before = len(os.listdir(f"/proc/{q.pid}/task"))
        r = subprocess.run([str(TOOL), "load", str(q.pid), "--json", "--config",
                            json.dumps(config)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.returncode, r.stderr)
        out = json.loads(r.stdout)
        assert out["call_threads_ended"] is True, out
        def added():
            return len(os.listdir(f"/proc/{q.pid}/task")) - before
        # the call's ended threads leave /proc a moment after the answer; the engine's stay
        wait_for(lambda: added() <= need - 2, 30, f"the loaded engine's threads within "
                 f"{need - 2} (the call's two ended)")
        assert added() > 0, "nothing started: the count proved nothing"
    finally:
        for x in (p, q):
            if x is not None:
                if x.poll() is None:
                    x.kill()
                x.wait()
        wait_for(lambda: not (cg / "cgroup.procs").read_text().strip(), 30, "the cgroup empty")
        cg.rmdir()


@pytest.mark.skipif(os.geteuid() != 0, reason="a target of another uid with a limit set as root")
def test_trim_is_refused_under_rlimit_nproc():
    uid = 40000 + os.getpid() % 20000  # a uid of its own: no other task counts
    p = spawner(uid=uid)
    try:
        calls(p, "RLIMIT_NPROC")
    finally:
        p.kill()
        p.wait()
