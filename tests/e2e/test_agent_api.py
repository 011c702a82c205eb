"""The node agent and a process where memtrim is loaded (issue 39): "a process where memtrim is
loaded is asked through its own API or socket; the others are trimmed from outside".

Two unmodified programs in one limited cgroup (the demo's fragmenting workload without its own
engine): one with libmemtrim.so preloaded (its API on a loopback port inside a network
namespace of its own, as a container's, or on a unix socket), one plain. `memtrim agent`
beside them with idle trims every second (so that the test does not wait for pressure): the
plain one is trimmed from outside (the command), the preloaded one is asked through its API
(`memtrim agent --ask`, agent/ask.c): each of the agent's trims of it went through its API, and
its own /metrics count them as its manual trims. A preloaded process whose API cannot be
reached (HttpEnabled false) is reported ("api_unreachable") and never trimmed from outside,
while the plain one beside it is.

Control agent-inject-loaded: the agent trims a memtrim-loaded process from outside, as any
other (its own count of manual trims stays 0; the unreachable one is trimmed).
"""
import http.client
import json
import re
import socket
import subprocess

import pytest

from agent_util import Agent
from hosts_util import API_LINE, build_file, cgroup, procs  # noqa: F401
from wait import wait_for

LIMIT = 400 << 20
DEMO = ["--no-memtrim", "--workers", "4", "--study-mb", "20", "--keep-percent", "2",
        "--concurrency", "1", "--pause-ms", "100", "--studies", "100000", "--canary"]


def demo(env=None, wrap_net=False):
    cmd = ["/usr/bin/env", *[f"{k}={v}" for k, v in (env or {}).items()],
           str(build_file("memtrim-demo")), *DEMO]
    if wrap_net:  # a network namespace of its own, its loopback up, as a container's
        cmd = ["/usr/bin/unshare", "--net", "/bin/sh", "-c", 'ip link set lo up && exec "$@"',
               "netns", *cmd]
    return cmd


def preload(config):
    return {"LD_PRELOAD": str(build_file("libmemtrim.so")),
            "MEMTRIM_CONFIG": json.dumps(dict({"Database": ""}, **config))}


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.path)


def manual_trims(pid, api):
    """memtrim_trims_total{trigger="manual"} of the host's own /metrics: api is a unix socket's
    path, or a port on its loopback in its network namespace (read from there by nsenter)."""
    if api.startswith("/"):
        c = UnixHTTP(api)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    else:
        text = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "/usr/bin/python3", "-c",
                               "import sys, urllib.request; sys.stdout.write(urllib.request."
                               f"urlopen('http://127.0.0.1:{api}/metrics', timeout=10).read().decode())"],
                              capture_output=True, text=True, timeout=30, check=True).stdout
    m = re.search(r'^memtrim_trims_total\{trigger="manual"\} (\d+)', text, re.M)
    return int(m.group(1)) if m else 0


def agent_beside(procs, cg, tmp_path):
    path = "/" + cg.path.name
    agent = Agent(procs, tmp_path / "agent.log", {"AllowCgroups": [path], "ScanIntervalMs": 200,
                                                  "IdleTrims": True, "IdleIntervalSeconds": 1})
    wait_for(lambda: path in agent.cgroups(), 20, "the agent to watch the cgroup")
    return agent, path


def view_of(agent, path, pid):
    return next((p for p in agent.cgroups()[path]["processes"] if p["pid"] == pid), None)


@pytest.mark.parametrize("where", ["netns", "unix"])
def test_a_process_with_memtrim_is_asked_through_its_api(procs, cgroup, tmp_path, where):
    cg = cgroup(LIMIT)
    agent, path = agent_beside(procs, cg, tmp_path)
    if where == "unix":
        sock = tmp_path / "api" / "memtrim.sock"
        sock.parent.mkdir(mode=0o700)
        cfg = {"HttpBind": f"unix:{sock}"}
    else:
        cfg = {"HttpPort": 0}
    host = procs(cg.wrap(demo(preload(cfg), wrap_net=where == "netns")), tmp_path / "host.log")
    plain = procs(cg.wrap(demo()), tmp_path / "plain.log")
    api = str(sock) if where == "unix" else wait_for(lambda: (m := API_LINE.search(host.output()))
                                                     and m.group(1), 30, "the host's API line")
    wait_for(lambda: sock.exists() if where == "unix" else True, 30, "the host's socket")

    def both_trimmed():
        h, p = view_of(agent, path, host.pid), view_of(agent, path, plain.pid)
        return h and p and h["trims"] >= 3 and p["trims"] >= 1 and (h, p)
    h, p = wait_for(both_trimmed, 60, "the agent to trim both processes (3 asks of the host)")
    asked = manual_trims(host.pid, api)
    log = agent.output()
    print(f"\n{where}: the host: {h['trims']} trims by the agent, {asked} manual trims by its own "
          f"memtrim, {h['released_bytes'] >> 20} MiB; the plain one: {p['trims']} trims, "
          f"{p['released_bytes'] >> 20} MiB, load {open('/proc/loadavg').read().split()[0]}")
    assert h["memtrim_loaded"] and not p["memtrim_loaded"], (h, p)
    # every trim the agent made of the host went through its API (the agent's line for each
    # says so; the command never ran on it), and its own memtrim counts them as its manual
    # trims (at least one: a request that meets a trim under way is coalesced onto it, its
    # result shared (core/measure/trim.c), so the two counts may differ under load)
    lines = re.findall(rf"process {host.pid} \([^)]*\): released .*", agent.output())
    assert len(lines) >= h["trims"] and all("asked through its memtrim's API" in x for x in lines), \
        (h, lines, log[-3000:])
    assert asked >= 1, (asked, h, log[-3000:])
    assert host.running() and plain.running()
    agent.stop()


def test_a_process_whose_api_cannot_be_reached_is_reported_and_left_alone(procs, cgroup, tmp_path):
    cg = cgroup(LIMIT)
    agent, path = agent_beside(procs, cg, tmp_path)
    host = procs(cg.wrap(demo(preload({"HttpEnabled": False}))), tmp_path / "host.log")
    plain = procs(cg.wrap(demo()), tmp_path / "plain.log")

    def reported():
        h, p = view_of(agent, path, host.pid), view_of(agent, path, plain.pid)
        return h and p and h.get("reason") == "api_unreachable" and p["trims"] >= 2 and (h, p)
    h, p = wait_for(reported, 60, "the host reported api_unreachable, the plain one trimmed twice")
    print(f"\nthe unreachable host: {h['reason']}: {h['why']}; the plain one: {p['trims']} trims")
    assert h["trims"] == 0 and h["released_bytes"] == 0, h
    assert "trimmed from outside" in h["why"] and not h["unreleasable"], h
    metrics = agent.get("/metrics")
    assert re.search(rf'memtrim_agent_refusals_total\{{cgroup="{re.escape(path)}".*reason="api_unreachable"\}} 1$',
                     metrics, re.M), metrics
    assert host.running()
    agent.stop()


IMPOSTOR = r"""
import json, mmap, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
held = b"\x01" * (40 << 20)
print("ready", flush=True)
sys.stdin.readline()  # then, as `memtrim load` into a running process: memtrim in its maps
f = open(sys.argv[2], "rb")  # libmemtrim.so's file in its maps, never run: 'memtrim loaded'
m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)
more = b"\x02" * (24 << 20)  # grown since its trim: worth another
class H(BaseHTTPRequestHandler):
    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.answer({"status": "ok", "version": "0", "pid": os.getpid()})
    def do_POST(self):
        self.answer({"released_bytes": float(sys.argv[1])})
    def log_message(self, *a):
        pass
s = HTTPServer(("127.0.0.1", 0), H)
print("serving", flush=True)
s.serve_forever()
"""


def test_an_impostors_answer_is_checked(procs, cgroup, tmp_path):
    """memtrim loaded into a running process (as `memtrim load` does) is seen at its next trim,
    and its API's answer is checked. An impostor: trimmed from outside first, then it maps
    libmemtrim.so's file (never running it) and answers as memtrim's API on its own port, each trim
    'releasing' 1e300 bytes. The agent asks it (no longer trims it from outside), and the
    answer, no byte count a process could hold, counts nothing (reason failed: an unexpected
    answer): its released bytes stay those of its first trim. Controls agent-loaded-once
    (memtrim looked for at first sight only: trimmed from outside again) and
    agent-api-answer-unchecked (the answer taken as it is: 1e300 cast to a byte count)."""
    cg = cgroup(LIMIT)
    agent, path = agent_beside(procs, cg, tmp_path)
    p = subprocess.Popen(cg.wrap(["/usr/bin/python3", "-c", IMPOSTOR, "1e300",
                                  build_file("libmemtrim.so")]),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        first = wait_for(lambda: (v := view_of(agent, path, p.pid)) and v["trims"] >= 1 and v, 30,
                         "a trim from outside")
        assert not first["memtrim_loaded"], first
        p.stdin.write("load\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "serving"
        v = wait_for(lambda: (v := view_of(agent, path, p.pid)) and v.get("reason") and v, 30,
                     "the agent to ask the impostor")
        print(f"\nthe impostor: first {first['trims']} trim from outside, {first['released_bytes']} "
              f"bytes; then {v}")
        assert v["memtrim_loaded"] and v["reason"] == "failed" and "unexpected" in v["why"], v
        assert v["released_bytes"] == first["released_bytes"], (first, v)
        assert agent.cgroups()[path]["released_bytes"] == first["released_bytes"]
        agent.stop()
    finally:
        p.kill()
        p.wait()
