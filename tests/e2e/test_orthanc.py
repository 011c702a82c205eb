"""libOrthancMemTrim.so in Debian's real Orthanc (/usr/sbin/Orthanc, 1.10.1),
started as a plain process on loopback with a temporary configuration folder
(Orthanc merges every *.json in it: orthanc.json + memtrim.json, as an
operator would). Synthetic DICOM made with pydicom is uploaded and
anonymized to grow Orthanc's heap; a trim through the API gives it back."""
import io
import json
import signal
import sqlite3
import threading
from pathlib import Path

import pytest
import requests

from hosts_util import ROOT, build_file, free_port, http_ok, procs, rss_bytes, wait_for  # noqa: F401

ORTHANC = Path("/usr/sbin/Orthanc")
pytestmark = pytest.mark.skipif(not ORTHANC.exists(), reason="Debian's orthanc is not installed")

pydicom = pytest.importorskip("pydicom")


def plugin():
    return build_file("libOrthancMemTrim.so")


def write_config(folder, memtrim_section, extra=None):
    """orthanc.json (ports, storage, the plugin) + memtrim.json (the section)."""
    folder.mkdir()
    port, dicom = free_port(), free_port()
    cfg = {"Name": "memtrim-e2e", "HttpPort": port, "DicomPort": dicom,
           "RemoteAccessAllowed": False, "AuthenticationEnabled": False,
           "StorageDirectory": str(folder.parent / "storage"),
           "IndexDirectory": str(folder.parent / "index"),
           "Plugins": [str(plugin())], "HttpThreadsCount": 16, "ConcurrentJobs": 4}
    cfg.update(extra or {})
    (folder / "orthanc.json").write_text(json.dumps(cfg, indent=2))
    if memtrim_section is not None:
        (folder / "memtrim.json").write_text(json.dumps({"MemoryTrim": memtrim_section}))
    return f"http://127.0.0.1:{port}"


def start_orthanc(procs, tmp_path, memtrim_section, extra=None):
    base = write_config(tmp_path / "config", memtrim_section, extra)
    p = procs([ORTHANC, "--verbose", tmp_path / "config"], tmp_path / "orthanc.log")
    return p, base


def wait_ready(p, base):
    def ready():
        if not p.running():
            raise AssertionError(f"Orthanc exited {p.proc.returncode}:\n{p.output()[-4000:]}")
        return http_ok(base + "/system")
    wait_for(ready, 60, "Orthanc to answer /system")


def make_instance(study_uid, series_uid, number, size=1024):
    """A 2 MB CT slice of noise (16-bit, size x size)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid
    import os
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.PatientName, ds.PatientID = "Memtrim^Test", "MEMTRIM-E2E"
    ds.StudyInstanceUID, ds.SeriesInstanceUID = study_uid, series_uid
    ds.StudyDescription, ds.Modality = "memtrim e2e", "CT"
    ds.InstanceNumber = number
    ds.Rows = ds.Columns = size
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.PixelData = os.urandom(size * size * 2)
    buf = io.BytesIO()
    ds.save_as(buf, write_like_original=False)
    return buf.getvalue()


def upload_studies(base, studies, per_study, threads=8):
    from pydicom.uid import generate_uid
    jobs = []
    for _ in range(studies):
        study, series = generate_uid(), generate_uid()
        jobs += [(study, series, i + 1) for i in range(per_study)]
    errors = []

    def worker(chunk):
        s = requests.Session()
        for study, series, n in chunk:
            r = s.post(base + "/instances", data=make_instance(study, series, n), timeout=60)
            if r.status_code != 200:
                errors.append(r.text)

    ts = [threading.Thread(target=worker, args=(jobs[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]
    return requests.get(base + "/studies", timeout=30).json()


def anonymize_all(base, study_ids, rounds=2):
    errors = []

    def worker(sid):
        for _ in range(rounds):
            r = requests.post(f"{base}/studies/{sid}/anonymize", json={}, timeout=300)
            if r.status_code != 200:
                errors.append(r.text)

    ts = [threading.Thread(target=worker, args=(sid,)) for sid in study_ids]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]


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
