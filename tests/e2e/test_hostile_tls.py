"""The hostile cases against the TLS listener (HttpsCertificate): slow handshakes at the
descriptor limit, garbage instead of a ClientHello, TLS renegotiation (openssl s_client's
"R"). The host keeps its descriptors (a soft RLIMIT_NOFILE of 256: 16 connections, 8 per
address), keeps its own work going (its studies complete) and serves a TLS client from
another address throughout; every hostile connection is closed by the request deadline
(RequestTimeoutSeconds 3), which counts the handshake too."""
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Demo
from hosts_util import read_to_close
from test_hostile import NOFILE, DEADLINE_S, SLACK_S, Watch, studies, wait_for
from tls_util import CA

OPENSSL = shutil.which("openssl")


@pytest.fixture(scope="module")
def tls_host(tmp_path_factory):
    ca = CA(tmp_path_factory.mktemp("pki"))
    cert, key = ca.issue("localhost")
    demo = Demo({"RequestTimeoutSeconds": DEADLINE_S, "SampleIntervalSeconds": 1,
                 "HttpsCertificate": str(cert), "HttpsPrivateKey": str(key)},
                workers=2, study_mb=8, pause_ms=20, quiet=False, nofile=NOFILE, ca=ca.pem)
    watch = Watch(demo)
    watch.start()
    yield demo, watch, ca
    watch.stop()
    out = demo.output()
    rc = demo.stop()
    assert rc == 0, out[-3000:]
    assert watch.max_fds < NOFILE, f"the host reached {watch.max_fds}/{NOFILE} descriptors"
    assert "runtime error" not in out and "AddressSanitizer" not in out, out[-3000:]


def served_over_tls(demo, ca, src="127.0.0.2"):
    """A TLS client from another address gets /healthz (a new connection); False when the
    connection is refused or reset."""
    try:
        return _served_over_tls(demo, ca, src)
    except (ConnectionError, ssl.SSLError, socket.timeout):
        return False


def _served_over_tls(demo, ca, src):
    ctx = ssl.create_default_context(cafile=str(ca.pem))
    with socket.create_connection(("127.0.0.1", demo.port), timeout=10,
                                  source_address=(src, 0)) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = read_to_close(s)
    return data.startswith(b"HTTP/1.1 200")


def keepalive_client(demo, ca):
    """A kept-alive TLS connection from 127.0.0.2, opened now."""
    import http.client
    ctx = ssl.create_default_context(cafile=str(ca.pem))
    c = http.client.HTTPSConnection("localhost", demo.port, timeout=10, context=ctx,
                                    source_address=("127.0.0.2", 0))
    c.connect()
    return c


def keepalive_rate(c, seconds):
    """Requests per second on the kept-alive connection c (GET /healthz). A connection the
    server gives away to a newer one (every loopback address is one address; past the limits
    an idle kept-alive connection may make room, as server/ documents) is reopened, as
    Prometheus would."""
    import http.client
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        try:
            c.request("GET", "/healthz")
            r = c.getresponse()
            r.read()
        except (http.client.HTTPException, ConnectionError, ssl.SSLError):
            c.close()
            c.connect()
            continue
        assert r.status == 200
        n += 1
    return n / (time.time() - t0)


def mhd_cpu_seconds(demo):
    """CPU time of the host's libmicrohttpd threads so far, to the nanosecond (schedstat's
    time on the CPU: a short window measures as well as a long one)."""
    total = 0
    for task in Path(f"/proc/{demo.proc.pid}/task").iterdir():
        try:
            if not (task / "comm").read_text().startswith("MHD"):
                continue
            total += int((task / "schedstat").read_text().split()[0])
        except OSError:
            continue
    return total / 1e9


def closed(s):
    s.settimeout(0.001)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_slow_handshakes_at_the_descriptor_limit(tls_host):
    """1,100 connections that send the first bytes of a ClientHello and stall."""
    demo, watch, ca = tls_host
    client = keepalive_client(demo, ca)  # opened before the flood, as Prometheus's would be
    before = keepalive_rate(client, 1.0)
    done = studies(demo)
    hello_start = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a record header, then stall
    flood = []
    for _ in range(1100):
        try:
            s = socket.create_connection(("127.0.0.1", demo.port), timeout=10)
            s.send(hello_start)
            flood.append(s)
        except OSError:
            break
    # The connections past the limits are refused; those it took (and the kernel's backlog)
    # stall their handshake.
    held = [s for s in flood if not closed(s)]
    # They cost the server nothing while they wait (libmicrohttpd's epoll spun on them:
    # about 0.15 s of CPU a second for 20; poll, which the TLS daemon uses, none).
    # The window: while the host completes 30 studies of its own (its work goes on; no
    # request of ours costs the server CPU meanwhile), not a fixed sleep.
    c0, t0, base = mhd_cpu_seconds(demo), time.time(), studies(demo)
    wait_for(lambda: studies(demo) >= base + 30, 60, "30 studies of the host's beside the flood")
    window = time.time() - t0
    spin = (mhd_cpu_seconds(demo) - c0) / window
    print(f"libmicrohttpd threads: {spin:.3f} s of CPU a second with {len(held)} stalled handshakes"
          f" (over {window:.2f} s)")
    assert spin < 0.05, f"{spin:.3f} s of CPU a second for {len(held)} stalled handshakes"
    wait_for(lambda: served_over_tls(demo, ca), 10, "a client from another address served")
    during = keepalive_rate(client, 1.0)  # within the deadline: the flood still holds
    client.close()
    print(f"kept-alive TLS client: {before:.0f} req/s before, {during:.0f} req/s while "
          f"{len(held)} stalled handshakes hold their connections")
    # The kept-alive client is served throughout. Its rate is printed, not bounded: on the
    # shared 2-core machine it swung 0.1x-2.8x between runs either way; what the flood could
    # take from the host is CPU, and that is bounded above (0 s a second).
    assert during > 0, (before, during)
    wait_for(lambda: all(closed(s) for s in flood), DEADLINE_S + SLACK_S + 5,
             "the stalled handshakes closed")
    for s in flood:
        s.close()
    wait_for(lambda: studies(demo) > done, 30, "a study completed during the flood")
    assert watch.max_fds < NOFILE // 2, f"{watch.max_fds} descriptors at the flood's height"
    wait_for(lambda: served_over_tls(demo, ca, src="127.0.0.1"), 10, "the flood's address served")


def test_garbage_instead_of_a_client_hello(tls_host):
    demo, watch, ca = tls_host
    done = studies(demo)
    payloads = [os.urandom(517), b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n",
                b"\x16\x03\x01\x00\x05" + b"\x01\x00\x00\x01\x00",  # a ClientHello too short
                b"\x16\x03\x03\xff\xff" + os.urandom(300),         # a record longer than sent
                b"\x15\x03\x03\x00\x02\x02\x28",                   # an alert first
                b"\x00" * 2048]
    t0 = time.time()
    for round_ in range(3):
        socks = []
        for p in payloads:
            s = socket.create_connection(("127.0.0.1", demo.port), timeout=10)
            try:
                s.sendall(p)
            except OSError:
                pass
            socks.append(s)
        wait_for(lambda: all(closed(s) for s in socks), DEADLINE_S + SLACK_S + 5,
                 f"round {round_}: every garbage connection closed")
        for s in socks:
            s.close()
    wait_for(lambda: served_over_tls(demo, ca), 10, "a TLS client served after the garbage")
    wait_for(lambda: studies(demo) > done, 30, "a study completed meanwhile")
    assert watch.max_fds < NOFILE // 2, watch.max_fds
    assert time.time() - t0 < 3 * (DEADLINE_S + SLACK_S + 5)


@pytest.mark.skipif(OPENSSL is None, reason="openssl is needed")
def test_renegotiation_is_refused(tls_host):
    """A client that asks to renegotiate (TLS 1.2) gets its connection closed, with no reply
    to what it sends afterwards; 40 of them at once leave the host serving."""
    demo, watch, ca = tls_host
    done = studies(demo)
    script = ("printf 'R\\n'; sleep 2; "
              "printf 'GET /healthz HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n'; sleep 1")
    procs = [subprocess.Popen(["sh", "-c", f"({script}) | {OPENSSL} s_client -tls1_2 -connect "
                               f"127.0.0.1:{demo.port} -CAfile {ca.pem} -servername localhost"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(40)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    renegotiated = [o for o in outs if "RENEGOTIATING" in o]
    assert len(renegotiated) >= 8, outs[0][-1500:]  # the rest met the connection limit
    for o in renegotiated:
        assert "HTTP/1.1 200" not in o, o[-1500:]
    wait_for(lambda: served_over_tls(demo, ca), 10, "a TLS client served after the renegotiations")
    wait_for(lambda: studies(demo) > done, 30, "a study completed meanwhile")
    assert watch.max_fds < NOFILE // 2, watch.max_fds
