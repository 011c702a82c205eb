"""A hostile local client against the demo host (issue 15): every request in
the table gets its documented status or a cut connection, while the host's
own work goes on (its studies keep completing) and its descriptors stay
below its limit throughout. Then the cases that need a host of their own:
slow headers, a connection flood, endless bodies, a network bind without a
token, the token file, the store's path, a deleted database, trims' heap
readings on the probe budget.

The host runs with a soft RLIMIT_NOFILE of 256 (so memtrim's default is 16
connections, 8 per address) and RequestTimeoutSeconds 3.
"""
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import Demo, metric_value
from hosts_util import all_threads_stopped
from wait import wait_for

NOFILE = 256
DEADLINE_S = 3  # RequestTimeoutSeconds of the hosts below
SLACK_S = 4     # the watchdog's wake-up, MHD's close, a loaded machine
INT64_MAX = 2**63 - 1


class Watch(threading.Thread):
    """Samples a host's open descriptors every 20 ms while it runs."""

    def __init__(self, demo):
        super().__init__(daemon=True)
        self.demo = demo
        self.max_fds = 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set() and self.demo.proc.poll() is None:
            try:
                self.max_fds = max(self.max_fds, len(os.listdir(f"/proc/{self.demo.proc.pid}/fd")))
            except OSError:
                pass
            time.sleep(0.02)

    def stop(self):
        self.done.set()
        self.join()


def studies(demo):
    return sum(1 for line in demo.output().splitlines() if line.startswith("study "))


def connect(demo, src="127.0.0.1", timeout=30):
    s = socket.create_connection(("127.0.0.1", demo.port), timeout=timeout,
                                 source_address=(src, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def kernel_holds(port):
    """Connections to 127.0.0.1:port the kernel has not handed to the server yet: those
    in the listening socket's accept queue (its rx_queue in /proc/net/tcp) and those whose
    handshake it has not completed (SYN_RECV)."""
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if int(local.split(":")[1], 16) != port:
                continue
            if state == "0A":  # LISTEN
                n += int(queues.split(":")[1], 16)
            elif state == "03":  # SYN_RECV
                n += 1
    return n


def listen_overflows():
    """The kernel's count of connections it dropped because a listening socket's
    accept queue was full (ListenOverflows, /proc/net/netstat; this namespace's)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split()))["ListenOverflows"])
    return 0


def read_reply(s, seconds):
    """The status of the reply on s, or "cut" when it closes without one."""
    s.settimeout(seconds)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    except socket.timeout:
        return "timeout"
    if data.startswith(b"HTTP/1."):
        return int(data.split()[1])
    return "cut"


def send_raw(demo, data, seconds=15):
    s = connect(demo)
    try:
        try:
            s.sendall(data)
        except (ConnectionResetError, BrokenPipeError):
            pass
        return read_reply(s, seconds)
    finally:
        s.close()


def req(demo, method, target, headers=None, body=b""):
    headers = dict(headers or {})
    head = f"{method} {target} HTTP/1.1\r\n"
    head += f"Host: {headers.pop('Host', f'127.0.0.1:{demo.port}')}\r\nConnection: close\r\n"
    for k, v in headers.items():
        head += f"{k}: {v}\r\n"
    if (body or method in ("POST", "PATCH")) and "Content-Length" not in headers:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode("latin-1") + b"\r\n" + body


# ---- the table -------------------------------------------------------------

EDGES = ["0", "-0", "1", "-1", "9223372036854775807", "9223372036854775808",
         "-9223372036854775808", "-9223372036854775809", "99999999999999999999",
         "18446744073709551616", "1e3", "+1", " 1", "0x10", "", "-", "1h", "-1h", "366d",
         "367d", "999999999999999999d", "-9223372036854775807ms", "%2D1", "1%00"]
NUMERIC = [("/memory/trims", "metric=x", "since"), ("/memory/trims", "", "until"),
           ("/memory/trims", "", "limit"), ("/memory/series", "metric=rss_bytes", "since"),
           ("/memory/series", "metric=rss_bytes", "until"),
           ("/memory/series", "metric=rss_bytes", "step"), ("/memory/trim", "", "pad")]


def cases(demo):
    """(name, raw request, allowed outcomes)."""
    port = demo.port
    c = []
    for path, base, param in NUMERIC:
        base = "" if path == "/memory/trims" else base
        allowed = {200, 400, 429} if path == "/memory/trim" else {200, 400}
        for v in EDGES:
            q = (base + "&" if base else "") + f"{param}={v.replace(' ', '%20')}"
            c.append((f"{path} {param}={v!r}", req(demo, "POST" if path == "/memory/trim" else
                                                    "GET", f"{path}?{q}"), allowed))
    c += [
        # item 2: the series overflow (UB under UBSan; a step above 366 days otherwise)
        ("series since=0 until=INT64_MAX", req(demo, "GET", "/memory/series?metric=rss_bytes"
                                               f"&since=0&until={INT64_MAX}"), {400}),
        ("series near INT64_MAX", req(demo, "GET", "/memory/series?metric=rss_bytes"
                                      f"&since={INT64_MAX - 1000}&until={INT64_MAX}&step=366d"),
         {400}),  # 19 digits: no time (openapi.yaml's TimeParam)
        ("series at the largest time", req(demo, "GET", "/memory/series?metric=rss_bytes"
                                           f"&since={10**18 - 1001}&until={10**18 - 1}&step=366d"),
         {200}),
        # item 6: %00 and bad escapes are a 400, not a truncated value
        ("%00 in a value", req(demo, "GET", "/memory/trims?trigger=manual%00garbage"), {400}),
        ("%00 in the path", req(demo, "GET", "/memory/trim%00"), {400}),
        ("%00 in a name", req(demo, "GET", "/memory/trims?limit%00x=1"), {400}),
        ("bad escape %zz", req(demo, "GET", "/memory/trims?since=%zz"), {400}),
        ("truncated escape", req(demo, "GET", "/memory/trims?since=1%2"), {400}),
        ("bad escape in path", req(demo, "GET", "/memory%2"), {400}),
        ("empty name", req(demo, "GET", "/memory/trims?=1"), {400}),
        ("repeated name", req(demo, "GET", "/memory/trims?limit=1&limit=2"), {400}),
        ("thousands of parameters",
         req(demo, "GET", "/memory/trims?" + "&".join(f"a{i}=1" for i in range(3000))),
         {400, 414, 431, "cut"}),
        ("oversized URL", req(demo, "GET", "/memory/stats?x=" + "a" * 40000), {414, 431, "cut"}),
        ("oversized headers", req(demo, "GET", "/healthz",
                                  {f"X-Pad-{i}": "b" * 500 for i in range(100)}),
         {431, 413, "cut"}),
        ("huge Content-Length", req(demo, "GET", "/healthz", {"Content-Length": "1" * 30}),
         {400, 413, "cut"}),
        ("declared body over the cap",
         req(demo, "PATCH", "/config", {"Content-Length": "100000"}), {413, "cut"}),
        ("nested JSON", req(demo, "PATCH", "/config", {}, b"[" * 30000), {400}),
        ("nested objects", req(demo, "PATCH", "/config", {},
                               b'{"a":' * 10000 + b"1" + b"}" * 10000), {400}),
        # item 5: no client may set an interval that hurts the host
        ("PATCH ManualTrimMinIntervalMs 0",
         req(demo, "PATCH", "/config", {}, b'{"ManualTrimMinIntervalMs": 0}'), {400}),
        ("PATCH StatsMaxAgeMs 0", req(demo, "PATCH", "/config", {}, b'{"StatsMaxAgeMs": 0}'),
         {400}),
        ("PATCH TrimMinGapSeconds 0",
         req(demo, "PATCH", "/config", {}, b'{"TrimMinGapSeconds": 0}'), {400}),
        ("PATCH ProbeBudgetPercent 10",
         req(demo, "PATCH", "/config", {}, b'{"ProbeBudgetPercent": 10}'), {400}),
        # item 6: duplicate keys, NUL and garbage
        ("PATCH duplicate keys", req(demo, "PATCH", "/config", {},
                                     b'{"TrimIntervalSeconds": 60, "TrimIntervalSeconds": 1}'),
         {400}),
        ("PATCH NUL then garbage", req(demo, "PATCH", "/config", {},
                                       b'{"TrimIntervalSeconds": 60}\x00{"x": garbage'), {400}),
        ("PATCH trailing garbage", req(demo, "PATCH", "/config", {},
                                       b'{"TrimIntervalSeconds": 60} x'), {400}),
        ("PATCH 1e999", req(demo, "PATCH", "/config", {}, b'{"TrimIntervalSeconds": 1e999}'),
         {400}),
        ("PATCH 2^63 pad", req(demo, "PATCH", "/config", {},
                               b'{"TrimPadBytes": 9223372036854775808}'), {400}),
        # item 3: cross-site requests to state-changing routes, whatever the method
        ("GET trim, foreign Origin", req(demo, "GET", "/memory/trim",
                                         {"Origin": "http://evil.example"}), {403}),
        ("GET trim, Sec-Fetch-Site cross-site",
         req(demo, "GET", "/memory/trim", {"Sec-Fetch-Site": "cross-site"}), {403}),
        ("GET trim, Sec-Fetch-Site same-site (another local port)",
         req(demo, "GET", "/memory/trim", {"Sec-Fetch-Site": "same-site"}), {403}),
        ("POST trim, Origin on another local port",
         req(demo, "POST", "/memory/trim", {"Origin": f"http://127.0.0.1:{port + 1}"}), {403}),
        ("POST trim, Origin localhost on another port",
         req(demo, "POST", "/memory/trim", {"Origin": "http://localhost:3000"}), {403}),
        ("PATCH, Origin null", req(demo, "PATCH", "/config", {"Origin": "null"},
                                   b'{"TrimIntervalSeconds": 60}'), {403}),
        ("HEAD trim, foreign Origin (HEAD never trims)", req(demo, "HEAD", "/memory/trim",
                                          {"Origin": "http://evil.example"}), {405}),
        ("foreign Host", req(demo, "GET", "/memory/stats", {"Host": "evil.example"}), {403}),
        ("GET trim like curl", req(demo, "GET", "/memory/trim"), {200, 429}),
        ("POST trim from the dashboard's own origin",
         req(demo, "POST", "/memory/trim", {"Origin": f"http://127.0.0.1:{port}",
                                            "Sec-Fetch-Site": "same-origin"}), {200, 429}),
        ("a read from another origin", req(demo, "GET", "/memory/stats",
                                           {"Origin": "http://evil.example"}), {200}),
        # odd requests
        ("unknown method", req(demo, "BREW", "/memory/trim"), {405, 400, 501, "cut"}),
        ("HTTP/0.9", b"GET /healthz\r\n\r\n", {400, 505, "cut"}),
        ("no Host on HTTP/1.1", b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
         {400}),
        ("no Host on an HTTP/1.1 trim", b"POST /memory/trim HTTP/1.1\r\nContent-Length: 0\r\n"
         b"Connection: close\r\n\r\n", {400}),
        ("two Host headers", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example"
         b"\r\nConnection: close\r\n\r\n", {400}),
        ("two Content-Lengths that disagree",
         b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
         b"Content-Length: 27\r\n\r\n{}" + b' "TrimIntervalSeconds": 5}', {400}),
        ("HEAD on a GET route", req(demo, "HEAD", "/memory/stats"), {200}),
        ("absolute-form target", req(demo, "GET", f"http://127.0.0.1:{port}/healthz"),
         {404, 400, 200}),
        ("binary garbage", bytes(range(256)) * 8 + b"\r\n\r\n", {400, "cut"}),
    ]
    return c


@pytest.fixture(scope="module")
def host():
    demo = Demo({"RequestTimeoutSeconds": DEADLINE_S, "SampleIntervalSeconds": 1},
                workers=2, study_mb=8, pause_ms=20, quiet=False, nofile=NOFILE)
    watch = Watch(demo)
    watch.start()
    yield demo, watch
    watch.stop()
    out = demo.output()
    rc = demo.stop()
    assert rc == 0, out[-3000:]
    assert watch.max_fds < NOFILE, f"the host reached {watch.max_fds}/{NOFILE} descriptors"
    assert "RSS -1 MB" not in out, "the host could not open a file"
    assert "runtime error" not in out and "AddressSanitizer" not in out, out[-3000:]


def test_table(host):
    demo, watch = host
    done = studies(demo)
    failures = []
    for name, data, allowed in cases(demo):
        got = send_raw(demo, data)
        if got not in allowed:
            failures.append(f"{name}: got {got}, expected one of {sorted(map(str, allowed))}")
        assert demo.proc.poll() is None, f"the host died at '{name}': {demo.output()[-3000:]}"
    assert not failures, "\n".join(failures)
    # the demo kept working meanwhile, and the configuration holds what the table allowed
    wait_for(lambda: studies(demo) > done, 30, "a study completed")
    cfg = demo.get("/config").json()
    assert cfg["ManualTrimMinIntervalMs"] == 1000 and cfg["StatsMaxAgeMs"] == 1000
    assert watch.max_fds < NOFILE


def test_series_steps_stay_documented(host):
    demo, _ = host
    for since, until in [(0, 10**15), (0, 366 * 86400000 * 300), (10**12, 10**12 + 1)]:
        r = demo.get(f"/memory/series?metric=rss_bytes&since={since}&until={until}")
        assert r.status_code in (200, 400), r.text
        if r.status_code == 200:
            assert 1000 <= r.json()["step_ms"] <= 366 * 86400000


def test_int64_config_values_print_as_integers(host):
    demo, _ = host
    r = demo.request("PATCH", "/config", data=b'{"TrimMinReleasableBytes": 9007199254740992}')
    assert r.status_code == 200, r.text
    text = demo.get("/config").text
    assert '"TrimMinReleasableBytes":9007199254740992' in text.replace(" ", ""), text
    demo.request("PATCH", "/config", data=b'{"TrimMinReleasableBytes": 8388608}')


def test_slow_headers_are_cut_at_the_deadline(host):
    demo, watch = host
    s = connect(demo)
    t0 = time.time()
    line = b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100
    cut_after = None
    for b in line:  # one byte every 0.3 s: never idle, never done
        try:
            s.send(bytes([b]))
        except (BrokenPipeError, ConnectionResetError):
            cut_after = time.time() - t0
            break
        s.settimeout(0.3)
        try:
            if s.recv(1024) == b"":
                cut_after = time.time() - t0
                break
        except socket.timeout:
            pass
        except ConnectionResetError:
            cut_after = time.time() - t0
            break
    s.close()
    assert cut_after is not None, "a slow client kept its connection past every deadline"
    assert cut_after <= DEADLINE_S + SLACK_S, f"cut after {cut_after:.1f} s"


def test_endless_chunked_body_is_cut(host):
    demo, _ = host
    s = connect(demo)
    s.sendall(b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    t0, cut = time.time(), False
    while time.time() - t0 < DEADLINE_S + SLACK_S + 5:
        try:
            s.sendall(b"10\r\n" + b"x" * 16 + b"\r\n")  # slow and endless
        except (BrokenPipeError, ConnectionResetError):
            cut = True
            break
        time.sleep(0.2)
    s.close()
    assert cut and time.time() - t0 <= DEADLINE_S + SLACK_S + 1


def test_fast_huge_chunked_body(host):
    demo, _ = host
    s = connect(demo)
    s.sendall(b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
    try:
        for _ in range(64):  # 4 MB
            s.sendall(chunk)
        s.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert read_reply(s, 15) in (413, "cut")
    s.close()


def test_connection_flood(host):
    """1,100 connections that each send a byte: the host keeps its descriptors, a
    client from another loopback address (the same address to the limits) is
    served, and what the flood still holds is cut at the deadline."""
    demo, watch = host
    done = studies(demo)
    flood = []
    for _ in range(1100):
        try:
            s = connect(demo)
            s.send(b"G")
            flood.append(s)
        except OSError:
            break
    # a flood at all: far past the host's 16 connections (the rest wait or are refused)
    assert len(flood) >= 100, f"only {len(flood)} flood connections opened"
    # The flood's connect()s have returned, but the kernel may still hold some of them:
    # 1,100 may overflow the listen backlog (4096, or net.core.somaxconn if less), and a
    # connection whose handshake's last ACK came while the queue was full is handed to the
    # server later, after ours; those already queued are handed over in rounds. Eight of
    # those (MaxConnectionsPerIp at this RLIMIT_NOFILE) would evict ours as the flood's
    # address does its own (ci failed so: 'cut'). So wait until the kernel holds none.
    wait_for(lambda: kernel_holds(demo.port) == 0, 30,
             "the kernel handed every flood connection to the server")
    # the flood's address is at its share and gives way to a new connection
    other = socket.create_connection(("127.0.0.1", demo.port), timeout=10,
                                     source_address=("127.0.0.2", 0))
    other.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    reply = read_reply(other, 10)
    assert reply == 200, "\n".join(ln for ln in demo.output().splitlines()
                                   if "memtrim/server" in ln)[-2000:]
    other.close()
    # every connection the server took is cut by the deadline (the rest were refused at once)
    def all_closed():
        for s in flood:
            s.settimeout(0.001)
            try:
                if s.recv(1) != b"":
                    return False
            except socket.timeout:
                return False
            except OSError:
                pass
        return True
    wait_for(all_closed, DEADLINE_S + SLACK_S + 5, "the flood's connections closed")
    for s in flood:
        s.close()
    wait_for(lambda: studies(demo) > done, 30, "a study completed during the flood")
    assert watch.max_fds < NOFILE // 2, f"{watch.max_fds} descriptors at the flood's height"
    stats = demo.get("/memory/stats").json()
    assert stats["probe_error"] is None and stats["rss_bytes"] > 0


# ---- connection limits (hosts of their own, at the common RLIMIT_NOFILE) ----

LIMITS_NOFILE = 1024  # memtrim's share: 128 connections, 96 waiting per address
# The most descriptors a flood may add there: 128 open plus 16 + 10 per HTTP thread
# closing (MaxConnections' share of 1024 and its slack, server_limits).
LIMITS_FDS_ADDED = 128 + 16 + 20 + 4


PROBE = r"""
import socket, sys, time
port, src = int(sys.argv[1]), sys.argv[2]
def healthz_ok():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1.0, source_address=(src, 0))
    except OSError:
        return False
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.startswith(b"HTTP/1.1 200")
    except OSError:
        return False
    finally:
        s.close()
sys.stdout.write("ready\n"); sys.stdout.flush()
last = time.monotonic(); longest = 0.0; answers = 0
import select
while True:
    if select.select([sys.stdin], [], [], 0.01)[0]:
        line = sys.stdin.readline().strip()
        if line != "count":  # "stop", or the test's end of input
            break
        sys.stdout.write(f"{answers}\n"); sys.stdout.flush()
    if healthz_ok():
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
        answers += 1
longest = max(longest, time.monotonic() - last)
print(longest, answers)
"""


class Reachability:
    """Asks /healthz from src over and over (a new connection each, 1 s
    timeout) and keeps the longest time without an answer. It runs in a
    process of its own: as a thread it shared the interpreter's lock with the
    test's flood loop, and under load the gaps it measured were partly its
    own waits for that lock (a connect took 0.46 s beside five busy loops
    while the server answered in 1 ms)."""

    def __init__(self, port, src="127.0.0.1"):
        self.port, self.src = port, src
        self.longest, self.answers = 0.0, 0
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE, str(self.port), self.src],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def count(self):
        """The answers so far."""
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def observe(self, answers, what):
        """Wait for `answers` more answers (the observation window is answers, not time: a
        server that stops answering holds the wait, and its gap shows in `longest`)."""
        target = self.count() + answers
        wait_for(lambda: self.count() >= target, 60, f"{answers} /healthz answers {what}")

    def stop(self):
        out, _ = self.proc.communicate(input="stop\n", timeout=30)
        longest, answers = out.split()
        self.longest, self.answers = float(longest), int(answers)


def log_lines(demo):
    return len(demo.output().splitlines())


def test_half_bodies_closed_with_fin_leave_the_api_reachable():
    """Issue 24, item 5: 200 PATCHes that send half their body and close (FIN)
    made /healthz unreachable from 127.0.0.1 for 10 s (they held the address's
    share until the request deadline; libmicrohttpd never saw the FIN). Now
    each new connection takes a half-sent one's place: never a second without
    an answer, and a few log lines, not one per connection."""
    demo = Demo({}, workers=1, study_mb=1, pause_ms=1000, quiet=False, nofile=LIMITS_NOFILE)
    try:
        before = log_lines(demo)
        probe = Reachability(demo.port)
        probe.start()
        body = b'{"TrimIntervalSeconds": 777}'
        for round_ in range(3):
            for i in range(200):
                src = "127.0.0.1" if i % 2 == 0 else f"127.0.0.{2 + i % 50}"
                s = connect(demo, src)
                s.sendall(b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
                s.close()  # FIN with half the body sent
            probe.observe(5, f"after round {round_ + 1}")
        # The server has met the flood: past the address's share the half-sent ones gave
        # way (or, the defect, were refused); then 30 answers beside what the flood left.
        wait_for(lambda: "took the place of one waiting" in demo.output() or
                 "refused a connection" in demo.output(), 60,
                 "the server's line on the half-sent connections")
        probe.observe(30, "after the flood")
        probe.stop()
        assert probe.answers > 10
        assert probe.longest < 1.0, f"/healthz went {probe.longest:.2f} s without an answer"
        added = log_lines(demo) - before
        assert added <= 15, demo.output().splitlines()[before:][:40]
        assert demo.get("/config").json()["TrimIntervalSeconds"] != 777
    finally:
        assert demo.stop() == 0


def test_loopback_aliases_are_one_address():
    """Half-open connections spread over 127.0.0.2-127.0.0.41 (each alias
    under any per-address share) count as one address: the host's descriptors
    stay within memtrim's share, /healthz from 127.0.0.1 keeps answering, and
    the eviction's log line names the address as loopback."""
    demo = Demo({}, workers=1, study_mb=1, pause_ms=1000, quiet=False, nofile=LIMITS_NOFILE)
    watch = Watch(demo)
    watch.start()
    flood = []
    try:
        base_fds = len(os.listdir(f"/proc/{demo.proc.pid}/fd"))
        probe = Reachability(demo.port)
        probe.start()
        overflows = listen_overflows()
        for i in range(400):
            try:
                s = connect(demo, f"127.0.0.{2 + i % 40}")
                s.sendall(b"GET /memory/stats HTTP/1.1\r\nX-Slow: ")
                flood.append(s)
            except OSError:
                pass
        # The server has taken the flood in (it evicts past the loopback share, or refuses,
        # the defect), then 30 answers while the half-open connections are held.
        wait_for(lambda: "waiting from loopback of MaxConnectionsPerIp" in demo.output() or
                 "refused a connection" in demo.output(), 60,
                 "the server's line on the flood from the loopback aliases")
        probe.observe(30, "while the flood is held")
        probe.stop()
        # A gap of just over 1 s is a SYN the kernel dropped and resent 1 s later (ci saw
        # 1.02 s twice with a 256-deep listen backlog): the message says if it was that.
        assert probe.longest < 1.0, (f"/healthz went {probe.longest:.2f} s without an answer; "
                                     f"{listen_overflows() - overflows} SYNs dropped meanwhile "
                                     f"on a full accept queue")
        assert watch.max_fds - base_fds <= LIMITS_FDS_ADDED, (watch.max_fds, base_fds)
        out = demo.output()
        assert "waiting from loopback of MaxConnectionsPerIp 96" in out, out[-3000:]
    finally:
        for s in flood:
            s.close()
        watch.stop()
        assert demo.stop() == 0


def test_a_burst_while_the_host_is_stopped_waits_in_the_kernel():
    """400 connections that arrive while the host is off the CPU (here stopped
    with SIGSTOP; a busy or descheduled host for a few ms is the same to the
    kernel) wait in the listening socket's queue, none dropped: with a 256-deep
    backlog the kernel dropped the 257th SYN, and a client then waited 1 s for
    its retransmission (ci: /healthz 1.02 s without an answer beside a flood).
    Once the host runs again it answers /healthz and sheds the burst within
    memtrim's share of descriptors."""
    with open("/proc/sys/net/core/somaxconn") as f:
        somaxconn = int(f.read())
    if somaxconn < 512:
        pytest.skip(f"net.core.somaxconn is {somaxconn}: the kernel caps the backlog below 400")
    demo = Demo({}, workers=1, study_mb=1, pause_ms=1000, quiet=False, nofile=LIMITS_NOFILE)
    watch = Watch(demo)
    watch.start()
    flood = []
    stopped = False
    try:
        base_fds = len(os.listdir(f"/proc/{demo.proc.pid}/fd"))
        assert demo.get("/healthz").status_code == 200
        overflows = listen_overflows()
        os.kill(demo.proc.pid, signal.SIGSTOP)
        stopped = True
        wait_for(lambda: all_threads_stopped(demo.proc.pid), 10, "the host's threads stopped")
        for i in range(400):
            # A dropped SYN is resent after 1 s and again after 3 s: a 5 s connect times
            # out only if the queue is full (the host is stopped; nothing drains it).
            try:
                s = connect(demo, f"127.0.0.{2 + i % 40}", timeout=5)
            except OSError as e:
                raise AssertionError(f"connection {i + 1} of 400 to the stopped host: {e} "
                                     f"({listen_overflows() - overflows} SYNs dropped on a "
                                     f"full accept queue)")
            s.sendall(b"GET /memory/stats HTTP/1.1\r\nX-Slow: ")
            flood.append(s)
        # All 400 settle in the accept queue. The wait is for the last handshakes: the
        # client's connect returns before the kernel has moved the server's side from
        # SYN_RECV into the queue, and a read of /proc/net/tcp meanwhile can miss one.
        held = []
        try:
            wait_for(lambda: held.append(kernel_holds(demo.port)) or held[-1] == 400, 10,
                     "the kernel holding all 400")
        except AssertionError as e:
            raise AssertionError(f"{e}: it holds {held[-1]}, "
                                 f"{listen_overflows() - overflows} SYNs dropped") from None
        os.kill(demo.proc.pid, signal.SIGCONT)
        stopped = False
        wait_for(lambda: kernel_holds(demo.port) == 0, 30,
                 "the kernel handed the burst to the host")
        assert demo.get("/healthz", timeout=10).status_code == 200, demo.output()[-3000:]
        assert watch.max_fds - base_fds <= LIMITS_FDS_ADDED, (watch.max_fds, base_fds)
    finally:
        if stopped:
            os.kill(demo.proc.pid, signal.SIGCONT)
        for s in flood:
            s.close()
        watch.stop()
        assert demo.stop() == 0


def recv_reply(s):
    """One whole reply on a kept-alive socket: its status, or raises."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the server")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int([ln.split(b":", 1)[1] for ln in head.split(b"\r\n")
                  if ln.lower().startswith(b"content-length:")][0])
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-reply")
        rest += chunk
    assert len(rest) == length, "more than one reply"
    return int(head.split()[1])


def test_64_keepalive_clients_behind_one_address_beside_a_flood():
    """Issue 24, item 8: 64 kept-alive clients behind one address (wrk -c64, a
    reverse proxy, NAT) were refused from the 33rd connection on. Now all 64
    are served on their own connections, request after request, while a flood
    of half-open connections from the same address (and its aliases) comes and
    goes beside them: the flood displaces its own connections, never theirs."""
    demo = Demo({}, workers=1, study_mb=1, pause_ms=1000, quiet=False, nofile=LIMITS_NOFILE)
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    errors, served = [], [0]
    lock = threading.Lock()
    first_round = threading.Barrier(65)
    stop = threading.Event()

    def client(i):
        s = connect(demo)
        try:
            for n in range(40):
                s.sendall(request)
                status = recv_reply(s)
                if status != 200:
                    raise AssertionError(f"status {status}")
                with lock:
                    served[0] += 1
                if n == 0:
                    first_round.wait(30)
                time.sleep(0.005)
        except Exception as e:  # noqa: BLE001 - every failure is the test's finding
            with lock:
                errors.append(f"client {i}: {e!r}")
            if n == 0:
                first_round.abort()
        finally:
            s.close()

    def flood():
        socks = []
        i = 0
        while not stop.is_set():
            try:
                s = connect(demo, "127.0.0.1" if i % 2 else f"127.0.0.{2 + i % 30}")
                s.sendall(b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Length: 100\r\n\r\n{")
                socks.append(s)
            except OSError:
                pass
            i += 1
            if len(socks) > 300:
                for old in socks[:100]:
                    old.close()
                del socks[:100]
        for s in socks:
            s.close()

    try:
        clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(64)]
        for t in clients:
            t.start()
        first_round.wait(30)  # every client has been served once on its connection
        flooder = threading.Thread(target=flood, daemon=True)
        flooder.start()
        for t in clients:
            t.join(120)
        stop.set()
        flooder.join(30)
        assert not errors, errors[:10]
        assert served[0] == 64 * 40
        assert "took the place of one waiting on its first request" in demo.output()
        assert "idle after a request" not in demo.output()
    finally:
        stop.set()
        assert demo.stop() == 0


# ---- hosts of their own ----------------------------------------------------

def test_network_bind_without_token_is_refused():
    with pytest.raises(RuntimeError) as e:
        Demo({"HttpBind": "0.0.0.0"}, workers=1, study_mb=1, pause_ms=1000)
    assert "AllowUnauthenticatedRemote" in str(e.value)
    d = Demo({"HttpBind": "0.0.0.0", "AllowUnauthenticatedRemote": True}, workers=1, study_mb=1,
             pause_ms=1000)
    try:
        assert "reachable from other machines without a token" in d.output()
    finally:
        assert d.stop() == 0
    d = Demo({"HttpBind": "0.0.0.0", "AuthToken": "t0k"}, workers=1, study_mb=1, pause_ms=1000)
    try:
        assert "without a token" not in d.output()
    finally:
        assert d.stop() == 0


def test_token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text("f1le-t0ken\n")
    path.chmod(0o644)
    with pytest.raises(RuntimeError) as e:
        Demo({"AuthTokenFile": str(path)}, workers=1, study_mb=1, pause_ms=1000)
    assert "chmod 600" in str(e.value)
    path.chmod(0o600)
    d = Demo({"AuthTokenFile": str(path)}, workers=1, study_mb=1, pause_ms=1000)
    try:
        assert d.request("POST", "/memory/trim").status_code == 401
        # the scheme is case-insensitive and spaces after it are skipped (documented)
        r = d.request("POST", "/memory/trim", headers={"Authorization": "bearer    f1le-t0ken"})
        assert r.status_code == 200, r.text
        assert d.get("/config").json()["AuthToken"] == "<redacted>"
        assert "f1le-t0ken" not in d.output()
    finally:
        assert d.stop() == 0


def test_store_refuses_what_is_not_a_regular_file(tmp_path):
    target = tmp_path / "elsewhere.sqlite"
    link = tmp_path / "link.sqlite"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.sqlite"
    os.mkfifo(fifo)
    paths = [link, fifo]
    if os.geteuid() == 0 and os.path.exists("/dev/full"):
        paths.append(Path("/dev/full"))
    for p in paths:
        d = Demo({"Database": str(p)}, workers=1, study_mb=1, pause_ms=1000)
        try:
            h = d.get("/healthz").json()
            assert h["status"] == "degraded" and "regular file" in h["reason"], h
        finally:
            assert d.stop() == 0
        assert not os.path.exists(str(p) + "-journal") and not os.path.exists(str(p) + "-wal")
    assert not target.exists()


def test_deleted_database_is_noticed_and_reopened(tmp_path):
    db = tmp_path / "store.sqlite"
    d = Demo({"Database": str(db), "SampleIntervalSeconds": 1}, workers=1, study_mb=1,
             pause_ms=1000)
    try:
        wait_for(db.exists, 10, "the store file")
        db.unlink()
        seen = []

        def reported():
            h = d.get("/healthz").json()
            seen.append(h)
            return "deleted" in h["reason"]
        wait_for(reported, 15, "/healthz reporting the deleted file")
        wait_for(lambda: db.exists() and d.get("/healthz").json()["status"] == "ok", 15,
                 "the store reopened at its path")
        wait_for(lambda: d.get("/memory/series?metric=rss_bytes&since=-1m").json()["buckets"],
                 15, "new samples in the new file")
    finally:
        assert d.stop() == 0


def test_trim_heap_readings_spend_the_probe_budget():
    d = Demo({"ManualTrimMinIntervalMs": 0, "ProbeBudgetPercent": 0.001,
              "TrimIntervalSeconds": 0}, workers=1, study_mb=8, pause_ms=1000)
    try:
        first = d.request("POST", "/memory/trim").json()
        second = d.request("POST", "/memory/trim").json()
        # the first trim's two mallinfo2 calls cost ~100000 times themselves at 0.001 %
        assert second["heap_free_before_bytes"] is None, (first, second)
        assert second["heap_free_after_bytes"] is None
        assert second["rss_after_bytes"] > 0
    finally:
        assert d.stop() == 0


# ---- issue 24: PATCHes that must not hurt the host ----------------------------

MIB = 1 << 20


def vm_hwm(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def module_lines(demo, *modules):
    return [ln for ln in demo.output().splitlines()
            if any(ln.startswith(f"memtrim/{m}:") for m in modules)]


def test_200_patches_give_a_few_log_lines(start_demo):
    """Each applied tunable logged a line, 200 PATCHes 200 lines (finding 6): now one
    PATCH line and one tunables line per 10 s, the rest counted."""
    d = start_demo({}, workers=1, study_mb=1, pause_ms=1000)
    before = len(module_lines(d, "config", "tunables"))
    t0 = time.monotonic()
    for i in range(200):
        body = {"TrimIntervalSeconds": 30 + i % 2,
                "MallocMmapThresholdBytes": (1 + i % 2) * MIB}
        r = d.request("PATCH", "/config", json=body)
        assert r.status_code == 200, r.text
    for i in range(50):  # refused ones: no line at all
        r = d.request("PATCH", "/config", json={"MemoryLimitBytes": 1})
        assert r.status_code == 400, r.text
    seconds = time.monotonic() - t0
    lines = module_lines(d, "config", "tunables")[before:]
    allowed = 2 * (1 + int(seconds // 10))
    assert len(lines) <= allowed, f"{len(lines)} lines in {seconds:.1f} s:\n" + "\n".join(lines)
    assert d.get("/config").json()["MallocMmapThresholdBytes"] == 2 * MIB


HOSTILE_PATCHES = [
    ({"MemoryLimitBytes": 1}, "MemoryLimitBytes"),          # the audit's trim storm
    ({"MemoryLimitBytes": 8 * MIB}, "MemoryLimitBytes"),
    ({"PressureRatio": 0.1}, "PressureRatio"),
    ({"MallocTrimThresholdBytes": 2**31 - 1}, "MallocTrimThresholdBytes"),  # 840 MB kept
    ({"MallocTopPadBytes": 2**31 - 1}, "MallocTopPadBytes"),
    ({"MallocTopPadBytes": 32 * MIB, "TrimIntervalSeconds": 0}, "TrimIntervalSeconds"),
    ({"TrimBudgetPercent": 100}, "TrimBudgetPercent"),
    ({"TrimIntervalSeconds": 1}, "TrimIntervalSeconds"),      # a trim a second: x0.8-0.9
    ({"TrimMinGapSeconds": 1}, "TrimMinGapSeconds"),
    ({"TrimMinReleasableBytes": 0}, "TrimMinReleasableBytes"),
    ({"RetentionHours": 87600}, "RetentionHours"),
    ({"TrimPadBytes": 2**53}, "TrimPadBytes"),
]


def hostile_patches(d):
    """Every hostile PATCH is a 400 that names the key; deep bodies too."""
    for body, key in HOSTILE_PATCHES:
        r = d.request("PATCH", "/config", json=body)
        assert r.status_code == 400 and key in r.json()["error"]["message"], (body, r.text)
    for deep in (b"[" * 999 + b"]" * 999, b'{"a":' * 999 + b"1" + b"}" * 999):
        r = d.request("PATCH", "/config", data=deep)
        assert r.status_code == 400 and "deeper than 32" in r.json()["error"]["message"], r.text
    # below twice the process's peak RSS: refused however sane it looks
    peak = vm_hwm(d.proc.pid)
    r = d.request("PATCH", "/config", json={"MemoryLimitBytes": max(16 * MIB, peak)})
    assert r.status_code == 400 and "twice this process's peak RSS" in r.text, r.text


def floors(d):
    """The most aggressive configuration a client may set."""
    return {"MemoryLimitBytes": 2 * vm_hwm(d.proc.pid) + 16 * MIB, "PressureRatio": 0.5,
            "TrimIntervalSeconds": 5, "TrimMinReleasableBytes": MIB,
            "TrimReleasableTriggerBytes": MIB, "TrimMinGapSeconds": 5,
            "ProbeBudgetPercent": 1, "StatsMaxAgeMs": 100, "TrimBudgetPercent": 2,
            "SampleIntervalSeconds": 1, "TrimBusyCpuPercent": 100,
            "MallocTrimThresholdBytes": 32 * MIB, "MallocTopPadBytes": 32 * MIB}


def trims_total(d):
    """Trims the host ran so far, every trigger (its /metrics)."""
    return sum(metric_value(d.get("/metrics").text, "memtrim_trims_total", f'trigger="{t}"')
               for t in ("manual", "periodic", "pressure", "burst"))


# Slices of the floors test: one measurement of this many, judged once (no second chance).
PATCH_ROUNDS = 6


def test_no_accepted_patch_cuts_throughput(start_demo):
    """The demo beside a control host (the soak's measurement: workers pinned, slices
    interleaved, the pair's ratio without the PATCH as the correction): under the most
    aggressive configuration PATCH accepts, the host keeps >= 0.9 of its throughput, in
    one measurement of PATCH_ROUNDS slices each way (the floors' figures read 1.01-1.04,
    benchmarks.md "PATCH bounds": the margin is the 10 %); the floors make it trim in their
    slices (else they measured nothing aggressive); the audit's PATCHes (MemoryLimitBytes 1
    cut it to x0.23) are refused."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "soak"))
    from soak import pin_workers, throughput_ratio, window
    workload = dict(workers=2, study_mb=64, pause_ms=0, quiet=False)
    host = start_demo({"Database": ""}, **workload)
    control = start_demo({"Database": ""}, **workload)
    cpus = sorted(os.sched_getaffinity(0))
    for d in (host, control):
        pin_workers(d, cpus, workload["workers"])
    wait_for(lambda: studies(host) > 20 and studies(control) > 20, 30, "both hosts working")
    hostile_patches(host)
    defaults = {k: control.get("/config").json()[k] for k in floors(host)}
    defaults["MallocTrimThresholdBytes"] = defaults["MallocTopPadBytes"] = 131072
    totals = [0, 0, 0, 0]
    slices = []
    floor_trims = 0
    for _ in range(PATCH_ROUNDS):
        r = host.request("PATCH", "/config", json=defaults)
        assert r.status_code == 200, r.text
        window([host, control], 1)
        b, bc = window([host, control], 5)
        r = host.request("PATCH", "/config", json=floors(host))
        assert r.status_code == 200, r.text
        window([host, control], 1)
        before = trims_total(host)
        p, pc = window([host, control], 5)
        floor_trims += trims_total(host) - before
        totals = [t + x for t, x in zip(totals, (b, bc, p, pc))]
        slices.append(f"{b}/{bc} {p}/{pc}")
    ratio = throughput_ratio(*totals)
    print(f"\nPATCH floors: slices host/control (defaults, floors): {', '.join(slices)}: "
          f"ratio {ratio:.4f}, {floor_trims:.0f} trims under the floors; "
          f"load {open('/proc/loadavg').read().split()[:3]}")
    assert ratio >= 0.9, f"throughput ratio {ratio:.4f} under the PATCH floors ({slices})"
    assert floor_trims >= 1, "no trim in the floors' slices: they measured nothing aggressive"


def test_raised_tunables_need_periodic_trims(tmp_path):
    """The audit's 2 GiB trim threshold and top pad kept the demo at its 840 MB peak after
    the workload (3 MB without memtrim). They are refused; what PATCH may set (32 MiB,
    with periodic trims) leaves the host within a few MB of the run without memtrim.
    The workload lasts a few seconds (400 studies): periodic trims run while the host works,
    their releases come straight back and lengthen the gap (x32), and the heap the host
    leaves free when it goes quiet must still go back within the base interval. With 16
    studies this held only where the workload ended before the first trim; CI's slower
    machine found 132 MB (what 400 studies show on the code before the fix, every run)."""
    import subprocess
    from conftest import BUILD, find_lib

    def run(*extra):
        out = subprocess.run([str(BUILD / "memtrim-demo"), "--workers", "4", "--study-mb", "100",
                              "--keep-percent", "0", "--pause-ms", "0", "--studies", "400",
                              "--linger", "3", "--quiet", "--lib", str(find_lib()), *extra],
                             capture_output=True, text=True, timeout=600).stdout  # a hang guard: 120 s ran out at load 20 (r12)
        line = [ln for ln in out.splitlines() if "RSS now" in ln]
        assert line, out[-2000:]
        return int(line[0].rsplit("RSS now", 1)[1].split()[0])

    for key in ("MallocTrimThresholdBytes", "MallocTopPadBytes"):  # the audit's, at start
        bad = subprocess.run([str(BUILD / "memtrim-demo"), "--studies", "1", "--study-mb", "1",
                              "--lib", str(find_lib()), "--config",
                              json.dumps({"HttpPort": 0, "Database": "", key: 2**31 - 1})],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and f"{key}: 2147483647 is out of range" in bad.stderr, \
            bad.stderr[-2000:]
    without = run("--no-memtrim")
    cfg = {"HttpPort": 0, "Database": "", "PressureRatio": 0, "TrimReleasableTriggerBytes": 0,
           "TrimIntervalSeconds": 1, "MallocTrimThresholdBytes": 32 * MIB,
           "MallocTopPadBytes": 32 * MIB}
    raised = run("--config", json.dumps(cfg))
    print(f"\nRSS after the workload: {without} MB without memtrim, {raised} MB with 32 MiB "
          "tunables and periodic trims")
    assert raised <= without + 16, (raised, without)


def test_store_replaced_by_rename_is_left_alone(tmp_path):
    """`mv backup.sqlite memtrim.sqlite` while the host runs (finding 4): /healthz went
    back to ok and at stop the file held the old store's rows, the backup's were gone;
    a file that is no database moved into place became one. Now the store stops writing,
    /healthz says degraded and why, and the file moved in is left as it was."""
    import sqlite3
    db = tmp_path / "memtrim.sqlite"
    backup = tmp_path / "backup.sqlite"
    with sqlite3.connect(backup) as c:  # a backup: an earlier store's copy
        c.execute("CREATE TABLE kept (n INTEGER)")
        c.executemany("INSERT INTO kept VALUES (?)", [(i,) for i in range(123)])
    c.close()
    d = Demo({"Database": str(db), "SampleIntervalSeconds": 1, "ManualTrimMinIntervalMs": 0},
             workers=1, study_mb=4, pause_ms=100)
    try:
        wait_for(lambda: d.get("/memory/series?metric=rss_bytes&since=-1m").json()["buckets"],
                 15, "samples in the store")
        os.rename(backup, db)
        for _ in range(3):
            d.request("POST", "/memory/trim")  # rows that must not reach the backup

        def degraded():
            h = d.get("/healthz").json()
            return h["status"] == "degraded" and h["database"] == "replaced" and h
        h = wait_for(degraded, 15, "/healthz reporting the replaced file")
        assert "replaced by another file" in h["reason"], h
        r = d.get("/memory/trims")
        assert r.status_code == 503 and "replaced" in r.text, r.text
        assert d.get("/healthz").json()["database"] == "replaced"  # for good
    finally:
        assert d.stop() == 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert names == {"kept"}, names
        assert c.execute("SELECT count(*) FROM kept").fetchone()[0] == 123
    c.close()

    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"an operator's notes, not a database\n" * 300)
    db2 = tmp_path / "other.sqlite"
    d = Demo({"Database": str(db2), "SampleIntervalSeconds": 1}, workers=1, study_mb=4,
             pause_ms=100)
    try:
        wait_for(lambda: d.get("/memory/series?metric=rss_bytes&since=-1m").json()["buckets"],
                 15, "samples in the store")
        before = notes.read_bytes()
        os.rename(notes, db2)
        wait_for(lambda: d.get("/healthz").json()["database"] == "replaced", 15,
                 "/healthz reporting the replaced file")
    finally:
        assert d.stop() == 0
    assert db2.read_bytes() == before
    with pytest.raises(sqlite3.DatabaseError):
        with sqlite3.connect(f"file:{db2}?mode=ro", uri=True) as c:
            c.execute("SELECT count(*) FROM samples").fetchone()



def test_stored_rows_near_the_ends(tmp_path):
    """#31 F6 (the SQL part) and F7, as a restarted host meets them: a member of a group may
    report 2^56 released bytes per trim and could send any trim id, and the leader stored
    them. 200 such rows made every /memory/trims a 500 for good (sum(): integer overflow),
    and an id of INT64_MAX - 1 made the next id overflow after a restart (negative ids; UBSan
    aborted the host). Now the sums saturate and the ids stay in [1, 2^53 - 1]."""
    import sqlite3
    db = tmp_path / "m.sqlite"
    cfg = {"Database": str(db), "ManualTrimMinIntervalMs": 0, "TrimIntervalSeconds": 0}
    d = Demo(cfg, workers=1, study_mb=1, pause_ms=1000)  # makes the schema
    assert d.stop() == 0
    con = sqlite3.connect(db)
    t0 = int(time.time() * 1000) - 600_000  # within RetentionHours
    rows = [(t0 + i, 1, 1000, 5 << 56, 4 << 56, 1 << 56, 1, t0 + i) for i in range(200)]
    rows.append((t0 + 500, 0, 1000, 5000, 3000, 2000, 1, 2 ** 63 - 2))
    con.executemany("INSERT INTO trims (start_ms, trigger, duration_ns, rss_before_bytes,"
                    " rss_after_bytes, released_bytes, malloc_trim_ret, seq)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    d = Demo(cfg, workers=1, study_mb=1, pause_ms=1000)
    try:
        r = d.get("/memory/trims?limit=5")
        assert r.status_code == 200, r.text
        summary = r.json()["summary"]
        assert summary["count"] == 201 and summary["released_bytes"] == 2 ** 63 - 1, summary
        ids = []
        for _ in range(3):
            t = d.request("POST", "/memory/trim")
            assert t.status_code == 200, t.text
            ids.append(t.json()["id"])
        assert all(0 < i <= 2 ** 53 - 1 for i in ids) and ids == sorted(set(ids)), ids
    finally:
        out = d.output()
        assert d.stop() == 0, out[-2000:]
    assert "runtime error" not in out, out[-2000:]
