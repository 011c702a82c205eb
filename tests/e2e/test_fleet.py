"""A fleet as operators watch it: Debian's Prometheus (on loopback, a
temporary data directory, 1 s scrapes) runs on a configuration made from
examples/prometheus.yml (its rule file examples/alerts.yml included) and
scrapes three real hosts at once over HTTPS (a CA made in the test, the read
token from a file, as the example does): the demo host, Debian's Orthanc with
libOrthancMemTrim.so (which also requires a client certificate: HttpsClientCA,
the example's commented cert_file/key_file uncommented), and an unmodified
program (Debian's python3) under LD_PRELOAD. Trims go with the admin token. Prometheus's HTTP API must then
return memtrim_rss_bytes, a rate() of released bytes and a histogram_quantile
of trim durations for every host, with sane values and up == 1; every query of
examples/grafana-dashboard.json must return data; the alert rules must
evaluate without error. Also: promtool check rules and promtool test rules on
examples/alerts.yml."""
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from hosts_util import build_file, procs, wait_for  # noqa: F401 (procs is a fixture)
from pkg_util import ROOT, free_port_from

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
ORTHANC = Path("/usr/sbin/Orthanc")
TOKEN = "fleet-test-token-7f3a"  # the admin token: trims
READ = "fleet-read-token-2c09"     # the read token: Prometheus
RATE_WINDOW = "30s"


def test_alert_rules_check_and_unit_tests():
    assert PROMTOOL, "promtool (Debian package prometheus) is needed"
    r = subprocess.run([PROMTOOL, "check", "rules", str(ROOT / "examples" / "alerts.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 6 rules found" in r.stdout
    r = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], capture_output=True,
                       text=True, cwd=ROOT / "tests" / "prometheus")
    assert r.returncode == 0, r.stdout + r.stderr
    # every alert of the file is exercised by the unit tests
    alerts = {r["alert"] for g in yaml.safe_load((ROOT / "examples" / "alerts.yml").read_text())["groups"]
              for r in g["rules"]}
    tested = set(re.findall(r"alertname: (\w+)", (ROOT / "tests" / "prometheus" / "alerts_test.yml").read_text()))
    assert alerts == tested, f"alerts without a unit test: {alerts - tested}"


class Fleet:
    """The test's PKI and token files: a CA, a server certificate for 127.0.0.1, a client
    certificate for Prometheus, the admin and read tokens in owner-only files."""

    def __init__(self, folder):
        from tls_util import CA
        self.ca = CA(folder / "pki")
        self.cert, self.key = self.ca.issue("localhost")
        self.client = self.ca.issue("prometheus", client=True)
        self.read_file = folder / "read.token"
        self.read_file.write_text(READ + "\n")
        self.read_file.chmod(0o600)

    def memtrim(self, port, **extra):
        """A host's "MemoryTrim" keys: HTTPS, the admin token, the read token from its file."""
        cfg = {"HttpPort": port, "HttpsCertificate": str(self.cert),
               "HttpsPrivateKey": str(self.key), "AuthToken": TOKEN,
               "ReadTokenFile": str(self.read_file)}
        cfg.update(extra)
        return cfg

    def get(self, target, path, token=READ, client=False, method="GET"):
        return requests.request(method, f"https://{target}{path}",
                                headers={"Authorization": f"Bearer {token}"} if token else {},
                                verify=str(self.ca.pem), cert=self.client if client else None,
                                timeout=30)


def prometheus_config(folder, fleet, demo_and_preload, orthanc_target):
    """examples/prometheus.yml with this test's targets, intervals and files: the CA, the read
    token, and for the orthanc-memtrim job the client certificate block uncommented."""
    text = (ROOT / "examples" / "prometheus.yml").read_text()
    head, sep, orthanc_job = text.partition("- job_name: orthanc-memtrim")
    assert sep, "examples/prometheus.yml has no orthanc-memtrim job"
    orthanc_job, n = re.subn(r"^(\s*)# ((cert|key)_file: )(.*)$", r"\1\2\4", orthanc_job,
                             flags=re.M)
    assert n == 2, "the example's commented client certificate block changed"
    text = head + sep + orthanc_job
    files = {"/etc/prometheus/memtrim-ca.pem": fleet.ca.pem,
             "/etc/prometheus/memtrim-read.token": fleet.read_file,
             "/etc/prometheus/memtrim-client.pem": fleet.client[0],
             "/etc/prometheus/memtrim-client.key": fleet.client[1]}
    for example, ours in files.items():
        assert example in text, f"examples/prometheus.yml no longer names {example}"
        text = text.replace(example, str(ours))
    cfg = yaml.safe_load(text)
    cfg["global"].update(scrape_interval="1s", evaluation_interval="1s")
    cfg["rule_files"] = [str(ROOT / "examples" / f) for f in cfg["rule_files"]]
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    jobs["memtrim"]["static_configs"] = [{"targets": demo_and_preload,
                                          "labels": {"env": "test", "service": "fleet"}}]
    jobs["orthanc-memtrim"]["static_configs"] = [{"targets": [orthanc_target],
                                                  "labels": {"env": "test", "service": "orthanc"}}]
    for job in jobs.values():
        assert job["scheme"] == "https", job
        assert job["authorization"]["credentials_file"] == str(fleet.read_file)
    assert "cert_file" not in jobs["memtrim"]["tls_config"]
    assert jobs["orthanc-memtrim"]["tls_config"]["cert_file"] == str(fleet.client[0])
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return path


CHURN = """
import sys, time
# An unmodified program: Python frees 24 MB of 64 KB blocks (glibc's heap) every 0.3 s.
while True:
    blocks = [bytes(65536) for _ in range(384)]
    del blocks
    time.sleep(0.3)
"""


def start_hosts(procs, tmp_path, fleet):
    demo_port, preload_port = free_port_from(41), free_port_from(42)
    http, dicom, orthanc_api = free_port_from(43), free_port_from(44), free_port_from(45)
    demo = procs([build_file("memtrim-demo"), "--lib", build_file("libmemtrim.so"),
                  "--config", json.dumps(fleet.memtrim(demo_port, MemoryLimitBytes=8 << 30,
                                                       Database=str(tmp_path / "demo.sqlite"))),
                  "--workers", "2", "--study-mb", "16", "--pause-ms", "200", "--quiet"],
                 tmp_path / "demo.log")
    env = dict(__import__("os").environ, LD_PRELOAD=str(build_file("libmemtrim.so")),
               MEMTRIM_CONFIG=json.dumps(fleet.memtrim(
                   preload_port, Database=str(tmp_path / "preload.sqlite"))))
    preload = procs(["/usr/bin/python3", "-c", CHURN], tmp_path / "preload.log", env=env)
    cfg = tmp_path / "orthanc"
    cfg.mkdir()
    (cfg / "orthanc.json").write_text(json.dumps({
        "Name": "memtrim-fleet", "HttpPort": http, "DicomPort": dicom,
        "RemoteAccessAllowed": False, "AuthenticationEnabled": False,
        "StorageDirectory": str(tmp_path / "storage"), "IndexDirectory": str(tmp_path / "index"),
        "Plugins": [str(build_file("libOrthancMemTrim.so"))]}))
    # The Orthanc plugin's own server over TLS, with client certificates required.
    (cfg / "memtrim.json").write_text(json.dumps({"MemoryTrim": fleet.memtrim(
        orthanc_api, HttpsClientCA=str(fleet.ca.pem))}))
    orthanc = procs([ORTHANC, cfg], tmp_path / "orthanc.log")
    # target -> (process, needs a client certificate)
    hosts = {f"127.0.0.1:{demo_port}": (demo, False), f"127.0.0.1:{preload_port}": (preload, False),
             f"127.0.0.1:{orthanc_api}": (orthanc, True)}
    for target, (p, client) in hosts.items():
        def ready():
            assert p.running(), p.output()[-3000:]
            try:
                return fleet.get(target, "/healthz", client=client).status_code == 200
            except requests.RequestException:
                return False
        wait_for(ready, 90, f"memtrim on {target}")
    # The read token is required, and the Orthanc host refuses a client without a certificate.
    orthanc_target = f"127.0.0.1:{orthanc_api}"
    assert fleet.get(f"127.0.0.1:{demo_port}", "/metrics", token=None).status_code == 401
    assert fleet.get(orthanc_target, "/metrics", client=True, token=None).status_code == 401
    r = fleet.get(orthanc_target, "/metrics")
    assert r.status_code == 403 and r.json()["error"]["code"] == "client_certificate", r.text
    return hosts


def query(base, promql):
    r = requests.get(base + "/api/v1/query", params={"query": promql}, timeout=30)
    assert r.status_code == 200, f"{promql}: {r.status_code} {r.text}"
    body = r.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def by_instance(results):
    return {r["metric"].get("instance"): float(r["value"][1]) for r in results}


@pytest.mark.skipif(PROMETHEUS is None or not ORTHANC.exists(),
                    reason="needs Debian's prometheus and orthanc")
def test_prometheus_scrapes_three_real_hosts(procs, tmp_path):  # noqa: F811
    fleet = Fleet(tmp_path)
    hosts = start_hosts(procs, tmp_path, fleet)
    targets = list(hosts)
    prom_port = free_port_from(40)
    config = prometheus_config(tmp_path, fleet, targets[:2], targets[2])
    prom = procs([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                  f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                 tmp_path / "prometheus.log")
    base = f"http://127.0.0.1:{prom_port}"

    def ready():
        assert prom.running(), prom.output()[-3000:]
        try:
            return requests.get(base + "/-/ready", timeout=5).status_code == 200
        except requests.ConnectionError:  # not listening yet
            return False
    wait_for(ready, 60, "Prometheus to be ready")

    def all_up():
        assert prom.running(), prom.output()[-3000:]
        up = by_instance(query(base, "up"))
        return len(up) == 3 and all(v == 1 for v in up.values()) and up
    up = wait_for(all_up, 90, "Prometheus to scrape the three hosts with up == 1")
    assert set(up) == set(targets), up  # IP targets keep their full instance label

    # Trims on every host, manual ones through each API (the admin token; the read token
    # Prometheus holds may not: 403),
    # spread over the rate window, while Prometheus scrapes.
    def trim_all():
        for target, (p, client) in hosts.items():
            assert p.running(), p.output()[-3000:]
            r = fleet.get(target, "/memory/trim", token=TOKEN, client=client, method="POST")
            assert r.status_code in (200, 429), (target, r.status_code, r.text)

    def trimmed_everywhere():
        trim_all()
        counts = by_instance(query(base, f"sum by (instance) (increase(memtrim_trims_total[{RATE_WINDOW}]))"))
        return len(counts) == 3 and all(v > 0 for v in counts.values())
    r = fleet.get(targets[0], "/memory/trim", method="POST")
    assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_scope", r.text
    wait_for(trimmed_everywhere, 90, "trims on every host to reach Prometheus", interval=1.2)

    # Prometheus holds each host's own figure: a trim between its last scrape and this
    # read can move the host's RSS (CI saw 43 MB scraped, 10 MB after a trim), so wait for
    # a scrape after the trims, by the condition itself.
    def rss_agrees():
        rss = by_instance(query(base, "memtrim_rss_bytes"))
        if set(rss) != set(targets):
            return None
        for target, value in rss.items():
            own = fleet.get(target, "/memory/stats", client=hosts[target][1]).json()["rss_bytes"]
            assert 1 << 20 < value < 64 << 30, (target, value)
            if not own / 4 < value < own * 4:
                return None
        return rss
    wait_for(rss_agrees, 60, "Prometheus's memtrim_rss_bytes to agree with each host's own "
             "(within 4x)", interval=1.0)

    released = by_instance(query(base, f"sum by (instance) (rate(memtrim_released_bytes_total[{RATE_WINDOW}]))"))
    assert set(released) == set(targets), released
    assert all(math.isfinite(v) and 0 <= v < 64 << 30 for v in released.values()), released

    p95 = by_instance(query(base, "histogram_quantile(0.95, sum by (instance, le) "
                                  f"(rate(memtrim_trim_duration_seconds_bucket[{RATE_WINDOW}])))"))
    assert set(p95) == set(targets), p95
    assert all(math.isfinite(v) and 0 < v <= 1 for v in p95.values()), p95

    # Every query of the Grafana dashboard returns data (Grafana's variables
    # as "All" and its intervals filled in).
    dash = json.loads((ROOT / "examples" / "grafana-dashboard.json").read_text())
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "expr" and isinstance(v, str):
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for x in node:
                walk(x)
    walk(dash)
    assert len(exprs) >= 10
    empty = []
    for expr in exprs:
        promql = (expr.replace("$job", ".*").replace("$instance", ".*")
                  .replace("$__rate_interval", RATE_WINDOW).replace("$__range", "5m")
                  .replace("$__interval", "5s"))
        trim_all()
        if not query(base, promql):
            empty.append(promql)
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
    for var in dash["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            m = re.match(r"label_values\((.*),\s*(\w+)\)$", q["query"])
            assert m, q
            match = m.group(1).replace("$job", ".*")
            r = requests.get(base + "/api/v1/series", params={"match[]": match}, timeout=10).json()
            values = {s[m.group(2)] for s in r["data"]}
            assert values, f"template variable {var['name']}: {q['query']} gives nothing"

    # The alert rules of examples/alerts.yml evaluate against real series without error.
    def rules_evaluated():
        groups = requests.get(base + "/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return len(rules) == 6 and all(r["health"] == "ok" for r in rules) and rules
    rules = wait_for(rules_evaluated, 30, "the alert rules to evaluate")
    firing = [r["name"] for r in rules if r["state"] == "firing"]
    assert not firing, f"alerts firing on healthy hosts: {firing}"
