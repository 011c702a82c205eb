"""LD_PRELOAD=libmemtrim.so into programs that know nothing of memtrim:
Debian's python3 -m http.server and the demo host with --no-memtrim; the
exit paths; a daemon that forks (FollowFork); configuration errors that
must leave the program running."""
import os
import signal
import sqlite3
import sys
import textwrap
import time

import pytest
import requests

from hosts_util import (build_file, free_port, http_ok, pid_alive, preload_env, procs,  # noqa: F401
                        rss_bytes, wait_for)

PYTHON = "/usr/bin/python3"


def start_http_server(procs, tmp_path, config, extra_env=None):
    port = free_port()
    (tmp_path / "hello.txt").write_text("hello\n")
    p = procs([PYTHON, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
              tmp_path / "http.log", env=preload_env(config, extra_env), cwd=tmp_path)
    wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/hello.txt"), 20, "http.server")
    return p, port


def test_http_server_api_and_trim(procs, tmp_path):
    db = tmp_path / "memtrim.sqlite"
    p, port = start_http_server(procs, tmp_path, {"HttpPort": 0, "Database": str(db),
                                                  "ManualTrimMinIntervalMs": 0})
    api = f"http://127.0.0.1:{p.api_port()}"
    assert requests.get(api + "/healthz", timeout=10).json()["status"] == "ok"
    stats = requests.get(api + "/memory/stats", timeout=10).json()
    assert stats["rss_bytes"] > 0
    r = requests.post(api + "/memory/trim", timeout=30)
    assert r.status_code == 200, r.text
    trim = r.json()
    assert trim["trigger"] == "manual" and trim["rss_before_bytes"] > 0
    # The program itself is unharmed.
    assert requests.get(f"http://127.0.0.1:{port}/hello.txt", timeout=10).text == "hello\n"
    # SIGINT: the program handles it (KeyboardInterrupt), returns, memtrim stops and flushes.
    assert p.stop(signal.SIGINT) == 0, p.output()
    assert "memtrim/core: stopped" in p.output()
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM trims").fetchone()[0] >= 1


def test_demo_without_memtrim_gets_it_preloaded(procs, tmp_path):
    """The demo host with --no-memtrim never touches memtrim: the preload does
    it all. A burst of studies, then a trim through the API gives memory back;
    SIGTERM (handled by the demo, which returns from main) stops memtrim."""
    db = tmp_path / "memtrim.sqlite"
    config = {"HttpPort": 0, "Database": str(db), "TrimIntervalSeconds": 0,
              "TrimReleasableTriggerBytes": 0, "PressureRatio": 0}
    p = procs([build_file("memtrim-demo"), "--no-memtrim", "--workers", "4", "--study-mb", "64",
               "--pause-ms", "100", "--studies", "0"], tmp_path / "demo.log",
              env=preload_env(config))
    api = f"http://127.0.0.1:{p.api_port()}"
    wait_for(lambda: (rss_bytes(p.pid) or 0) > 150 << 20, 30, "the demo's RSS to pass 150 MB")
    r = requests.post(api + "/memory/trim", timeout=30)
    assert r.status_code == 200, r.text
    trim = r.json()
    assert trim["released_bytes"] > 0, trim
    assert trim["rss_after_bytes"] < trim["rss_before_bytes"], trim
    assert p.stop(signal.SIGTERM) == 0, p.output()
    out = p.output()
    assert "studies done" in out and "memtrim/core: stopped" in out, out[-2000:]
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM trims").fetchone()[0] >= 1


def test_exit_from_main_stops_memtrim(procs, tmp_path):
    """A program that ends by returning from main (here: --studies 2) stops
    memtrim in the destructor, promptly and without a crash."""
    p = procs([build_file("memtrim-demo"), "--no-memtrim", "--workers", "2", "--study-mb", "16",
               "--pause-ms", "50", "--studies", "2", "--quiet"], tmp_path / "demo.log",
              env=preload_env({"HttpPort": 0, "Database": str(tmp_path / "m.sqlite")}))
    t0 = time.time()
    assert p.wait(30) == 0, p.output()
    assert time.time() - t0 < 20
    assert "memtrim/core: stopped" in p.output()


DAEMON = textwrap.dedent("""
    import os, signal, sys, time
    children = int(sys.argv[2])
    pids = []
    for i in range(children):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            # fork() has returned here: memtrim's atfork handlers have all run.
            open(sys.argv[1] + ".%d.forked" % os.getpid(), "w").close()
            signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
            junk = [bytearray(4096) for _ in range(20000)]   # some heap to trim
            del junk
            while True:
                time.sleep(0.1)
        pids.append(pid)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(" ".join(map(str, pids)))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    if sys.argv[3] == "exit":      # the daemon pattern: the parent goes, the child lives on
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        time.sleep(0.1)
""")


def start_daemon(procs, tmp_path, config, children, parent):
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    pid_file = tmp_path / "pids"
    p = procs([PYTHON, script, pid_file, str(children), parent], tmp_path / "daemon.log",
              env=preload_env(config))
    pids = wait_for(lambda: pid_file.exists() and pid_file.read_text().split(), 20,
                    "the daemon's children")
    pids = [int(x) for x in pids]
    for pid in pids:
        procs.adopt(pid)
    return p, pids


def stop_pid(pid, timeout=20):
    import os
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not pid_alive(pid), timeout, f"process {pid} to exit")


def test_fork_daemon_follow_fork(procs, tmp_path):
    """A daemon that forks and lets its parent exit: with FollowFork the
    child starts memtrim again on the same port once the parent is gone."""
    port = free_port()
    config = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite")}
    p, (child,) = start_daemon(procs, tmp_path, config, 1, "exit")
    assert p.wait(20) == 0, p.output()
    api = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(api + "/healthz"), 15, "memtrim in the forked child")
    r = requests.post(api + "/memory/trim", timeout=30)
    assert r.status_code == 200, r.text
    assert pid_alive(child)
    stop_pid(child)
    assert not http_ok(api + "/healthz")
    assert "FollowFork" not in p.output(), p.output()


def test_fork_without_follow_fork_stays_in_parent(procs, tmp_path):
    """By default memtrim stays in the parent: the child neither serves nor
    keeps the parent's listening socket, so the port is free once the parent
    is gone."""
    port = free_port()
    config = {"HttpPort": port, "Database": str(tmp_path / "m.sqlite")}
    p, (child,) = start_daemon(procs, tmp_path, config, 1, "exit")
    assert p.wait(20) == 0, p.output()
    wait_for(lambda: (tmp_path / f"pids.{child}.forked").exists(), 20, "the child's fork() to return")
    assert pid_alive(child)
    # With FollowFork the child's atfork handler starts a restart thread before fork()
    # returns; without it the child is the single thread that forked, and nothing waits.
    tasks = os.listdir(f"/proc/{child}/task")
    assert tasks == [str(child)], f"the child runs threads {tasks}: memtrim followed the fork"
    assert not http_ok(f"http://127.0.0.1:{port}/healthz")
    import socket
    with socket.socket() as s:  # nobody holds the port any more
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
    stop_pid(child)


def test_fork_parent_keeps_port_children_stay_off(procs, tmp_path):
    """With "Group": false, two FollowFork children of a parent that keeps the
    port (a preforking server): after waiting for the port a while, each says
    once, at info level, that memtrim in its parent serves it, and keeps
    running without memtrim; nothing is an error; the parent still serves."""
    port = free_port()
    config = {"HttpPort": port, "FollowFork": True, "Group": False, "Database": ""}
    p, children = start_daemon(procs, tmp_path, config, 2, "stay")
    wait_for(lambda: p.output().count("is served by memtrim in its ancestor") >= 2, 30,
             "both children to find the parent holding the port")
    out = p.output()
    for c in children:
        assert (f"not started in pid {c} (python3): port {port} is served by memtrim in its "
                f"ancestor pid {p.pid} (python3)") in out, out
    assert "(error)" not in out and "not restarted in child" not in out, out
    assert all(pid_alive(c) for c in children)
    assert http_ok(f"http://127.0.0.1:{port}/healthz")
    for c in children:
        stop_pid(c)
    assert p.stop() == 0, p.output()


def test_fork_parent_keeps_port_children_join_its_group(procs, tmp_path):
    """By default (Group true) the same children join the parent's worker
    group: the parent's port lists all three processes, a trim reaches each,
    and nothing waits for the port or is an error (tests/e2e/test_groups.py
    has the rest)."""
    port = free_port()
    config = {"HttpPort": port, "FollowFork": True, "Database": ""}
    p, children = start_daemon(procs, tmp_path, config, 2, "stay")
    api = f"http://127.0.0.1:{port}"

    def members():
        r = requests.get(api + "/memory/stats", timeout=10).json()
        return sorted(m["pid"] for m in r.get("group", {}).get("members", []))
    wait_for(lambda: members() == sorted([p.pid] + children), 20, "both children to join")
    r = requests.post(api + "/memory/trim", timeout=30)  # no store here: the counters tell
    assert r.status_code == 200, r.text
    assert sorted(m["pid"] for m in r.json()["group"]["members"]) == sorted([p.pid] + children)

    def trimmed():
        g = requests.get(api + "/memory/stats", timeout=10).json()["group"]
        return {m["pid"]: m["trims"] for m in g["members"]}
    wait_for(lambda: all(n >= 1 for n in trimmed().values()), 20, "every member's trim")
    out = p.output()
    assert "(error)" not in out and "served by memtrim in its ancestor" not in out, out
    for c in children:
        stop_pid(c)
    wait_for(lambda: members() == [p.pid], 20, "the children to leave the group")
    assert p.stop() == 0, p.output()


@pytest.mark.parametrize("config, key", [
    ('{"TrimIntervalSecond": 5}', "TrimIntervalSecond"),
    ('{"MemoryTrim": {"HttpPort": "x"}}', "HttpPort"),
    ("/nonexistent/memtrim.json", "/nonexistent/memtrim.json"),
    ('{"HttpPort": ', "invalid JSON"),
])
def test_config_error_leaves_program_running(procs, tmp_path, config, key):
    # The constructor has run (and printed) before the program serves its first request.
    p, port = start_http_server(procs, tmp_path, config)
    out = p.output()
    lines = [ln for ln in out.splitlines() if "memtrim" in ln]
    assert len(lines) == 1, out
    assert lines[0].startswith("memtrim: not started:") and key in lines[0], lines
    assert requests.get(f"http://127.0.0.1:{port}/hello.txt", timeout=10).text == "hello\n"
    assert p.stop(signal.SIGINT) == 0, p.output()


def test_no_config_does_nothing(procs, tmp_path):
    p, port = start_http_server(procs, tmp_path, "", {"MEMTRIM_CONFIG": ""})
    assert "memtrim" not in p.output()
    assert p.stop(signal.SIGINT) == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
