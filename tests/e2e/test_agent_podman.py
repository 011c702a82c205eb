"""The node agent beside real containers (issue 39, docs/agent.md): Debian's podman with runc
runs an image built offline from Debian's packages (mmdebstrap, podman_util.py), under podman's
default seccomp profile and a memory limit, in the cgroup podman makes for it
(/libpod_parent/libpod-<ID> on cgroup v1 here). Inside, unmodified, Debian's python3 serves
test_agent_runtimes.py's [python-450] work (bench/runtimes/py_app.py, mounted read-only): the
burst of 240 requests of 36 MB from 16 clients, then one upload-sized request of BIG_MB, in
450 MiB (that file says how they were sized). The container shares the host's network: the
test's clients reach it on loopback.

Each counted run, no retries, side by side: the control, the container alone, must be
OOM-killed (exit 137, the kernel's log names its python3 killed in its cgroup, and conmon
wrote its "oom" file; podman's State.OOMKilled stays false on cgroup v1 here, podman_util.py); then the same container beside `memtrim
agent` (at its defaults, allowed on that container's cgroup alone) must finish: every request
answered, no OOM kill. The agent lists the cgroup as a Podman container with its ID and the
container's python3 by its host pid, with its trims; /metrics carries the container_id label
and the released bytes. The trims pass the container's seccomp filter: the command reads it
(PTRACE_SECCOMP_GET_FILTER) and runs it over each call it would make (docs/command-rules.md).

MEMTRIM_PODMAN_RUNS: the runs (default 2; the counted sets in docs/agent.md were run with
more). Control (tests/controls.txt): agent-never-trims (the agent picks but trims nothing:
the container beside it dies as its control).
"""
import os
import re
import time
from pathlib import Path

import pytest

import podman_util as pu
import runtimes_util as ru
from agent_util import Agent
from hosts_util import ROOT, procs  # noqa: F401
from test_agent_runtimes import BIG_MB
from wait import wait_for

MB = 1 << 20
LIMIT = 450 * MB
RUNS = int(os.environ.get("MEMTRIM_PODMAN_RUNS", "2"))


def load():
    return open("/proc/loadavg").read().split()[0]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The module's images, removed at its end. No container engine is no skip: CI runs as
    root with tests/install-deps.sh's podman, runc and mmdebstrap."""
    why = pu.unavailable()
    if why:
        pytest.fail(f"real containers cannot run here: {why}")
    made = pu.Images(tmp_path_factory.mktemp("images"))
    yield made
    made.remove()


class PyServer:
    """py_app.py in a container of image under LIMIT (its port through a read-write folder
    of tmp), as runtimes_util.burst and big expect a server: .name, .port."""

    name = "python"

    def __init__(self, image, tmp, label):
        tmp.mkdir(parents=True, exist_ok=True)
        self.container = None
        self.container = pu.Container(
            image, label, LIMIT,
            [(ROOT / "bench" / "runtimes" / "py_app.py", "/app/py_app.py", "ro"),
             (tmp, "/run/memtrim", "rw")],
            ["python3", "/app/py_app.py", "/run/memtrim/port"], tmp)
        port = tmp / "port"

        def ready():
            if not self.container.running():
                raise AssertionError(f"the container ended: {pu.podman('logs', self.container.name)}")
            return port.exists() and port.read_text()
        self.port = int(wait_for(ready, 60, "python3's port file in the container"))

    def cgroup_file(self, name):
        return int((Path("/sys/fs/cgroup/memory") / self.container.cgroup.lstrip("/") / name)
                   .read_text().split()[0])

    def oom_kills(self):
        stat = (Path("/sys/fs/cgroup/memory") / self.container.cgroup.lstrip("/") /
                "memory.oom_control").read_text()
        return int(re.search(r"^oom_kill (\d+)$", stat, re.M).group(1))


def work(server):
    """The cell's work: the burst, then the one big request if the container still runs;
    (the burst's result with the big request's error among its errors, the cgroup's charge
    between, None when the container had ended)."""
    b = ru.burst(server, deadline=time.monotonic() + 120)
    between = None
    if server.container.running():
        between = server.cgroup_file("memory.usage_in_bytes")
        err = ru.big(server, BIG_MB)
        if err:
            b.errors.append(err)
    return b, between


@pytest.mark.parametrize("run", range(RUNS))
def test_python_in_a_podman_container_lives_beside_the_agent(procs, images, tmp_path, run):
    image = images.get("python", ["python3"])
    made = []
    try:
        plain = PyServer(image, tmp_path / "control", f"r{run}-control")
        made.append(plain.container)
        assert plain.container.seccomp() == "2", "podman applied no seccomp filter"
        b, between = work(plain)
        # the big request answered 200 means the control lived: the test says nothing then
        assert b.errors, "the control survived: the run proves nothing"
        code, oom = plain.container.end(30)
        killed = plain.container.oom_killed()
        print(f"\nrun {run + 1}: python3 in a podman container of {LIMIT >> 20} MiB alone: "
              f"{len(b.latencies)} requests, {len(b.errors)} errors, "
              f"{None if between is None else between >> 20} MiB after the burst, exit {code}, "
              f"OOMKilled {oom}, the kernel's OOM kills in its cgroup {killed}, load {load()}")
        # two witnesses: the kernel's log and conmon's "oom" file (podman_util.podman)
        assert code == 137 and killed == [plain.container.pid] and \
            (tmp_path / "control" / "oom").exists(), \
            f"the control ended otherwise: exit {code}, OOM kills {killed}"

        s = PyServer(image, tmp_path / "agent", f"r{run}-agent")
        made.append(s.container)
        c = s.container
        assert re.fullmatch(r"/libpod_parent/libpod-[0-9a-f]{64}|.*/libpod-[0-9a-f]{64}\.scope",
                            c.cgroup), c.cgroup
        agent = Agent(procs, tmp_path / "agent.log", {"AllowCgroups": [c.cgroup]})

        def watched():
            view = agent.cgroups().get(c.cgroup)
            return view and any(p["pid"] == c.pid for p in view["processes"]) and view
        view = wait_for(watched, 20, "the agent to watch the container and its python3")
        assert view["kind"] == "podman" and view["container_id"] == c.id, \
            {k: view.get(k) for k in ("kind", "runtime", "container_id")}
        b, between = work(s)
        view = agent.cgroups()[c.cgroup]
        mine = [p for p in view["processes"] if p["pid"] == c.pid]
        peak = s.cgroup_file("memory.max_usage_in_bytes")
        kills = s.oom_kills()
        log = agent.output()
        metrics = [line for line in agent.get("/metrics").splitlines()
                   if f'container_id="{c.id}"' in line]
        released = [line for line in metrics
                    if line.startswith("memtrim_agent_released_bytes_total{")]
        refusals = {re.search(r'reason="([^"]+)"', line).group(1): float(line.rsplit(" ", 1)[1])
                    for line in metrics if line.startswith("memtrim_agent_refusals_total{")}
        print(f"run {run + 1}: python3 in a podman container beside the agent: "
              f"{len(b.latencies)} requests, {len(b.errors)} errors, "
              f"{None if between is None else between >> 20} MiB after the burst, oom_kill {kills}, "
              f"peak {peak >> 20} MiB, the agent: {view['trims']} trims, "
              f"{view['released_bytes'] >> 20} MiB released, refusals "
              f"{ {k: v for k, v in refusals.items() if v} }, load {load()}")
        refused = re.findall(r"seccomp[^\n]*", log)
        # the trims passed the container's filter: none refused for it
        assert not refusals.get("seccomp"), (refusals, refused[:3])
        assert not b.errors and kills == 0 and not c.oom_killed() and c.running() and \
            not (tmp_path / "agent" / "oom").exists(), \
            (b.errors[:3], kills, refused[:3], log[-2000:])
        assert mine and mine[0]["program"] == "python3" and mine[0]["trims"] >= 1 \
            and mine[0]["released_bytes"] > 0, (mine, refused[:3], log[-2000:])
        assert released and float(released[0].rsplit(" ", 1)[1]) == view["released_bytes"] > 0, \
            released
        assert f'cgroup="{c.cgroup}"' in released[0] and 'kind="podman"' in released[0], released
        agent.stop()
    finally:
        for c in made:
            c.remove()
