"""A property-based test of openapi.yaml against a real memtrim host on loopback (Debian's
python3-hypothesis): for every operation, requests generated from the spec's own parameter
and body schemas, valid ones and invalid ones (a value outside its schema, an unknown
parameter, an empty or mistyped PATCH).

For every response: a valid UTF-8 body, no 5xx but a 503 the operation documents, a status
the operation documents, and a body valid against its schema (conftest's validate). A valid
request is not refused (400) but by a rule between values that JSON Schema cannot say and a
description states (RULES); an invalid one is refused with 400.

The counts are fixed and the generation derandomized (the same requests every run, no example
database): VALID + INVALID examples an operation, about 1,300 requests in all."""
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from conftest import BUILD, Demo, deref, load_spec
from test_contract import spec_operations

VALID, INVALID = 80, 80
set_hypothesis_home_dir(str(BUILD / "hypothesis"))  # its caches, out of the source tree
SETTINGS = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))

# 400s a schema-valid request may still get, each a rule a description in openapi.yaml states
RULES = [
    r"parameter 'until': must be later than 'since'",          # until, since
    r"parameter 'step': \d+ ms gives \d+ buckets",              # step, at most 10000 buckets
    r"MemoryLimitBytes: \d+ is below \d+, twice",                # twice the peak RSS
    r"(MallocTrimThresholdBytes|MallocTopPadBytes).*TrimIntervalSeconds",  # glibc's tunables
    r"TrimIntervalSeconds.*(MallocTrimThresholdBytes|MallocTopPadBytes)",
    r"Malloc\w+Bytes: .*(null|unset|mallopt)",                   # null only while unset
]

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


def start_host():
    return Demo({"SampleIntervalSeconds": 1, "ManualTrimMinIntervalMs": 0})


@pytest.fixture(scope="module")
def shared_host():
    d = start_host()
    yield d
    rc = d.stop()
    assert rc == 0, d.output()[-2000:]


@pytest.fixture
def host(shared_host, method):
    """The module's host; PATCH /config gets one of its own, so that what it sets (a longer
    ManualTrimMinIntervalMs, a smaller probe budget) does not decide the others' answers."""
    if method != "PATCH":
        yield shared_host
        return
    d = start_host()
    yield d
    rc = d.stop()
    assert rc == 0, d.output()[-2000:]


def valid_value(spec, schema):
    """Values the schema takes (what a query string or a JSON body would carry)."""
    schema = deref(spec, schema)
    if "allOf" in schema:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            merged.update(deref(spec, part))
        return valid_value(spec, merged)
    nullable = st.just(None) if schema.get("nullable") else st.nothing()
    if "anyOf" in schema:
        base = {k: v for k, v in schema.items() if k != "anyOf"}
        return nullable | st.one_of([valid_value(spec, {**base, **deref(spec, b)})
                                     for b in schema["anyOf"]])
    if "enum" in schema:
        return nullable | st.sampled_from(schema["enum"])
    t, lo, hi = schema.get("type"), schema.get("minimum"), schema.get("maximum")
    if t == "integer":
        return nullable | st.integers(min_value=lo, max_value=hi)
    if t == "number":
        ints = st.integers(min_value=None if lo is None else math.ceil(lo),
                           max_value=None if hi is None else math.floor(hi))
        return nullable | ints | st.floats(min_value=lo, max_value=hi, allow_nan=False,
                                           allow_infinity=False)
    if t == "boolean":
        return nullable | st.booleans()
    if t == "string" and "pattern" in schema:
        return nullable | st.from_regex(schema["pattern"], fullmatch=True)
    if t == "string":
        return nullable | TEXT
    raise AssertionError(f"no strategy for the schema {schema}")


def invalid_value(spec, schema):
    """Query-string values the schema refuses."""
    schema = deref(spec, schema)
    if "allOf" in schema:
        return invalid_value(spec, deref(spec, schema["allOf"][0]))
    t = schema.get("type")
    if "enum" in schema:
        return TEXT.filter(lambda s: s not in [str(e) for e in schema["enum"]])
    if t == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        outside = []
        if lo is not None:
            outside.append(st.integers(max_value=lo - 1).map(str))
        if hi is not None:
            outside.append(st.integers(min_value=hi + 1).map(str))
        return st.one_of(outside + [TEXT.filter(lambda s: not re.fullmatch(r"-?[0-9]+", s))])
    if t == "string" and "pattern" in schema:
        return TEXT.filter(lambda s: not re.search(schema["pattern"], s))
    return st.nothing()


def query(value):
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def operation_params(spec, method, path):
    op = spec["paths"][path][method.lower()]
    return [deref(spec, p) for p in op.get("parameters", []) if deref(spec, p)["in"] == "query"]


@st.composite
def valid_request(draw, spec, method, path, own_pid):
    params = {}
    for p in operation_params(spec, method, path):
        if p.get("required") or draw(st.booleans()):
            values = valid_value(spec, p["schema"])
            if p["name"] == "pid":  # the process's own, as often as any other
                values = st.just(own_pid) | values
            v = query(draw(values))
            if v is not None:
                params[p["name"]] = v
    body = None
    if method == "PATCH":
        keys = spec["components"]["schemas"]["ConfigPatchKeys"]["properties"]
        chosen = draw(st.lists(st.sampled_from(sorted(keys)), min_size=1, max_size=3,
                               unique=True))
        body = {k: draw(valid_value(spec, keys[k])) for k in chosen}
        if draw(st.booleans()):
            body = {"MemoryTrim": body}
    return params, body


@st.composite
def invalid_request(draw, spec, method, path):
    params = {p["name"]: p for p in operation_params(spec, method, path)}
    base = {p["name"]: str(p["example"]) for p in params.values()
            if p.get("required") and "example" in p}
    choices = ["unknown"] + [n for n, p in params.items()
                             if not invalid_value(spec, p["schema"]).is_empty]
    if method == "PATCH":
        choices += ["empty", "unknown_key", "wrong_type", "out_of_range", "not_object"]
    kind = draw(st.sampled_from(choices))
    body = None
    if method == "PATCH":
        body = {"TrimIntervalSeconds": 30}
    if kind == "unknown":
        name = draw(TEXT.filter(lambda s: s and s not in params))
        base[name] = draw(TEXT)
    elif kind in params:
        base[kind] = draw(invalid_value(spec, params[kind]["schema"]))
    else:
        keys = spec["components"]["schemas"]["ConfigPatchKeys"]["properties"]
        key = draw(st.sampled_from(sorted(keys)))
        schema = keys[key]
        if kind == "empty":
            body = draw(st.sampled_from([{}, {"MemoryTrim": {}}]))
        elif kind == "unknown_key":
            body = {draw(TEXT.filter(lambda s: s not in keys and s != "MemoryTrim")): 1}
        elif kind == "wrong_type":
            body = {key: draw(TEXT | st.lists(st.integers(), max_size=2) | st.booleans())}
        elif kind == "out_of_range":
            hi = schema.get("maximum")
            low = schema.get("minimum")
            above = st.integers(min_value=int(hi) + 1, max_value=int(hi) * 4 + 2)
            floor = next((b["minimum"] for b in schema.get("anyOf", []) if "minimum" in b), None)
            gap = st.floats(min_value=0, max_value=floor, exclude_min=True, exclude_max=True)\
                if floor else st.nothing()
            below = st.floats(max_value=low, exclude_max=True, allow_nan=False,
                              allow_infinity=False, min_value=-1e18) if low is not None \
                else st.nothing()
            body = {key: draw(above | gap | below)}
        elif kind == "not_object":
            body = draw(st.sampled_from([[], [1], "x", 3, None]))
    return base, body


SEEN = {}


def send(host, method, path, params, body, kind):
    kw = {"params": params}
    if method == "PATCH":
        kw["json"] = body
    r = host.request(method, path, **kw)
    key = (kind, method, path)
    SEEN.setdefault(key, []).append(r.status_code)
    return r


def counted(method, path, kind, n):
    """Every example was sent (an operation without parameters has one valid request: the
    generator gives it once), and a valid operation was answered 2xx at least once."""
    from collections import Counter
    got = SEEN.pop((kind, method, path), [])
    print(f"{kind} {method} {path}: {len(got)} requests, statuses {dict(Counter(got))}")
    spec_params = bool(operation_params(load_spec(), method, path)) or method == "PATCH"
    assert len(got) == (n if spec_params or kind == "invalid" else 1), len(got)
    if kind == "valid":
        assert any(200 <= s < 300 for s in got), f"{method} {path}: no 2xx in {Counter(got)}"


def check(spec, validate, method, path, r, where):
    """What every response must be; the body as text."""
    try:
        text = r.content.decode("utf-8")
    except UnicodeDecodeError as e:
        pytest.fail(f"{where}: the body is not UTF-8 ({e}): {r.content[:200]!r}")
    op = spec["paths"][path][method.lower()]
    assert r.status_code < 500 or (r.status_code == 503 and "503" in op["responses"]), \
        f"{where}: {r.status_code} {text[:300]}"
    validate(path, method, r)
    return text


def operations():
    return sorted(spec_operations(load_spec()))


@pytest.mark.parametrize("method,path", operations())
def test_valid_requests(host, spec, validate, method, path):
    own_pid = host.get("/healthz").json()["pid"]

    @settings(SETTINGS, max_examples=VALID)
    @given(valid_request(spec, method, path, own_pid))
    def run(req):
        params, body = req
        where = f"{method} {path} {params} {body}"
        r = send(host, method, path, params, body, "valid")
        check(spec, validate, method, path, r, where)
        if r.status_code == 400:
            message = r.json()["error"]["message"]
            assert any(re.search(rule, message) for rule in RULES), \
                f"{where}: a valid request refused: {message}"
    run()
    counted(method, path, "valid", VALID)


@pytest.mark.parametrize("method,path", operations())
def test_invalid_requests(host, spec, validate, method, path):
    @settings(SETTINGS, max_examples=INVALID)
    @given(invalid_request(spec, method, path))
    def run(req):
        params, body = req
        where = f"{method} {path} {params} {body}"
        # a key given the value in effect changes nothing and is accepted (ConfigPatchKeys)
        current = host.get("/config").json() if method == "PATCH" else {}
        r = send(host, method, path, params, body, "invalid")
        check(spec, validate, method, path, r, where)
        if r.status_code == 200 and isinstance(body, dict) and len(body) == 1:
            key, value = next(iter(body.items()))
            if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    current.get(key) == value:
                return
        assert r.status_code == 400, f"{where}: {r.status_code} {r.text[:300]}"
    run()
    counted(method, path, "invalid", INVALID)

