"""The node agent beside real containers (issue 39, docs/agent.md): Debian's podman with runc
runs images built offline from Debian's packages (mmdebstrap, podman_util.py), under podman's
default seccomp profile and a memory limit, in the cgroup podman makes for each
(/libpod_parent/libpod-<ID> on cgroup v1 here). Inside, unmodified, Debian's runtimes do
test_agent_runtimes.py's cells (that file says how each was sized), run by the same
runtimes_util.Server with the container for its wrap: python3 ([python-450]: the burst of 240
requests of 36 MB from 16 clients, then one upload-sized request of BIG_MB), ruby + puma
([ruby-520]: the same burst at 16 MB, then RUBY_BIG_MB) and Orthanc ([orthanc-340]: 240 uploads
of 2 MB CT slices, then each study anonymized). The apps' folder is mounted read-only and the
run's folder read-write, each at its own path; the container shares the host's network (the
test's clients reach it on loopback).

Each counted run, no retries, side by side: the control, the container alone, must be
OOM-killed (exit 137, the kernel's log names its process killed in its cgroup, and conmon wrote
its "oom" file; podman's State.OOMKilled stays false on cgroup v1 here, podman_util.py); then
the same container beside `memtrim agent` (at its defaults, allowed on that container's cgroup
alone) must finish: every request answered, no OOM kill. The agent lists the cgroup as a Podman
container with its ID and the runtime's process by its host pid, with its trims; /metrics
carries the container_id label and the released bytes. The trims pass the container's seccomp
filter: the command reads it (PTRACE_SECCOMP_GET_FILTER) and runs it over each call it would
make (docs/command-rules.md); none is refused for it.

MEMTRIM_PODMAN_RUNS: the runs of each cell (default 1; the counted sets in docs/agent.md were
run with more). Control (tests/controls.txt): agent-never-trims (the agent picks but trims
nothing: the container beside it dies as its control).
"""
import os
import re
import time

import pytest

import podman_util as pu
import runtimes_util as ru
from agent_util import Agent
from hosts_util import procs  # noqa: F401
from test_agent_runtimes import BIG_MB, RUBY_BIG_MB
from wait import wait_for

MB = 1 << 20
RUNS = int(os.environ.get("MEMTRIM_PODMAN_RUNS", "1"))
# name, limit (MiB), the big request (MB, 0: none), the program the agent names
CELLS = {"python-450": ("python", 450, BIG_MB, "python3"),
         "ruby-520": ("ruby", 520, RUBY_BIG_MB, "puma"),
         "orthanc-340": ("orthanc", 340, 0, "Orthanc")}
# One image for the three (one mmdebstrap: 30-40 s at load 2-6, where one a runtime took 27-31 s
# each)
PACKAGES = ["python3", "ruby", "puma", "orthanc"]


def load():
    return open("/proc/loadavg").read().split()[0]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The module's images, removed at its end. No container engine is no skip: CI runs as
    root with tests/install-deps.sh's podman, runc and mmdebstrap."""
    why = pu.unavailable()
    if why:
        pytest.fail(f"real containers cannot run here: {why}")
    pu.sweep()
    made = pu.Images(tmp_path_factory.mktemp("images"))
    yield made
    made.remove()


@pytest.fixture(scope="module")
def bodies():
    return ru.orthanc_bodies(80)


def start(name, image, tmp, label, limit_mb, made, servers):
    """The runtime's server in a container of its own (its podman client is the Server's
    process); (Server, Container)."""
    tmp.mkdir(parents=True, exist_ok=True)
    c = pu.Container(image, label, limit_mb * MB, [(ru.APPS, "ro"), (tmp, "rw")])
    made.append(c)
    s = ru.Server(name, tmp, wrap=c.command)
    servers.append(s)
    return s, c.attach()


def work(s, c, bodies, big_mb):
    """The cell's work: the burst, then the one big request if the container still runs;
    (the burst's result with the big request's error among its errors, the cgroup's charge
    between, None when the container had ended)."""
    b = ru.burst(s, bodies=bodies, deadline=time.monotonic() + 120)
    between = c.memory("memory.usage_in_bytes") if s.proc.poll() is None and not b.errors \
        else None
    if big_mb and s.proc.poll() is None:
        err = ru.big(s, big_mb)
        if err:
            b.errors.append(err)
    return b, between


def mib(n):
    return None if n is None else n >> 20


@pytest.mark.parametrize("run", range(RUNS))
@pytest.mark.parametrize("cell", CELLS)
def test_a_runtime_in_a_podman_container_lives_beside_the_agent(procs, images, tmp_path,
                                                                request, cell, run):
    name, limit_mb, big_mb, program = CELLS[cell]
    image = images.get("runtimes", PACKAGES)
    cells = request.getfixturevalue("bodies") if name == "orthanc" else None
    made, servers = [], []
    try:
        plain, pc = start(name, image, tmp_path / "control", f"{cell}-{run}-control", limit_mb,
                          made, servers)
        assert pc.seccomp() == "2", "podman applied no seccomp filter"
        b, between = work(plain, pc, cells, big_mb)
        # every request answered means the control lived: the run says nothing then
        assert b.errors, "the control survived: the run proves nothing"
        code = plain.proc.wait(60)
        killed = pc.oom_killed()
        print(f"\n{cell} run {run + 1}: in a podman container alone: {len(b.latencies)} requests, "
              f"{len(b.errors)} errors, {mib(between)} MiB after the burst, exit {code}, the "
              f"kernel's OOM kills in its cgroup {killed}, load {load()}")
        # two witnesses: the kernel's log and conmon's "oom" file (podman_util.podman)
        assert code == 137 and killed and (tmp_path / "control" / "oom").exists(), \
            f"the control ended otherwise: exit {code}, OOM kills {killed}"

        s, c = start(name, image, tmp_path / "agent", f"{cell}-{run}-agent", limit_mb, made,
                     servers)
        assert re.fullmatch(r"/libpod_parent/libpod-[0-9a-f]{64}|.*/libpod-[0-9a-f]{64}\.scope",
                            c.cgroup), c.cgroup
        agent = Agent(procs, tmp_path / "agent.log", {"AllowCgroups": [c.cgroup]})

        def watched():
            view = agent.cgroups().get(c.cgroup)
            return view and any(p["pid"] == c.pid for p in view["processes"]) and view
        view = wait_for(watched, 20, "the agent to watch the container and its runtime")
        assert view["kind"] == "podman" and view["container_id"] == c.id, \
            {k: view.get(k) for k in ("kind", "runtime", "container_id")}
        b, between = work(s, c, cells, big_mb)
        view = agent.cgroups()[c.cgroup]
        mine = [p for p in view["processes"] if p["pid"] == c.pid]
        peak = c.memory("memory.max_usage_in_bytes")
        kills = c.oom_kill_count()
        log = agent.output()
        metrics = [line for line in agent.get("/metrics").splitlines()
                   if f'container_id="{c.id}"' in line]
        released = [line for line in metrics
                    if line.startswith("memtrim_agent_released_bytes_total{")]
        refusals = {re.search(r'reason="([^"]+)"', line).group(1): float(line.rsplit(" ", 1)[1])
                    for line in metrics if line.startswith("memtrim_agent_refusals_total{")}
        print(f"{cell} run {run + 1}: in a podman container beside the agent: "
              f"{len(b.latencies)} requests, {len(b.errors)} errors, {mib(between)} MiB after "
              f"the burst, oom_kill {kills}, peak {mib(peak)} MiB, the agent: {view['trims']} "
              f"trims, {mib(view['released_bytes'])} MiB released, refusals "
              f"{ {k: v for k, v in refusals.items() if v} }, load {load()}")
        refused = re.findall(r"seccomp[^\n]*", log)
        # the trims passed the container's filter: none refused for it
        assert not refusals.get("seccomp"), (refusals, refused[:3])
        assert not b.errors and kills == 0 and not c.oom_killed() and s.proc.poll() is None \
            and not (tmp_path / "agent" / "oom").exists(), \
            (b.errors[:3], kills, refused[:3], log[-2000:])
        assert mine and mine[0]["program"] == program and mine[0]["trims"] >= 1 \
            and mine[0]["released_bytes"] > 0, (mine, refused[:3], log[-2000:])
        assert released and float(released[0].rsplit(" ", 1)[1]) == view["released_bytes"] > 0, \
            released
        assert f'cgroup="{c.cgroup}"' in released[0] and 'kind="podman"' in released[0], released
        agent.stop()
    finally:
        for c in made:  # first the containers: their podman clients then end at once
            c.remove()
        for s in servers:
            s.stop()
