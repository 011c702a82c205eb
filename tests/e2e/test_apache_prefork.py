"""Debian's Apache with mpm_prefork as a worker group (issue 21 item 4, docs/groups.md):
apache2 started in the foreground (-DFOREGROUND) with a configuration of its
own in a temporary directory, on loopback ports, with libmemtrim.so preloaded
(FollowFork, one HttpPort). The master (root) serves memtrim's port and owns
the store; its children, which drop their privileges to www-data right after
the fork, are members over the socketpair made at fork (a descriptor: the uid
change does not touch it). Apache does not re-exec itself: a graceful restart
(SIGUSR1) replaces the children in the same master, and the group follows."""
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
import requests

from wait import group_trim
from hosts_util import (children_of, free_port, group_member_pids as members, http_ok,  # noqa: F401
                        pid_alive, preload_env, procs, traversable_dir, wait_for)

APACHE = "/usr/sbin/apache2"
MODULES = "/usr/lib/apache2/modules"

CONF = """
ServerRoot {root}
LoadModule mpm_prefork_module {modules}/mod_mpm_prefork.so
LoadModule authz_core_module {modules}/mod_authz_core.so
LoadModule dir_module {modules}/mod_dir.so
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile {root}/apache.pid
DefaultRuntimeDir {root}
Mutex file:{root} default
ErrorLog {root}/error.log
LogLevel info
User www-data
Group www-data
DocumentRoot {root}/www
DirectoryIndex index.html
<Directory {root}/www>
  Require all granted
</Directory>
StartServers 3
MinSpareServers 3
MaxSpareServers 4
MaxRequestWorkers 3
ServerLimit 3
"""

PAGE = "<h1>served by Apache prefork with memtrim preloaded</h1>\n"

# memtrim's warnings that the test's clients or the machine's load may cause, each by its
# text: they say memtrim did what it must (rate-limited, server/conns.c), not that it is
# wrong. Every other memtrim warning or error fails the test.
EXPECTED_WARNINGS = (
    "memtrim/server: a connection from ",  # took the place of a waiting one (MaxConnections)
    "memtrim/server: refused a connection from ",  # past MaxConnections, none to give way
)
# Always a defect, whoever says it: memtrim not running in a process ("memtrim: not
# started", "did not join"), a sanitizer's report or leak, a child that crashed (Apache:
# "child pid N exit signal Segmentation fault"; a SIGKILL is not logged so) or hung at its
# exit (Apache: "still did not exit"). Apache's own error lines are not memtrim's: this
# configuration's 3 workers make it say "server reached MaxRequestWorkers" at [error].
DEFECTS = ("memtrim: ", "AddressSanitizer", "LeakSanitizer", "ThreadSanitizer",
           "runtime error:", "Segmentation fault", "exit signal", "possible coredump",
           "still did not exit")


def memtrim_defects(log):
    """The lines of Apache's error log and memtrim's stderr that signal a defect."""
    bad = []
    for line in log.splitlines():
        if any(d in line for d in DEFECTS):
            bad.append(line)
        elif "memtrim/" in line and "(error)" in line:
            bad.append(line)
        elif "memtrim/" in line and "(warning)" in line and \
                not any(w in line for w in EXPECTED_WARNINGS):
            bad.append(line)
    return bad


def test_log_check_tells_defects_from_expected_warnings():
    """The log check itself: a rate-limited connection line passes, anything else at
    warning or error level, a crash, a sanitizer's report or memtrim not started fails."""
    fine = ["[mpm_prefork:notice] [pid 7] AH00163: Apache/2.4.62 (Debian) configured",
            "[mpm_prefork:notice] [pid 7] AH00171: Graceful restart requested, doing restart",
            "memtrim/group: pid 7 leads a worker group: its forked children join it (info)",
            "[mpm_prefork:error] [pid 7] AH00161: server reached MaxRequestWorkers setting, "
            "consider raising the MaxRequestWorkers setting",
            "memtrim/server: a connection from 127.0.0.1 took the place of one waiting idle "
            "after a request (from 127.0.0.1): 128 open of MaxConnections 128, 96 waiting from "
            "127.0.0.1 of MaxConnectionsPerIp 96 (warning)",
            "memtrim/server: refused a connection from 127.0.0.1: 128 connections open, none "
            "waiting to be given up (MaxConnections 128) (and 3 more such line(s) dropped "
            "before it: at most 5 every 10 s) (warning)"]
    assert memtrim_defects("\n".join(fine)) == []
    defects = ["memtrim/group: descriptor 9, a member's channel (pid 8), was closed by someone "
               "else in pid 7 (the host?): dropped from the group, left alone (warning)",
               "memtrim/store: cannot write: disk I/O error (error)",
               "memtrim: not started: configuration key GroupDir: ...",
               "memtrim: FollowFork: pid 9 did not join its parent's group (see above)",
               "[core:notice] [pid 7] AH00052: child pid 9 exit signal Segmentation fault (11)",
               "[mpm_prefork:warn] [pid 7] AH00045: child process 9 still did not exit, "
               "sending a SIGTERM",
               "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020"]
    for line in defects:
        assert memtrim_defects("\n".join(fine + [line])) == [line], line


def uid_of(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def need_apache():
    if not os.path.exists(APACHE) or not os.path.exists(f"{MODULES}/mod_mpm_prefork.so"):
        pytest.skip("apache2 is not installed (tests/install-deps.sh)")
    if os.geteuid() != 0:
        pytest.skip("Apache's children drop to www-data only when the master runs as root")


def configure(root):
    """The pages, Apache's configuration on a free port, and memtrim's (FollowFork, one
    port; only the requests trim)."""
    (root / "www").mkdir()
    (root / "www" / "index.html").write_text(PAGE)
    port, web = free_port(), free_port()
    (root / "httpd.conf").write_text(CONF.format(root=root, modules=MODULES, port=web))
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(root / "m.sqlite"),
           "TrimIntervalSeconds": 0, "ManualTrimMinIntervalMs": 0}
    return port, web, cfg


@pytest.fixture
def root():
    d = traversable_dir("memtrim-apache-")  # the children, www-data, read the pages inside
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_apache_prefork(procs, root):
    """One port answers for the master and its 3 children (www-data after the
    fork); one trim reaches each child, in its own process; the history names
    each pid; a child killed with SIGKILL leaves and its replacement joins; a
    graceful restart's new children replace the old in the group; Apache
    serves its pages throughout and stops cleanly."""
    need_apache()
    www_data = pwd.getpwnam("www-data").pw_uid
    port, web, cfg = configure(root)
    env = preload_env(cfg)
    # A session of its own: the master signals its whole process group at a restart and at
    # shutdown (prefork's killpg), which must not reach pytest.
    p = procs([APACHE, "-f", str(root / "httpd.conf"), "-DFOREGROUND"], root / "apache.log",
              env=env, cwd=root, start_new_session=True)
    api, site = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{web}/"

    def group_is_master_and_children(n=3):
        kids = children_of(p.pid)
        return len(kids) == n and http_ok(api + "/healthz") and members(api) == sorted(kids + [p.pid])

    wait_for(group_is_master_and_children, 30, "Apache's master and its 3 children in one group")
    kids = children_of(p.pid)
    assert requests.get(api + "/healthz", timeout=5).json()["pid"] == p.pid  # the master serves
    assert all(uid_of(k) == www_data for k in kids), [uid_of(k) for k in kids]
    assert uid_of(p.pid) == 0
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    assert f"pid={p.pid}," in out and all(f"pid={k}," not in out for k in kids), out
    for _ in range(6):
        r = requests.get(site, timeout=10)
        assert r.status_code == 200 and r.text == PAGE, (r.status_code, r.text)

    _, results = group_trim(api)
    assert sorted(results) == sorted(kids + [p.pid]), results
    for k in kids:
        assert "released_bytes" in results[k] and "error" not in results[k], results[k]
    for k in kids:
        wait_for(lambda: requests.get(api + f"/memory/trims?pid={k}", timeout=10)
                 .json()["summary"]["count"] >= 1, 15, f"child {k}'s trim in the store")
    metrics = requests.get(api + "/metrics", timeout=10).text
    for k in kids:
        assert f'memtrim_member_rss_bytes{{pid="{k}",program="apache2"}}' in metrics, metrics

    # A child killed: it leaves at once, the master forks a replacement, which joins.
    os.kill(kids[0], signal.SIGKILL)
    wait_for(lambda: kids[0] not in (members(api) or [kids[0]]) and group_is_master_and_children(),
             30, "the replacement child to join")
    # A graceful restart (apachectl graceful: SIGUSR1 to the master): no re-exec; the old
    # children exit once idle, new ones are forked and join; nobody stale.
    before = children_of(p.pid)
    p.send(signal.SIGUSR1)
    wait_for(lambda: not set(children_of(p.pid)) & set(before) and
             group_is_master_and_children(), 30, "the new generation of children")
    g = requests.get(api + "/memory/stats", timeout=10).json()["group"]
    assert g["left"] >= 4 and g["member_count"] == 4, g
    r = requests.get(site, timeout=10)
    assert r.status_code == 200 and r.text == PAGE

    last = children_of(p.pid)
    assert p.stop() == 0, p.output()
    wait_for(lambda: not any(pid_alive(k) for k in last), 20, "the children to exit")
    # memtrim's lines before Apache took stderr over, then its error log (all the rest)
    log = p.output() + (root / "error.log").read_text()
    assert not memtrim_defects(log), memtrim_defects(log)
    db = sqlite3.connect(root / "m.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    pids = {row[0] for row in db.execute("SELECT DISTINCT pid FROM trims")}
    db.close()
    assert set(kids) | {p.pid} <= pids, pids


def test_apache_daemonized(procs, root):
    """apache2 without -DFOREGROUND (as apachectl and Debian's unit start it):
    the process memtrim started in forks the daemon and exits; the daemon, a
    member of that first group, takes the port and the store over, and the
    children it forked meanwhile (www-data) waited on a channel to it and are
    adopted: one port for the daemon and its 3 children, a trim in each."""
    need_apache()
    port, web, cfg = configure(root)
    starter = procs([APACHE, "-f", str(root / "httpd.conf")], root / "apache.log",
                    env=preload_env(cfg), cwd=root, start_new_session=True)
    assert starter.wait(30) == 0, starter.output()
    pidfile = root / "apache.pid"
    daemon = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 20,
                          "Apache's pid file"))
    procs.adopt(daemon)
    api, site = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{web}/"

    try:
        wait_for(lambda: len(children_of(daemon)) == 3 and http_ok(api + "/healthz") and
                 members(api) == sorted(children_of(daemon) + [daemon]), 30,
                 "the daemon and its 3 children in one group")
        kids = children_of(daemon)
        health = requests.get(api + "/healthz", timeout=5).json()
        assert health["pid"] == daemon and health["database"] == "ok", health
        assert requests.get(site, timeout=10).text == PAGE
        _, results = group_trim(api)
        assert sorted(results) == sorted(kids + [daemon]), results
        assert all("released_bytes" in results[k] for k in kids), results
    finally:
        if pid_alive(daemon):
            os.kill(daemon, signal.SIGTERM)
    wait_for(lambda: not pid_alive(daemon), 20, "the daemon to stop")
    log = (root / "error.log").read_text() + starter.output()
    assert not memtrim_defects(log), memtrim_defects(log)
