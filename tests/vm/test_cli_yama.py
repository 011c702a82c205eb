"""The memtrim command under Yama (issue 29): Debian's kernel has it, the development
machine's has not. At kernel.yama.ptrace_scope 1 a user's tool may not trace that user's
process unless it is its descendant, at 2 only CAP_SYS_PTRACE may trace. Each refusal names
the scope, and the kernel agrees (a ptrace(PTRACE_SEIZE) of the same pair fails with EPERM);
each has its control at scope 0 or as root, which works. At 3 nobody may trace, root
included: that case runs last in the VM's session (marked vm_last, tests/vm/conftest.py), as
scope 3 cannot be lowered until a reboot, and its control is the same root tool trimming the
same target just before."""
import ctypes
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

BUILD = Path(os.environ.get("MEMTRIM_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
NOBODY = 65534


def as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


@pytest.fixture
def bins():
    """The tool and the target where nobody can run them (the checkout and pytest's own
    temporary directories may be 0700)."""
    d = Path(tempfile.mkdtemp(prefix="memtrim-yama-"))
    d.chmod(0o755)
    for name in ("memtrim", "memtrim-cli-target"):
        shutil.copy(BUILD / name, d / name)
        (d / name).chmod(0o755)
    yield d
    shutil.rmtree(d)


@pytest.fixture
def scope():
    old = SCOPE.read_text().strip()
    yield lambda v: SCOPE.write_text(f"{v}\n")
    SCOPE.write_text(f"{old}\n")


@pytest.fixture
def target(bins):
    p = subprocess.Popen([str(bins / "memtrim-cli-target")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, preexec_fn=as_nobody)
    assert p.stdout.readline().startswith("ready")
    yield p
    p.kill()
    p.wait()


def tool(bins, pid, user=None):
    return subprocess.run([str(bins / "memtrim"), "trim", str(pid), "--json"], capture_output=True,
                          text=True, timeout=60, preexec_fn=user)


def kernel_allows(pid, user=as_nobody):
    """Does the kernel let nobody (or root: user None) seize pid? (a child that tries, then
    detaches)"""
    child = os.fork()
    if child == 0:
        if user:
            user()
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.ptrace(0x4206, pid, None, None) == 0  # PTRACE_SEIZE
        os._exit(0 if ok else 1)
    _, status = os.waitpid(child, 0)  # the child's exit detaches it
    return os.waitstatus_to_exitcode(status) == 0


def test_the_vm_kernel_has_yama():
    assert SCOPE.exists()


def test_scope_1_refuses_a_non_descendant(bins, scope, target):
    scope(1)
    r = tool(bins, target.pid, as_nobody)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "ptrace_scope is 1" in r.stderr and json.loads(r.stdout)["error"]["code"] == "refused"
    assert not kernel_allows(target.pid)
    scope(0)  # the control: same user, same pair, scope 0
    assert kernel_allows(target.pid)
    r = tool(bins, target.pid, as_nobody)
    assert r.returncode == 0, r.stderr


def test_scope_2_wants_cap_sys_ptrace(bins, scope, target):
    scope(2)
    r = tool(bins, target.pid, as_nobody)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "ptrace_scope is 2" in r.stderr
    assert not kernel_allows(target.pid)
    r = tool(bins, target.pid)  # the control: root has CAP_SYS_PTRACE
    assert r.returncode == 0, r.stderr


@pytest.mark.vm_last  # scope 3 holds until a reboot: nothing may trace after it
def test_scope_3_refuses_even_root(bins, target):
    r = tool(bins, target.pid)  # the control: root, the same target, at scope 0
    assert SCOPE.read_text().strip() == "0"
    assert r.returncode == 0, r.stderr
    assert kernel_allows(target.pid, None)
    SCOPE.write_text("3\n")
    r = tool(bins, target.pid)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "ptrace_scope is 3" in r.stderr and json.loads(r.stdout)["error"]["code"] == "refused"
    assert not kernel_allows(target.pid, None)  # the kernel refuses root too
    status = open(f"/proc/{target.pid}/status").read()
    assert "TracerPid:\t0" in status and target.poll() is None  # untouched
