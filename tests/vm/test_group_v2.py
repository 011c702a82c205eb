"""Worker groups on a real cgroup v2 kernel (issue 21; run by tests/vm/run.sh): the prefork
example (examples/prefork/prefork.c) with memtrim preloaded, FollowFork and one HttpPort,
in a memory.max-limited cgroup. Its master forks 3 workers 2 s apart; each does 4 studies
of 40 MB in 1 KB blocks, 4 s apart, and keeps what it freed resident in its arena until
something trims it. Under 100 MB (3 x 40 MB is more) the kernel kills workers unless the
group gives the freed studies back; two studies at once fit. Sized for TCG, whose speed
follows the host's load: a 40 MB study took 0.4 s there on a quiet host and 2-3 s at load
6, and with the workers 600 ms apart all three were mid-study at once at that load (their
live memory alone at the limit: the group lost workers, as malloc_trim after every study
would). 2 s apart, at most two studies overlap up to a 4 s study. A run takes 18-35 s.

Measured both ways in the VM: without memtrim the kernel OOM-kills workers (the control: it
must, else the case proves nothing); with the group, one port answers for the master and
every worker, the group reads the cgroup's usage and memory.max, and every worker completes
its studies with no OOM kill. Outcomes and counts only, never a time."""
import json
import subprocess

import requests

from hosts_util import build_file, http_ok, wait_for
from test_groups import forked, group, member_pids, start_prefork

MB = 1 << 20
LIMIT = 100 * MB
WORKERS = 3
ARGS = ["--workers", str(WORKERS), "--studies", "4", "--study-mb", "40", "--pause-ms", "4000",
        "--stagger-ms", "2000"]


def result(p):
    last = [ln for ln in p.output().splitlines() if ln.startswith('{"workers"')]
    assert last, p.output()[-3000:]
    return json.loads(last[-1])


def test_without_memtrim_the_group_is_killed(procs, cgroup, tmp_path):
    cg = cgroup(LIMIT)
    p = procs(cg.wrap([build_file("memtrim-prefork")] + ARGS), tmp_path / "none.log")
    p.wait(600)
    res, ev = result(p), cg.events()
    print(f"\nwithout memtrim: {res}; memory.events max {ev['max']}, oom_kill {ev['oom_kill']}")
    assert res["finished"] < WORKERS and ev["oom_kill"] >= 1, \
        f"the control was not OOM-killed ({res}, {ev}): the case is void"


def test_one_port_serves_the_group_and_it_survives(procs, cgroup, tmp_path):
    cg = cgroup(LIMIT)
    p, api = start_prefork(procs, tmp_path, ARGS + ["--hold", "--pid-dir", str(tmp_path)],
                           config={}, wrap=cg.wrap)
    info = forked(p)
    everyone = sorted([info["master"]] + info["pids"])
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == everyone, 120,
             "the workers to join the master's group")
    # One port: only the master listens on it; it answers for every member.
    port = int(api.rsplit(":", 1)[1])
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    assert f"pid={info['master']}," in out and all(f"pid={w}," not in out for w in info["pids"]), out
    g = group(api)
    assert g["member_count"] == WORKERS + 1 and g["usage_source"] == "cgroup", g
    assert g["limit_bytes"] == LIMIT, g
    # The studies: every worker writes its pid file when done (--hold keeps it alive after);
    # a worker the kernel killed never does, and memory.events says so.
    wait_for(lambda: len(list(tmp_path.glob("worker.*"))) == WORKERS or
             cg.events()["oom_kill"] > 0 or not p.running(), 600, "the studies")
    ev = cg.events()
    g = group(api)
    print(f"\nwith the group: {len(list(tmp_path.glob('worker.*')))}/{WORKERS} workers done; "
          f"memory.events max {ev['max']}, oom_kill {ev['oom_kill']}; group pressure trims "
          f"{g['pressure_trims']}, released {g['pressure_released_bytes']}; peak "
          f"{(cg.peak_bytes() or 0) >> 20} MB")
    assert ev["oom_kill"] == 0 and len(list(tmp_path.glob("worker.*"))) == WORKERS, (ev, g)
    assert member_pids(api) == everyone, g
    assert g["pressure_trims"] >= WORKERS - 1, g
    # The workers' pressure trims are in the master's one store, each under its pid.
    trimmed = {w for w in info["pids"]
               if requests.get(api + f"/memory/trims?pid={w}", timeout=30).json()
               ["summary"]["count"] >= 1}
    assert len(trimmed) >= WORKERS - 1, trimmed
    assert p.stop() in (0, 1), p.output()[-3000:]
    assert result(p)["finished"] == WORKERS
