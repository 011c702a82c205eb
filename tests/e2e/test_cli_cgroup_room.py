"""The memtrim command never OOM-kills a target for want of room in its memory cgroup
(issue 37, item 2). A python3 in a v1 memory cgroup (/sys/fs/cgroup/memory; its name holds a
space and a colon, which /proc/PID/cgroup prints as they are) whose limit is its usage plus
512 KiB: load (the library, memtrim's engine and the page) is refused by name (exit 2), the
target alive and without the library; trim, which charges only the page, runs.
Control cmd-cgroup-room (the check off): load OOM-kills the target.
"""
import json
import os
import subprocess

import pytest

from conftest import BUILD
from hosts_util import Cgroup, free_port

TOOL = BUILD / "memtrim"
HEADROOM = 512 << 10
PY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\nprint('bye', flush=True)\n"


def tool(*args):
    r = subprocess.run([str(TOOL), *map(str, args), "--json"], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.skipif(not (Cgroup.V1 / "memory.limit_in_bytes").exists() or os.geteuid() != 0,
                    reason="a v1 memory cgroup made as root (tests/vm has the v2 hosts)")
def test_load_is_refused_without_room_and_trim_runs():
    cg = Cgroup(f"memtrim room:{os.getpid()}", 1 << 30)  # /proc/PID/cgroup: to the line's end
    p = subprocess.Popen(cg.wrap(["/usr/bin/python3", "-c", PY]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd="/tmp")
    try:
        assert p.stdout.readline() == "ready\n"
        usage = int((cg.path / "memory.usage_in_bytes").read_text())
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            if (cg.path / name).exists():
                (cg.path / name).write_text(str(usage + HEADROOM))
        rc, out, err = tool("load", p.pid, "--config", json.dumps({"HttpPort": free_port()}))
        assert p.poll() is None, f"the target died ({p.returncode}; oom_kill {cg.oom_kills()})"
        assert rc == 2 and "memory cgroup has" in err and "memory.limit_in_bytes" in err, \
            (rc, out, err)
        assert json.loads(out)["error"]["code"] == "refused"
        assert not [m for m in open(f"/proc/{p.pid}/maps") if "libmemtrim" in m]
        rc, out, err = tool("trim", p.pid)
        assert rc == 0, (rc, out, err)
        p.stdin.close()
        assert p.stdout.readline() == "bye\n" and p.wait(30) == 0
        assert cg.oom_kills() == 0
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        cg.remove()
