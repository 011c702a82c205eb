"""No surprises after `memtrim load` (issue 37, item 4). A python3 loaded with a configuration
that names neither a store nor a token:
- no memtrim.sqlite* appears in its working directory (the store is ":memory:" unless the
  configuration names a "Database": then that file, and only it);
- its API answers no other local user without the token the tool printed (uid nobody gets 401
  for /memory/stats and for a trim; the token opens both; /healthz stays open);
- a write error on the tool's standard output is an error: with stdout on /dev/full, trim,
  stats and load exit non-zero and say so on stderr.
Controls: cmd-load-store (no default store: the file appears), cmd-load-token (no token: nobody
reads the stats), cmd-stdout (write errors ignored: exit 0).
"""
import json
import os
import shutil
import subprocess
import tempfile

import requests

from conftest import BUILD
from hosts_util import free_port
from wait import wait_for

TOOL = BUILD / "memtrim"
PY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\nprint('bye', flush=True)\n"


def start(cwd):
    p = subprocess.Popen(["/usr/bin/python3", "-c", PY], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd=cwd)
    assert p.stdout.readline() == "ready\n"
    return p


def stop(p):
    if p.poll() is None:
        p.stdin.close()
        assert p.stdout.readline() == "bye\n"
        assert p.wait(30) == 0


def load(pid, config):
    r = subprocess.run([str(TOOL), "load", str(pid), "--json", "--config", json.dumps(config)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def as_nobody(url, headers=None, method="GET"):
    """The request made by uid nobody (another local user): its status code."""
    code = ("import sys, urllib.request, urllib.error\n"
            "req = urllib.request.Request(sys.argv[1], method=sys.argv[2])\n"
            "for h in sys.argv[3:]:\n"
            "    k, v = h.split(': ', 1); req.add_header(k, v)\n"
            "try:\n"
            "    print(urllib.request.urlopen(req, timeout=10).status)\n"
            "except urllib.error.HTTPError as e:\n"
            "    print(e.code)\n")
    hs = [f"{k}: {v}" for k, v in (headers or {}).items()]
    r = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "/usr/bin/python3", "-c", code, url, method, *hs],
                       capture_output=True, text=True, timeout=30, cwd="/")
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def test_no_store_file_unless_asked_for():
    cwd = tempfile.mkdtemp(prefix="memtrim-load-cwd-")
    elsewhere = tempfile.mkdtemp(prefix="memtrim-load-db-")
    try:
        p = start(cwd)
        try:
            out = load(p.pid, {"HttpPort": free_port()})
            base = f"http://{out['listen']}"
            auth = {"Authorization": f"Bearer {out['token']}"}
            stats = requests.get(f"{base}/memory/stats", headers=auth, timeout=10)
            assert stats.status_code == 200, stats.text
            wait_for(lambda: requests.get(f"{base}/memory/trims", headers=auth, timeout=10).ok,
                     what="the store open (503 while it starts)")
            assert [f for f in os.listdir(cwd) if f.startswith("memtrim")] == []
        finally:
            stop(p)
        assert os.listdir(cwd) == []
        p = start(cwd)  # asked for: that file, and nothing in the working directory
        try:
            db = os.path.join(elsewhere, "x.sqlite")
            out = load(p.pid, {"HttpPort": free_port(), "Database": db})
            wait_for(lambda: os.path.exists(db), what="the store named")
            assert os.listdir(cwd) == []
        finally:
            stop(p)
    finally:
        shutil.rmtree(cwd)
        shutil.rmtree(elsewhere)


def test_the_api_wants_the_printed_token():
    p = start("/")
    try:
        out = load(p.pid, {"HttpPort": free_port()})
        base = f"http://{out['listen']}"
        assert as_nobody(f"{base}/healthz") == 200
        assert as_nobody(f"{base}/memory/stats") == 401
        assert as_nobody(f"{base}/memory/trim", method="POST") == 401
        token = {"Authorization": f"Bearer {out['token']}"}
        assert len(out["token"]) == 32
        assert as_nobody(f"{base}/memory/stats", token) == 200
        assert as_nobody(f"{base}/memory/trim", token, method="POST") == 200
    finally:
        stop(p)


def test_a_write_error_on_stdout_is_an_error():
    p = start("/")
    try:
        with open("/dev/full", "w") as full:
            for args in (["trim"], ["stats"], ["load", "--config",
                                               json.dumps({"HttpPort": free_port()})]):
                r = subprocess.run([str(TOOL), args[0], str(p.pid), *args[1:], "--json"],
                                   stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
                assert r.returncode == 6, (args, r.returncode, r.stderr)
                assert "cannot write the result" in r.stderr, r.stderr
            r = subprocess.run([str(TOOL), "--help"], stdout=full, timeout=60)
            assert r.returncode == 6
    finally:
        stop(p)
