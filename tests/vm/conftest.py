"""Fixtures of the tests that run on a real cgroup v2 kernel (tests/vm/run.sh boots
Debian's kernel under qemu with this machine's / shared, then runs pytest there):
the e2e helpers (tests/e2e/hosts_util.py: processes always stopped, memory cgroups
removed at the end). These tests are only meaningful on that kernel: anywhere else
(a v1 or hybrid host) the session stops with a usage error instead of testing the
wrong hierarchy.

Run: tests/vm/run.sh -- /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider tests/vm
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from hosts_util import cgroup, procs  # noqa: E402,F401  (fixtures)
from skips_util import listed_skips  # noqa: E402


def pure_v2_host():
    """None on a pure cgroup v2 host (the VM), else what is wrong."""
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    kinds = {m[2] for m in mounts if m[2] in ("cgroup", "cgroup2")}
    if kinds != {"cgroup2"}:
        return f"cgroup filesystems mounted: {sorted(kinds) or 'none'} (want cgroup2 alone)"
    if not any(m[1] == "/sys/fs/cgroup" and m[2] == "cgroup2" for m in mounts):
        return "cgroup2 is not mounted at /sys/fs/cgroup"
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "vm_last: runs after every other case of the session "
                            "(it changes the kernel for good: Yama's ptrace_scope 3)")
    config.addinivalue_line("markers", "survival: a survival cell's counted pairs (survival_util): "
                            "run by bench/survival.sh, measured and not gating")
    _root.append(config.rootpath)
    why = pure_v2_host()
    if why:
        raise pytest.UsageError(f"tests/vm needs the cgroup v2 VM ({why}); run them with "
                                "tests/vm/run.sh -- /usr/bin/python3 -m pytest -q tests/vm")


def pytest_collection_modifyitems(items):
    """The vm_last cases at the end, in their order (a stable sort)."""
    items.sort(key=lambda item: item.get_closest_marker("vm_last") is not None)


# No case here may skip unless tests/skips.txt lists it for "vm" (a case an open issue owns,
# with its measured reason): any other skip fails the session, and so does a session in
# which nothing passed. A skip is a case's (setup or call), an
# expected failure (xfail), or one at collection (a module-level skip or importorskip).
_skipped, _passed = [], []


_root = []  # the session's rootpath: node ids are relative to it


def listed(nodeid):
    """tests/skips.txt lists nodeid (made relative to the repository) for vm."""
    import fnmatch
    import os
    repo = Path(__file__).resolve().parents[2]
    rel = os.path.relpath(_root[0], repo) if _root else "."
    full = nodeid if rel == "." else f"{rel}/{nodeid}"
    return any(full == g or fnmatch.fnmatchcase(full, g) for g in listed_skips("vm"))


def pytest_collectreport(report):
    if report.skipped and not listed(report.nodeid):
        _skipped.append(report.nodeid)


def pytest_runtest_logreport(report):
    if report.skipped:
        if not listed(report.nodeid):
            _skipped.append(report.nodeid)
    elif report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
        _passed.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus in (0, 1) and (_skipped or (session.testscollected and not _passed)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    for nodeid in _skipped:
        terminalreporter.line(f"skipped, and tests/skips.txt does not list it for vm: {nodeid}", red=True)
    if not _passed and not _skipped and terminalreporter.stats.get("failed") is None:
        terminalreporter.line("no test passed: a stage that ran nothing is not a pass", red=True)
