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

    r = requests.post(api + "/memory/trim", timeout=60)
    assert r.status_code == 200, r.text
    results = {m["pid"]: m for m in r.json()["group"]["members"]}
    assert sorted(results) == sorted(kids + [p.pid]), r.text
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
    log = p.output()
    assert "(error)" not in log and "(warning)" not in log, log[-3000:]
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
        r = requests.post(api + "/memory/trim", timeout=60)
        results = {m["pid"]: m for m in r.json()["group"]["members"]}
        assert sorted(results) == sorted(kids + [daemon]), r.text
        assert all("released_bytes" in results[k] for k in kids), r.text
    finally:
        if pid_alive(daemon):
            os.kill(daemon, signal.SIGTERM)
    wait_for(lambda: not pid_alive(daemon), 20, "the daemon to stop")
    log = (root / "error.log").read_text() + starter.output()
    assert "(error)" not in log and "(warning)" not in log, log[-3000:]
