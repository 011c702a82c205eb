"""Every error status produced by a real request, with the JSON error body
{"error": {"code", "message"}} that says what was wrong."""
import sqlite3
import time
from pathlib import Path

import requests


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
    assert r.headers["Allow"] == "GET, PATCH"
    r = demo.request("PUT", "/memory/trim")
    assert r.headers["Allow"] == "POST, GET"
    r = demo.request("POST", "/metrics")
    assert r.headers["Allow"] == "GET"


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
    time.sleep(0.2)
    r = d.get("/memory/trims")
    assert "trim history" in error(r, 500, "store_query_failed")
    validate("/memory/trims", "GET", r)
