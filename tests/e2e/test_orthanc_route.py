"""The memtrim route inside Debian's real Orthanc (1.10.1) against the embedded
server of the same plugin (issue 24, findings 1 and 7): the same requests get
the same answers (status, Content-Type, Cache-Control, Retry-After,
WWW-Authenticate, body), bar what Orthanc's SDK cannot send, each named here:
- 429: Orthanc knows no such status (its HttpStatus enum, 1.10 and since);
  the route answers 503 with the same Retry-After and body.
- 405: OrthancPluginSendMethodNotAllowed clears the headers and sends no body;
  status and Allow are the same.
- HEAD and OPTIONS: Orthanc's HttpServer takes them as WebDAV requests and
  answers 404 itself unless a WebDAV collection is registered at the URI
  (which would take GET too): they never reach a plugin's REST callback.
A deep JSON body (999 nested '[' or {"a":) is a 400 on both, and Orthanc runs
on (it was a SIGSEGV in a CivetWeb worker's stack, in cJSON)."""
import json
import signal
import socket

import pytest
import requests

from hosts_util import procs, wait_for  # noqa: F401
from test_orthanc import ORTHANC, start_orthanc, wait_ready  # noqa: F401

pytestmark = pytest.mark.skipif(not ORTHANC.exists(), reason="Debian's orthanc is not installed")

TOKEN = "e2e-route-token-0123456789"
COMPARED = ("Content-Type", "Cache-Control", "Retry-After", "WWW-Authenticate", "Allow")


def raw(port, data, timeout=30):
    """Send raw bytes, return (status or None, the whole reply) once the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        reply = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    status = int(reply.split()[1]) if reply.startswith(b"HTTP/1.") else None
    return status, reply


def nested(n, opening, closing):
    return (opening * n + "1" + closing * n).encode()


@pytest.fixture
def orthanc(procs, tmp_path):
    section = {"HttpPort": 0, "AuthToken": TOKEN, "ManualTrimMinIntervalMs": 60000,
               "TrimIntervalSeconds": 0, "PressureRatio": 0, "TrimReleasableTriggerBytes": 0}
    p, base = start_orthanc(procs, tmp_path, section)
    wait_ready(p, base)
    api = f"http://127.0.0.1:{p.api_port()}"
    yield p, base, api
    assert p.running(), p.output()[-4000:]
    log = p.output()
    assert "Parameter out of range" not in log and "Exception while invoking plugin" not in log, \
        log[-4000:]
    assert p.stop(signal.SIGTERM, grace=60) == 0, p.output()[-4000:]


def both(orthanc, method, path, **kw):
    """The same request to the embedded server and through Orthanc (PATCH is PUT there)."""
    p, base, api = orthanc
    kw.setdefault("timeout", 30)
    e = requests.request(method, api + path, **kw)
    o = requests.request("PUT" if method == "PATCH" else method, base + "/memtrim" + path, **kw)
    return e, o


def same(e, o, status=None, headers=COMPARED, body=True):
    assert e.status_code == (status or e.status_code), (e.status_code, e.text)
    assert o.status_code == e.status_code, (o.status_code, o.text, e.status_code, e.text)
    for h in headers:
        assert o.headers.get(h) == e.headers.get(h), (h, o.headers, e.headers)
    if body:
        assert o.content == e.content, (o.content[:500], e.content[:500])


def test_deep_bodies_are_refused_and_orthanc_runs_on(orthanc):
    p, base, api = orthanc
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for body in (nested(999, "[", "]"), nested(999, '{"a":', "}"), nested(33, "[", "]")):
        e, o = both(orthanc, "PATCH", "/config", data=body, headers=auth)
        same(e, o, status=400)
        err = o.json()["error"]
        assert err["code"] == "bad_body" and "deeper than 32 levels" in err["message"], err
    assert p.running(), p.output()[-4000:]
    # a body of 32 levels is parsed, and refused for what it says
    e, o = both(orthanc, "PATCH", "/config", data=nested(32, "[", "]"), headers=auth)
    same(e, o, status=400)
    assert "deeper" not in o.json()["error"]["message"]
    # a valid one is applied through either
    e, o = both(orthanc, "PATCH", "/config", data=b'{"TrimIntervalSeconds": 45}', headers=auth)
    assert e.status_code == o.status_code == 200, (e.text, o.text)
    assert o.headers["Content-Type"] == e.headers["Content-Type"] == "application/json"
    assert requests.get(base + "/system", timeout=10).status_code == 200


def test_errors_are_the_embedded_servers(orthanc):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    same(*both(orthanc, "GET", "/nope"), status=404)
    same(*both(orthanc, "GET", "/memory/trims?bogus=1"), status=400)
    same(*both(orthanc, "GET", "/memory/series?metric=rss_bytes&step=-1"), status=400)
    same(*both(orthanc, "PATCH", "/config", data=b'{"TrimIntervalSeconds": "x"}',
               headers=auth), status=400)
    same(*both(orthanc, "PATCH", "/config", data=b'{"HttpPort": 1}', headers=auth), status=400)
    # 401: memtrim's Bearer challenge and body, not Orthanc's Basic one
    for h in ({}, {"Authorization": "Bearer wrong"}):
        e, o = both(orthanc, "POST", "/memory/trim", headers=h)
        same(e, o, status=401)
        assert o.headers["WWW-Authenticate"].startswith("Bearer realm=\"memtrim\"")
        assert o.headers["Content-Type"] == "application/json"
    # 405: status and Allow (Orthanc's SDK sends no body with it)
    e, o = both(orthanc, "DELETE", "/memory/stats")
    same(e, o, status=405, headers=("Allow",), body=False)
    # 200s: same Content-Type and Cache-Control, same static bodies
    for path in ("/openapi.yaml", "/"):
        same(*both(orthanc, "GET", path), status=200, headers=("Content-Type", "Cache-Control"))
    for path in ("/healthz", "/memory/stats", "/config"):
        e, o = both(orthanc, "GET", path)
        same(e, o, status=200, headers=("Content-Type", "Cache-Control"), body=False)
        assert set(o.json()) == set(e.json())


def test_too_soon_is_503_with_retry_after(orthanc):
    """A second manual trim inside ManualTrimMinIntervalMs: 429 + Retry-After on the
    embedded server, 503 + the same Retry-After and body through Orthanc (no empty
    reply, no "Parameter out of range" in Orthanc's log: the fixture checks)."""
    p, base, api = orthanc
    auth = {"Authorization": f"Bearer {TOKEN}"}
    first = requests.post(api + "/memory/trim", headers=auth, timeout=60)
    assert first.status_code == 200, first.text
    e = requests.post(api + "/memory/trim", headers=auth, timeout=60)
    o = requests.post(base + "/memtrim/memory/trim", headers=auth, timeout=60)
    assert e.status_code == 429 and o.status_code == 503, (e.status_code, o.status_code, o.text)
    assert o.headers.get("Content-Type") == e.headers.get("Content-Type") == "application/json"
    assert o.json()["error"]["code"] == e.json()["error"]["code"]
    assert int(o.headers["Retry-After"]) >= 1 and int(e.headers["Retry-After"]) >= 1
    assert abs(int(o.headers["Retry-After"]) - int(e.headers["Retry-After"])) <= 1


def test_head_and_options_never_reach_the_plugin(orthanc):
    """What Orthanc 1.10.1 does with them (HttpServer.cpp: WebDAV, then 404): recorded,
    so that an Orthanc that passes them on shows up here."""
    p, base, api = orthanc
    port = int(base.rsplit(":", 1)[1])
    for method in ("HEAD", "OPTIONS"):
        status, reply = raw(port, f"{method} /memtrim/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  "Connection: close\r\n\r\n".encode())
        assert status == 404, reply[:300]
    assert p.running()


def test_hostile_patches_through_orthanc(orthanc):
    """The PATCHes that hurt the demo (issue 24) are refused through Orthanc as by the
    embedded server, with the same body; 200 accepted ones give a few log lines."""
    from test_hostile import HOSTILE_PATCHES
    p, base, api = orthanc
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for body, key in HOSTILE_PATCHES:
        e, o = both(orthanc, "PATCH", "/config", data=json.dumps(body).encode(), headers=auth)
        same(e, o, status=400)
        assert key in o.json()["error"]["message"], (body, o.text)
    before = sum(1 for ln in p.output().splitlines() if "memtrim/config:" in ln or
                 "memtrim/tunables:" in ln)
    s = requests.Session()
    for i in range(200):
        r = s.put(base + "/memtrim/config", headers=auth, timeout=30,
                  data=json.dumps({"TrimIntervalSeconds": 30 + i % 2,
                                   "MallocMmapThresholdBytes": (1 + i % 2) << 20}))
        assert r.status_code == 200, r.text
    lines = [ln for ln in p.output().splitlines() if "memtrim/config:" in ln or
             "memtrim/tunables:" in ln][before:]
    assert len(lines) <= 4, "\n".join(lines)


READ = "e2e-route-read-token-98765"


@pytest.fixture
def orthanc_read(procs, tmp_path):
    """The plugin with a ReadToken and no ReadRequiresAuth: reads need a token on both hosts."""
    section = {"HttpPort": 0, "AuthToken": TOKEN, "ReadToken": READ,
               "ManualTrimMinIntervalMs": 0, "TrimIntervalSeconds": 0, "PressureRatio": 0,
               "TrimReleasableTriggerBytes": 0}
    p, base = start_orthanc(procs, tmp_path, section)
    wait_ready(p, base)
    yield p, base, f"http://127.0.0.1:{p.api_port()}"
    assert p.running(), p.output()[-4000:]
    assert p.stop(signal.SIGTERM, grace=60) == 0, p.output()[-4000:]


def test_a_read_token_makes_reads_need_one_on_both_hosts(orthanc_read):
    """ReadToken set, ReadRequiresAuth not: a read without a token is a 401 on the embedded
    server and through Orthanc alike (server_reads_need_auth, one rule for both), the read
    token reads, and writes with it are 403 insufficient_scope."""
    read = {"Authorization": f"Bearer {READ}"}
    admin = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/memory/stats", "/memory/trims", "/config"):
        e, o = both(orthanc_read, "GET", path)
        same(e, o, status=401)
        assert o.headers["WWW-Authenticate"] == 'Bearer realm="memtrim"', o.headers
        e, o = both(orthanc_read, "GET", path, headers=read)
        same(e, o, status=200, headers=("Content-Type", "Cache-Control"), body=False)
    e, o = both(orthanc_read, "POST", "/memory/trim", headers=read)
    same(e, o, status=403)
    assert o.json()["error"]["code"] == "insufficient_scope", o.text
    e, o = both(orthanc_read, "POST", "/memory/trim", headers=admin)
    assert e.status_code == o.status_code == 200, (e.text, o.text)
    # what stays open without a token: the health check and the API's description
    for path in ("/healthz", "/openapi.yaml"):
        e, o = both(orthanc_read, "GET", path)
        assert e.status_code == o.status_code == 200, (path, e.status_code, o.status_code)
