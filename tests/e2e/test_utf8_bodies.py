"""Every response body is valid UTF-8, whatever the client sent. A quoted parameter is cut on
a character boundary (39 ASCII bytes and then 'é', whose second byte is the 41st: the quote
stops before it, with no U+FFFD), and bytes that are not UTF-8 (percent-encoded 0xFF 0xFE,
a cut 0xC3, an overlong '/', a surrogate) are never echoed: each becomes U+FFFD. Over every
operation of openapi.yaml: each query parameter it takes, an unknown parameter's name, the
path of a resource that does not exist, PATCH /config's keys and values, and the Host and
Content-Length headers (which the server quotes). The control rt-utf8-raw (the old
`%.40s` quote, bodies sent as they are) fails it."""
import socket
from urllib.parse import quote_from_bytes

import pytest

from hosts_util import read_to_close
from test_contract import spec_operations

CUT = ("a" * 39 + "é" * 4).encode()  # valid UTF-8; byte 40 is inside the first 'é'
RAW = [b"\xff\xfe", b"x\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"ok\x80"]  # none is UTF-8
FFFD = "\ufffd"


def body_of(r):
    return r.content if hasattr(r, "content") else r


def check_body(raw, sent, where):
    """The body decodes as UTF-8 (strictly) and holds no invalid byte that was sent."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        pytest.fail(f"{where}: the body is not UTF-8 ({e}): {raw[:300]!r}")
    if sent == CUT:
        assert FFFD not in text, f"{where}: a quote cut inside a character: {text[:300]}"
    return text


def query_url(base, path, name, value):
    return f"{base}{path}?{quote_from_bytes(name, safe='')}={quote_from_bytes(value, safe='')}"


def test_every_quoted_query_parameter(demo, spec):
    checked = 0
    for method, path in sorted(spec_operations(spec)):
        if method == "PATCH":
            continue  # its body: below
        op = spec["paths"][path][method.lower()]
        names = [p["name"] for p in op.get("parameters", []) if "name" in p]
        names += [spec["components"]["parameters"][p["$ref"].split("/")[-1]]["name"]
                  for p in op.get("parameters", []) if "$ref" in p]
        for value in [CUT] + RAW:
            for name in [n.encode() for n in names] + [b"unknown_" + value]:
                params = {"metric": b"rss_bytes"} if path == "/memory/series" and \
                    name != b"metric" else {}
                url = query_url(demo.base, path, name, value)
                url += "".join(f"&{k}={v.decode()}" for k, v in params.items())
                r = demo.request(method, url[len(demo.base):])
                assert r.status_code < 500, f"{method} {url}: {r.status_code} {r.text[:300]}"
                check_body(r.content, value, f"{method} {url} ({r.status_code})")
                checked += 1
    assert checked >= 100, checked


def test_paths_methods_and_config_keys(demo):
    for value in [CUT] + RAW:
        path = "/memory/" + quote_from_bytes(value, safe="")
        r = demo.get(path)
        assert r.status_code == 404, r.text
        check_body(r.content, value, f"GET {path}")
        for doc in (b'{"' + value + b'": 1}', b'{"Database": "' + value + b'"}',
                    b'{"TrimIntervalSeconds": "' + value + b'"}'):
            r = demo.request("PATCH", "/config", data=doc,
                             headers={"Content-Type": "application/json"})
            assert r.status_code == 400, f"{doc!r}: {r.status_code} {r.text[:300]}"
            check_body(r.content, value, f"PATCH /config {doc!r}")


def raw_request(port, head):
    """One request as bytes on a socket (requests would encode the headers): the reply's body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        data = read_to_close(s)
    status, _, body = data.partition(b"\r\n\r\n")
    return status.split(b"\r\n")[0], body


def test_quoted_headers(demo):
    for value in [CUT] + RAW:
        status, body = raw_request(demo.port, b"GET /healthz HTTP/1.1\r\nHost: h" + value +
                                   b"\r\nConnection: close\r\n\r\n")
        assert b" 403 " in status + b" ", status
        check_body(body, value, f"Host: {value!r}")
        status, body = raw_request(demo.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                   b"Content-Length: 1" + value + b"\r\nConnection: close\r\n\r\n")
        assert b" 400 " in status + b" ", status
        check_body(body, value, f"Content-Length: {value!r}")


def test_a_cut_quote_keeps_whole_characters(demo):
    r = demo.get("/memory/trims", params={"limit": CUT})
    assert r.status_code == 400, r.text
    assert "a" * 39 + "..." in r.json()["error"]["message"], r.text
    r = demo.get("/memory/trims", params={"limit": "é" * 30})
    assert r.status_code == 400, r.text
    assert "é" * 20 + "..." in r.json()["error"]["message"], r.text


def test_raw_bytes_are_not_echoed(demo):
    r = demo.get("/memory/trims?limit=%FF%FEx")
    assert r.status_code == 400, r.text
    assert b"\xff" not in r.content and "\ufffd\ufffdx" in r.json()["error"]["message"], r.text
