"""Without a token, a loopback server refuses requests that come by another
name (DNS rebinding) and writes sent from another site's page (403), and
still serves local names and tools without an Origin (curl)."""
import requests

from conftest import Demo


def test_foreign_host_and_origin_are_refused():
    demo = Demo({"ManualTrimMinIntervalMs": 0}, workers=1, study_mb=8, pause_ms=3000)
    try:
        for host in ("127.0.0.1.nip.io", "[::2]", "localhost.attacker.example"):
            r = demo.get("/healthz", headers={"Host": host})
            assert r.status_code == 403, host
        r = demo.get("/memory/stats", headers={"Host": "attacker.example:8043"})
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden_host"
        assert "attacker.example" in r.json()["error"]["message"]
        r = demo.request("PATCH", "/config", json={"TrimIntervalSeconds": 1},
                         headers={"Origin": "http://attacker.example"})
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden_origin"
        assert demo.get("/config").json()["TrimIntervalSeconds"] == 30  # unchanged
        # local names, the page's own origin, and curl (no Origin) are served
        for host in ("localhost:%d" % demo.port, "127.0.0.1", "[::1]:1", "localhost.:1",
                     "LOCALHOST", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]:9", "127.1.2.3"):
            assert demo.get("/healthz", headers={"Host": host}).status_code == 200
        r = demo.request("POST", "/memory/trim",
                         headers={"Origin": "http://127.0.0.1:%d" % demo.port})
        assert r.status_code == 200
        assert demo.request("POST", "/memory/trim").status_code == 200
    finally:
        demo.stop()


def test_with_a_token_other_names_are_allowed():
    demo = Demo({"AuthToken": "s3cret"}, workers=1, study_mb=8, pause_ms=3000)
    try:
        r = demo.get("/healthz", headers={"Host": "memtrim.internal"})
        assert r.status_code == 200
    finally:
        demo.stop()
