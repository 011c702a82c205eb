"""The contract: openapi.yaml is valid (Redocly's linter), the route table
and the spec list the same paths and methods, every spec path is served, the
served spec is the file, and the spec's metric list is the store's."""
import shutil
import subprocess
from pathlib import Path

from conftest import BUILD, ROOT

TESTS = ROOT / "tests"


def redocly():
    exe = TESTS / "node_modules" / ".bin" / "redocly"
    if not exe.exists():
        assert shutil.which("npm"), "npm is needed to install @redocly/cli (tests/package.json)"
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=TESTS, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
    return exe


def test_spec_lints():
    r = subprocess.run([str(redocly()), "lint", "--format=stylish", str(ROOT / "openapi.yaml")],
                       cwd=TESTS, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in (r.stdout + r.stderr).lower().replace("deprecation warning", "")


def route_table():
    out = subprocess.run([str(BUILD / "test_server_routes"), "--list"], check=True,
                         capture_output=True, text=True).stdout
    return {tuple(line.split(" ", 1)) for line in out.splitlines() if line}


def spec_operations(spec):
    ops = set()
    for path, item in spec["paths"].items():
        for method in item:
            if method in ("get", "put", "post", "delete", "patch", "head", "options", "trace"):
                ops.add((method.upper(), path))
    return ops


def test_route_table_equals_spec(spec):
    routes = route_table()
    ops = spec_operations(spec)
    assert routes - ops == set(), "routes missing from openapi.yaml"
    assert ops - routes == set(), "operations in openapi.yaml that the server does not route"


def test_every_spec_operation_is_served(demo, spec):
    for method, path in sorted(spec_operations(spec)):
        params = {"metric": "rss_bytes"} if path == "/memory/series" else {}
        kw = {"json": {"TrimIntervalSeconds": 30}} if method == "PATCH" else {}
        r = demo.request(method, path, params=params, **kw)
        assert r.status_code not in (404, 405), f"{method} {path}: {r.status_code} {r.text}"
        assert str(r.status_code) in spec["paths"][path][method.lower()]["responses"], \
            f"{method} {path}: {r.status_code} is not documented"


def test_served_spec_is_the_file(demo):
    r = demo.get("/openapi.yaml")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/yaml"
    # The file carries "@PROJECT_VERSION@" where the build writes CMake's version.
    version = demo.get("/healthz").json()["version"]
    want = (ROOT / "openapi.yaml").read_bytes().replace(b"@PROJECT_VERSION@", version.encode())
    assert r.content == want
    assert b"@PROJECT_VERSION@" not in r.content


def test_series_metric_enum_is_the_stores(demo, spec):
    r = demo.get("/memory/series", params={"metric": "no_such_metric"})
    assert r.status_code == 400
    listed = r.json()["error"]["message"].split("one of ", 1)[1].split(", ")
    assert listed == spec["components"]["schemas"]["SeriesMetric"]["enum"]
    stats = demo.get("/memory/stats").json()
    for name in listed:
        assert name in stats, f"series metric {name} is not a /memory/stats field"


def test_config_patch_schema_lists_the_runtime_keys(demo, spec):
    """Every key the PATCH schema lists is accepted, and a non-runtime key is refused."""
    keys = spec["components"]["schemas"]["ConfigPatchKeys"]["properties"]
    current = demo.get("/config").json()
    for key in keys:
        r = demo.request("PATCH", "/config", json={key: current[key]})
        assert r.status_code == 200, f"{key}: {r.text}"
    for key in set(spec["components"]["schemas"]["Config"]["properties"]) - set(keys):
        r = demo.request("PATCH", "/config", json={key: current[key]})
        assert r.status_code == 400, f"{key} should not be changeable at run time"
