"""/metrics: Prometheus text format that promtool accepts, memtrim_ names in
base units, the trim histogram, trims by trigger and skips by reason, and a
mallinfo2 count that polling does not drive up."""
import re
import shutil
import subprocess
import time

from conftest import metric_value


def test_promtool_accepts_it(demo):
    demo.request("POST", "/memory/trim")
    r = demo.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is needed"
    check = subprocess.run([promtool, "check", "metrics"], input=r.text, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == "" and check.stderr.strip() == "", check.stdout + check.stderr


def test_names_and_families(demo):
    text = demo.get("/metrics").text
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert line.startswith("memtrim_"), line
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for name, kind in types.items():
        if kind == "counter":
            assert name.endswith("_total"), name
    assert types["memtrim_trim_duration_seconds"] == "histogram"
    for trigger in ("manual", "periodic", "pressure", "burst"):
        assert metric_value(text, "memtrim_trims_total", f'trigger="{trigger}"') is not None
    assert 'memtrim_trim_skips_total{reason="' in text
    assert metric_value(text, "memtrim_trim_duration_seconds_bucket", 'le="+Inf"') == \
        metric_value(text, "memtrim_trim_duration_seconds_count")
    for name in ("memtrim_released_bytes_total", "memtrim_heap_probes_total",
                 "memtrim_heap_probe_seconds_total", "memtrim_housekeeper_cpu_seconds_total",
                 "memtrim_rss_bytes", "memtrim_heap_free_bytes"):
        assert name in types, name


def test_polling_does_not_multiply_mallinfo2(start_demo):
    """64 polls per second for 3 s: the shared snapshot refreshes at most once
    per StatsMaxAgeMs, so mallinfo2 runs a handful of times, not hundreds."""
    d = start_demo({"StatsMaxAgeMs": 1000, "SampleIntervalSeconds": 10}, study_mb=8)
    before = metric_value(d.get("/metrics").text, "memtrim_heap_probes_total")
    t0 = time.time()
    n = 0
    import requests
    with requests.Session() as s:
        while time.time() - t0 < 3:
            assert s.get(d.url("/memory/stats")).status_code == 200
            n += 1
    elapsed = time.time() - t0
    after = metric_value(d.get("/metrics").text, "memtrim_heap_probes_total")
    assert n > 100
    assert after - before <= elapsed / 1.0 + 2, (before, after, n)
