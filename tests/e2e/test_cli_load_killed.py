"""A killed `memtrim load` leaves no file (issue 37, item 3). A python3 alone in its own pid
and mount namespace (the build directory hidden under a tmpfs, so the library's path does not
exist there) is loaded, and the tool is SIGKILLed at a random instant of the load (RUNS
counted runs, each with a fresh target; the instants drawn with a fixed seed, uniform over
1.5 times a whole load's duration, measured first). After each kill: no libmemtrim file in
the target's /tmp or anywhere the tool could have written one, and no helper of the tool left
running. Control cmd-load-file (the old copy into the target's /tmp): killed loads leave the
copy behind.
"""
import glob
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time

from conftest import BUILD
from test_cli_load import HOLD_C, PY_HOLDER
from wait import wait_for

TOOL = BUILD / "memtrim"
RUNS = 20
PY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


def start_target(cwd):
    argv = ["/usr/bin/unshare", "--pid", "--mount", "--fork", "--mount-proc", "--propagation",
            "private", "/bin/sh", "-c",
            f"mount -t tmpfs none '{BUILD}' && mount -t tmpfs none /tmp && exec \"$0\" \"$@\"",
            "/usr/bin/python3", "-c", PY]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         cwd=cwd)
    assert p.stdout.readline() == "ready\n"
    kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
    return p, int(kids[0])  # unshare's child: the namespace's pid 1, python3


def tool_processes():
    """Processes running the tool's binary (the helpers are forks of it)."""
    exe = os.path.realpath(TOOL)
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink(f"/proc/{d}/exe") == exe:
                    found.append(int(d))
            except OSError:
                pass
    return found


def leftovers(pid):
    """Files of ours in the target's /tmp, a tmpfs of its own: another memtrim's on this
    machine cannot show there, and the control's copies go with the namespace."""
    return glob.glob(f"/proc/{pid}/root/tmp/libmemtrim*")


def load_argv(pid):
    return [str(TOOL), "load", str(pid), "--json", "--config", '{"HttpPort": 0}']


def test_a_killed_load_leaves_no_file():
    cwd = tempfile.mkdtemp(prefix="memtrim-killed-load-")
    try:
        p, pid = start_target(cwd)  # a whole load, timed: the instants' range
        try:
            t0 = time.monotonic()
            r = subprocess.run(load_argv(pid), capture_output=True, text=True, timeout=60)
            whole = time.monotonic() - t0
            assert r.returncode == 0, r.stderr
            assert leftovers(pid) == []
        finally:
            p.kill()
            p.wait()
        rng = random.Random(37)
        left, loaded = [], 0
        for run in range(RUNS):
            p, pid = start_target(cwd)
            try:
                tool = subprocess.Popen(load_argv(pid), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0, 1.5 * whole))  # the kill's instant, not a wait
                tool.send_signal(signal.SIGKILL)
                tool.wait()
                wait_for(lambda: not tool_processes(), timeout=10, what="the tool's helpers gone")
                files = leftovers(pid)
                if files:
                    left.append((run, files))
                loaded += any("libmemtrim" in m for m in open(f"/proc/{pid}/maps"))
            finally:
                p.kill()
                p.wait()
        print(f"{RUNS} killed loads ({whole * 1e3:.0f} ms a whole one): {loaded} had mapped "
              f"the library, {len(left)} left a file")
        assert left == [], left
    finally:
        shutil.rmtree(cwd)


def helpers(tool_pid):
    """The tool's children that run as uid nobody (the target's): its library helper."""
    found = []
    try:
        kids = open(f"/proc/{tool_pid}/task/{tool_pid}/children").read().split()
    except OSError:
        return []
    for k in kids:
        try:
            if "\nUid:\t65534\t" in open(f"/proc/{k}/status").read():
                found.append(int(k))
        except OSError:
            pass
    return found


def test_the_helper_holds_nothing_of_the_tools():
    """While a load waits (another thread of the target holds the loader lock), its helper is
    a fresh image: no environment (the operator's, root's), standard input and outputs on
    /dev/null, only the memfd and its two pipes besides, the target's uid, and confined by a
    seccomp filter; the operator's environment is not in its memory. Control
    cmd-load-helper-fork (the helper forked, not a fresh image): the environment is there."""
    d = tempfile.mkdtemp(prefix="memtrim-holder-", dir="/var/tmp")  # not under its /tmp
    os.chmod(d, 0o755)
    p = tool = main_w = None
    try:
        src, lib = os.path.join(d, "hold.c"), os.path.join(d, "hold.so")
        open(src, "w").write(HOLD_C)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
        main_r, main_w = os.pipe()  # its main thread reads this: a safe thread
        p = subprocess.Popen(["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh",
                              "-c", "mount -t tmpfs none /tmp && exec \"$0\" \"$@\"",
                              "/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                              "--clear-groups", "/usr/bin/python3", "-c", PY_HOLDER, lib, "read",
                              str(main_r)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd="/", pass_fds=(main_r,))
        os.close(main_r)
        assert p.stdout.readline() == "ready\n"
        wait_for(lambda: any("hold.so" in m for m in open(f"/proc/{p.pid}/maps")),
                 what="the holder inside dlopen")
        env = dict(os.environ, MEMTRIM_SECRET_FOR_TEST="s3cr3t-of-the-operator")
        tool = subprocess.Popen(load_argv(p.pid) + ["--timeout", "20"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        kids = wait_for(lambda: helpers(tool.pid), what="the helper")
        assert len(kids) == 1, [open(f"/proc/{k}/cmdline", "rb").read() for k in kids]
        pid = kids[0]
        assert open(f"/proc/{pid}/environ", "rb").read() == b""
        status = open(f"/proc/{pid}/status").read()
        assert "\nSeccomp:\t2\n" in status and "\nUid:\t65534\t65534\t65534\t65534\n" in status
        fds = {os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd")}
        others = {f for f in fds if f != "/dev/null" and not f.startswith("pipe:")}
        assert others == {"/memfd:libmemtrim.so.0 (deleted)"}, fds
        with open(f"/proc/{pid}/mem", "rb") as mem:
            for line in open(f"/proc/{pid}/maps"):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                if line.split()[1].startswith("r") and end - start < 64 << 20:
                    try:
                        mem.seek(start)
                        assert b"s3cr3t-of-the-operator" not in mem.read(end - start), line
                    except OSError:
                        pass
        p.stdin.write("\n")  # the loader lock goes: the load completes
        p.stdin.flush()
        out, err = tool.communicate(timeout=60)
        assert tool.returncode == 0, err
        assert not os.path.exists(f"/proc/{pid}/status") or \
            open(f"/proc/{pid}/status").read().find("State:\tZ") >= 0
    finally:
        for x in (tool, p):
            if x and x.poll() is None:
                x.kill()
                x.wait()
        shutil.rmtree(d)
        if main_w is not None:
            os.close(main_w)
