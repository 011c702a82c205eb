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
from wait import wait_for

TOOL = BUILD / "memtrim"
RUNS = 20
PY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


def start_target(cwd):
    argv = ["/usr/bin/unshare", "--pid", "--mount", "--fork", "--mount-proc", "--propagation",
            "private", "/bin/sh", "-c", f"mount -t tmpfs none '{BUILD}' && exec \"$0\" \"$@\"",
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
    return glob.glob(f"/proc/{pid}/root/tmp/libmemtrim*") + glob.glob("/tmp/libmemtrim*")


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
            files = []
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
                for f in files:  # this run's own (the control's copies), never another's
                    if f.startswith("/tmp/") and os.path.exists(f):
                        os.unlink(f)
        print(f"{RUNS} killed loads ({whole * 1e3:.0f} ms a whole one): {loaded} had mapped "
              f"the library, {len(left)} left a file")
        assert left == [], left
    finally:
        shutil.rmtree(cwd)
