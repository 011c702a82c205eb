"""The memtrim command's per-target lock (issue 37, item 3): no other user can take or block it.
uid nobody tries every way it has to hold the lock of root's process (the abstract name
`memtrim-inject-PID` the tool used to bind, the target's /proc/PID/mem, a file under
/run/memtrim-command) and root's trim still runs. The process's own user may hold its own
process's lock (it may act on it), and so does root's own lock file: both make the tool wait
and exit 4. A lock directory its group may write is refused (exit 6). Control cmd-lock-squat
(the abstract name back): nobody's squat blocks root's trim (exit 4).
"""
import fcntl
import json
import os
import subprocess

from conftest import BUILD
from hosts_util import readable_build

TOOL = BUILD / "memtrim"
TARGET = BUILD / "memtrim-cli-target"

SQUAT = r"""
import errno, fcntl, os, socket, sys
pid, start = sys.argv[1], sys.argv[2]
held = []
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(f"\0memtrim-inject-{pid}")  # the old lock: anyone may bind it
held.append("abstract")
try:
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held.append("mem")
except OSError as e:
    assert e.errno in (errno.EACCES, errno.EPERM), e
for path in ("/run/memtrim-command", f"/run/memtrim-command/inject-{pid}-{start}"):
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(path)
    except OSError as e:
        assert e.errno in (errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOENT), e
print(" ".join(held), flush=True)
sys.stdin.read()
"""


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def start_time(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]


def spawn(argv, **kw):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kw)
    line = p.stdout.readline()
    return p, line


def trim(pid):
    r = subprocess.run([str(TOOL), "trim", str(pid), "--json", "--thread-wait", "0.5"],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def end(*procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_nobody_cannot_squat_roots_process():
    target, ready = spawn([str(TARGET)])
    assert ready.startswith("ready")
    squat, held = spawn(["/usr/bin/python3", "-c", SQUAT, str(target.pid),
                         start_time(target.pid)], preexec_fn=as_nobody, cwd="/")
    try:
        assert held.split() == ["abstract"], held  # the only one nobody could take
        rc, out, err = trim(target.pid)
        assert rc == 0, (rc, out, err)
        assert json.loads(out)["released_bytes"] >= 0
        lock = f"/run/memtrim-command/inject-{target.pid}-{start_time(target.pid)}"
        assert not os.path.exists(lock)  # dropped: unlinked by its holder
    finally:
        end(squat, target)


def test_the_owner_and_root_hold_it():
    """The lock works: root's lock file held here, then nobody's own process's /proc/PID/mem
    held by nobody, each makes the tool wait and give up (exit 4); released, it trims."""
    target, ready = spawn([str(TARGET)])
    assert ready.startswith("ready")
    # nobody's own process runs a copy nobody can read (the build may sit under /root, 0700)
    mine_bin = readable_build(TARGET.name) / TARGET.name
    mine, ready = spawn([str(mine_bin)], preexec_fn=as_nobody, cwd="/")
    assert ready.startswith("ready")
    holder = None
    try:
        os.makedirs("/run/memtrim-command", mode=0o700, exist_ok=True)
        path = f"/run/memtrim-command/inject-{target.pid}-{start_time(target.pid)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        rc, out, err = trim(target.pid)
        assert rc == 4 and "another memtrim is acting" in err, (rc, err)
        os.unlink(path)
        os.close(fd)
        assert trim(target.pid)[0] == 0
        holder, held = spawn(["/usr/bin/python3", "-c", SQUAT, str(mine.pid),
                              start_time(mine.pid)], preexec_fn=as_nobody, cwd="/")
        assert held.split() == ["abstract", "mem"], held  # its own process: it may
        rc, out, err = trim(mine.pid)
        assert rc == 4 and "another memtrim is acting" in err, (rc, err)
        end(holder)
        assert trim(mine.pid)[0] == 0
    finally:
        end(*(p for p in (holder, mine, target) if p))


def test_the_lock_directory_must_be_roots_alone():
    """A /run/memtrim-command its group may write is refused, not used (exit 6). The tool
    runs in a mount namespace of its own with a /run of its own, so that other memtrims on
    this machine never see that directory; the one beside it, made 0700, works."""
    target, ready = spawn([str(TARGET)])
    assert ready.startswith("ready")
    try:
        runs = {}
        for mode in ("770", "700"):
            r = subprocess.run(["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh",
                                "-c", f"mount -t tmpfs -o mode=755 none /run && "
                                f"mkdir -m {mode} /run/memtrim-command && exec \"$0\" \"$@\"",
                                str(TOOL), "trim", str(target.pid), "--json"],
                               capture_output=True, text=True, timeout=60)
            runs[mode] = (r.returncode, r.stderr)
        assert runs["770"][0] == 6 and "is not root's alone" in runs["770"][1], runs
        assert runs["700"][0] == 0, runs
    finally:
        end(target)


def test_a_killed_tools_lock_file_is_swept():
    """A tool killed while it held root's lock leaves its empty file; the next root tool
    removes the files of processes that are gone (a dead pid, a pid whose start time is not
    the file's), never a live process's nor a file not named like ours. In a /run of the
    tool's own (a mount namespace with a tmpfs over /run). Control cmd-lock-sweep: they stay."""
    target, ready = spawn([str(TARGET)])
    assert ready.startswith("ready")
    gone = subprocess.Popen(["/bin/true"])
    gone.wait()
    live = f"inject-{os.getpid()}-{start_time(os.getpid())}"  # a live process (not the target)
    stale = [f"inject-{gone.pid}-12345", f"inject-{target.pid}-999"]
    script = ("mount -t tmpfs -o mode=755 none /run && mkdir -m 700 /run/memtrim-command && "
              "cd /run/memtrim-command && touch \"$@\" other-file && "
              f"'{TOOL}' stats {target.pid} --json >/dev/null && ls /run/memtrim-command")
    try:
        r = subprocess.run(["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                            script, "sh", live, *stale], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.split()) == sorted(["other-file", live]), r.stdout
    finally:
        end(target)


def mem_flocked(pid):
    """Whether a flock is held on pid's /proc/PID/mem (its inode in /proc/locks)."""
    ino = os.stat(f"/proc/{pid}/mem").st_ino
    return any(f":{ino} " in line and "FLOCK" in line for line in open("/proc/locks"))


def test_a_tool_with_a_read_only_run_and_the_hosts_exclude_each_other():
    """The node agent's commands in a pod (a read-only root: no /run/memtrim-command) take the
    flock on /proc/PID/mem alone; a root tool on the host takes its /run lock, and the mem
    lock too, so the two never act on one process at once (issue 39). The host's tool held in
    flight on a root process with no thread it may take (a spinning python3: it waits its
    --thread-wait, holding its locks): the mem lock is held, and a tool whose /run is a
    read-only tmpfs (a mount namespace of its own) waits and gives up (exit 4); then a test-held
    mem lock makes the host's tool give up too. Control agent-lock-run-only (root's tool takes
    the /run lock alone for a root process): no mem lock, and the pod's tool goes in."""
    from wait import wait_for
    spin = subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"])
    host = None
    try:
        wait_for(lambda: os.path.exists(f"/proc/{spin.pid}/stat"), 10, "the spinner")
        run_file = f"/run/memtrim-command/inject-{spin.pid}-{start_time(spin.pid)}"
        host = subprocess.Popen([str(TOOL), "trim", str(spin.pid), "--json", "--thread-wait", "6"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: os.path.exists(run_file) or host.poll() is not None, 20,
                 "the host's tool to take its /run lock")
        assert host.poll() is None, host.communicate()
        assert wait_for(lambda: mem_flocked(spin.pid) or host.poll() is not None, 3,
                        "the host's tool to hold /proc/PID/mem's lock too") is True
        pod = subprocess.run(["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                              "mount -t tmpfs -o ro none /run && exec \"$0\" \"$@\"", str(TOOL),
                              "trim", str(spin.pid), "--json", "--thread-wait", "0.5"],
                             capture_output=True, text=True, timeout=60)
        assert host.poll() is None, "the host's tool ended before the pod's was refused"
        assert pod.returncode == 4 and "another memtrim is acting" in pod.stderr, \
            (pod.returncode, pod.stderr)
        out, err = host.communicate(timeout=60)
        # the other way: a mem lock held as the pod's tool holds it stops the host's tool
        fd = os.open(f"/proc/{spin.pid}/mem", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            rc, out, err = trim(spin.pid)
            assert rc == 4 and "another memtrim is acting" in err, (rc, err)
        finally:
            os.close(fd)
    finally:
        end(*(p for p in (host, spin) if p))
