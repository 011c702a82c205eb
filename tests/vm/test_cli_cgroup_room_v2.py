"""The memtrim command's memory cgroup check on cgroup v2 (issue 37, item 2; the v1 case is
tests/e2e/test_cli_cgroup_room.py). A python3 whose cgroup has 512 KiB left under its limit,
the limit where a v2 host puts it: memory.max on its own cgroup, on its parent only (the leaf
says "max"), or memory.high on its own: load is refused by name (exit 2, the binding file
named), the target alive and without the library; trim, which charges only the page, runs.
Control cmd-cgroup-room (the check off): load goes ahead, and the target, reclaiming at its
limit, does not return from it within --timeout (3 of 3 placements: exit 5). TCG is slow:
outcomes only, never a time.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

from hosts_util import Cgroup, free_port

BUILD = Path(os.environ.get("MEMTRIM_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
TOOL = BUILD / "memtrim"
HEADROOM = 512 << 10
PY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\nprint('bye', flush=True)\n"


def tool(*args):
    r = subprocess.run([str(TOOL), *map(str, args), "--json"], capture_output=True, text=True,
                       timeout=300)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("placement,binding", [("own", "memory.max"), ("parent", "memory.max"),
                                               ("high", "memory.high")])
def test_load_is_refused_without_room_and_trim_runs(placement, binding):
    parent = Cgroup(f"memtrim-room-p-{os.getpid()}", None)
    leaf = Cgroup("leaf", None, parent=parent)
    p = subprocess.Popen(leaf.wrap(["/usr/bin/python3", "-c", PY]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd="/tmp")
    try:
        assert p.stdout.readline() == "ready\n"
        where = parent if placement == "parent" else leaf
        limit = int((where.path / "memory.current").read_text()) + HEADROOM
        (where.path / binding).write_text(str(limit))
        rc, out, err = tool("load", p.pid, "--timeout", "10",  # the control's load may hang
                            "--config", json.dumps({"HttpPort": free_port()}))
        assert p.poll() is None, f"the target died ({p.returncode}): {leaf.events()}"
        assert rc == 2 and "memory cgroup has" in err and f"{where.path}/{binding}" in err, \
            (rc, out, err)
        assert not [m for m in open(f"/proc/{p.pid}/maps") if "libmemtrim" in m]
        # the same room again for the trim: the cgroup's charge moves meanwhile (memory.high
        # lets it pass the line: r3 saw 0 KiB left), and the claim is "HEADROOM is enough"
        limit = int((where.path / "memory.current").read_text()) + HEADROOM
        (where.path / binding).write_text(str(limit))
        rc, out, err = tool("trim", p.pid)
        assert rc == 0, (rc, out, err)
        p.stdin.close()
        assert p.stdout.readline() == "bye\n" and p.wait(120) == 0
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        leaf.remove()
        parent.remove()
