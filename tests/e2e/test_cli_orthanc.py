"""memtrim trim $(pidof Orthanc) against Debian's Orthanc, unmodified, with no plugin (issue
29): after an anonymisation burst (4 studies of 24 synthetic 2 MB CT slices uploaded by 8
threads, each study anonymized twice: orthanc_util) its glibc heap holds freed memory.
`memtrim stats` reads it from outside (the control: stats calls mallinfo2 only, and RSS stays
where it was); `memtrim trim` then takes a thread of Orthanc's in a safe system call and
releases a large part of what stats called free; Orthanc is untraced after, still answers,
stores one more instance, and stops cleanly.
"""
import json
import os
import subprocess

import pytest
import requests

from conftest import BUILD
from hosts_util import procs  # noqa: F401
from orthanc_util import ORTHANC, anonymize_all, make_instance, start_orthanc, upload_studies, \
    wait_ready

pytestmark = pytest.mark.skipif(not ORTHANC.exists(), reason="Debian's orthanc is not installed")
pydicom = pytest.importorskip("pydicom")

TOOL = BUILD / "memtrim"


def rss(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tool(*args):
    r = subprocess.run([str(TOOL), *args, "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout)


def test_trim_orthanc_after_an_anonymisation_burst(procs, tmp_path):  # noqa: F811
    p, base = start_orthanc(procs, tmp_path, None, extra={"Plugins": []})
    wait_ready(p, base)
    studies = upload_studies(base, studies=4, per_study=24)
    anonymize_all(base, studies)
    pid = p.proc.pid

    before = rss(pid)
    st = tool("stats", str(pid))
    assert st["allocator"] == "glibc" and st["heap_free_bytes"] > 40 << 20, st
    assert rss(pid) > before - (8 << 20), (before, rss(pid))  # the control: stats frees nothing

    out = tool("trim", str(pid))
    assert out["allocator"] == "glibc" and out["malloc_trim_return"] == 1, out
    assert out["released_bytes"] > st["heap_free_bytes"] // 2, (out, st)
    print(f"Orthanc: RSS {out['rss_before_bytes'] >> 20} -> {out['rss_after_bytes'] >> 20} MiB, "
          f"stats' free {st['heap_free_bytes'] >> 20} MiB, thread {out['thread']} in "
          f"{out['thread_syscall']}, stopped {out['thread_stopped_seconds'] * 1e3:.2f} ms")

    with open(f"/proc/{pid}/status") as f:
        assert "TracerPid:\t0\n" in f.read()
    assert requests.get(base + "/system", timeout=30).status_code == 200
    from pydicom.uid import generate_uid
    r = requests.post(base + "/instances", data=make_instance(generate_uid(), generate_uid(), 1),
                      timeout=120)
    assert r.status_code == 200, r.text
    assert p.stop() == 0, p.output()[-3000:]
