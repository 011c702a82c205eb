"""The unix socket listener ("HttpBind": "unix:PATH") with curl --unix-socket: every route of
openapi.yaml answers; the socket has HttpSocketMode; a peer of another uid (curl run as
nobody through setpriv) reads, may not write without the admin token, and may not connect
at all when the mode excludes it; writes are logged with the peer's uid and pid; a stale
socket is replaced, a live one (another host) and a world-writable directory stop the start;
the socket is gone after stop."""
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from hosts_util import build_file, read_to_close, wait_for
from pkg_util import ROOT

TOKEN = "unix-admin-51aa"
SETPRIV = shutil.which("setpriv")


class UnixHost:
    """memtrim-demo serving on a unix socket; stopped with SIGTERM (must exit 0)."""

    def __init__(self, folder, config):
        self.sock = folder / "memtrim.sock"
        cfg = {"HttpBind": f"unix:{self.sock}", "Database": str(folder / "memtrim.sqlite"),
               "ManualTrimMinIntervalMs": 0}
        cfg.update(config)
        self.log_path = folder / f"host-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(build_file("memtrim-demo")), "--lib", str(build_file("libmemtrim.so")),
             "--config", json.dumps(cfg), "--workers", "1", "--study-mb", "4", "--quiet"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the host exited {self.proc.returncode}: {self.output()}")
            rc, out, _ = curl(self.sock, "/healthz")
            return rc == 0 and '"status"' in out
        wait_for(ready, 20, "the unix socket to answer")
        return self

    def output(self):
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def hosts(folder):  # folder: removed only after every host here has stopped
    started = []

    def start(folder, config=None, ready=True):
        h = UnixHost(folder, config or {})
        started.append((h, ready))  # ready=False: a start that is expected to be refused
        return h.wait_ready() if ready else h
    yield start
    for h, ready in started:
        rc = h.stop()
        assert rc == 0 or not ready, h.output()[-2000:]


def curl(sock, path, *args, as_nobody=False):
    cmd = ["curl", "-sS", "--max-time", "10", "--unix-socket", str(sock), *args,
           f"http://localhost{path}"]
    if as_nobody:
        cmd = [SETPRIV, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


def status(sock, path, *args, as_nobody=False):
    rc, out, err = curl(sock, path, "-o", "/dev/null", "-w", "%{http_code}", *args,
                        as_nobody=as_nobody)
    assert rc == 0, (path, rc, err)
    return int(out)


@pytest.fixture
def folder():
    # Not under pytest's tmp_path (0700): nobody must be able to reach the socket inside.
    d = Path(tempfile.mkdtemp(prefix="memtrim-unix-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_every_route_over_the_unix_socket(hosts, folder):
    h = hosts(folder)
    mode = stat.S_IMODE(os.stat(h.sock).st_mode)
    assert stat.S_ISSOCK(os.stat(h.sock).st_mode) and mode == 0o660, oct(mode)
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    extra = {"/memory/series": "?metric=rss_bytes"}
    seen = 0
    for path, ops in spec["paths"].items():
        for method in ops:
            if method not in ("get", "post", "patch", "head"):
                continue
            args = ["-X", method.upper()]
            if method == "patch":
                args += ["-H", "Content-Type: application/json", "--data",
                         '{"TrimIntervalSeconds": 30}']
            rc, out, err = curl(h.sock, path + extra.get(path, ""), "-w", "\n%{http_code}", *args)
            assert rc == 0, (method, path, rc, err)
            body, _, code = out.rpartition("\n")
            if path == "/memory/arenas" and code == "503":
                # /memory/arenas answers 503 probe_budget while malloc_info's budget is
                # spent (a trim of this loop just ran): the route answered, and said why;
                # any other 503 is a failure
                error = json.loads(body)["error"]
                assert error["code"] == "probe_budget" and "ProbeBudgetPercent" in \
                    error["message"], (method, path, body)
            else:
                assert code == "200", (method, path, code, body[:500])
            seen += 1
    assert seen >= 13, seen
    # Any Host is fine (no browser reaches a unix socket): not the loopback Host rule.
    assert status(h.sock, "/memory/stats", "-H", "Host: memtrim.example") == 200
    assert "serving HTTP on unix socket" in h.output()
    h.stop()
    assert not h.sock.exists(), "the socket outlived its host"


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is needed")
def test_another_uid_reads_and_may_not_write(hosts, folder):
    h = hosts(folder, {"HttpSocketMode": "0666"})
    assert status(h.sock, "/memory/stats", as_nobody=True) == 200
    rc, out, err = curl(h.sock, "/memory/trim", "-X", "POST", as_nobody=True)
    body = json.loads(out)
    assert body["error"]["code"] == "forbidden_peer", out
    assert "uid 65534" in body["error"]["message"]
    assert status(h.sock, "/config", "-X", "PATCH", "--data", '{"TrimIntervalSeconds": 9}',
                  as_nobody=True) == 403
    # The host's own user (root here) writes without a token.
    assert status(h.sock, "/memory/trim", "-X", "POST") == 200
    log = h.output()
    assert "unix socket: POST /memory/trim by uid 65534 gid 65534 pid " in log, log[-2000:]
    assert "unix socket: POST /memory/trim by uid 0 gid 0 pid " in log
    h.stop()


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is needed")
def test_with_a_token_another_uid_writes_with_it(hosts, folder):
    h = hosts(folder, {"HttpSocketMode": "0666", "AuthToken": TOKEN})
    assert status(h.sock, "/memory/trim", "-X", "POST", as_nobody=True) == 403
    assert status(h.sock, "/memory/trim", "-X", "POST", "-H", f"Authorization: Bearer {TOKEN}",
                  as_nobody=True) == 200
    assert status(h.sock, "/memory/trim", "-X", "POST", "-H", "Authorization: Bearer wrong",
                  as_nobody=True) == 401
    h.stop()
    assert TOKEN not in h.output()


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is needed")
def test_the_mode_keeps_another_uid_out(hosts, folder):
    h = hosts(folder)  # 0660, root's group: nobody may not connect
    rc, out, err = curl(h.sock, "/healthz", as_nobody=True)
    assert rc == 7, (rc, out, err)  # curl cannot connect ...
    probe = ("import socket\ntry:\n socket.socket(socket.AF_UNIX).connect(%r)\n"
             "except OSError as e:\n print(type(e).__name__)" % str(h.sock))
    r = subprocess.run([SETPRIV, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                        "/usr/bin/python3", "-c", probe], capture_output=True, text=True)
    assert r.stdout.strip() == "PermissionError", (r.stdout, r.stderr)  # ... because of the mode
    assert status(h.sock, "/healthz") == 200


def test_stale_live_and_unsafe(hosts, folder, tmp_path):
    sock = folder / "memtrim.sock"
    # A stale socket (bound, nobody listening: a crashed host) is replaced.
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()
    h = hosts(folder)
    assert "stale socket (nobody answered on it) was replaced" in h.output()
    # A second host on the same path: refused, the first keeps its socket.
    second = hosts(folder, ready=False)
    assert second.proc.wait(timeout=20) != 0
    assert "another process answers on that socket" in second.output(), second.output()[-1500:]
    assert status(h.sock, "/healthz") == 200
    h.stop()
    assert not sock.exists()
    # A plain file at the path is not removed.
    sock.write_text("not a socket")
    third = hosts(folder, ready=False)
    assert third.proc.wait(timeout=20) != 0
    assert "a file that is not a socket is already there" in third.output()
    assert sock.read_text() == "not a socket"
    sock.unlink()
    # A directory anyone may write to (no sticky bit): refused.
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    fourth = hosts(unsafe, ready=False)
    assert fourth.proc.wait(timeout=20) != 0
    assert "has mode 0777: anyone may replace the socket" in fourth.output()


# Run as nobody: opens connections that send nothing, as fast as it can, and keeps them until
# the server closes them (an eviction); it stops when its stdin closes (or after `total`
# connections); prints "flooding" once 200 are open.
FLOOD = r"""
import os, selectors, socket, sys
path, total = sys.argv[1], int(sys.argv[2])
sel = selectors.DefaultSelector()
sel.register(sys.stdin, selectors.EVENT_READ)
opened, said = 0, False
while opened < total:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        opened += 1
    except OSError:
        s.close()
    if opened >= 200 and not said:
        print("flooding", flush=True)
        said = True
    for key, _ in sel.select(0):
        if key.fileobj is sys.stdin:
            sys.exit(0)
        try:
            data = key.fileobj.recv(1)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fileobj)
            key.fileobj.close()
print("flooding", flush=True)
sys.stdin.read()
"""


REQUESTS = 600  # at 150, 30f456e failed 3 of 5 runs on this count; at 600, every run


def one_request(sock):
    """GET /healthz on a fresh connection: the status line, or the error it met."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    try:
        s.connect(str(sock))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = read_to_close(s)
        return data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed without a reply"
    except OSError as e:
        return repr(e)
    finally:
        s.close()


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is needed")
def test_another_uids_flood_does_not_evict_ours(hosts, folder):
    """#31 F12: on the unix socket every peer counted as one address, so nobody's flood of
    2,000 silent connections evicted 11-13 of 150 of the host user's own requests. Peers are
    keyed by uid (SO_PEERCRED): the flood displaces its own connections, and every one of ours
    is answered. The flood is real (nobody's connections are evicted: counted)."""
    h = hosts(folder, {"HttpSocketMode": "0666"})
    flood = subprocess.Popen([SETPRIV, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                              "/usr/bin/python3", "-c", FLOOD, str(h.sock), "1000000000"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout.readline().strip() == "flooding"
        answers = [one_request(h.sock) for _ in range(REQUESTS)]
    finally:
        flood.stdin.close()
        flood.wait(timeout=30)
    bad = [a for a in answers if a != "HTTP/1.1 200 OK"]
    assert bad == [], f"{len(bad)} of {REQUESTS} failed: {bad[:5]}; the log: {h.output()[-3000:]}"
    log = h.output()
    assert "took the place of one waiting on its first request (from uid 65534 on the unix " \
           "socket)" in log, log[-2000:]
    assert "(from uid 0 on the unix socket)" not in log, log[-2000:]


NOBODY = 65534

# Run as nobody: listens on the path first and says so; answers nothing; ends with its stdin.
SQUAT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
print("listening", flush=True)
sys.stdin.read()
"""


def refused(hosts, folder):
    h = hosts(folder, ready=False)
    assert h.proc.wait(timeout=20) != 0, "the host started"
    return h.output()


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is needed")
def test_socket_directory_others_may_write_is_refused(hosts, folder):
    """#31 F4: in a sticky world-writable directory (/tmp's mode) another user who listened on
    the path first made the host refuse to start, and root's curl then handed the admin token
    to the squatter. A directory others may write to is refused as the socket's own, sticky
    or not, whoever got there first."""
    shared = folder / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    squat = subprocess.Popen([SETPRIV, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                              "/usr/bin/python3", "-c", SQUAT, str(shared / "memtrim.sock")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert squat.stdout.readline().strip() == "listening"
        log = refused(hosts, shared)
    finally:
        squat.stdin.close()
        squat.wait(timeout=20)
    assert f"the directory '{shared}' has mode 1777: anyone may replace the socket there, or " \
           "put their own at the path before the host starts; the sticky bit does not stop " \
           "that" in log, log[-1500:]
    # Without the squatter too, and group-writable alike.
    (shared / "memtrim.sock").unlink()
    assert "has mode 1777" in refused(hosts, shared)
    shared.chmod(0o770)
    assert "has mode 0770: anyone may replace the socket there" in refused(hosts, shared)


def test_every_directory_on_the_path_is_checked(hosts, folder):
    """#31 F5: the socket was chmod/chown'ed by path, following links, and only its own
    directory was checked: a user who owned a parent could swap the directory during start
    and have root set a root 0600 file to 0666. Every directory from / is checked, walked by
    descriptor with no link followed, and the mode and group are set through the checked
    directory's descriptor."""
    theirs = folder / "theirs"
    inner = theirs / "run"
    inner.mkdir(parents=True)
    inner.chmod(0o755)
    os.chown(theirs, NOBODY, NOBODY)  # root is the host's user here: nobody owns a parent
    log = refused(hosts, inner)
    assert f"the directory '{theirs}' belongs to uid {NOBODY}, neither the host's user (uid 0) " \
           "nor root" in log, log[-1500:]
    # A symbolic link on the way: whoever may change it may move the socket.
    real = folder / "real"
    real.mkdir()
    real.chmod(0o755)
    link = folder / "link"
    link.symlink_to(real)
    log = refused(hosts, link)
    assert f"'{link}' is a symbolic link (to '{real}'): give the path without links" in log, \
        log[-1500:]
    # A world-writable directory on the way needs the sticky bit (as /tmp has).
    open_dir = folder / "open"
    (open_dir / "run").mkdir(parents=True)
    (open_dir / "run").chmod(0o755)
    open_dir.chmod(0o777)
    log = refused(hosts, open_dir / "run")
    assert f"the directory '{open_dir}' has mode 0777: anyone may replace the socket or a " \
           "directory on the way to it" in log, log[-1500:]
    open_dir.chmod(0o1777)
    h = hosts(open_dir / "run", {"HttpSocketMode": "0600", "HttpSocketGroup": "nogroup"})
    st = os.lstat(h.sock)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert st.st_gid == NOBODY and st.st_uid == 0, (st.st_uid, st.st_gid)
    assert status(h.sock, "/healthz") == 200
