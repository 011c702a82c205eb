"""End-to-end fixtures: the real demo host (build/memtrim-demo) with memtrim
loaded through dlopen, on an ephemeral loopback port, and the OpenAPI
contract turned into JSON Schema for response validation.

The build to test is MEMTRIM_BUILD_DIR (default: <repo>/build). Run with
Debian's interpreter: /usr/bin/python3 -m pytest tests/e2e
"""
import copy
import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import jsonschema
import pytest
import requests
import yaml

from skips_util import listed_skips
from wait import wait_for

# A runner started in the background of a non-interactive shell (`.ci/run &`)
# ignores SIGINT and SIGQUIT, and every child inherits an ignored signal:
# the hosts these tests stop with SIGINT would not stop (CI saw python3's
# http.server killed after the grace period). Their default, for every child.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("MEMTRIM_BUILD_DIR", ROOT / "build")).resolve()
SPEC_PATH = ROOT / "openapi.yaml"


def find_lib(build=BUILD):
    for name in ("libmemtrim.so", "libmemtrim.so.0"):
        if (build / name).exists():
            return build / name
    raise RuntimeError(f"no libmemtrim.so in {build} (set MEMTRIM_BUILD_DIR)")


class Demo:
    """One memtrim-demo process: started with a memtrim configuration and a
    workload, stopped with SIGTERM (it must exit 0)."""

    def __init__(self, config, workers=2, study_mb=64, keep_percent=2, pause_ms=200,
                 concurrency=1, studies=0, env=None, quiet=True, nofile=None, build=None,
                 ca=None, cert=None):
        # HTTPS (HttpsCertificate): requests trust `ca` (a PEM path) and send `cert`
        # ((certificate, key) paths) when the server asks for a client certificate.
        self.verify = str(ca) if ca else True
        self.cert = (str(cert[0]), str(cert[1])) if cert else None
        self.dir = tempfile.mkdtemp(prefix="memtrim-e2e-")
        self.port_file = Path(self.dir) / "port"
        self.log_path = Path(self.dir) / "demo.log"
        cfg = {"HttpPort": 0, "Database": str(Path(self.dir) / "memtrim.sqlite")}
        cfg.update(config)
        self.config = cfg
        build = Path(build) if build else BUILD
        args = [str(build / "memtrim-demo"), "--lib", str(find_lib(build)),
                "--config", json.dumps(cfg), "--workers", str(workers),
                "--study-mb", str(study_mb), "--keep-percent", str(keep_percent),
                "--concurrency", str(concurrency), "--pause-ms", str(pause_ms),
                "--studies", str(studies), "--port-file", str(self.port_file)]
        args += ["--quiet"] if quiet else []
        self.log = open(self.log_path, "w")

        def limit_fds():  # nofile: the host's soft RLIMIT_NOFILE (its hard limit unchanged)
            import resource
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env or os.environ.copy(),
                                     preexec_fn=limit_fds if nofile else None)
        self.base = None

        def listening():
            if self.proc.poll() is not None:
                raise RuntimeError(f"memtrim-demo exited {self.proc.returncode}: {self.output()}")
            return self.port_file.exists() and self.port_file.read_text().strip()
        try:
            self.port = int(wait_for(listening, 20, "memtrim-demo to write its port file"))
        except AssertionError:
            self.stop()
            raise
        self.base = (f"https://localhost:{self.port}" if "HttpsCertificate" in config
                     else f"http://127.0.0.1:{self.port}")
        self.wait_store()

    def wait_store(self, timeout=20):
        """The store opens in the background after start: wait until it has
        (or failed), so that tests of the history do not race it."""
        def opened():
            state = self.get("/healthz", timeout=10).json()["database"]
            return state != "opening" and state
        return wait_for(opened, timeout, "the store to open (or fail)")

    def url(self, path):
        return self.base + path

    def _tls(self, kw):
        if self.base.startswith("https:"):
            kw.setdefault("verify", self.verify)
            if self.cert:
                kw.setdefault("cert", self.cert)
        return kw

    def get(self, path, **kw):
        kw.setdefault("timeout", 30)
        return requests.get(self.url(path), **self._tls(kw))

    def request(self, method, path, **kw):
        kw.setdefault("timeout", 30)
        return requests.request(method, self.url(path), **self._tls(kw))

    def output(self):
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("memtrim-demo did not stop within 20 s of SIGTERM")
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def start_demo():
    """Factory: start_demo(config, **workload) -> Demo; every one is stopped
    at the end of the test and must have exited 0."""
    demos = []

    def start(config=None, **kw):
        d = Demo(config or {}, **kw)
        demos.append(d)
        return d

    yield start
    for d in demos:
        rc = d.stop()
        assert rc == 0, f"memtrim-demo exited {rc}: {d.output()[-2000:]}"


@pytest.fixture(scope="module")
def demo():
    """A shared demo for read-only checks: default policy, a file store,
    samples every second."""
    d = Demo({"SampleIntervalSeconds": 1, "ManualTrimMinIntervalMs": 0})
    yield d
    rc = d.stop()
    assert rc == 0, d.output()[-2000:]


# ---- the contract as JSON Schema ------------------------------------------

def load_spec():
    with open(SPEC_PATH) as f:
        return yaml.safe_load(f)


def _to_json_schema(node):
    """OpenAPI 3.0 schema objects -> JSON Schema (draft 7): nullable becomes
    a null type, OpenAPI-only keywords go."""
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items()
           if k not in ("nullable", "example", "examples", "xml", "externalDocs", "deprecated")}
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = out["enum"] + [None]
        else:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


def deref(spec, node):
    """A spec node with its $ref (to this spec) followed, as often as it takes."""
    while isinstance(node, dict) and "$ref" in node:
        target = spec
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


@pytest.fixture(scope="session")
def spec():
    return load_spec()


@pytest.fixture(scope="session")
def validate(spec):
    """validate(path, method, response): the body must match the schema the
    spec gives for that path, method, status and content type."""
    root = _to_json_schema(copy.deepcopy(spec))

    def check(path, method, resp):
        op = spec["paths"][path][method.lower()]
        status = str(resp.status_code)
        assert status in op["responses"], f"{method} {path}: {status} is not in the spec"
        r = deref(spec, op["responses"][status])
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip()
        assert ctype in r.get("content", {}), f"{method} {path} {status}: content type {ctype}"
        schema = r["content"][ctype]["schema"]
        if ctype == "application/json":
            body = resp.json()
            wrapped = dict(root)
            wrapped.update(_to_json_schema(copy.deepcopy(schema)))
            jsonschema.validate(body, wrapped, cls=jsonschema.Draft7Validator)
            return body
        return resp.text

    return check


def metric_value(text, name, labels=None):
    """The value of one sample in a Prometheus text page (None if absent)."""
    want = name + ("{" + labels + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == want:
            return float(value)
    return None


# ---- honest skips ---------------------------------------------------------
# A skipped case is not a pass: the session fails when a case skipped that
# tests/skips.txt does not list for "e2e" (a line "<where> <node id> <reason>",
# the format its header describes), and when no case passed at all. A skip is a
# case's skip (in its setup or its call), an expected failure (xfail: the case
# ran and failed, so it proves nothing), or a skip at collection (a module-level
# pytest.skip or importorskip, which removes every case of the module without a
# test report: it goes through the list as the module's node id).



_skipped = []  # (node id, reason)
_passed = []


def skip_reason(report):
    """What a skipped report (a case's or a collector's) says: its xfail reason or its skip's."""
    if hasattr(report, "wasxfail"):
        return f"xfail ({report.wasxfail or 'no reason given'})"
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def pytest_configure(config):
    config.addinivalue_line("markers", "survival: a survival cell's counted pairs (survival_util): "
                            "run by bench/survival.sh, measured and not gating")


def pytest_collectreport(report):
    if report.skipped:
        _skipped.append((report.nodeid, "at collection: " + skip_reason(report)))


def pytest_runtest_logreport(report):
    if report.skipped:
        _skipped.append((report.nodeid, skip_reason(report)))
    elif report.passed and report.when == "call" and not hasattr(report, "wasxfail"):
        _passed.append(report.nodeid)


_verdict = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    import fnmatch
    if exitstatus not in (0, 1):  # interrupted, a usage error, nothing collected: as pytest says
        return
    globs = listed_skips("e2e")
    # node ids as from the repository's root, whatever directory pytest ran in
    rel = os.path.relpath(session.config.rootpath, ROOT)
    ids = [(n if rel == "." else f"{rel}/{n}", r) for n, r in _skipped]
    # a line is the node id itself or a glob: a parametrized id's [...] is not a class of
    # characters (test_agent_runtimes' [ruby-300] matched nothing as a glob: CI on 5116935)
    unlisted = [(n, r) for n, r in ids
                if not any(n == g or fnmatch.fnmatchcase(n, g) for g in globs)]
    for nodeid, reason in unlisted:
        _verdict.append(f"skipped and not listed in tests/skips.txt: {nodeid}: {reason}")
    if not _passed and session.testscollected:
        _verdict.append(f"no test passed ({len(_skipped)} skipped): a stage that ran nothing "
                        "is not a pass")
    if _verdict:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _verdict:
        terminalreporter.section("honest skips (tests/skips.txt)", red=True)
        for line in _verdict:
            terminalreporter.line(line, red=True)
