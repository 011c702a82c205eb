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
Every run counts: 3 runs of 8 workers with the closefrom 300 ms after the fork
(memtrim has joined the worker to the group by then) and one right at the fork.

The same in the serving process itself (--closefrom-master): its store and HTTP
server hold descriptors inside SQLite and libmicrohttpd. On 30f456e the host's
files held, but the host died at its exit with SIGSEGV (libmicrohttpd, stopped,
removed its listening socket from an epoll set that was gone, and wrote and
closed by number): 3 of 3 runs. memtrim sees its canary gone, says so, and
leaves the store and the server as they are."""
import json

import pytest

from hosts_util import build_file, free_port, preload_env, procs, wait_for  # noqa: F401


def run(procs, tmp_path, name, delay_ms, extra=(), workers=8):
    port = free_port()
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / f"{name}.sqlite"),
           "SampleIntervalSeconds": 1}
    files = tmp_path / f"{name}-files"
    files.mkdir()
    p = procs([build_file("memtrim-prefork"), "--workers", str(workers), "--studies", "10",
               "--study-mb", "8", "--pause-ms", "50", "--stagger-ms", "20",
               "--closefrom", "16", "--closefrom-delay-ms", str(delay_ms),
               "--pid-dir", str(files)] + list(extra),
              tmp_path / f"{name}.log", env=preload_env(cfg))
    rc = p.proc.wait(timeout=120)
    out = p.output()
    result = next((json.loads(l) for l in out.splitlines() if l.startswith('{"workers"')), None)
    return rc, result, out


@pytest.mark.parametrize("delay_ms", [300, 300, 300, 0])
def test_a_worker_that_runs_closefrom_keeps_every_descriptor(procs, tmp_path, delay_ms):
    rc, result, out = run(procs, tmp_path, "closefrom", delay_ms)
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
    rc, result, out = run(procs, tmp_path, "same", 300, ["--closefrom-same"])
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
