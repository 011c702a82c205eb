"""The memtrim command and containers (issue 29, item 3), with real namespaces and no image:
`unshare --pid --mount --fork` and a private root (a tmpfs holding /usr bound read-only, its
own /proc and /tmp), entered with chroot, so that the target's paths are not the host's.

- From the host: a target in that pid and mount namespace, its libc and loader copied to
  /ctr/lib inside the root (a path the host does not have) and run from there. trim and stats
  read that libc through /proc/PID/ (the control: the path its maps name does not exist for
  the tool); the pid printed is the host's, the thread one of /proc/PID/task (not the
  namespace's numbers).
- Inside: the tool run in the target's pid and mount namespaces and root (nsenter) acts on it
  by the pid it has there; the control, the same tool without CAP_SYS_PTRACE (setpriv), is
  refused by name, because the target holds capabilities the tool lacks.
- load: a python3 in that namespace, where the library's path does not exist (the control:
  the target's own dlopen of it fails), gets the API up; /healthz names the pid as the target
  sees it, the tool's output the host's.
"""
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from conftest import BUILD
from hosts_util import free_port
from wait import wait_for

TOOL = BUILD / "memtrim"
TARGET = BUILD / "memtrim-cli-target"

# Run by `unshare --pid --mount --fork`: pid 1 of the new namespace builds the root, makes it
# the namespace's root as a container runtime does (pivot_root, the old root unmounted: from
# the host the target's maps name its own paths) and runs the target ($@) there, in the
# foreground (its stdin is the test's pipe).
SETUP = r"""
set -e
R=$1; shift
mount -t tmpfs -o mode=755 none "$R"
mkdir -p "$R/usr" "$R/proc" "$R/dev" "$R/ctr/lib" "$R/ctr/bin" "$R/ctr/build"
mkdir -m 1777 "$R/tmp"
for l in bin lib lib64 sbin; do ln -s usr/$l "$R/$l"; done
mount --bind /usr "$R/usr" && mount -o remount,bind,ro "$R/usr"
mount --rbind /dev "$R/dev"
mount -t proc proc "$R/proc"
mount --bind "$BUILD" "$R/ctr/build" && mount -o remount,bind,ro "$R/ctr/build"
cp /lib/x86_64-linux-gnu/libc.so.6 /lib64/ld-linux-x86-64.so.2 "$R/ctr/lib/"
cp "$BUILD/memtrim-cli-target" "$R/ctr/bin/"
if [ -n "$CHROOT_AS" ]; then  # a chroot in this mount namespace, as that uid:gid
  exec chroot --userspec="$CHROOT_AS" "$R" "$@"
fi
mkdir "$R/old"
cd "$R"
pivot_root . old
umount -l /old
rmdir /old
exec /usr/bin/sh -c '"$0" "$@"; exit $?' "$@"
"""

# In the container's own copies: /ctr/lib's loader and libc.
CTR_TARGET = ["/ctr/lib/ld-linux-x86-64.so.2", "--library-path", "/ctr/lib",
              "/ctr/bin/memtrim-cli-target", "--hold-mb", "24", "--holders", "2"]

PY_LOAD = """
import ctypes, sys, threading
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a thread in a futex
print('ready', flush=True)
for line in sys.stdin:
    try:  # the control: can this process open the path the tool would give it?
        ctypes.CDLL(line.strip())
        print('opened', flush=True)
    except OSError:
        print('absent', flush=True)
print('bye', flush=True)
"""


def status(pid, name):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(name + ":"):
            return line.split()[1:]
    return None


def children(pid):
    return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]


class Container:
    """A target alone in its own pid and mount namespace and root."""

    def __init__(self, root, argv, chroot_as=""):
        env = dict(os.environ, BUILD=str(BUILD), CHROOT_AS=chroot_as)
        self.p = subprocess.Popen(["/usr/bin/unshare", "--pid", "--mount", "--fork",
                                   "--propagation", "private", "/bin/sh", "-c", SETUP, "sh",
                                   str(root), *argv], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline()
        assert line.startswith("ready"), line
        init = children(self.p.pid)[0]  # the namespace's pid 1, then the target below it
        self.init = init
        self.pid = init if chroot_as else wait_for(lambda: (children(init) or [None])[0],
                                                   what="the target")
        self.nspid = int(status(self.pid, "NSpid")[-1])  # the pid the target sees

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def stop(self):
        self.p.kill()  # unshare; its namespace's pid 1 then the target go with it
        self.p.wait()
        if status(self.init, "State") is not None:
            os.kill(self.init, 9)  # pid 1 of the namespace: the kernel ends the rest


@pytest.fixture
def container(tmp_path):
    made = []

    def make(argv, chroot_as="", root=None):
        root = root or tmp_path / f"root{len(made)}"
        root.mkdir()
        made.append(Container(root, argv, chroot_as))
        return made[-1]
    yield make
    for c in made:
        c.stop()


def run(argv, prefix=()):
    r = subprocess.run([*prefix, *argv, "--json"], capture_output=True, text=True, timeout=60)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None, r.stderr


def libc_mapped(pid):
    return {line.split()[-1] for line in open(f"/proc/{pid}/maps") if "libc.so" in line}


def test_from_the_host_into_a_pid_and_mount_namespace(container):
    c = container(CTR_TARGET)
    assert c.nspid != c.pid
    assert libc_mapped(c.pid) == {"/ctr/lib/libc.so.6"}
    assert not os.path.exists("/ctr/lib/libc.so.6")  # the control: not the tool's path
    rc, out, err = run([str(TOOL), "stats", str(c.pid)])
    assert rc == 0, err
    assert out["pid"] == c.pid and out["heap_free_bytes"] > 20 << 20, out
    rc, out, err = run([str(TOOL), "trim", str(c.pid), "--raise", "10"])
    assert rc == 0, err
    assert out["pid"] == c.pid and out["released_bytes"] > 10 << 20, out
    # memtrim's thread raised for its call: its gettid is the namespace's number, found again
    # as the host's in its NSpid (unless the call was over before the tracer looked)
    assert out["call_thread_raised"] or "returned" in out["call_thread_not_raised"], out
    tid = out["thread"]  # the host's tid, one of /proc/PID/task: not the namespace's
    assert str(tid) in os.listdir(f"/proc/{c.pid}/task")
    assert status(tid, "NSpid")[0] == str(tid) != status(tid, "NSpid")[-1]
    assert status(c.pid, "TracerPid") == ["0"]
    assert c.ask("report").startswith("{")  # its main thread reads on


NSENTER = ["/usr/bin/nsenter", "--pid", "--mount", "--root", "--wd"]
NO_PTRACE = ["/usr/bin/setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"]


def test_inside_the_container_with_cap_sys_ptrace(container):
    c = container(CTR_TARGET)
    enter = [*NSENTER, "--target", str(c.pid)]
    inside = ["/ctr/build/memtrim", "trim", str(c.nspid)]
    # the control: the same tool in the same place without CAP_SYS_PTRACE
    rc, out, err = run(inside, [*enter, *NO_PTRACE])
    assert rc == 2 and out["error"]["code"] == "refused", (rc, out, err)
    assert "capabilities" in err and "CAP_SYS_PTRACE" in err, err
    assert status(c.pid, "TracerPid") == ["0"]
    rc, out, err = run(inside, enter)
    assert rc == 0, err
    assert out["pid"] == c.nspid and out["released_bytes"] > 10 << 20, out  # its own numbers
    assert c.ask("report").startswith("{")


def test_load_into_another_mount_namespace(container):
    """The library's path does not exist in the target's namespace (its own dlopen of it
    fails: the control), the tool hands it a memfd (no file): /healthz names the pid
    as the target sees it (its namespace's), the tool's output the host's."""
    c = container(["/usr/bin/python3", "-c", PY_LOAD])
    lib = os.path.realpath(BUILD / "libmemtrim.so.0")
    assert not os.path.exists(f"/proc/{c.pid}/root{lib}")
    assert c.ask(lib) == "absent"
    port = free_port()
    rc, out, err = run([str(TOOL), "load", str(c.pid), "--config", json.dumps({"HttpPort": port})])
    assert rc == 0, err
    assert out["pid"] == c.pid and out["library"] == "/memfd:libmemtrim.so.0 (deleted)", out
    health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
    assert health["pid"] == c.nspid != c.pid, health
    assert os.listdir(f"/proc/{c.pid}/root/tmp") == []  # no copy
    assert c.ask("/nonexistent") == "absent"  # it reads on


@pytest.fixture
def open_dir():
    """A directory another uid may enter (pytest's own are 0700)."""
    top = Path(tempfile.mkdtemp(prefix="memtrim-chroot-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def test_a_chrooted_target_without_map_files(open_dir, container):
    """A user's own process chrooted in the tool's mount namespace, the tool that user too
    (no CAP_SYS_ADMIN: /proc/PID/map_files is closed to it). The maps name the libc by the
    tool's path, not the target's: read inside the target's root it does not exist (the
    control), read as it is, checked to be the mapped file (device and inode), it does."""
    shutil.copy(TOOL, open_dir / "memtrim")
    c = container(CTR_TARGET, "65534:65534", open_dir / "root")
    (libc,) = libc_mapped(c.pid)
    assert libc == f"{open_dir}/root/ctr/lib/libc.so.6", libc
    assert status(c.pid, "Uid")[0] == "65534"
    as_nobody = ["/usr/bin/nsenter", "--mount", "--target", str(c.pid), "/usr/bin/setpriv",
                 "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all"]
    assert not os.path.exists(f"/proc/{c.pid}/root{libc}")
    rc, out, err = run([str(open_dir / "memtrim"), "trim", str(c.pid)], as_nobody)
    assert rc == 0, err
    assert out["pid"] == c.pid and out["released_bytes"] > 10 << 20, out
    assert c.ask("report").startswith("{")
