"""`memtrim load PID` (issue 29): libmemtrim.so loaded into a running, unmodified Debian
python3 that never linked memtrim, started with the given configuration through the existing
call mechanism (dlopen, then memtrim_attach, each on one thread blocked in read): /healthz
names that pid, /memory/stats answers, a second load says it is already loaded, the program
reads its input on and exits 0. In its own mount namespace with a tmpfs over the build
directory (the library's path does not exist there) it loads a memfd a helper of the tool
holds (no file anywhere). Refusals: a static binary, a configuration that is not JSON; both leave the target
without the library. The loader lock: memtrim's own thread waits for it like any thread,
whichever thread holds it (the one taken included), and the tool only until --timeout.
"""
import json
import os
import select
import subprocess

import pytest
import requests

from conftest import BUILD
from hosts_util import free_port, wait_for

TOOL = BUILD / "memtrim"

PY_THREAD = """
import sys, threading
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a thread in a futex
print('ready', flush=True)
sys.stdin.read()
print('bye', flush=True)
"""


def maps_memtrim(pid):
    return [line for line in open(f"/proc/{pid}/maps") if "libmemtrim" in line]


def load(pid, *args):
    r = subprocess.run([str(TOOL), "load", str(pid), "--json", *args], capture_output=True,
                       text=True, timeout=60)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None, r.stderr


@pytest.mark.parametrize("own_mounts", [False, True], ids=["same-namespace", "own-mount-namespace"])
def test_load_into_python3(own_mounts):
    argv = ["/usr/bin/python3", "-c", PY_THREAD]
    if own_mounts:  # the build directory (and so the library's path) is hidden from the target
        argv = ["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                f"mount -t tmpfs none '{BUILD}' && exec \"$0\" \"$@\"", *argv]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert maps_memtrim(p.pid) == []  # it never linked memtrim
        if own_mounts:
            assert not os.path.exists(f"/proc/{p.pid}/root{BUILD}/libmemtrim.so")
        port = free_port()
        rc, out, err = load(p.pid, "--config", json.dumps({"HttpPort": port}))
        assert rc == 0, err
        assert out["listen"] == f"127.0.0.1:{port}" and out["loaded_now"] is True, out
        assert out["thread_syscall"] == "read", out  # the main thread: the other is in a futex
        if own_mounts:
            assert out["library"] == "/memfd:libmemtrim.so.0 (deleted)", out  # no file
        health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
        assert health["pid"] == p.pid and health["program"] == "python3", health
        stats = requests.get(f"http://127.0.0.1:{port}/memory/stats", timeout=10,
                             headers={"Authorization": f"Bearer {out['token']}"})
        assert stats.status_code == 200 and stats.json()["rss_bytes"] > 0
        rc, again, err = load(p.pid, "--config", json.dumps({"HttpPort": free_port()}))
        assert rc == 7 and again["error"]["code"] == "already_loaded", (rc, again, err)
        assert again["listen"] == f"127.0.0.1:{port}" and "already loaded" in err
        assert len({line.split()[-1] for line in maps_memtrim(p.pid)}) == 1  # one copy mapped
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("TracerPid:"):
                assert line.split()[1] == "0"
        p.stdin.close()  # its read goes on and sees the end of input; memtrim stops at exit
        assert p.stdout.readline().strip() == "bye"
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_load_refusals():
    static = subprocess.Popen([str(BUILD / "memtrim-cli-target-static")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    py = subprocess.Popen(["/usr/bin/python3", "-c", PY_THREAD], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    try:
        assert static.stdout.readline().startswith("ready")
        assert py.stdout.readline().strip() == "ready"
        rc, out, err = load(static.pid, "--config", "{}")
        assert rc == 3 and "static binary" in err, (rc, err)
        assert out["error"]["code"] == "unsupported"
        rc, out, err = load(py.pid, "--config", "{HttpPort: 1}")
        assert rc == 1 and "--config: not a JSON object" in err, (rc, err)
        rc, out, err = load(py.pid, "--config", "/nonexistent/memtrim.json")
        assert rc == 1 and "cannot read /nonexistent/memtrim.json" in err, (rc, err)
        assert maps_memtrim(py.pid) == [] and maps_memtrim(static.pid) == []
        py.stdin.close()
        assert py.stdout.readline().strip() == "bye" and py.wait(30) == 0
    finally:
        for p in (static, py):
            if p.poll() is None:
                p.kill()
                p.wait()


HOLD_C = r"""
#include <unistd.h>
/* Runs inside dlopen, so with ld.so's _dl_load_lock held: blocks in read(0) for a line. */
__attribute__((constructor)) static void hold(void)
{
    char c;
    while (read(0, &c, 1) == 1 && c != '\n')
        ;
}
"""

PY_HOLDER = """
import ctypes, os, sys, threading
dlopen = ctypes.CDLL(None).dlopen  # a foreign call: it runs without the GIL
dlopen.argtypes, dlopen.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_void_p
threading.Thread(target=dlopen, args=(sys.argv[1].encode(), 2), daemon=True).start()
print('ready', flush=True)
if sys.argv[2] == 'futex':
    threading.Event().wait()
else:
    os.read(int(sys.argv[3]), 1)  # the main thread in read too: a safe thread that holds no loader lock
    if sys.argv[2] == 'setxid':  # glibc's setxid: every thread glibc started runs SIGSETXID
        os.setresuid(-1, -1, -1)
        print('setxid done', flush=True)
        os.read(int(sys.argv[3]), 1)
print('bye', flush=True)
"""


def holder_in_read(pid):
    """The tid of the thread blocked in read inside the hold library's constructor."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) != pid and open(f"/proc/{pid}/task/{tid}/syscall").read().split()[0] == "0":
            return int(tid)
    return None


@pytest.fixture
def hold_lib(tmp_path):
    src = tmp_path / "hold.c"
    src.write_text(HOLD_C)
    lib = tmp_path / "libhold.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_load_takes_the_loader_lock_holder_and_waits_on_its_own_thread(hold_lib):
    """The only thread in a safe system call is inside dlopen (a constructor reading, the
    loader lock held): load takes it only to start memtrim's thread, which waits for the
    loader lock like any thread; --timeout bounds the command (exit 5) while the holder reads
    on; once its constructor returns, memtrim's dlopen completes on its own (the holder then
    ends: no thread is left to take for a second load). trim takes that same thread (the loader lock is nothing to it)."""
    p = subprocess.Popen(["/usr/bin/python3", "-c", PY_HOLDER, str(hold_lib), "futex"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        holder = wait_for(lambda: holder_in_read(p.pid), what="the holder in read")
        r = subprocess.run([str(TOOL), "trim", str(p.pid), "--json"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and json.loads(r.stdout)["thread"] == holder, r.stderr
        port = free_port()
        rc, out, err = load(p.pid, "--config", json.dumps({"HttpPort": port}), "--timeout", "1")
        assert rc == 5 and "has not returned" in err, (rc, err)
        assert holder_in_read(p.pid) == holder  # back in its read, the lock still its own
        assert maps_memtrim(p.pid) == []
        p.stdin.write("\n")  # the constructor returns: the lock is released
        p.stdin.flush()
        wait_for(lambda: maps_memtrim(p.pid), what="libmemtrim mapped by memtrim's own thread")
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_load_waits_for_the_loader_lock_within_its_deadline(hold_lib):
    """Another thread holds the loader lock: dlopen on memtrim's thread waits, --timeout bounds
    the command (exit 5); once the lock is released the call completes on its own and the
    thread ends; a second load starts memtrim; the program exits 0."""
    r_fd, w_fd = os.pipe()
    p = subprocess.Popen(["/usr/bin/python3", "-c", PY_HOLDER, str(hold_lib), "read", str(r_fd)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         pass_fds=(r_fd,))
    os.close(r_fd)
    try:
        assert p.stdout.readline().strip() == "ready"
        wait_for(lambda: holder_in_read(p.pid), what="the holder in read")
        port = free_port()
        rc, out, err = load(p.pid, "--config", json.dumps({"HttpPort": port}), "--timeout", "1")
        assert rc == 5 and "has not returned" in err, (rc, err)
        assert maps_memtrim(p.pid) == []  # dlopen still waits for the lock
        p.stdin.write("\n")  # the constructor returns: the lock is released
        p.stdin.flush()
        wait_for(lambda: maps_memtrim(p.pid), what="libmemtrim mapped")
        # The first load's call returned and its thread restored itself: the main thread is
        # back in its own read (it waited in futex for the loader lock meanwhile). Then one
        # load, which must find memtrim running (no retry until it stops saying "not finished").
        wait_for(lambda: open(f"/proc/{p.pid}/task/{p.pid}/syscall").read().split()[0] == "0",
                 what="the main thread back in its read")
        rc, out, err = load(p.pid, "--config", json.dumps({"HttpPort": port}))
        assert rc == 0 and out["listen"] == f"127.0.0.1:{port}" and not out["loaded_now"], err
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()["pid"] == p.pid
        os.write(w_fd, b"x")
        assert p.stdout.readline().strip() == "bye"
        assert p.wait(30) == 0
    finally:
        os.close(w_fd)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_setuid_in_another_thread_does_not_wait_for_memtrims_thread(hold_lib):
    """memtrim's thread waits for the loader lock (another thread's dlopen holds it) when the
    main thread calls setresuid: glibc's setxid signals every thread it started, memtrim's
    included, and waits for each one's handler. memtrim's thread takes that one signal, so
    setresuid returns while the lock is still held. Control cmd-setxid-blocked (every signal
    blocked on memtrim's thread): setresuid waits for memtrim's call to end, here for the
    loader lock's holder (had the holder been the one calling setuid, for ever)."""
    r_fd, w_fd = os.pipe()
    p = subprocess.Popen(["/usr/bin/python3", "-c", PY_HOLDER, str(hold_lib), "setxid",
                          str(r_fd)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         pass_fds=(r_fd,))
    os.close(r_fd)
    try:
        assert p.stdout.readline().strip() == "ready"
        wait_for(lambda: holder_in_read(p.pid), what="the holder in read")
        rc, out, err = load(p.pid, "--config", json.dumps({"HttpPort": free_port()}),
                            "--timeout", "1")
        assert rc == 5 and "has not returned" in err, (rc, err)
        assert maps_memtrim(p.pid) == []  # memtrim's dlopen still waits for the lock
        os.write(w_fd, b"x")  # the main thread calls setresuid
        ready, _, _ = select.select([p.stdout], [], [], 30)  # a hang guard, not a time limit
        assert ready and p.stdout.readline().strip() == "setxid done", "setresuid waits"
        assert maps_memtrim(p.pid) == []  # it returned with the lock still held
        p.stdin.write("\n")  # the constructor returns: memtrim's dlopen completes
        p.stdin.flush()
        wait_for(lambda: maps_memtrim(p.pid), what="libmemtrim mapped")
        os.write(w_fd, b"x")
        assert p.stdout.readline().strip() == "bye"
        assert p.wait(30) == 0
    finally:
        os.close(w_fd)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_load_where_its_proc_is_another_pid_namespaces():
    """A python3 in its own pid namespace whose /proc is still the host's (unshare --pid
    without --mount-proc): the memfd's path, /proc/<helper's pid there>/fd/<n>, would name
    another process of the host's there, so the tool sees that it does not lead to its memfd;
    and a copy of the library in its /tmp is what a killed load would leave. Refused by name
    (exit 3), nothing mapped, its /tmp empty. Controls: cmd-load-proc-check (the path not
    checked): its dlopen fails (exit 6); cmd-load-file (the copy, as before): loaded from a
    file written into its /tmp (exit 0)."""
    argv = ["/usr/bin/unshare", "--pid", "--fork", "--mount", "--propagation", "private",
            "/bin/sh", "-c", f"mount -t tmpfs none '{BUILD}' && mount -t tmpfs none /tmp && "
            "exec \"$0\" \"$@\"", "/usr/bin/python3", "-c", PY_THREAD]  # a /tmp of its own
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        pid = int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0])
        rc, out, err = load(pid, "--config", json.dumps({"HttpPort": free_port()}))
        assert rc == 3 and "another pid namespace's" in err, (rc, out, err)
        assert os.listdir(f"/proc/{pid}/root/tmp") == []
        assert not maps_memtrim(pid)
    finally:
        p.kill()
        p.wait()


def test_load_into_another_user_namespace_is_refused():
    """A python3 in a user namespace of its own (unshare --user --map-root-user --mount): the
    helper's memfd needs a root memtrim in the target's user namespace, so the library could
    only reach it as a copy written into its /tmp, which a killed load left behind (12 of 17
    in the issue). Refused by name (exit 3), nothing mapped, no copy made. Control
    cmd-load-file (the copy, as before): it loads from the copy (exit 0)."""
    p = subprocess.Popen(["/usr/bin/unshare", "--user", "--map-root-user", "--mount",
                          "/usr/bin/python3", "-c", PY_THREAD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        before = {f for f in os.listdir(f"/proc/{p.pid}/root/tmp") if "libmemtrim" in f}
        rc, out, err = load(p.pid, "--config", json.dumps({"HttpPort": free_port()}))
        assert rc == 3 and "neither memtrim's mount namespace" in err, (rc, out, err)
        assert not maps_memtrim(p.pid)
        assert {f for f in os.listdir(f"/proc/{p.pid}/root/tmp") if "libmemtrim" in f} == before
    finally:
        p.kill()
        p.wait()
