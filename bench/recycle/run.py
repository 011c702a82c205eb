#!/usr/bin/python3
"""memtrim's worker group against worker recycling (issue 32 item 5; docs/benchmarks.md,
"Against recycling"). Debian's gunicorn (sync workers) and PHP-FPM (pm = static), each
serving an app that fragments its heap per request (40,000 blocks of 1,000 bytes made and
dropped, a few kept as a cache keeps them), W workers under one memory cgroup v1 limit.
Modes, run in turn (round after round, so they see the same load):
  none          neither recycling nor memtrim
  recycle-N     gunicorn --max-requests N / pm.max_requests = N (a worker exits after N
                requests and the master forks a fresh one)
  group         memtrim preloaded into the master (FollowFork, one port), no recycling
  group+recycle-N   both
Each run: the server starts in a fresh cgroup, C clients send requests for D seconds (a
connection per request: sync gunicorn closes each one, PHP-FPM is spoken to over FastCGI
by this script), then it stops. Reported per run and per mode (the median of the rounds):
requests per second, p99 latency, failed requests, worker restarts (workers the master
forked after its first W: recycling's and the OOM killer's), OOM kills (the cgroup's
counter) and the cgroup's peak memory. Needs root (the cgroup). Fewer clients than workers
(2 for 4): with a client per worker every worker is always mid-request and reuses its freed
40 MB at once, which nothing can lower (measured: 4 clients under 200 MB OOM-killed
gunicorn in every mode); with 2, half the workers sit between requests holding what they
freed, as a server below its peak does. The default limit, 180 MB, is above two requests'
live memory and the idle workers (gunicorn: about 140 MB) and below four workers holding
their freed 40 MB each (about 220 MB).

  bench/recycle/run.py [--build build] [--servers gunicorn,php-fpm] [--workers 4]
                       [--limit-mb 180] [--seconds 15] [--clients 2] [--rounds 3]
                       [--recycle 10,100] [--both 100]

PHP runs as deployed, with Zend's own allocator: a script's strings live in 2 MB chunks
that Zend maps itself and keeps cached between requests (measured: a child holds 48 MB after
40 MB requests), which malloc_trim cannot give back; with USE_ZEND_ALLOC=0 the same script
leaves a child at 10-13 MB (everything is freed at the request's end and glibc trims its
top itself). The PHP rows show what recycling and memtrim do to such a worker."""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "e2e"))
from hosts_util import Cgroup, free_port  # noqa: E402

GUNICORN_APP = """
import os
cache = []
def app(environ, start_response):
    junk = [bytearray(1000) for _ in range(40000)]   # 40 MB in 1 KB blocks
    cache.extend(junk[::4000])                       # a few outlive the request
    del cache[:-64]
    del junk
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
"""

PHP_APP = """<?php
$junk = [];
for ($i = 0; $i < 40000; $i++) $junk[] = str_repeat('x', 990) . $i;  // 40 MB in 1 KB strings
echo getmypid();
"""

FPM_CONF = """
[global]
error_log = {log}
daemonize = no
log_level = notice
[www]
listen = 127.0.0.1:{port}
pm = static
pm.max_children = {workers}
pm.max_requests = {max_requests}
clear_env = no
catch_workers_output = yes
"""


# ---- the servers -------------------------------------------------------------------------

def gunicorn(d, workers, port, max_requests):
    (d / "app.py").write_text(GUNICORN_APP)
    cmd = ["/usr/bin/python3", "-m", "gunicorn", "--workers", str(workers), "--bind",
           f"127.0.0.1:{port}", "--chdir", str(d), "--log-level", "info"]
    if max_requests:
        cmd += ["--max-requests", str(max_requests)]
    return cmd + ["app:app"], {}


def php_fpm(d, workers, port, max_requests):
    fpm = next((f for f in ("/usr/sbin/php-fpm8.2", "/usr/sbin/php-fpm") if os.path.exists(f)),
               None)
    (d / "app.php").write_text(PHP_APP)
    (d / "fpm.conf").write_text(FPM_CONF.format(log=d / "fpm-error.log", port=port,
                                                workers=workers, max_requests=max_requests))
    return [fpm, "--nodaemonize", "--fpm-config", str(d / "fpm.conf"), "-R"], {}


SERVERS = {"gunicorn": gunicorn, "php-fpm": php_fpm}


def restarts(server, d, log, workers):
    """Workers the master forked after its first `workers`."""
    if server == "gunicorn":
        booted = len(re.findall(r"Booting worker with pid", log))
    else:
        text = (d / "fpm-error.log").read_text(errors="replace") if (d / "fpm-error.log").exists() else ""
        booted = len(re.findall(r"child \d+ started", text))
    return max(0, booted - workers)


# ---- the clients ---------------------------------------------------------------------------

def http_get(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as r:
        r.read()
        return r.status == 200


def fcgi_record(kind, body, req=1):
    pad = (8 - len(body) % 8) % 8
    return struct.pack(">BBHHBx", 1, kind, req, len(body), pad) + body + b"\0" * pad


def fcgi_pair(k, v):
    def n(x):
        return struct.pack(">B", len(x)) if len(x) < 128 else struct.pack(">I", len(x) | 1 << 31)
    return n(k) + n(v) + k + v


def fcgi_get(port, script):
    """One FastCGI request (a responder, GET script): True on a 200 and a clean end."""
    params = {"SCRIPT_FILENAME": script, "SCRIPT_NAME": "/app.php", "REQUEST_METHOD": "GET",
              "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1", "GATEWAY_INTERFACE": "CGI/1.1",
              "REMOTE_ADDR": "127.0.0.1", "SERVER_NAME": "localhost", "SERVER_PORT": "80",
              "CONTENT_LENGTH": "0"}
    body = b"".join(fcgi_pair(k.encode(), v.encode()) for k, v in params.items())
    msg = (fcgi_record(1, struct.pack(">HB5x", 1, 0)) + fcgi_record(4, body) + fcgi_record(4, b"")
           + fcgi_record(5, b""))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(msg)
        buf, out = b"", b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return False
            buf += chunk
            while len(buf) >= 8:
                _, kind, _, clen, pad = struct.unpack(">BBHHB", buf[:7])
                if len(buf) < 8 + clen + pad:
                    break
                content, buf = buf[8:8 + clen], buf[8 + clen + pad:]
                if kind == 6:
                    out += content
                elif kind == 3:
                    return b"Status:" not in out.split(b"\r\n\r\n")[0] or b"Status: 200" in out


def load(get, seconds, clients):
    """clients threads, each request after the last, for `seconds`: (latencies of the
    requests served, failed count, wall seconds)."""
    lat, failed, lock = [], [0], threading.Lock()
    end = time.monotonic() + seconds

    def client():
        while time.monotonic() < end:
            t = time.monotonic()
            try:
                ok = get()
            except (OSError, http.client.HTTPException):  # a worker killed mid-request
                ok = False
            took = time.monotonic() - t
            with lock:
                if ok:
                    lat.append(took)
                else:
                    failed[0] += 1
    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, failed[0], time.monotonic() - t0


# ---- one run ---------------------------------------------------------------------------------

def run_one(args, server, mode, n):
    group = mode.startswith("group")
    m = re.search(r"recycle-(\d+)", mode)
    max_requests = int(m.group(1)) if m else 0
    d = __import__("pathlib").Path(tempfile.mkdtemp(prefix=f"memtrim-recycle-{server}-"))
    os.chmod(d, 0o755)  # php-fpm's children (www-data by default when root: -R keeps root)
    port = free_port()
    cmd, env_extra = SERVERS[server](d, args.workers, port, max_requests)
    env = dict(os.environ, **env_extra)
    if group:
        env["LD_PRELOAD"] = os.path.join(args.build, "libmemtrim.so")
        env["MEMTRIM_CONFIG"] = json.dumps({"FollowFork": True, "HttpPort": free_port(),
                                            "Database": ""})
    cg = Cgroup(f"memtrim-recycle-{os.getpid()}-{n}", args.limit_mb << 20)
    log = open(d / "server.log", "w")
    p = subprocess.Popen(cg.wrap(cmd), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=d)
    done = False
    try:
        get = (lambda: http_get(port)) if server == "gunicorn" else \
            (lambda: fcgi_get(port, str(d / "app.php")))
        deadline = time.monotonic() + 60
        while True:  # the server answers
            try:
                if get():
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or p.poll() is not None:
                raise SystemExit(f"{server} {mode} did not start:\n" +
                                 (d / "server.log").read_text()[-2000:])
            time.sleep(0.1)
        lat, failed, wall = load(get, args.seconds, args.clients)
        done = True
    finally:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
        if not done:
            cg.remove()  # kills what is left inside
    out = (d / "server.log").read_text(errors="replace")
    res = {"server": server, "mode": mode, "rps": len(lat) / wall,
           "p99_ms": statistics.quantiles(lat, n=100)[98] * 1000 if len(lat) >= 2 else None,
           "failed": failed, "restarts": restarts(server, d, out, args.workers),
           "oom_kills": cg.oom_kills(), "peak_mb": (cg.peak_bytes() or 0) >> 20,
           "load": float(open("/proc/loadavg").read().split()[0])}
    cg.remove()
    shutil.rmtree(d, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--servers", default="gunicorn,php-fpm")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--limit-mb", type=int, default=180)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--recycle", default="10,100", help="max_requests settings to compare")
    ap.add_argument("--both", default="100", help="max_requests settings with the group too")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # each run's finally stops its server
    args.build = os.path.abspath(args.build)
    modes = ["none"] + [f"recycle-{n}" for n in args.recycle.split(",") if n] + ["group"] + \
        [f"group+recycle-{n}" for n in args.both.split(",") if n]
    results, n = [], 0
    for r in range(args.rounds):
        for server in args.servers.split(","):
            for mode in modes:
                res = run_one(args, server, mode, n)
                n += 1
                res["round"] = r + 1
                results.append(res)
                print(json.dumps(res), flush=True)
    print(f"\n{args.workers} workers, {args.limit_mb} MB limit, {args.clients} clients, "
          f"{args.seconds:g} s a run, {args.rounds} rounds; medians of the rounds:")
    print(f"{'server':9} {'mode':18} {'req/s':>7} {'p99 ms':>8} {'failed':>7} {'restarts':>9} "
          f"{'OOM kills':>9} {'peak MB':>8}")
    for server in args.servers.split(","):
        for mode in modes:
            rs = [x for x in results if x["server"] == server and x["mode"] == mode]

            def med(k):
                v = [x[k] for x in rs if x[k] is not None]
                return statistics.median(v) if v else float("nan")
            print(f"{server:9} {mode:18} {med('rps'):7.1f} {med('p99_ms'):8.1f} "
                  f"{med('failed'):7.0f} {med('restarts'):9.0f} {med('oom_kills'):9.0f} "
                  f"{med('peak_mb'):8.0f}")


if __name__ == "__main__":
    main()
