"""Manual trims: memory comes back after churn, the rate limit (429 then
success after the interval), and concurrent requests coalescing into one trim."""
import sqlite3
import threading
import time

from conftest import metric_value
from wait import wait_for, wait_for_stats

# No periodic, burst or pressure trims: the freed memory stays resident until we trim.
QUIET_POLICY = {"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0}


def test_manual_trim_after_churn_releases_memory(start_demo):
    d = start_demo(dict(QUIET_POLICY, ManualTrimMinIntervalMs=0), workers=4, study_mb=64,
                   keep_percent=2, pause_ms=3000)
    wait_for_stats(d, lambda s: (s["heap_free_bytes"] or 0) >= 32 << 20, "free heap")
    r = d.request("POST", "/memory/trim")
    assert r.status_code == 200, r.text
    t = r.json()
    assert t["released_bytes"] > 0, t
    assert t["rss_after_bytes"] < t["rss_before_bytes"], t
    assert t["malloc_trim_result"] == 1
    assert not t["coalesced"]
    assert t["released_nothing_reason"] is None, t  # it released: no reason


# What a trim's record may say when it released under a page, with the readings a host
# at rest gives (heap and per-arena readings both taken): never "unexplained" or
# "not measured" there.
TOLD_APART = {"nothing_free", "pinned_small_chunks", "pinned_chunk_edges",
              "pinned_thread_arena_top", "not_resident"}


def stored_trims(d):
    """The store's trim rows, read from its file (an HTTP request would leave freed
    memory of its own for the next trim to give back)."""
    with sqlite3.connect(f"file:{d.config['Database']}?mode=ro", uri=True) as db:
        return db.execute("SELECT seq, trigger, released_bytes, heap_free_before_bytes,"
                          " nothing_reason FROM trims ORDER BY start_ms").fetchall()


def test_trim_that_releases_nothing_says_why(start_demo, validate):
    """A fresh demo host at rest: one small study, then nothing, and periodic trims each
    second with no HTTP request between them. The first after the per-arena reading gives
    back that reading's buffers; the ones after it release nothing and say why, in the
    store and in /memory/trims, in the contract's terms."""
    d = start_demo(dict(QUIET_POLICY, TrimIntervalSeconds=1, TrimMinReleasableBytes=0,
                        ProbeBudgetPercent=10, SampleIntervalSeconds=3600),
                   workers=1, study_mb=4, pause_ms=3600000, quiet=False)
    wait_for(lambda: "study 1 on worker" in d.output(), what="the one study's end")
    arenas = wait_for(lambda: (r := d.get("/memory/arenas", params={"max_age": "0ms"}))
                      .status_code == 200 and r, what="a per-arena reading")
    assert arenas.json()["arenas"], arenas.text
    since = len(stored_trims(d))
    rows = wait_for(lambda: t[since:] if len(t := stored_trims(d)) >= since + 3 else None,
                    timeout=60, what="three periodic trims after the reading")
    assert all(r[1] == 1 for r in rows), rows  # periodic
    last = rows[2]  # two trims after the last request
    print("periodic trims after the reading:", rows)
    assert last[2] < 4096, rows
    assert last[4] in TOLD_APART, rows
    # nothing_free exactly when the heap's free memory was under a page
    assert (last[4] == "nothing_free") == (last[3] < 4096), rows
    api = validate("/memory/trims", "GET", d.get("/memory/trims"))["trims"]
    row = next(x for x in api if x["id"] == last[0])
    assert row["released_nothing_reason"] == last[4], (row, last)
    assert row["released_bytes"] == last[2]


def test_rate_limit_then_success(start_demo):
    d = start_demo(dict(QUIET_POLICY, ManualTrimMinIntervalMs=1500), study_mb=8)
    assert d.request("POST", "/memory/trim").status_code == 200
    r = d.request("POST", "/memory/trim")
    assert r.status_code == 429, r.text
    retry_s = int(r.headers["Retry-After"])
    assert 1 <= retry_s <= 2
    err = r.json()["error"]
    assert err["code"] == "rate_limited" and "ManualTrimMinIntervalMs" in err["message"]
    assert 0 < err["retry_after_ms"] <= 1500
    assert d.get("/memory/trim").status_code == 429  # GET trims too, so it is limited too
    # The subject here is time itself: a client that waits what retry_after_ms says is served.
    time.sleep(err["retry_after_ms"] / 1000 + 0.05)
    r = d.request("POST", "/memory/trim")
    assert r.status_code == 200, r.text
    metrics = d.get("/metrics").text
    assert "memtrim_manual_trims_rate_limited_total 2" in metrics


def test_concurrent_trims_coalesce(start_demo):
    """Trims of a heap with much freed memory take tens of ms; three requests
    sent together on three connections (four HTTP threads) land during one
    trim, and at least one shares its result. Retried: it is a race."""
    d = start_demo(dict(QUIET_POLICY, ManualTrimMinIntervalMs=0, HttpThreads=4), workers=4,
                   study_mb=128, keep_percent=2, pause_ms=50, concurrency=2)
    for attempt in range(20):
        wait_for_stats(d, lambda s: (s["heap_free_bytes"] or 0) >= 64 << 20, "free heap")
        barrier = threading.Barrier(3)
        results = []

        def trim():
            barrier.wait()
            results.append(d.request("POST", "/memory/trim"))

        threads = [threading.Thread(target=trim) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.status_code == 200 for r in results), [r.text for r in results]
        bodies = [r.json() for r in results]
        coalesced = [b for b in bodies if b["coalesced"]]
        if coalesced:
            # A coalesced answer is the result of a trim one of the other requests started
            # (nothing else trims here: QUIET_POLICY): its id is that request's.
            started = {b["id"] for b in bodies if not b["coalesced"]}
            assert started and all(b["id"] in started for b in coalesced), bodies
            # Earlier attempts coalesced none (else they had returned): the counter is this
            # attempt's count.
            total = metric_value(d.get("/metrics").text, "memtrim_manual_trims_coalesced_total")
            assert total == len(coalesced), (total, bodies)
            return
    raise AssertionError(f"no coalesced trim in 20 attempts; last: {bodies}")
