"""The contract as a client walks it: the spec's examples are requests the server accepts, an
empty PATCH is refused as `minProperties: 1` says, a single process's own pid filters its own
trims and series, and every `links` entry of openapi.yaml leads from a response to a request
that answers about the same thing (a trim to the history that holds it, a pid to its trims
and series), alone and in a worker group. Controls: rt-patch-empty (an empty PATCH changes
nothing and gets 200), rt-pid-self (the own pid matches no row of a single process)."""
import re

import requests

from conftest import deref
from hosts_util import procs  # noqa: F401
from test_contract import spec_operations
from test_groups import forked, member_pids, start_prefork, stop_group
from wait import wait_for

SAFE = {"GET"}  # the walk of examples makes no trim: GET /memory/trim trims, and is left out


def parameters(spec, op):
    return [deref(spec, p) for p in op.get("parameters", [])]


def test_the_examples_are_accepted(demo, spec, validate):
    """Each GET with every parameter at its example (since -1h, until -5m, step 1m, ...): 200."""
    walked = 0
    for method, path in sorted(spec_operations(spec)):
        if method not in SAFE or path == "/memory/trim":
            continue
        op = spec["paths"][path][method.lower()]
        params = {p["name"]: str(p["example"]) for p in parameters(spec, op) if "example" in p}
        params = {k: v for k, v in params.items() if k != "pid"}  # an example pid is no process
        if not params:
            continue
        r = demo.request(method, path, params=params)
        validate(path, method, r)
        if r.status_code == 503 and path == "/memory/arenas":  # the probe budget's answer
            assert r.json()["error"]["code"] == "probe_budget" and "Retry-After" in r.headers
            walked += 1
            continue
        assert r.status_code == 200, f"{method} {path} {params}: {r.status_code} {r.text[:300]}"
        walked += 1
    assert walked >= 3, walked  # /memory/trims, /memory/series, /memory/arenas


def test_an_empty_patch_is_refused(demo, spec, validate):
    before = demo.get("/config").json()
    for body in ({}, {"MemoryTrim": {}}):
        r = demo.request("PATCH", "/config", json=body)
        assert r.status_code == 400, f"{body}: {r.status_code} {r.text[:300]}"
        validate("/config", "PATCH", r)
        assert "nothing to change" in r.json()["error"]["message"], r.text
    assert demo.get("/config").json() == before
    assert spec["components"]["schemas"]["ConfigPatchKeys"]["minProperties"] == 1


def test_a_single_process_own_pid_filters_its_own_rows(start_demo, validate):
    d = start_demo({"SampleIntervalSeconds": 1, "ManualTrimMinIntervalMs": 0,
                    "TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0})
    pid = d.get("/healthz").json()["pid"]
    trim = d.request("POST", "/memory/trim").json()

    def own(p):
        r = d.get("/memory/trims", params={"pid": p})
        validate("/memory/trims", "GET", r)
        return r.json()
    body = wait_for(lambda: (b := own(pid))["summary"]["count"] >= 1 and b, 20,
                    f"/memory/trims?pid={pid} (its own pid) to hold its trim")
    assert trim["id"] in [t["id"] for t in body["trims"]], body
    assert body["pid"] == pid, body
    assert own(pid + 1 if pid < 2 ** 31 - 1 else 1)["summary"]["count"] == 0
    series = wait_for(lambda: (r := d.get("/memory/series", params={
        "metric": "rss_bytes", "pid": pid, "step": "1s", "since": "-5m"})).status_code == 200
        and r.json()["buckets"] and r, 20, "its own series")
    validate("/memory/series", "GET", series)
    assert series.json()["pid"] == pid and series.json()["buckets"][-1]["max"] > 0


# ---- links ------------------------------------------------------------------

RUNTIME = re.compile(r"^\$response\.body#(/.*)$")


def all_links(spec):
    """(source method, source path, status, link name, link) for every link of the spec."""
    out = []
    for method, path in spec_operations(spec):
        op = spec["paths"][path][method.lower()]
        for status, resp in op["responses"].items():
            for name, link in deref(spec, resp).get("links", {}).items():
                out.append((method, path, status, name, link))
    return out


def pointer(body, ptr):
    node = body
    for part in ptr.lstrip("/").split("/"):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return None
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def operation(spec, operation_id):
    for method, path in spec_operations(spec):
        if spec["paths"][path][method.lower()].get("operationId") == operation_id:
            return method, path
    raise AssertionError(f"a link names operationId {operation_id}, which no operation has")


def follow(api, spec, validate, source_body, link):
    """The link's request (None when its pointer is not in this body), checked against the
    spec; returns (params, response)."""
    params = {}
    for name, expr in link["parameters"].items():
        m = RUNTIME.match(str(expr))
        value = pointer(source_body, m.group(1)) if m else expr
        if value is None:
            return None
        params[name] = str(value)
    method, path = operation(spec, link["operationId"])
    r = requests.request(method, api + path, params=params, timeout=30)
    assert r.status_code == 200, f"{link['operationId']} {params}: {r.status_code} {r.text[:300]}"
    validate(path, method, r)
    return params, r.json()


def walk(api, spec, validate, sources):
    """Follow every link whose source is in sources ({(method, path): body}); the names walked."""
    walked = set()
    for method, path, status, name, link in all_links(spec):
        if (method, path) not in sources or status != "200":
            continue
        body = sources[(method, path)]
        got = follow(api, spec, validate, body, link)
        if got is None:
            continue
        params, target = got
        if "pid" in params:
            assert target.get("pid") == int(params["pid"]), (name, target)
            rows = target.get("trims", [])
            assert all(t.get("pid", int(params["pid"])) == int(params["pid"]) for t in rows)
        if name == "TrimInHistory":
            assert body["id"] in [t["id"] for t in target["trims"]], (body, target)
        walked.add(name)
    return walked


def test_every_link_leads_somewhere_alone(start_demo, spec, validate):
    d = start_demo({"SampleIntervalSeconds": 1, "ManualTrimMinIntervalMs": 0,
                    "TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0})
    names = {n for _, _, _, n, _ in all_links(spec)}
    assert {"TrimInHistory", "OwnTrims", "OwnSeries", "MemberSeries", "MemberTrims"} <= names
    trim = d.request("POST", "/memory/trim").json()
    wait_for(lambda: d.get("/memory/trims").json()["summary"]["count"] >= 1, 20, "the stored trim")
    wait_for(lambda: d.get("/memory/series", params={"metric": "rss_bytes", "since": "-5m"})
             .json()["buckets"], 20, "a stored sample")
    sources = {("POST", "/memory/trim"): trim, ("GET", "/memory/trim"): trim,
               ("GET", "/healthz"): d.get("/healthz").json(),
               ("GET", "/memory/stats"): d.get("/memory/stats").json()}
    walked = walk(d.base, spec, validate, sources)
    assert {"TrimInHistory", "OwnTrims", "OwnSeries"} <= walked, walked
    # alone, /memory/stats has no group: its member links have nothing to follow
    assert "group" not in sources[("GET", "/memory/stats")]


def test_every_link_leads_somewhere_in_a_group(procs, tmp_path, spec, validate):  # noqa: F811
    p, api = start_prefork(procs, tmp_path, ["--workers", "2", "--studies", "1", "--study-mb",
                                             "8", "--hold", "--pid-dir", str(tmp_path)])
    info = forked(p)
    everyone = sorted([info["master"]] + info["pids"])
    wait_for(lambda: member_pids(api) == everyone, 30, "the workers to join")
    requests.post(api + "/memory/trim", timeout=60)
    stats = requests.get(api + "/memory/stats", timeout=10).json()
    first = stats["group"]["members"][0]["pid"]
    wait_for(lambda: requests.get(api + "/memory/series", params={
        "metric": "rss_bytes", "pid": first, "since": "-5m"}, timeout=10).json()["buckets"], 20,
        "the member's samples")
    walked = walk(api, spec, validate, {("GET", "/memory/stats"): stats,
                                        ("GET", "/healthz"): requests.get(api + "/healthz",
                                                                          timeout=10).json()})
    assert {"MemberSeries", "MemberTrims", "OwnTrims", "OwnSeries"} <= walked, walked
    stop_group(p)
