"""Advice end to end, in the real demo host and Debian's Orthanc: glibc
tunables from the configuration (in force, reported, changed at run time
where glibc honours it), GET /memory/arenas and GET /memory/doctor against
the OpenAPI contract (JSON and plain text), the probe budget's 503, and the
one-line exit summary in each host's log."""
import re
import signal

import pytest
import requests

from hosts_util import procs  # noqa: F401 (fixture)
from wait import wait_for
from orthanc_util import ORTHANC, start_orthanc, upload_studies, wait_ready

# A workload that spreads its free memory over many arenas: six workers, each
# allocating 40 MB studies, three at once.
MANY_ARENAS = dict(workers=6, study_mb=40, concurrency=3, pause_ms=50)


def findings(demo):
    r = demo.get("/memory/doctor")
    assert r.status_code == 200, r.text
    return {f["id"]: f for f in r.json()["findings"]}


def test_arenas_and_doctor_follow_the_contract(start_demo, validate):
    d = start_demo({"StatsMaxAgeMs": 200}, **MANY_ARENAS)
    wait_for(lambda: d.get("/memory/stats").json()["heap_timestamp_ms"], 20, "a heap reading")

    def arenas():
        r = d.get("/memory/arenas")
        return r if r.status_code == 200 and r.json()["arena_count"] >= 3 else None
    r = wait_for(arenas, 30, "a per-arena view with the workers' arenas")
    body = validate("/memory/arenas", "GET", r)
    assert body["supported"] is True and body["allocator"] == "glibc"
    assert body["arena_count"] == len(body["arenas"])
    assert [a["nr"] for a in body["arenas"]][0] == 0 and body["arenas"][0]["main"]
    for a in body["arenas"]:
        assert a["free_bytes"] == a["free_fastbin_bytes"] + a["free_bins_bytes"] + a["free_top_bytes"]
        assert a["in_use_bytes"] + a["free_bytes"] <= a["system_bytes"] + 4096
    assert body["totals"]["free_bytes"] == sum(a["free_bytes"] for a in body["arenas"])
    assert body["totals"]["system_bytes"] == sum(a["system_bytes"] for a in body["arenas"])

    # The workers' arenas hold the free memory: the doctor says so, with evidence.
    f = wait_for(lambda: findings(d).get("many_arenas"), 30, "the many_arenas finding")
    assert f["recommendation"]["kind"] == "config"
    assert f["recommendation"]["key"] == "MallocArenaMax"
    assert f["recommendation"]["value"] in (2, 4)
    assert f["evidence"]["arena_count"] >= 3
    assert f["evidence"]["free_other_arenas_bytes"] > 0
    validate("/memory/doctor", "GET", d.get("/memory/doctor"))

    text = d.get("/memory/doctor", headers={"Accept": "text/plain"})
    assert text.headers["Content-Type"].startswith("text/plain")
    validate("/memory/doctor", "GET", text)
    assert text.text.startswith("memtrim doctor: ")
    assert "recommendation: Set \"MallocArenaMax\"" in text.text
    # q-values: JSON preferred here, text there.
    r = d.get("/memory/doctor", headers={"Accept": "text/plain;q=0.5, application/json"})
    assert r.headers["Content-Type"].startswith("application/json")
    r = d.get("/memory/doctor", headers={"Accept": "application/json;q=0.1, text/plain"})
    assert r.headers["Content-Type"].startswith("text/plain")


def test_arenas_share_the_probe_budget(start_demo, validate):
    """malloc_info locks every arena: with a tiny budget and no cache age, a
    second reading in a row is refused with 503 + Retry-After; the doctor
    then says clients poll faster than the budget allows."""
    d = start_demo({"ProbeBudgetPercent": 0.001, "StatsMaxAgeMs": 0}, workers=2, study_mb=8)
    statuses = []
    for _ in range(14):
        r = d.get("/memory/arenas")
        statuses.append(r.status_code)
        validate("/memory/arenas", "GET", r)
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "probe_budget"
            assert int(r.headers["Retry-After"]) >= 1
            assert "ProbeBudgetPercent" in r.json()["error"]["message"]
    assert statuses.count(503) >= 13, statuses
    # A poller that accepts an older reading gets the cached one instead (if there is one).
    r = d.get("/memory/arenas", params={"max_age": "1h"})
    validate("/memory/arenas", "GET", r)
    if 200 in statuses:
        assert r.status_code == 200 and r.json()["age_ms"] >= 0
    r = d.get("/memory/arenas", params={"max_age": "soon"})
    assert r.status_code == 400 and "max_age" in r.json()["error"]["message"]
    f = findings(d).get("probe_budget_limited")
    assert f, findings(d)
    assert f["recommendation"]["key"] == "StatsMaxAgeMs" and f["recommendation"]["value"] >= 1000
    assert f["evidence"]["refused"] >= 13


def test_tunables_in_force_and_at_run_time(start_demo):
    d = start_demo({"MallocArenaMax": 2, "MallocTopPadBytes": 1 << 20}, **MANY_ARENAS)
    cfg = d.get("/config").json()
    assert cfg["MallocArenaMax"] == 2 and cfg["MallocTopPadBytes"] == 1 << 20
    assert cfg["MallocMmapThresholdBytes"] is None and cfg["MallocTrimThresholdBytes"] is None
    t = d.get("/memory/stats").json()["malloc_tunables"]
    assert t == {"glibc": True, "arena_max": 2, "top_pad_bytes": 1 << 20,
                 "mmap_threshold_bytes": None, "trim_threshold_bytes": None,
                 "arena_max_auto": None}
    assert "MallocArenaMax = 2 applied with mallopt" in d.output()
    # Six workers and memtrim's own threads, all allocating: at most two arenas.
    def arenas():
        r = d.get("/memory/arenas")  # 503 while the probe budget says no
        return r.json() if r.status_code == 200 else None
    a = wait_for(arenas, 30, "a per-arena reading")
    assert 1 <= a["arena_count"] <= 2, a["arena_count"]

    # The three byte tunables change at run time; the arena limit does not.
    r = d.request("PATCH", "/config", json={"MallocTopPadBytes": 2 << 20,
                                            "MallocMmapThresholdBytes": 4 << 20})
    assert r.status_code == 200, r.text
    t = d.get("/memory/stats").json()["malloc_tunables"]
    assert t["top_pad_bytes"] == 2 << 20 and t["mmap_threshold_bytes"] == 4 << 20
    r = d.request("PATCH", "/config", json={"MallocArenaMax": 4})
    assert r.status_code == 400 and "MallocArenaMax" in r.json()["error"]["message"]
    r = d.request("PATCH", "/config", json={"MallocTopPadBytes": None})
    assert r.status_code == 400 and "MallocTopPadBytes" in r.json()["error"]["message"]
    assert d.get("/config").json()["MallocTopPadBytes"] == 2 << 20  # nothing changed
    r = d.request("PATCH", "/config", json={"MallocTrimThresholdBytes": None})
    assert r.status_code == 200  # unset stays unset


def test_bad_tunable_is_a_start_error_naming_the_key(start_demo):
    with pytest.raises(RuntimeError) as e:
        start_demo({"MallocMmapThresholdBytes": 1 << 40})
    assert "MallocMmapThresholdBytes" in str(e.value)


SUMMARY = re.compile(r"memtrim/core: exit summary: uptime [\d.]+ s; trims (\d+) \(manual (\d+), "
                     r"periodic \d+, pressure \d+, burst \d+\); released (\d+) bytes .*; trimming "
                     r"[\d.]+ s, probing [\d.]+ s .*; peak RSS (\d+) bytes .*; top finding: (.*)")

SAVED = re.compile(r"; saved: RSS (\d+) bytes, without memtrim (\d+) bytes, saved (\d+) bytes "
                   r"\([\d.]+ MiB\), at peak (\d+) bytes \(peak without memtrim (\d+) bytes\), "
                   r"[\d.]+ GB-hours, memtrim CPU [\d.]+ s; top finding")


def test_exit_summary_in_the_demos_log(start_demo):
    d = start_demo({"ManualTrimMinIntervalMs": 0}, workers=2, study_mb=16)
    assert d.request("POST", "/memory/trim").status_code == 200
    assert d.stop() == 0
    lines = [ln for ln in d.output().splitlines() if "exit summary" in ln]
    assert len(lines) == 1, d.output()[-3000:]
    m = SUMMARY.search(lines[0])
    assert m, lines[0]
    assert int(m.group(1)) >= 1 and int(m.group(2)) >= 1
    assert int(m.group(4)) > 0  # peak RSS
    assert m.group(5) != ""
    # what memtrim saved: saved is the counterfactual less RSS, never below it
    s = SAVED.search(lines[0])
    assert s, lines[0]
    rss, without, saved = int(s.group(1)), int(s.group(2)), int(s.group(3))
    assert saved == without - rss and without >= rss, lines[0]
    assert int(s.group(5)) >= int(m.group(4)), lines[0]  # the counterfactual peak >= the peak


@pytest.mark.skipif(not ORTHANC.exists(), reason="Debian's orthanc is not installed")
def test_exit_summary_and_doctor_in_orthanc(procs, tmp_path):
    p, base = start_orthanc(procs, tmp_path, {"HttpPort": 0, "Database": "",
                                              "ManualTrimMinIntervalMs": 0,
                                              "MallocArenaMax": 4})
    wait_ready(p, base)
    assert "MallocArenaMax = 4 applied with mallopt" in p.output()
    upload_studies(base, studies=1, per_study=8, threads=4)
    r = requests.post(base + "/memtrim/memory/trim", timeout=60)
    assert r.status_code == 200, r.text
    doc = requests.get(base + "/memtrim/memory/doctor", timeout=30)
    assert doc.status_code == 200 and "findings" in doc.json()
    text = requests.get(base + "/memtrim/memory/doctor", headers={"Accept": "text/plain"},
                        timeout=30)
    assert text.text.startswith("memtrim doctor: "), text.text[:200]
    arenas = requests.get(base + "/memtrim/memory/arenas", timeout=30)
    assert arenas.status_code in (200, 503), arenas.text
    if arenas.status_code == 200:
        assert arenas.json()["arena_count"] <= 4
    assert p.stop(signal.SIGTERM, grace=60) == 0, p.output()[-4000:]
    lines = [ln for ln in p.output().splitlines() if "exit summary" in ln]
    assert len(lines) == 1, p.output()[-4000:]
    m = SUMMARY.search(lines[0])
    assert m and int(m.group(2)) >= 1, lines[0]


def test_under_jemalloc_no_arena_view_and_no_tunables(start_demo, validate):
    """Under another allocator glibc's tunables are not applied (a warning says
    so, /memory/stats says glibc: false) and /memory/arenas says it has no
    per-arena view, and why."""
    from test_allocators import env_with, lib_path
    d = start_demo({"MallocArenaMax": 2}, workers=2, study_mb=8,
                   env=env_with(lib_path("jemalloc")))
    assert "glibc does not serve malloc in this process: not applied" in d.output()
    t = d.get("/memory/stats").json()["malloc_tunables"]
    assert t["glibc"] is False and t["arena_max"] is None
    r = d.get("/memory/arenas")
    body = validate("/memory/arenas", "GET", r)
    assert body["supported"] is False and body["allocator"] == "jemalloc"
    assert "jemalloc" in body["reason"] and body["arenas"] == []
    doc = validate("/memory/doctor", "GET", d.get("/memory/doctor"))
    assert doc["allocator"] == "jemalloc"
    assert "many_arenas" not in [f["id"] for f in doc["findings"]]
