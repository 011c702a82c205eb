"""Helpers for the tests that load memtrim into real hosts (Debian's Orthanc,
unmodified programs through LD_PRELOAD, a memory cgroup): free loopback
ports, processes that are always stopped, RSS readings, log scraping and
memory cgroups (v1 memory.limit_in_bytes or v2 memory.max).

The build to test is MEMTRIM_BUILD_DIR (default: <repo>/build).
"""
import os
import random
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import requests

from wait import wait_for  # noqa: F401 (the one wait helper, re-exported for the host tests)

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("MEMTRIM_BUILD_DIR", ROOT / "build")).resolve()
API_LINE = re.compile(r"memtrim/core: memtrim \S+ started; API on https?://[^:]+:(\d+)/")


def build_file(name):
    path = BUILD / name
    if not path.exists():
        raise RuntimeError(f"no {name} in {BUILD} (build first, or set MEMTRIM_BUILD_DIR)")
    return path


_handed_out = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port():
    """A loopback port nothing holds now, for a host to bind later. Not one the kernel
    picks for bind(0): those lie in its ephemeral range (ip_local_port_range), where
    any connection opened meanwhile (the suite opens thousands) may take the port
    before the host binds it (ci: Orthanc's "TCP port ... already in use", 55281).
    Below that range only a program that names the port takes it; above pkg_util's
    ports (19500-19599); never the same one twice from this process."""
    low = _ephemeral_low()
    if low - 20000 >= 1000:
        for _ in range(1000):
            port = random.randrange(20000, low)
            if port in _handed_out:
                continue
            with socket.socket() as s:  # no SO_REUSEADDR: a port in TIME_WAIT fails too
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:  # no room below the ephemeral range: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    """VmRSS of a process, in bytes (None when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def children_of(pid):
    """The pids of pid's children (from /proc), sorted; [] when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return sorted(int(x) for x in f.read().split())
    except OSError:
        return []


def group_member_pids(api):
    """The pids of the worker group that memtrim at api leads, sorted; None when it does not
    answer or leads no group."""
    try:
        g = requests.get(api + "/memory/stats", timeout=10).json().get("group")
    except (requests.RequestException, ValueError):
        return None
    return sorted(m["pid"] for m in g["members"]) if g else None


def traversable_dir(prefix):
    """A new directory under /tmp that other users may traverse (0755; pytest's tmp_path
    is 0700): for a process of another uid (nobody, www-data) that must reach inside.
    The caller removes it (shutil.rmtree)."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    return d


_readable = None


def readable_build(*names):
    """A directory under /tmp (0755) holding copies of the build's files names (0755), for a
    process of another uid (nobody) to run or preload: the build folder may sit in a
    checkout other users cannot enter (a clone under /root, mode 0700: "Permission denied",
    "cannot open shared object file"). One directory per run of the suite, filled on demand,
    removed when the run ends."""
    import atexit
    import shutil
    global _readable
    if _readable is None:
        _readable = traversable_dir("memtrim-build-")
        atexit.register(shutil.rmtree, _readable, True)
    for name in names:
        copy = _readable / name
        if not copy.exists():
            shutil.copy2(build_file(name), copy)
            copy.chmod(0o755)
    return _readable


def proc_state(pid, tid=None):
    """The state letter of a process (or of its thread tid) in /proc: R, S, T, Z...;
    None when it is gone."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def pid_alive(pid):
    return proc_state(pid) not in (None, "Z")


def all_threads_stopped(pid):
    """Whether every thread of pid has stopped (state T or t): kill(SIGSTOP) returns
    before the threads stop, and one still running may, say, accept a connection."""
    return all(proc_state(pid, tid) in (None, "T", "t") for tid in os.listdir(f"/proc/{pid}/task"))


def read_to_close(sock):
    """Everything a socket sends until the peer closes it (a reply to Connection: close)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def wait_store(api, timeout=30):
    """The host at api (http://...) answers and its store has opened, or failed: it opens in
    the background after start, and the history routes answer 503 store_unavailable ("the
    store is opening", openapi.yaml) until then. The state /healthz gives."""
    def opened():
        state = requests.get(api + "/healthz", timeout=10).json()["database"]
        return state != "opening" and state
    return wait_for(opened, timeout, "the store to open (or fail)",
                    retry_on=(requests.RequestException,))


def http_ok(url):
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


class Proc:
    """A process with its output in a log file, stopped by stop() (SIGTERM,
    then SIGKILL after `grace` seconds) whatever happens in the test."""

    def __init__(self, args, log_path, env=None, cwd=None, **kw):
        self.args = [str(a) for a in args]
        self.log_path = Path(log_path)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, cwd=cwd, **kw)
        self.pid = self.proc.pid
        self.killed = False

    def output(self):
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def running(self):
        return self.proc.poll() is None

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.args[0]} did not exit within {timeout} s; killed")

    def api_port(self, timeout=20):
        """The port memtrim logged ("... started; API on http://127.0.0.1:PORT/")."""
        def find():
            if not self.running():
                raise AssertionError(f"{self.args[0]} exited {self.proc.returncode}:\n"
                                     f"{self.output()[-3000:]}")
            m = API_LINE.search(self.output())
            return int(m.group(1)) if m else None
        return wait_for(find, timeout, "memtrim's API line in the log")

    def send(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    def kill(self):
        if self.running():
            self.proc.kill()
            self.killed = True
        self.proc.wait()

    def stop(self, sig=signal.SIGTERM, grace=20):
        """Signal, wait; returns the exit code (kills after grace seconds)."""
        if self.running():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self.log.closed:
            self.log.close()
        return self.proc.returncode


@pytest.fixture
def procs():
    """Factory: procs(args, log_path, **popen) -> Proc; every one is stopped
    (SIGTERM, then SIGKILL) when the test ends, and extra pids registered
    with procs.adopt(pid) are killed."""
    started, adopted = [], []

    def start(args, log_path, **kw):
        p = Proc(args, log_path, **kw)
        started.append(p)
        return p

    start.adopt = adopted.append
    yield start
    for p in started:
        p.stop(grace=10)
    for pid in adopted:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def preload_env(config, extra=None, other_uid=False):
    """The environment of a program that preloads libmemtrim.so with config
    (a dict, or a string: inline JSON or a file path); other_uid: the library's copy that
    another uid can read (readable_build)."""
    import json
    env = os.environ.copy()
    env.pop("MEMTRIM_LIB", None)
    lib = readable_build("libmemtrim.so") / "libmemtrim.so" if other_uid \
        else build_file("libmemtrim.so")
    env["LD_PRELOAD"] = str(lib)
    env["MEMTRIM_CONFIG"] = config if isinstance(config, str) else json.dumps(config)
    env.update(extra or {})
    return env


# ---- memory cgroups -------------------------------------------------------

class Cgroup:
    """A memory cgroup with a limit, created as root under cgroup v1
    (/sys/fs/cgroup/memory) or v2 (/sys/fs/cgroup with the memory controller).
    wrap(args) runs a command inside it."""

    V1 = Path("/sys/fs/cgroup/memory")
    V2 = Path("/sys/fs/cgroup")

    def __init__(self, name, limit_bytes, parent=None, high_bytes=None):
        """limit_bytes None: no limit of its own (v2 "max"; the parent's applies);
        parent: a v2 Cgroup to nest in; high_bytes: v2 memory.high."""
        self.version, self.path = self._create(name, parent)
        self.limit = limit_bytes
        if self.version == 1:
            if parent is not None or high_bytes is not None:
                raise RuntimeError("nested cgroups and memory.high: cgroup v2 only here")
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            memsw = self.path / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # swap must not hide the kill
                memsw.write_text(str(limit_bytes))
        else:
            if limit_bytes is not None:
                (self.path / "memory.max").write_text(str(limit_bytes))
            if high_bytes is not None:
                (self.path / "memory.high").write_text(str(high_bytes))
            swap = self.path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")

    @classmethod
    def unavailable(cls):
        """Why a memory cgroup cannot be made here, or None when it can."""
        if os.geteuid() != 0:
            return "creating a memory cgroup needs root"
        if (cls.V1 / "memory.limit_in_bytes").exists():
            return None
        controllers = cls.V2 / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split():
            return None
        return "no memory cgroup controller (neither v1 /sys/fs/cgroup/memory nor v2 memory)"

    def _create(self, name, parent_cg=None):
        if parent_cg is None and (self.V1 / "memory.limit_in_bytes").exists():
            path = self.V1 / name
            path.mkdir()
            return 1, path
        parent = parent_cg.path if parent_cg is not None else self.V2
        subtree = parent / "cgroup.subtree_control"
        if "memory" not in subtree.read_text().split():
            subtree.write_text("+memory")
        path = parent / name
        path.mkdir()
        return 2, path

    def wrap(self, args):
        """args run inside the cgroup: a shell puts itself in, then execs them."""
        procs = self.path / "cgroup.procs"
        return ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "memtrim-cgroup"] + \
            [str(a) for a in args]

    def peak_bytes(self):
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        f = self.path / name
        return int(f.read_text()) if f.exists() else None

    def oom_kills(self):
        f = self.path / ("memory.oom_control" if self.version == 1 else "memory.events")
        for line in f.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return None

    def events(self):
        """v2 memory.events as a dict (low, high, max, oom, oom_kill, ...)."""
        return {k: int(v) for k, v in
                (line.split() for line in (self.path / "memory.events").read_text().splitlines())}

    def stat(self):
        """v2 memory.stat as a dict of byte counts (anon, file, shmem, ...), plus "current"
        (memory.current); {} when the cgroup is gone."""
        try:
            st = {k: int(v) for k, v in
                  (line.split() for line in (self.path / "memory.stat").read_text().splitlines())}
            st["current"] = int((self.path / "memory.current").read_text())
        except (OSError, ValueError):
            return {}
        return st

    def remove(self):
        """Kill what is left inside, then remove the directory."""
        def emptied():
            pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return not pids

        def removed():
            self.path.rmdir()
            return True
        wait_for(emptied, 5, f"{self.path} to have no process left", interval=0.1)
        wait_for(removed, 5, f"{self.path} to be removed", interval=0.1, retry_on=OSError)


def cgroups(prefix):
    """The generator behind the cgroup fixtures: yields make(limit_bytes, **Cgroup's) ->
    Cgroup named <prefix>-<pid>-<n>, removes them all at the end; skips with
    the reason when no memory cgroup can be created here."""
    why = Cgroup.unavailable()
    if why:
        pytest.skip(why)
    made = []

    def make(limit_bytes, **kw):
        cg = Cgroup(f"{prefix}-{os.getpid()}-{len(made)}", limit_bytes, **kw)
        made.append(cg)
        return cg

    yield make
    for cg in reversed(made):  # children before their parents
        cg.remove()


# The demo's last line with --studies: studies completed and its peak RSS.
DEMO_SUMMARY = re.compile(r"memtrim-demo: (\d+) studies done, peak RSS (\d+) MB")


def assert_oom_killed(rc, out, cg):
    """The control of a cgroup test: the kernel's OOM killer ended the demo before
    its summary (if it did not, the test that memtrim keeps it alive is void)."""
    assert rc == -signal.SIGKILL, f"expected the OOM killer (exit 137), got {rc}:\n{out[-2000:]}"
    assert not DEMO_SUMMARY.search(out), out[-2000:]
    kills = cg.oom_kills()
    assert kills is not None, f"{cg.path} has no oom_kill count"
    assert kills >= 1, f"{cg.path}: oom_kill {kills}"


@pytest.fixture
def cgroup():
    """Factory: cgroup(limit_bytes) -> Cgroup (memtrim-test-*), removed at the end."""
    yield from cgroups("memtrim-test")


def channels(pid):
    """pid's unix SOCK_SEQPACKET sockets: a worker group's socket and its channels (its
    other descriptors, the store's files and HTTP connections, come and go on their own)."""
    out = subprocess.run(["ss", "-Hxap"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines()
               if line.startswith("u_seq") and f"pid={pid}," in line)
