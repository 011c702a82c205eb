"""Authentication on and off: writes need the bearer token once one is set,
reads only with ReadRequiresAuth, health and the contract never; the token
is never in a response or the log."""
TOKEN = "e2e-Secret-7c41"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_auth_off(demo):
    assert demo.request("POST", "/memory/trim").status_code == 200
    assert demo.request("PATCH", "/config", json={"TrimIntervalSeconds": 30}).status_code == 200


def test_token_protects_writes(start_demo, validate):
    d = start_demo({"AuthToken": TOKEN, "ManualTrimMinIntervalMs": 0}, study_mb=8)
    for method, path, kw in (("POST", "/memory/trim", {}), ("GET", "/memory/trim", {}),
                             ("PATCH", "/config", {"json": {"TrimIntervalSeconds": 45}})):
        r = d.request(method, path, **kw)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        validate(path, method, r)
        r = d.request(method, path, headers={"Authorization": "Bearer wrong"}, **kw)
        assert r.status_code == 401
        assert "invalid_token" in r.headers["WWW-Authenticate"]
        r = d.request(method, path, headers=AUTH, **kw)
        assert r.status_code == 200, (method, path, r.text)
    # Reads stay open without ReadRequiresAuth.
    for path in ("/memory/stats", "/metrics", "/config", "/memory/trims", "/healthz"):
        r = d.get(path)
        assert r.status_code == 200, (path, r.text)
    cfg = d.get("/config")
    assert cfg.json()["AuthToken"] == "<redacted>"
    assert TOKEN not in cfg.text
    for path in ("/healthz", "/metrics", "/memory/stats", "/openapi.yaml", "/"):
        assert TOKEN not in d.get(path, headers=AUTH).text
    d.stop()
    assert TOKEN not in d.output()


def test_read_requires_auth(start_demo):
    d = start_demo({"AuthToken": TOKEN, "ReadRequiresAuth": True}, study_mb=8)
    for path in ("/memory/stats", "/metrics", "/config", "/memory/trims"):
        assert d.get(path).status_code == 401, path
        assert d.get(path, headers=AUTH).status_code == 200, path
    for path in ("/healthz", "/openapi.yaml", "/"):
        assert d.get(path).status_code == 200, path
