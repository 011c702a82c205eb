"""Debian's Orthanc (/usr/sbin/Orthanc) with libOrthancMemTrim.so, shared by
tests/e2e/test_orthanc.py, test_advice.py, the cgroup v2 tests of tests/vm and
bench/advice.py: a temporary configuration folder (Orthanc merges every *.json in it:
orthanc.json + memtrim.json, as an operator would), a start on loopback ports, and the
burst that grows its heap: synthetic 2 MB CT slices made with pydicom, uploaded by 8
threads, then anonymized. Functions of their arguments; no state."""
import io
import json
import threading
from pathlib import Path

import requests

from hosts_util import build_file, free_port, http_ok, wait_for

ORTHANC = Path("/usr/sbin/Orthanc")


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


def start_orthanc(procs, tmp_path, memtrim_section, extra=None, wrap=None):
    """Orthanc on loopback (procs: the hosts_util fixture); wrap(args), when given, wraps
    its command (Cgroup.wrap: start it inside a memory cgroup)."""
    base = write_config(tmp_path / "config", memtrim_section, extra)
    args = [ORTHANC, "--verbose", tmp_path / "config"]
    p = procs(wrap(args) if wrap else args, tmp_path / "orthanc.log")
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


def upload_studies(base, studies, per_study, threads=8, size=1024):
    from pydicom.uid import generate_uid
    jobs = []
    for _ in range(studies):
        study, series = generate_uid(), generate_uid()
        jobs += [(study, series, i + 1) for i in range(per_study)]
    errors = []

    def worker(chunk):
        # Each upload on a connection of its own, closed after it (Connection: close): no
        # upload is retried. A kept-alive connection that idled past CivetWeb's timeout was
        # closed by Orthanc, and the next request on it met a reset.
        try:
            for study, series, n in chunk:
                r = requests.post(base + "/instances", data=make_instance(study, series, n, size),
                                  headers={"Connection": "close"}, timeout=120)
                if r.status_code != 200:
                    errors.append(r.text)
        except requests.RequestException as e:  # a thread's exception must fail the burst
            errors.append(f"{type(e).__name__}: {e}")

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
        try:
            for _ in range(rounds):
                r = requests.post(f"{base}/studies/{sid}/anonymize", json={}, timeout=600)
                if r.status_code != 200:
                    errors.append(r.text)
        except requests.RequestException as e:  # a thread's exception must fail the burst
            errors.append(f"{type(e).__name__}: {e}")

    ts = [threading.Thread(target=worker, args=(sid,)) for sid in study_ids]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]
