"""Debian's Orthanc with libOrthancMemTrim.so under a cgroup v2 limit (issue 20; run by
tests/vm/run.sh): the burst of tests/e2e/test_orthanc.py (4 studies x 24 uploads of 2 MB
CT slices by 8 threads, then 2 anonymizations of each study, tests/e2e/orthanc_util.py)
in a memory cgroup with memory.max LIMIT. Orthanc's HTTP and job threads leave freed
memory resident in their arenas: without the plugin the kernel kills Orthanc during the
burst (the control: if it lives, the case proves nothing); with the plugin at its defaults
it finds the limit in memory.max, the kernel's PSI trigger wakes its pressure trims, and
Orthanc serves the whole burst.

Orthanc's storage goes to the shared disk (build/vm/, over 9p), not to the guest's /tmp:
files in a tmpfs are charged to the cgroup and cannot be reclaimed without swap, and the
case is about the heap.
TCG is slow: the test asserts outcomes and counts, never a time.
"""
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import requests

from hosts_util import ROOT
from orthanc_util import anonymize_all, start_orthanc, upload_studies, wait_ready

MB = 1 << 20
LIMIT = 350 * MB
STUDIES, PER_STUDY, ROUNDS = 4, 24, 2
SHARED = Path(os.environ.get("MEMTRIM_VM_DIR", ROOT / "build" / "vm"))


@pytest.fixture
def storage():
    SHARED.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="orthanc-storage-", dir=SHARED))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def burst(procs, tmp_path, cg, storage, plugin):
    """Orthanc in cg, with or without the plugin, through the burst: (Proc, the burst's
    error or None)."""
    section = {"HttpPort": 0, "Database": ""} if plugin else None
    extra = {"StorageDirectory": str(storage)}
    if not plugin:
        extra["Plugins"] = []
    p, base = start_orthanc(procs, tmp_path, section, extra, wrap=cg.wrap)
    wait_ready(p, base)
    try:
        studies = upload_studies(base, STUDIES, PER_STUDY)
        assert len(studies) == STUDIES, studies
        anonymize_all(base, studies, rounds=ROUNDS)
        requests.get(base + "/system", timeout=60).raise_for_status()
        return p, None
    except (AssertionError, requests.RequestException) as e:
        return p, e


def report(what, p, cg):
    ev = cg.events()
    trims = p.output().count("pressure trim released")
    print(f"\n{what}: {'alive' if p.running() else f'exit {p.proc.returncode}'}, "
          f"{trims} pressure trims, peak {(cg.peak_bytes() or 0) >> 20} MB; memory.events: "
          f"high {ev['high']}, max {ev['max']}, oom {ev['oom']}, oom_kill {ev['oom_kill']}")
    return ev


def test_orthanc_without_the_plugin_is_killed(procs, cgroup, tmp_path, storage):
    cg = cgroup(LIMIT)
    p, err = burst(procs, tmp_path, cg, storage, plugin=False)
    rc = p.wait(120) if err is not None else None
    ev = report("Orthanc without the plugin", p, cg)
    assert err is not None and rc == -signal.SIGKILL, \
        f"the control was not OOM-killed (burst error {err}, exit {rc}): the case is void"
    assert ev["oom_kill"] >= 1


def test_orthanc_with_the_plugin_serves_the_burst(procs, cgroup, tmp_path, storage):
    cg = cgroup(LIMIT)
    p, err = burst(procs, tmp_path, cg, storage, plugin=True)
    ev = report("Orthanc with the plugin at its defaults", p, cg)
    out = p.output()
    said = "\n".join(ln for ln in out.splitlines() if "memtrim/cgroup" in ln or
                     "memtrim/pressure: pressure source" in ln)
    assert err is None, f"{err}\n{said}\n{out[-3000:]}"
    assert ev["oom_kill"] == 0
    assert f"from {cg.path}/memory.max" in said, said
    assert "pressure source: psi" in said, said
    assert "pressure trim released" in out, said
    assert p.stop(signal.SIGTERM, grace=120) == 0, out[-3000:]
