"""libOrthancMemTrim.so in Debian's real Orthanc (/usr/sbin/Orthanc, 1.10.1),
started as a plain process on loopback with a temporary configuration folder
(Orthanc merges every *.json in it: orthanc.json + memtrim.json, as an
operator would). Synthetic DICOM made with pydicom is uploaded and
anonymized to grow Orthanc's heap; a trim through the API gives it back."""
import json
import signal
import sqlite3

import pytest
import requests

from hosts_util import ROOT, procs, rss_bytes  # noqa: F401
from orthanc_util import ORTHANC, anonymize_all, start_orthanc, upload_studies, wait_ready

pytestmark = pytest.mark.skipif(not ORTHANC.exists(), reason="Debian's orthanc is not installed")

pydicom = pytest.importorskip("pydicom")


def test_orthanc_plugin_trims_after_anonymization(procs, tmp_path):
    # The shipped example section, with only manual trims: the test measures what one
    # trim gives back.
    section = json.loads((ROOT / "examples/orthanc/memtrim.json").read_text())["MemoryTrim"]
    section.update({"HttpPort": 0, "TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0,
                    "PressureRatio": 0, "ManualTrimMinIntervalMs": 0})
    p, base = start_orthanc(procs, tmp_path, section)
    wait_ready(p, base)
    api = f"http://127.0.0.1:{p.api_port()}"
    log = p.output()
    assert "Registering plugin 'memtrim'" in log, log[-3000:]

    # The embedded API and the same API inside Orthanc's REST API.
    assert requests.get(api + "/healthz", timeout=10).json()["status"] == "ok"
    inside = requests.get(base + "/memtrim/healthz", timeout=10)
    assert inside.status_code == 200 and inside.json()["status"] == "ok", inside.text
    assert requests.get(base + "/memtrim/nope", timeout=10).status_code == 404
    page = requests.get(base + "/memtrim/", timeout=10)  # the dashboard (relative links)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert requests.delete(base + "/memtrim/memory/stats", timeout=10).status_code == 405
    # a page elsewhere cannot trim through Orthanc either (a browser adds Orthanc's credentials)
    for h in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        r = requests.get(base + "/memtrim/memory/trim", headers=h, timeout=10)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin", r.text
    # No Database in the section: the store goes beside Orthanc's index.
    assert (tmp_path / "index" / "memtrim.sqlite").exists()

    rss_start = rss_bytes(p.pid)
    studies = upload_studies(base, studies=4, per_study=24)
    assert len(studies) == 4
    anonymize_all(base, studies)
    rss_before = rss_bytes(p.pid)
    stats = requests.get(base + "/memtrim/memory/stats", timeout=10).json()
    print(f"\nOrthanc RSS: {rss_start >> 20} MB at start, {rss_before >> 20} MB after 96 "
          f"uploads and 8 anonymizations (heap free {stats.get('heap_free_bytes', 0) >> 20} MB)")
    assert rss_before > rss_start + (32 << 20), (rss_start, rss_before)

    r = requests.post(base + "/memtrim/memory/trim", timeout=60)
    assert r.status_code == 200, r.text
    trim = r.json()
    rss_after = rss_bytes(p.pid)
    print(f"trim through /memtrim/memory/trim: released {trim['released_bytes'] >> 20} MB in "
          f"{trim['duration_seconds'] * 1000:.1f} ms; RSS {trim['rss_before_bytes'] >> 20} -> "
          f"{trim['rss_after_bytes'] >> 20} MB (process: {rss_before >> 20} -> {rss_after >> 20} MB)")
    assert trim["released_bytes"] > 0, trim
    assert trim["rss_after_bytes"] < trim["rss_before_bytes"], trim
    assert rss_after < rss_before
    # The embedded API sees the same history.
    trims = requests.get(api + "/memory/trims", timeout=10).json()
    assert trims["summary"]["count"] >= 1

    metrics = requests.get(base + "/tools/metrics-prometheus", timeout=10).text
    for name in ("orthanc_memory_trimming_duration_ms", "memtrim_rss_mb", "memtrim_heap_free_mb",
                 "memtrim_trims_total", "memtrim_released_mb_total"):
        assert any(line.startswith(name + " ") for line in metrics.splitlines()), \
            f"{name} missing from Orthanc's metrics:\n{metrics}"
    total = [ln for ln in metrics.splitlines() if ln.startswith("memtrim_trims_manual_total ")]
    assert float(total[0].split()[1]) >= 1

    assert p.stop(signal.SIGTERM, grace=60) == 0, p.output()[-4000:]
    log = p.output()
    assert "memtrim/orthanc: finalize: stopping memtrim" in log
    assert "memtrim/core: stopped" in log and "memtrim/orthanc: finalize: done" in log
    assert "Orthanc has stopped" in log
    with sqlite3.connect(tmp_path / "index" / "memtrim.sqlite") as c:
        assert c.execute("SELECT count(*) FROM trims").fetchone()[0] >= 1


@pytest.mark.parametrize("section, key", [
    ({"TrimIntervalSecond": 5}, "TrimIntervalSecond"),
    ({"HttpPort": "8043"}, "HttpPort"),
    ([], "MemoryTrim"),
])
def test_bad_section_stops_orthanc(procs, tmp_path, section, key):
    p, base = start_orthanc(procs, tmp_path, section)
    rc = p.wait(60)
    log = p.output()
    assert rc != 0, log[-3000:]
    errors = [ln for ln in log.splitlines() if "invalid \"MemoryTrim\" section" in ln]
    assert errors and key in errors[0], log[-3000:]


def test_port_in_use_leaves_orthanc_running(procs, tmp_path):
    """memtrim's own failures are not Orthanc's: a taken port is logged,
    Orthanc serves on, /memtrim/ says memtrim is not running."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        p, base = start_orthanc(procs, tmp_path, {"HttpPort": taken, "Database": ""})
        wait_ready(p, base)
        r = requests.get(base + "/memtrim/healthz", timeout=10)
        assert r.status_code == 503 and r.json()["error"]["code"] == "not_running", r.text
        assert "Orthanc runs on without it" in p.output()
        assert p.stop(signal.SIGTERM, grace=60) == 0, p.output()[-3000:]
