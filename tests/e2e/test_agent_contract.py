"""The node agent's contract (agent/openapi.yaml): its route table (agent/api.c) and the file
list the same paths and methods, and every answer of a running agent (a cgroup with a process,
a history) matches the schema the file gives for its status and content type: the 200s, a
bad parameter's 400, a history the agent does not keep (404), a read without the read token
(401), and the contract it serves is the file's."""
import copy
import re
from pathlib import Path

import jsonschema
import pytest
import requests
import yaml

from agent_util import Agent
from conftest import _to_json_schema, deref
from hosts_util import cgroup, procs  # noqa: F401
from wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "agent" / "openapi.yaml"


@pytest.fixture(scope="module")
def contract():
    return yaml.safe_load(CONTRACT.read_text())


def check(contract, path, method, resp):
    op = contract["paths"][path][method.lower()]
    status = str(resp.status_code)
    assert status in op["responses"], f"{method} {path}: {status} is not in the contract"
    r = deref(contract, op["responses"][status])
    ctype = resp.headers.get("Content-Type", "").split(";")[0].strip()
    assert ctype in r.get("content", {}), f"{method} {path} {status}: content type {ctype}"
    if ctype == "application/json":
        root = _to_json_schema(copy.deepcopy(contract))
        root.update(_to_json_schema(copy.deepcopy(r["content"][ctype]["schema"])))
        jsonschema.validate(resp.json(), root, cls=jsonschema.Draft7Validator)
        return resp.json()
    return resp.text


def test_the_route_table_and_the_contract_list_the_same_routes(contract):
    table = set(re.findall(r'\{"(GET|POST|PATCH|PUT|DELETE)", "([^"]+)"',
                           (ROOT / "agent" / "api.c").read_text()))
    spec = {(m.upper(), p) for p, item in contract["paths"].items() for m in item}
    assert table == spec, f"only in agent/api.c: {table - spec}; only in the contract: {spec - table}"


def test_every_answer_matches_the_contract(procs, cgroup, tmp_path, contract):
    cg = cgroup(256 << 20)
    path = "/" + cg.path.name
    sleeper = procs(cg.wrap(["/bin/sleep", "600"]), tmp_path / "sleep.log")
    agent = Agent(procs, tmp_path / "agent.log", {"AllowCgroups": [path], "ScanIntervalMs": 200,
                                                  "SampleIntervalSeconds": 1,
                                                  "Database": str(tmp_path / "agent.sqlite"),
                                                  "ReadToken": "r" * 32, "AuthToken": "a" * 32,
                                                  "ReadRequiresAuth": True})
    base = f"http://{agent.address}"
    auth = {"Authorization": "Bearer " + "r" * 32}

    def get(p, **kw):
        return requests.get(base + p, timeout=10, **kw)
    def mine():
        return [c for c in get("/agent/cgroups", headers=auth).json()["cgroups"] if c["cgroup"] == path]
    view = wait_for(lambda: (lambda c: c if c and c[0]["processes"] else None)(mine()), 20,
                    "the agent to see the sleeper")
    assert view[0]["processes"][0]["pid"] == sleeper.pid
    wait_for(lambda: get("/agent/history", headers=auth).json()["samples"], 20, "a sample")
    for p in ("/agent/cgroups", "/agent/history", f"/agent/history?cgroup={path}&since=0",
              "/metrics", "/healthz", "/", "/openapi.yaml"):
        r = get(p, headers=auth)
        assert r.status_code == 200, (p, r.status_code, r.text[:300])
        check(contract, p.split("?")[0], "GET", r)
    assert yaml.safe_load(get("/openapi.yaml").text)["paths"] == contract["paths"]
    for p, status in (("/agent/history?since=-1", 400), ("/agent/history?since=99999999999999999999", 400),
                      ("/agent/history?bogus=1", 400)):
        r = get(p, headers=auth)
        assert r.status_code == status, (p, r.status_code, r.text[:300])
        check(contract, "/agent/history", "GET", r)
    for p in ("/metrics", "/agent/cgroups", "/agent/history"):
        r = get(p)
        assert r.status_code == 401, (p, r.status_code)
        check(contract, p, "GET", r)
    agent.stop()
    nostore = Agent(procs, tmp_path / "agent2.log", {"AllowCgroups": [path]})
    r = requests.get(f"http://{nostore.address}/agent/history", timeout=10)
    assert r.status_code == 404
    check(contract, "/agent/history", "GET", r)
    nostore.stop()
