"""memtrim never touches a descriptor it does not own (issue 31, F1): a FollowFork
worker that, as daemons do after their fork, closes every descriptor from 3 up
(closefrom) and opens files of its own, which take memtrim's freed numbers, must
find each of its files open, unreplaced and holding exactly what it wrote, for
the whole run and as memtrim's member leaves (its channel is gone with the
closefrom). On 30f456e 21 of 32 such workers (4 runs of 8) lost a file: the
member closed its cgroup descriptors by number, and the pressure thread's wake
wrote 8 bytes into what had become the worker's file.

memtrim-prefork --closefrom checks every file after each study and exits 5
naming the descriptor when one was closed, replaced or written by someone else.
Every run counts: 3 runs of 8 workers with the closefrom once memtrim has joined
every worker to the group (the leader's /memory/stats lists each worker's pid: the
test then creates the file memtrim-prefork --closefrom-when waits for) and one right
at the fork. A fixed delay does not promise the join: a child's member starts 200 ms
after its fork at the earliest (FORK_JOIN_DELAY_MS), and at load 12 one worker of 8
found none of memtrim's files 300 ms after its fork (memtrim then stayed off there:
its channel's number was no longer its).

The same in the serving process itself (--closefrom-master): its store and HTTP
server hold descriptors inside SQLite and libmicrohttpd. On 30f456e the host's
files held, but the host died at its exit with SIGSEGV (libmicrohttpd, stopped,
removed its listening socket from an epoll set that was gone, and wrote and
closed by number): 3 of 3 runs. memtrim sees its canary gone, says so, and
leaves the store and the server as they are."""
import json

import pytest
import requests

from hosts_util import build_file, free_port, preload_env, procs, wait_for  # noqa: F401


def forked_pids(p):
    """The workers' pids from memtrim-prefork's "forked" line, None before it."""
    for line in p.output().splitlines():
        if line.startswith('{"event":"forked"'):
            return json.loads(line)["pids"]
    if not p.running():
        raise AssertionError(f"memtrim-prefork exited {p.proc.returncode} before its "
                             f"forks:\n{p.output()[-3000:]}")
    return None


def joined(api, pids):
    """Every pid of pids is a member of the group the leader at api serves."""
    g = requests.get(api + "/memory/stats", timeout=10).json().get("group") or {}
    return set(pids) <= {m["pid"] for m in g.get("members", [])}


def run(procs, tmp_path, name, when, extra=(), workers=8):
    """when: "joined" (each worker's closefrom once the leader lists every worker as a
    member) or a delay in ms after the fork (0: before any member started)."""
    port = free_port()
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / f"{name}.sqlite"),
           "SampleIntervalSeconds": 1}
    files = tmp_path / f"{name}-files"
    files.mkdir()
    go = tmp_path / f"{name}-go"
    gate = ["--closefrom-when", str(go)] if when == "joined" else \
        ["--closefrom-delay-ms", str(when)]
    p = procs([build_file("memtrim-prefork"), "--workers", str(workers), "--studies", "10",
               "--study-mb", "8", "--pause-ms", "50", "--stagger-ms", "20",
               "--closefrom", "16", "--pid-dir", str(files)] + gate + list(extra),
              tmp_path / f"{name}.log", env=preload_env(cfg))
    if when == "joined":
        try:
            pids = wait_for(lambda: forked_pids(p), 60, "memtrim-prefork's forked line")
            wait_for(lambda: joined(f"http://127.0.0.1:{port}", pids), 60,
                     f"memtrim to join the workers {pids} to the group",
                     retry_on=(requests.RequestException,))
        finally:
            go.touch()  # the workers go on (and end) whatever the wait found
    rc = p.proc.wait(timeout=120)
    out = p.output()
    result = next((json.loads(l) for l in out.splitlines() if l.startswith('{"workers"')), None)
    return rc, result, out


@pytest.mark.parametrize("when", ["joined", "joined", "joined", 0])
def test_a_worker_that_runs_closefrom_keeps_every_descriptor(procs, tmp_path, when):
    rc, result, out = run(procs, tmp_path, "closefrom", when)
    lost = [l for l in out.splitlines() if l.startswith("memtrim-prefork: worker")]
    assert result is not None, out[-3000:]
    assert not lost, "\n".join(lost[:8])
    assert result["finished"] == 8 and rc == 0, out[-3000:]


@pytest.mark.parametrize("run_no", [1, 2])
def test_a_worker_that_opens_memtrims_very_files_again_keeps_them(procs, tmp_path, run_no):
    """The worker's closefrom, then its own open of each /proc and cgroup file memtrim held,
    at memtrim's number (the same device and inode), up to 3 bytes read: each stays open,
    that file, its offset where the worker left it, for the whole run and as the member leaves (issue 31: before the
    stamp on every kind, such a file passed memtrim's identity check)."""
    rc, result, out = run(procs, tmp_path, "same", "joined", ["--closefrom-same"])
    lost = [l for l in out.splitlines() if l.startswith("memtrim-prefork: worker")]
    reopened = [int(l.split()[2]) for l in out.splitlines()
                if l.startswith("memtrim-prefork: --closefrom-same: ")]
    assert result is not None, out[-3000:]
    assert not lost, "\n".join(lost[:8])
    assert len(reopened) == 8 and min(reopened) >= 3, out[-3000:]
    assert result["finished"] == 8 and rc == 0, out[-3000:]


@pytest.mark.parametrize("run_no", [1, 2, 3])
def test_a_serving_process_that_runs_closefrom_keeps_every_descriptor_and_exits(
        procs, tmp_path, run_no):
    rc, result, out = run(procs, tmp_path, "master", 300, ["--closefrom-master"], workers=2)
    lost = [l for l in out.splitlines() if l.startswith("memtrim-prefork: worker")]
    assert not lost, "\n".join(lost[:8])
    assert rc == 0 and result is not None and result["finished"] == 2, \
        f"exit {rc} (a negative one is a signal):\n{out[-3000:]}"
    assert "the host closed memtrim's descriptors" in out, out[-3000:]
