"""memtrim_attach (the memtrim command's `load`) retried after a named group's start
failed: core/group/group_host.c installs its fork hooks once per process. They were
installed by every start, also one that failed, so the retry's second set made the next
fork() lock host.lock twice in its prepare handler and hang for good.

The failure is a real one: the named group's thread cannot start (RLIMIT_NPROC reached,
as a pids-limited container's host sees it). The host is Debian's python3 as nobody
(root is exempt from RLIMIT_NPROC), calling memtrim_attach through ctypes; a fork after
the retry must return, its child exit 0. The control, the same host whose first start
succeeds, forks the same way: it must pass too (the check is the retry, not the fork).
"""
import os
import shutil
import subprocess
import sys

from hosts_util import readable_build, traversable_dir

HOST = r"""
import ctypes, os, resource, signal, sys
lib, gdir, fail_first = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
os.setgid(65534)
os.setuid(65534)
m = ctypes.CDLL(lib)
buf = ctypes.create_string_buffer(512)
cfg = ('{"GroupName": "attach", "GroupDir": "%s", "HttpPort": 0, "Database": ""}' % gdir).encode()
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
if fail_first:
    resource.setrlimit(resource.RLIMIT_NPROC, (1, hard))  # no new thread for nobody
    rc = m.memtrim_attach(cfg, buf, 512)
    resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
    print("first", rc, buf.value.decode(), flush=True)
rc = m.memtrim_attach(cfg, buf, 512)
print("start", rc, buf.value.decode(), flush=True)
signal.alarm(20)  # a fork that hangs ends here (SIGALRM), not at the test's timeout
pid = os.fork()
if pid == 0:
    os._exit(0)
_, st = os.waitpid(pid, 0)
print("forked", os.waitstatus_to_exitcode(st), flush=True)
"""


def run_host(fail_first):
    lib = readable_build("libmemtrim.so.0") / "libmemtrim.so.0"
    gdir = traversable_dir("memtrim-attach-")
    try:
        os.chown(gdir, 65534, 65534)
        gdir.chmod(0o700)
        p = subprocess.run([sys.executable, "-c", HOST, str(lib), str(gdir),
                            "1" if fail_first else "0"],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr
    finally:
        shutil.rmtree(gdir, ignore_errors=True)


def test_attach_retried_after_a_failed_named_start_forks():
    rc, out, err = run_host(fail_first=True)
    lines = out.splitlines()
    # the first start failed as the kernel made it: the thread could not start
    assert lines and lines[0].startswith("first -11 ") and "cannot start its thread" in lines[0], \
        (out, err)
    assert len(lines) > 1 and lines[1].startswith("start 0 "), (out, err)
    assert rc == 0 and "forked 0" in lines, f"the fork after the retry hung or failed: " \
        f"rc {rc}\n{out}\n{err[-2000:]}"


def test_control_first_start_succeeds_and_forks():
    rc, out, err = run_host(fail_first=False)
    lines = out.splitlines()
    assert lines and lines[0].startswith("start 0 "), (out, err)
    assert rc == 0 and "forked 0" in lines, (rc, out, err[-2000:])
