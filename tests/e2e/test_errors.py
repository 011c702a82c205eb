"""Every error status produced by a real request, with the JSON error body
{"error": {"code", "message"}} that says what was wrong."""
import json
import socket
import sqlite3
from pathlib import Path

import requests

from wait import wait_for


def error(r, status, code=None):
    assert r.status_code == status, f"{r.status_code} {r.text}"
    assert r.headers["Content-Type"] == "application/json"
    body = r.json()
    assert set(body) == {"error"} and body["error"]["message"], body
    if code:
        assert body["error"]["code"] == code, body
    return body["error"]["message"]


def test_400_names_the_parameter_and_why(demo, validate):
    cases = [
        ("/memory/trims", {"limit": "abc"}, "parameter 'limit'"),
        ("/memory/trims", {"limit": "0"}, "from 1 to 10000"),
        ("/memory/trims", {"since": "yesterday"}, "parameter 'since'"),
        ("/memory/trims", {"trigger": "cron"}, "must be one of manual, periodic, pressure, burst"),
        ("/memory/trims", {"since": "2000", "until": "1000"}, "parameter 'until'"),
        ("/memory/trims", {"limt": "5"}, "parameter 'limt': unknown; known: since, until"),
        ("/memory/series", {}, "parameter 'metric': required"),
        ("/memory/series", {"metric": "rss"}, "unknown metric"),
        ("/memory/series", {"metric": "rss_bytes", "step": "1w"}, "parameter 'step'"),
        ("/memory/series", {"metric": "rss_bytes", "since": "-30d", "step": "1s"}, "buckets"),
        ("/memory/trim", {"pad": "-1"}, "parameter 'pad'"),
        ("/memory/stats", {"verbose": "1"}, "takes no parameters"),
    ]
    for path, params, needle in cases:
        r = demo.get(path, params=params)
        assert needle in error(r, 400, "bad_parameter"), (path, params)
        validate(path, "GET", r)
    r = demo.get("/memory/trims?limit=1&limit=2")
    assert "more than once" in error(r, 400)


def test_400_bad_body(demo):
    r = demo.request("PATCH", "/config", data="{not json", headers={"Content-Type": "application/json"})
    assert "JSON object" in error(r, 400, "bad_body")
    r = demo.request("PATCH", "/config", json=[1, 2])
    error(r, 400, "bad_body")


def test_404(demo):
    assert "/nowhere" in error(demo.get("/nowhere"), 404, "not_found")
    error(demo.get("/memory/stats/"), 404)


def test_405_with_allow(demo):
    r = demo.request("DELETE", "/config")
    error(r, 405, "method_not_allowed")
    assert r.headers["Allow"] == "GET, HEAD, PATCH"
    r = demo.request("PUT", "/memory/trim")
    assert r.headers["Allow"] == "POST, GET"
    r = demo.request("POST", "/metrics")
    assert r.headers["Allow"] == "GET, HEAD"



def test_head_never_trims(demo):
    """HEAD is a safe method: on GET /memory/trim (which trims, for curl's sake) it is
    405, and no trim ran."""
    before = demo.get("/memory/trims", params={"trigger": "manual"}).json()["summary"]["count"]
    r = demo.request("HEAD", "/memory/trim")
    assert r.status_code == 405 and r.headers["Allow"] == "POST, GET", r.headers
    r = demo.get("/memory/trim")  # a real trim is then stored...
    assert r.status_code == 200, r.text
    wait_for(lambda: demo.get("/memory/trims", params={"trigger": "manual"})
             .json()["summary"]["count"] >= before + 1, 10, "the GET's trim in the history")
    # ...and it is the only one since: the HEAD ran none
    assert demo.get("/memory/trims", params={"trigger": "manual"}).json()["summary"]["count"] \
        == before + 1


def test_head_on_every_get_route(demo, spec):
    """HEAD is GET without the body: the same status and headers (Content-Length
    included where the body is fixed), never 405 on a GET that only reads."""
    gets = sorted(p for p, item in spec["paths"].items() if "get" in item and p != "/memory/trim")
    assert len(gets) >= 8, gets
    for path in gets:
        params = {"metric": "rss_bytes"} if path == "/memory/series" else {}
        if path == "/memory/arenas":
            # malloc_info runs on a budget: a GET refused for it (503 probe_budget) and a HEAD
            # served a moment later when the budget's pause ended differ for the budget, not the
            # method (r12, load 20). The pair reads the cached reading, which stays within
            # max_age once one exists: wait for one (a readiness wait; the pair is checked once).
            params = {"max_age": "5m"}
            wait_for(lambda: demo.get(path, params=params).status_code == 200, 30,
                     "a cached malloc_info reading")
        g = demo.get(path, params=params)
        h = demo.request("HEAD", path, params=params)
        assert h.status_code == g.status_code, (path, h.status_code, g.status_code)
        assert h.status_code in (200, 429), (path, h.status_code, g.text[:300])
        assert h.content == b"", path
        for name in ("Content-Type", "Cache-Control"):
            assert h.headers.get(name) == g.headers.get(name), (path, name, h.headers)
        assert int(h.headers["Content-Length"]) > 0, (path, h.headers)
        if path in ("/", "/openapi.yaml"):
            assert h.headers["Content-Length"] == g.headers["Content-Length"], path


def raw_exchange(port, data):
    """Send raw bytes; the whole reply until the server closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    finally:
        s.close()


def raw_error(reply, status, needle):
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), reply[:200]
    assert b"Connection: close" in head, head
    message = json.loads(body)["error"]["message"]
    assert needle in message, message
    return message


def test_400_http11_without_host(demo):
    """Without Host an HTTP/1.1 request would skip the loopback Host check (DNS
    rebinding): 400, like a second Host; HTTP/1.0 needs none."""
    reply = raw_exchange(demo.port, b"GET /memory/stats HTTP/1.1\r\nConnection: close\r\n\r\n")
    raw_error(reply, 400, "needs a Host header")
    reply = raw_exchange(demo.port, b"POST /memory/trim HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    raw_error(reply, 400, "needs a Host header")
    reply = raw_exchange(demo.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    b"Host: evil.example\r\nConnection: close\r\n\r\n")
    raw_error(reply, 400, "2 Host headers")
    reply = raw_exchange(demo.port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ") or reply.startswith(b"HTTP/1.0 200 "), reply[:100]


def test_400_content_lengths_that_disagree(demo):
    before = demo.get("/config").json()["TrimIntervalSeconds"]
    body = b'{"TrimIntervalSeconds": 77}'
    data = (b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: %d\r\nContent-Length: 2\r\n\r\n" % len(body)) + body
    raw_error(raw_exchange(demo.port, data), 400, "Content-Length headers disagree")
    assert demo.get("/config").json()["TrimIntervalSeconds"] == before
    # equal repeats frame the body unambiguously: accepted
    data = (b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(body), len(body))) + body
    assert raw_exchange(demo.port, data).startswith(b"HTTP/1.1 200 ")
    assert demo.get("/config").json()["TrimIntervalSeconds"] == 77
    # a ninth field past the eight compared, disagreeing: refused, not framed by the first
    body = b'{"TrimIntervalSeconds": 78}'
    data = (b"PATCH /config HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + b"Content-Length: %d\r\n" % len(body) * 8 + b"Content-Length: 2\r\n\r\n") + body
    raw_error(raw_exchange(demo.port, data), 400, "9 Content-Length headers")
    assert demo.get("/config").json()["TrimIntervalSeconds"] == 77
    demo.request("PATCH", "/config", json={"TrimIntervalSeconds": before})


def test_413_declared_body(demo, validate):
    big = b"{" + b" " * (70 * 1024) + b"}"
    try:
        r = demo.request("PATCH", "/config", data=big, headers={"Content-Type": "application/json"})
    except requests.ConnectionError:
        # The server answers before reading the body and closes; if the client
        # was still sending, read the answer on a raw socket instead.
        r = None
    if r is not None:
        error(r, 413, "body_too_large")
        validate("/config", "PATCH", r)
    else:
        import socket
        s = socket.create_connection(("127.0.0.1", demo.port))
        s.sendall(b"PATCH /config HTTP/1.1\r\nHost: x\r\nContent-Length: 71680\r\n\r\n")
        assert b" 413 " in s.recv(4096).split(b"\r\n")[0]
        s.close()


def test_413_chunked_body(demo):
    def chunks():
        for _ in range(80):
            yield b" " * 1024
    r = demo.request("PATCH", "/config", data=chunks(), headers={"Content-Type": "application/json"})
    error(r, 413, "body_too_large")


def test_429(start_demo):
    d = start_demo({"ManualTrimMinIntervalMs": 60000}, study_mb=8)
    assert d.request("POST", "/memory/trim").status_code == 200
    r = d.request("POST", "/memory/trim")
    error(r, 429, "rate_limited")
    assert 55 <= int(r.headers["Retry-After"]) <= 60


def test_503_without_store(start_demo, validate):
    d = start_demo({"Database": ""}, study_mb=8)
    for path, params in (("/memory/trims", {}), ("/memory/series", {"metric": "rss_bytes"})):
        r = d.get(path, params=params)
        assert "no store is configured" in error(r, 503, "store_disabled")
        validate(path, "GET", r)
    # Everything that does not need the store still works.
    assert d.get("/memory/stats").status_code == 200
    assert d.request("POST", "/memory/trim").status_code == 200


def test_503_store_cannot_open(start_demo, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    d = start_demo({"Database": str(blocker / "memtrim.sqlite")}, study_mb=8)
    r = d.get("/memory/trims")
    # A store is configured: it is unavailable (and says why), not disabled.
    message = error(r, 503, "store_unavailable")
    assert "store" in message and r.headers.get("Retry-After") == "1", message
    health = d.get("/healthz").json()
    assert health["status"] == "degraded" and health["database"] != "ok"


def test_500_store_damaged_behind_memtrims_back(start_demo, validate):
    """The trims table renamed by someone else: the query fails inside
    memtrim, which says so with a 500 (the store itself is still open)."""
    d = start_demo({"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0}, study_mb=8)
    assert d.get("/memory/trims").status_code == 200
    db = sqlite3.connect(d.config["Database"], timeout=10)
    db.execute("ALTER TABLE trims RENAME TO trims_moved")
    db.commit()
    db.close()
    # The readers see the rename at their next statement: wait for the failure, not a while.
    wait_for(lambda: d.get("/memory/trims").status_code != 200, 10,
             "/memory/trims to fail on the renamed table")
    r = d.get("/memory/trims")
    assert "trim history" in error(r, 500, "store_query_failed")
    validate("/memory/trims", "GET", r)
