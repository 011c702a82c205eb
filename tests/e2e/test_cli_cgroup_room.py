"""The memtrim command never OOM-kills a target for want of room in its memory cgroup
(issue 37, item 2). A python3 in a v1 memory cgroup (/sys/fs/cgroup/memory; its name holds a
space and a colon, which /proc/PID/cgroup prints as they are) whose limit is its usage plus
512 KiB: load (the library, memtrim's engine and the page) is refused by name (exit 2), the
target alive and without the library; trim, which charges only the page, runs.
Control cmd-cgroup-room (the check off): load OOM-kills the target.

The kernel reclaims a cgroup's clean page cache before it OOM-kills anything in it, so that
cache is room (docs/command-rules.md): a python3 that read a file larger than its cgroup, the
cgroup full of that clean cache to 64 KiB of its limit (as Orthanc's storage writes fill its
own), is trimmed, and lives. Control cmd-room-cache-unseen (the old room): refused.

From a cgroup namespace of the command's own, the same load is refused the same way (control
cmd-cgroupns-unresolved: the room unread, the load runs).
"""
import json
import os
import subprocess
import time

import pytest

from conftest import BUILD
from hosts_util import Cgroup, free_port
from wait import wait_for

TOOL = BUILD / "memtrim"
HEADROOM = 512 << 10
PY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\nprint('bye', flush=True)\n"


def tool(*args):
    r = subprocess.run([str(TOOL), *map(str, args), "--json"], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def fill(p, cg):
    """The target ready, its cgroup's limits set HEADROOM above its usage."""
    assert p.stdout.readline() == "ready\n"
    usage = int((cg.path / "memory.usage_in_bytes").read_text())
    for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
        if (cg.path / name).exists():
            (cg.path / name).write_text(str(usage + HEADROOM))


def said_bye(p, cg):
    """The target, sent its end, ends as it should, never OOM-killed."""
    p.stdin.close()
    assert p.stdout.readline() == "bye\n" and p.wait(30) == 0
    assert cg.oom_kills() == 0


def ended(p, cg):
    if p.poll() is None:
        p.kill()
    p.wait()
    cg.remove()


@pytest.mark.skipif(not (Cgroup.V1 / "memory.limit_in_bytes").exists() or os.geteuid() != 0,
                    reason="a v1 memory cgroup made as root (tests/vm has the v2 hosts)")
def test_load_is_refused_without_room_and_trim_runs():
    cg = Cgroup(f"memtrim room:{os.getpid()}", 1 << 30)  # /proc/PID/cgroup: to the line's end
    p = subprocess.Popen(cg.wrap(["/usr/bin/python3", "-c", PY]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd="/tmp")
    try:
        fill(p, cg)
        rc, out, err = tool("load", p.pid, "--config", json.dumps({"HttpPort": free_port()}))
        assert p.poll() is None, f"the target died ({p.returncode}; oom_kill {cg.oom_kills()})"
        assert rc == 2 and "memory cgroup has" in err and "memory.limit_in_bytes" in err, \
            (rc, out, err)
        assert json.loads(out)["error"]["code"] == "refused"
        assert not [m for m in open(f"/proc/{p.pid}/maps") if "libmemtrim" in m]
        rc, out, err = tool("trim", p.pid)
        assert rc == 0, (rc, out, err)
        said_bye(p, cg)
    finally:
        ended(p, cg)


@pytest.mark.skipif(not (Cgroup.V1 / "memory.limit_in_bytes").exists() or os.geteuid() != 0,
                    reason="a v1 memory cgroup made as root (tests/vm has the v2 hosts)")
def test_the_room_is_read_from_another_cgroup_namespace():
    """The command in a cgroup namespace of its own (a container's, the agent's pod) sees the
    process's cgroup as /../../NAME: found through the mount whose root shows it, the room
    under its limit is read and a load without room refused by name, as from the host.
    Control cmd-cgroupns-unresolved (the mount point joined to the path as printed): no limit
    read, the load runs into the full cgroup."""
    cg = Cgroup(f"memtrim room ns:{os.getpid()}", 1 << 30)
    tool_cg = Cgroup.V1 / f"memtrim-room-tool-{os.getpid()}"
    (tool_cg / "sub").mkdir(parents=True)
    p = subprocess.Popen(cg.wrap(["/usr/bin/python3", "-c", PY]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd="/tmp")
    try:
        fill(p, cg)
        r = subprocess.run(["/bin/sh", "-c", f'echo $$ > "{tool_cg}/sub/cgroup.procs" && '
                            'exec unshare -C "$@"', "sh", str(TOOL), "load", str(p.pid),
                            "--json", "--config", json.dumps({"HttpPort": free_port()})],
                           capture_output=True, text=True, timeout=120)
        assert p.poll() is None, f"the target died ({p.returncode}; oom_kill {cg.oom_kills()})"
        assert r.returncode == 2 and "memory cgroup has" in r.stderr and \
            str(cg.path / "memory.limit_in_bytes") in r.stderr, (r.returncode, r.stderr)
        assert not [m for m in open(f"/proc/{p.pid}/maps") if "libmemtrim" in m]
        said_bye(p, cg)
    finally:
        ended(p, cg)
        wait_for(lambda: not (tool_cg / "sub" / "cgroup.procs").read_text().strip(), 30,
                 "the tool's cgroup empty")
        (tool_cg / "sub").rmdir()
        tool_cg.rmdir()


CACHED = '''
import sys
held = [bytearray(100000) for _ in range(200)]  # 20 MB of heap below the mmap threshold
last = bytearray(100000)  # above it: the freed chunks stay in the heap
del held
with open(sys.argv[1], 'rb') as f:  # clean page cache, charged to this cgroup
    while f.read(1 << 20):
        pass
print('ready', flush=True)
sys.stdin.read()
print('bye', flush=True)
'''


def stat(cg):
    return dict(line.split() for line in (cg.path / "memory.stat").read_text().splitlines())


def set_limit(cg, limit):
    """v1's memory and memory+swap limits to limit, in the order the kernel accepts (memsw
    never under memory's)."""
    mem, memsw = cg.path / "memory.limit_in_bytes", cg.path / "memory.memsw.limit_in_bytes"
    order = [mem, memsw]
    if memsw.exists() and limit > int(mem.read_text()):
        order.reverse()
    for f in order:
        if f.exists():
            f.write_text(str(limit))


@pytest.mark.skipif(not (Cgroup.V1 / "memory.limit_in_bytes").exists() or os.geteuid() != 0,
                    reason="a v1 memory cgroup made as root (tests/vm has the v2 hosts)")
def test_clean_page_cache_is_room(tmp_path):
    data = tmp_path / "data"
    with open(data, "wb") as f:  # 128 MiB on disk, then out of the page cache
        for _ in range(128):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    cg = Cgroup(f"memtrim-room-cache-{os.getpid()}", 64 << 20)
    p = subprocess.Popen(cg.wrap(["/usr/bin/python3", "-c", CACHED, str(data)]),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/tmp")
    try:
        assert p.stdout.readline() == "ready\n"
        usage = int((cg.path / "memory.usage_in_bytes").read_text())
        set_limit(cg, usage)  # full: no room but its clean cache (a call charges up to 384 KiB)
        usage = int((cg.path / "memory.usage_in_bytes").read_text())
        limit = int((cg.path / "memory.limit_in_bytes").read_text())
        s = stat(cg)
        clean = int(s["total_inactive_file"]) - int(s["total_dirty"]) - \
            int(s["total_writeback"]) - int(s["total_mapped_file"])
        print(f"\nusage {usage >> 10} KiB of {limit >> 10}, cache {int(s['total_cache']) >> 20} MiB, "
              f"inactive {int(s['total_inactive_file']) >> 20} MiB, clean and unmapped "
              f"{clean >> 20} MiB, failcnt {(cg.path / 'memory.failcnt').read_text().strip()}")
        assert limit - usage < 384 << 10 and clean >= 8 << 20, "the cell is not full of clean cache"
        t0 = time.monotonic()
        rc, out, err = tool("trim", p.pid)
        after = stat(cg)
        print(f"trim: rc {rc} in {time.monotonic() - t0:.2f} s; the cgroup's cache "
              f"{int(s['total_cache']) >> 10} KiB before, {int(after['total_cache']) >> 10} after, "
              f"usage {int((cg.path / 'memory.usage_in_bytes').read_text()) >> 10} KiB: {out.strip()[:300]}")
        assert rc == 0, (rc, out, err)
        assert json.loads(out)["released_bytes"] > 0
        assert p.poll() is None and cg.oom_kills() == 0, \
            f"the target died ({p.returncode}; oom_kill {cg.oom_kills()})"
        said_bye(p, cg)
    finally:
        ended(p, cg)
