"""Debian's Puma (issue 32 item 6, docs/groups.md) in clustered mode with memtrim
preloaded, FollowFork and one HttpPort: Puma's master forks 3 workers (one thread each),
each serving a Rack app that fragments its heap per request: 40,000 strings of 1,000 bytes
(40 MB, each buffer malloc'd), dropped, then GC.start, so glibc keeps the freed buffers
resident below what Ruby still holds until something trims them.

Measured (v1 memory cgroup, no memtrim): the cluster is charged 29 MB idle and 150 MB once
each worker served 4 requests (40 MB freed but resident in each). One request at a time
needs the idle cluster, one request's 40 MB and what the others did not give back; so a
110 MB limit kills the cluster without memtrim (the control, which must be OOM-killed) and
holds it with the group, which trims what each worker freed as the usage nears the limit."""
import shutil
import signal
import subprocess
import textwrap

import pytest
import requests

from hosts_util import (cgroup, children_of, free_port, http_ok, preload_env,  # noqa: F401
                        procs, wait_for)
from test_groups import member_pids
from wait import group_trim

MB = 1 << 20
LIMIT = 110 * MB
WORKERS = 3
REQUESTS = 30  # ten a worker, one at a time

APP = textwrap.dedent("""
    run lambda { |env|
      junk = Array.new(40_000) { "x" * 1000 }   # 40 MB in 1 KB malloc'd buffers
      junk = nil
      GC.start                                  # freed: resident until trimmed
      [200, {"content-type" => "text/plain"}, [Process.pid.to_s]]
    }
""")


def start_puma(procs, tmp_path, cg, name, config=None):
    """Puma clustered (3 workers, 1 thread each) inside cg; config: memtrim's (preloaded,
    FollowFork and one port), None: no memtrim. Returns (proc, app URL, API URL or None)."""
    puma = shutil.which("puma")
    if not puma or not shutil.which("ruby"):
        pytest.skip("puma and ruby are not installed (tests/install-deps.sh)")
    (tmp_path / "config.ru").write_text(APP)
    app_port = free_port()
    cmd = [puma, "-w", str(WORKERS), "-t", "1:1", "-b", f"tcp://127.0.0.1:{app_port}",
           "--dir", str(tmp_path), str(tmp_path / "config.ru")]
    api = None
    if config is not None:  # set after the cgroup's shell, for Puma alone
        port = free_port()
        cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / f"{name}.sqlite"),
               "SampleIntervalSeconds": 1}
        cfg.update(config)
        env = preload_env(cfg)
        cmd = ["/usr/bin/env", "LD_PRELOAD=" + env["LD_PRELOAD"],
               "MEMTRIM_CONFIG=" + env["MEMTRIM_CONFIG"]] + cmd
        api = f"http://127.0.0.1:{port}"
    p = procs(cg.wrap(cmd), tmp_path / f"{name}.log", cwd=tmp_path)
    app = f"http://127.0.0.1:{app_port}/"
    wait_for(lambda: len(children_of(p.pid)) == WORKERS and http_ok(app), 60,
             f"Puma's {WORKERS} workers to serve")
    return p, app, api


def serve(app, count):
    """count requests one at a time; {worker pid: requests served}, stopping at the first
    one that failed (a worker killed mid-request)."""
    served = {}
    for _ in range(count):
        try:
            r = requests.get(app, timeout=60)
        except requests.RequestException:
            break
        if r.status_code != 200:
            break
        served[int(r.text)] = served.get(int(r.text), 0) + 1
    return served


def test_puma_one_port_trims_each_worker(procs, cgroup, tmp_path):
    """One port answers for Puma's master and its 3 workers (only the master listens on it);
    one trim reaches each worker, in its own process, and releases what its requests freed;
    the one store names each worker's pid."""
    quiet = {"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0,
             "ManualTrimMinIntervalMs": 0}
    cg = cgroup(1024 * MB)
    p, app, api = start_puma(procs, tmp_path, cg, "puma", quiet)
    workers = children_of(p.pid)
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == sorted(workers + [p.pid]),
             30, "Puma's master and 3 workers in one group")
    port = int(api.rsplit(":", 1)[1])
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    assert f"pid={p.pid}," in out and all(f"pid={w}," not in out for w in workers), out
    served = serve(app, 60)
    deadline = 3
    while set(served) != set(workers) and deadline:  # Puma's accept is not round robin
        for pid, n in serve(app, 30).items():
            served[pid] = served.get(pid, 0) + n
        deadline -= 1
    assert set(served) == set(workers), (served, workers)
    body, results = group_trim(api)  # each worker's result read from the one store
    assert sorted(results) == sorted(workers + [p.pid]), body
    for w in workers:
        assert results[w]["trigger"] == "manual" and results[w]["released_bytes"] > 20 * MB, \
            results[w]
    assert p.stop() == -signal.SIGTERM, p.output()[-3000:]  # Puma ends by the signal sent
    assert cg.oom_kills() == 0


def test_puma_survives_a_shared_limit(procs, cgroup, tmp_path):
    """Under one 110 MB limit, 30 requests one at a time: without memtrim the kernel
    OOM-kills a worker (the control: asserted by the cgroup's oom_kill count and a failed
    request or a worker Puma had to replace); with the group at its defaults every request
    is served, by the same 3 workers, no OOM kill, the group reads the limit, and the
    workers' pressure trims are in the one store."""
    cg = cgroup(LIMIT)
    p, app, _ = start_puma(procs, tmp_path, cg, "none")
    before = sorted(children_of(p.pid))
    served = serve(app, REQUESTS)
    wait_for(lambda: cg.oom_kills() is not None, 5, "the oom_kill count")
    print(f"\nwithout memtrim: {sum(served.values())}/{REQUESTS} served, oom_kill "
          f"{cg.oom_kills()}, peak {(cg.peak_bytes() or 0) >> 20} MB")
    assert cg.oom_kills() >= 1, f"the control was not OOM-killed ({served}): the case is void"
    assert sum(served.values()) < REQUESTS or sorted(children_of(p.pid)) != before, served
    assert p.stop() == -signal.SIGTERM, p.output()[-3000:]

    cg = cgroup(LIMIT)
    p, app, api = start_puma(procs, tmp_path, cg, "group", {})
    workers = sorted(children_of(p.pid))
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == sorted(workers + [p.pid]),
             30, "the group")
    g = requests.get(api + "/memory/stats", timeout=10).json()["group"]
    assert g["usage_source"] == "cgroup" and g["limit_bytes"] == LIMIT, g
    served = serve(app, REQUESTS)
    g = requests.get(api + "/memory/stats", timeout=10).json()["group"]
    print(f"with the group: {sum(served.values())}/{REQUESTS} served by {sorted(served)}, "
          f"oom_kill {cg.oom_kills()}, peak {(cg.peak_bytes() or 0) >> 20} MB, pressure trims "
          f"{g['pressure_trims']}, released {g['pressure_released_bytes'] >> 20} MB")
    assert sum(served.values()) == REQUESTS and cg.oom_kills() == 0, (served, cg.oom_kills())
    assert sorted(children_of(p.pid)) == workers and set(served) <= set(workers), served
    assert g["pressure_trims"] >= 1, g
    trimmed = [w for w in workers if requests.get(api + f"/memory/trims?pid={w}", timeout=10)
               .json()["summary"]["count"] >= 1]
    assert trimmed, "no worker's pressure trim is in the store"
    assert p.stop() == -signal.SIGTERM, p.output()[-3000:]  # Puma ends by the signal sent
