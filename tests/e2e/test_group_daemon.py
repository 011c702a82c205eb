"""A daemon's start with FollowFork (docs/groups.md, "Members that come and
go"): the process memtrim starts in forks the daemon and exits at once, and
the daemon forks its workers before it could lead. The daemon, a member of
that first group, takes the port and the store over; the workers it forked
meanwhile waited on a channel to it and are adopted. A member's own child
that exits leaves no descriptor in the member. /usr/bin/python3 with
libmemtrim.so preloaded, no exec anywhere (os.fork runs the fork handlers)."""
import json
import os
import signal

import requests

from wait import group_trim
from hosts_util import (free_port, group_member_pids as members, http_ok, pid_alive,  # noqa: F401
                        preload_env, procs, wait_for)

PYTHON = "/usr/bin/python3"
MB = 1 << 20

DAEMON = """
import json, os, signal, sys, time
out = sys.argv[1]
if os.fork():
    sys.exit(0)            # the starter: exits at once (its memtrim stops, exit() runs)
os.setsid()
workers = []
for _ in range(2):         # forked at once, before the daemon could lead the group
    pid = os.fork()
    if pid == 0:
        def fork_one(*a):  # a member's own child that exits at once
            p = os.fork()
            if p == 0:
                os._exit(0)
            os.waitpid(p, 0)
            open(f"{out}.forked.{os.getpid()}", "w").close()
        signal.signal(signal.SIGUSR1, fork_one)
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        blocks = [bytearray(1000) for _ in range(20000)]
        keep = bytearray(1000)
        del blocks         # 20 MB freed, resident below `keep`
        open(f"{out}.ready.{os.getpid()}", "w").close()
        while True:
            time.sleep(1)
    workers.append(pid)
def stop(*a):
    for w in workers:
        os.kill(w, signal.SIGTERM)
    for w in workers:
        os.waitpid(w, 0)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open(out + ".tmp", "w") as f:
    json.dump({"daemon": os.getpid(), "workers": workers}, f)
os.rename(out + ".tmp", out)
while True:
    time.sleep(1)
"""


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_daemons_workers_join_the_daemon(procs, tmp_path):
    script, out = tmp_path / "daemon.py", tmp_path / "pids"
    script.write_text(DAEMON)
    port = free_port()
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite"),
           "TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0,
           "ManualTrimMinIntervalMs": 0}
    starter = procs([PYTHON, script, out], tmp_path / "daemon.log", env=preload_env(cfg),
                    start_new_session=True)
    assert starter.wait(30) == 0, starter.output()
    info = json.loads(wait_for(lambda: out.exists() and out.read_text(), 20, "the daemon"))
    daemon, workers = info["daemon"], info["workers"]
    for pid in [daemon] + workers:
        procs.adopt(pid)
    api = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_ok(api + "/healthz") and members(api) == sorted([daemon] + workers),
                 30, "the daemon and its workers in one group")
        health = requests.get(api + "/healthz", timeout=5).json()
        assert health["pid"] == daemon and health["database"] == "ok", health
        wait_for(lambda: all((tmp_path / f"pids.ready.{w}").exists() for w in workers), 20,
                 "the workers to free their memory")
        _, results = group_trim(api)
        for w in workers:
            assert results[w]["released_bytes"] > 10 * MB, results[w]

        # A member's own child that exits: its waiting channel goes with it.
        w = workers[0]
        before = fd_count(w)
        os.kill(w, signal.SIGUSR1)
        wait_for(lambda: (tmp_path / f"pids.forked.{w}").exists(), 20, "the member's child")
        wait_for(lambda: fd_count(w) == before, 10, f"the member to hold {before} descriptors")
        assert members(api) == sorted([daemon] + workers)
    finally:
        if pid_alive(daemon):
            os.kill(daemon, signal.SIGTERM)
    wait_for(lambda: not any(pid_alive(p) for p in [daemon] + workers), 20, "the daemon to stop")
    log = (tmp_path / "daemon.log").read_text()
    assert "(error)" not in log and "did not join" not in log, log[-3000:]
