"""The node agent with real runtimes (issue 39): Debian's ruby + puma (8 threads), python3
(ThreadingHTTPServer) and Orthanc, unmodified, each serving its burst of concurrent requests that
fragments the heap (python3 then one request that needs the freed heap back; Orthanc uploads
then anonymizes its studies)
(tests/e2e/runtimes_util.py, as test_runtimes.py's survival cells), in its own memory cgroup
and its own mount namespace (unshare --mount; not a pid namespace: the burst's helpers read
the server's own pid). Under the limit where glibc alone is OOM-killed (the control, which
must die) and memtrim preloaded finishes (the reference), `memtrim agent` beside it, at its
defaults and allowed on that cgroup alone, keeps it alive through the same burst: no error, no
OOM kill, and the agent's trims of it in /agent/cgroups. Counted runs, no retries; the load
printed beside the figures."""
import re
import time

import pytest

import runtimes_util as ru
from agent_util import Agent
from hosts_util import cgroup, procs, wait_for  # noqa: F401

MB = 1 << 20
# Orthanc in 340 MiB (test_runtimes.py's cell, which memtrim preloaded survives, its peak at the
# limit itself): 240 uploads of 2 MB CT slices from 16 clients, then each study anonymized at
# once. Its storage's page cache fills the cgroup to its limit within 2 s of the uploads and
# holds it there, so the command counts that clean cache as room (the kernel reclaims it before
# it OOM-kills; docs/command-rules.md): without it (control cmd-room-cache-unseen) the command
# refused its trims in the anonymization for want of room and the agent's container was
# OOM-killed 3 of 4 at load 3-4.5 (and 3 of 4 at load 23-26 before); with it 10 of 10 finished,
# never refused, at load 11.5-21.4 (docs/benchmarks.md).
# python3's ThreadingHTTPServer (py_app.py): test_runtimes.py's burst (240 requests of 36 MB from
# 16 clients, 1-64 KB objects, 1 in 50 kept in a shared ring), then one upload-sized request
# (GET /big: BIG_MB in one anonymous mapping outside glibc's arenas, written 64 KB at a time
# with a running checksum), in 450 MiB. Sized from measurements (docs/benchmarks.md): after the
# burst glibc alone holds 206-338 MiB (43 runs), of which about 65 MiB is live (the agent's
# trims bring the process's anonymous memory to 63-66 MiB), so the control dies of the heap it
# freed and kept (it would need under 150 MiB kept to survive), while 65 + 300 MiB fits with
# memtrim preloaded and beside the agent. At 400 MiB the burst itself reached the limit beside
# the agent once at load 21 (the command found no thread it may take, python's threads on the
# GIL). At 200 MB written at once (a memset) the control's kept heap came within 7 MiB of
# surviving (207 MiB, 2 runs of 12) and survived 1 in 9 earlier; no trim from outside lands
# within a memset, so the upload is filled at an upload's pace (about 200 MB/s here).
BIG_MB = 300
# puma in 300 MiB, [ruby-300], is measured, not gating (marker survival: bench/survival.sh, as test_runtimes'
# survival cells): its burst grows the cgroup 1.5 MB a millisecond, so from outside it holds
# only while each trim answers in about 30 ms, and the CPU a loaded machine leaves the trim's
# thread inside puma decides it. The suite's lanes side by side load it so: lost in the
# rehearsal beside two busy loops (1698f0c, load 9.5; 23 trims, one of 1,068 ms) and in the
# quiet one (78a7d06, the lanes at load 5-6; 7 trims, its budget of time inside spent), then 3
# of 5 beside that quiet rehearsal's lanes with trims that give back a MiB uncharged (load 6.6-
# 7.4; the two lost after 4 and 12 trims of 34-685 ms, the budget not binding). One lane after
# another (the r9 rehearsal, load 1-2) it held, and 29 of 30 at load 2.7-6.5 (f50ae8d).
# puma's counted cell, [ruby-520], is sized as python3's: the same burst, then one upload-sized
# request (config.ru's GET /big: RUBY_BIG_MB in one malloc, mapped outside glibc's arenas,
# written 64 KB at a time with a running checksum), in 520 MiB. Measured (docs/benchmarks.md):
# after the burst glibc alone keeps 271-459 MiB (load 2-22; 520 MiB when it died in the burst
# itself, quiet), memtrim's trim leaves 123-176 MiB, so the control dies of the heap it freed
# and kept (it would need about 220 MiB kept to survive), while the burst leaves the agent its
# limit's room: 382-453 MiB at its peak, with no trim needed within 30 ms.
RUBY_BIG_MB = 300
CELLS = [pytest.param("ruby", 300, 0, id="ruby-300", marks=pytest.mark.survival),
         pytest.param("ruby", 520, RUBY_BIG_MB, id="ruby-520"),
         pytest.param("python", 450, BIG_MB, id="python-450"),
         pytest.param("orthanc", 340, 0, id="orthanc-340")]


def usage(cg):
    """The cgroup's charge now (bytes)."""
    f = cg.path / ("memory.usage_in_bytes" if cg.version == 1 else "memory.current")
    return int(f.read_text())


def work(server, cg, bodies, big_mb):
    """The cell's work on server: the burst, then (python, ruby-520) the one big request; the burst's
    result with that request's error among its errors, and the cgroup's charge between."""
    b = ru.burst(server, bodies=bodies, deadline=time.monotonic() + 120)
    between = usage(cg)
    if big_mb and server.proc.poll() is None:
        err = ru.big(server, big_mb)
        if err:
            b.errors.append(err)
    return b, between


def load():
    return open("/proc/loadavg").read().split()[0]


@pytest.fixture(scope="module")
def bodies():
    pytest.importorskip("pydicom")
    return ru.orthanc_bodies(80)


def in_container(cg):
    """A server's command inside cg and a mount namespace of its own (unshare execs it: the
    same pid)."""
    return lambda cmd: cg.wrap(["/usr/bin/unshare", "--mount", "--propagation", "private", *cmd])


@pytest.mark.parametrize("name,limit_mb,big_mb", CELLS)
def test_the_agent_keeps_alive_what_glibc_loses(procs, cgroup, tmp_path, bodies, name, limit_mb,
                                                big_mb):
    why = ru.available(name)
    if why:
        pytest.skip(why)
    servers = []
    try:
        cg = cgroup(limit_mb * MB)
        plain = ru.Server(name, tmp_path / "plain", wrap=in_container(cg))
        servers.append(plain)
        b, between = work(plain, cg, bodies, big_mb)
        wait_for(lambda: plain.proc.poll() is not None or cg.oom_kills(), 10,
                 "the control's fate", interval=0.1)
        if cg.oom_kills():  # killed: give the kernel the time to end it
            wait_for(lambda: plain.proc.poll() is not None, 20, "the OOM-killed control to end",
                     interval=0.1)
        print(f"\n{name} in {limit_mb} MiB alone: {len(b.latencies)} requests, {len(b.errors)} "
              f"errors, {between >> 20} MiB after the burst, oom_kill {cg.oom_kills()}, peak {(cg.peak_bytes() or 0) >> 20} MiB, load {load()}")
        assert cg.oom_kills() >= 1 and plain.proc.poll() is not None, \
            "the control survived: the cell proves nothing"

        # the reference: memtrim preloaded at its defaults finishes the same work in the same
        # limit (the Done-when: what finishes with memtrim preloaded finishes with the agent)
        cgm = cgroup(limit_mb * MB)
        pre = ru.Server(name, tmp_path / "memtrim", env=ru.mode_env("memtrim"), wrap=in_container(cgm))
        servers.append(pre)
        b, between = work(pre, cgm, bodies, big_mb)
        print(f"{name} in {limit_mb} MiB, memtrim preloaded: {len(b.latencies)} requests, "
              f"{len(b.errors)} errors, {between >> 20} MiB after the burst, oom_kill {cgm.oom_kills()}, peak {(cgm.peak_bytes() or 0) >> 20} MiB, load {load()}")
        assert not b.errors and cgm.oom_kills() == 0 and pre.proc.poll() is None, \
            "memtrim preloaded did not finish: the cell is no reference"
        pre.stop()

        cg2 = cgroup(limit_mb * MB)
        path = "/" + cg2.path.name
        agent = Agent(procs, tmp_path / "agent.log", {"AllowCgroups": [path]})
        wait_for(lambda: path in agent.cgroups(), 20, "the agent to watch the cgroup")
        s = ru.Server(name, tmp_path / "agent", wrap=in_container(cg2))
        servers.append(s)
        b, between = work(s, cg2, bodies, big_mb)
        view = agent.cgroups()[path]
        mine = [p for p in view["processes"] if p["pid"] == s.pid]
        print(f"{name} in {limit_mb} MiB beside the agent: {len(b.latencies)} requests, "
              f"{len(b.errors)} errors, {between >> 20} MiB after the burst, oom_kill {cg2.oom_kills()}, peak "
              f"{(cg2.peak_bytes() or 0) >> 20} MiB, the agent: {view['trims']} trims, "
              f"{view['released_bytes'] >> 20} MiB released ({mine}), load {load()}")
        inside = sorted(float(t) for t in re.findall(
            r"released \d+ bytes in [0-9.]+ ms \([0-9.]+ ms CPU, ([0-9.]+) ms in the process",
            agent.output()))
        print(f"{name}: refused for room {agent.output().count('memory cgroup has')} times")
        if inside:
            print(f"{name}: the trims' time in the process median {inside[len(inside) // 2]:.1f} ms, "
                  f"max {inside[-1]:.1f} ms, {sum(inside) / 1e3:.2f} s in all")
        assert not b.errors and cg2.oom_kills() == 0 and s.proc.poll() is None, \
            (b.errors[:3], agent.output()[-2000:])
        assert mine and mine[0]["trims"] >= 1 and mine[0]["released_bytes"] > 0, view
        agent.stop()
    finally:
        for s in servers:
            s.stop()
