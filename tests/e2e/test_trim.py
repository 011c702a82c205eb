"""Manual trims: memory comes back after churn, the rate limit (429 then
success after the interval), and concurrent requests coalescing into one trim."""
import os
import sqlite3
import threading
import time
from pathlib import Path

from conftest import BUILD, metric_value
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


SYS_FUTEX = 202  # x86_64


def threads_in(pid):
    """(comm, syscall number, first argument) of each of the host's threads."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            call = (task / "syscall").read_text().split() + ["", ""]
        except OSError:
            continue  # a thread that ended
        out.append((comm, call[0], call[1]))
    return out


def http_waiters(pid):
    """How many of the host's HTTP threads (libmicrohttpd's MHD-worker) wait in futex(2) on
    one address, the most on any: requests waiting for the trim in progress (trim_run_at
    waits on its condition; an idle worker is in epoll_wait)."""
    at = {}
    for comm, nr, addr in threads_in(pid):
        if comm == "MHD-worker" and nr == str(SYS_FUTEX):
            at[addr] = at.get(addr, 0) + 1
    return max(at.values(), default=0)


def test_concurrent_trims_coalesce(start_demo, tmp_path):
    """Requests that arrive during a trim share its result. No race: the host's malloc_trim
    is held (libmemtrim-test-trim-hold.so, preloaded: tests/e2e/trim_hold.c) while the first
    request's trim runs; the two others are sent once it is held, each once the one before
    waits for it (HTTP threads in futex on one address), and it is let go once both wait.
    Both answers are then the
    first one's trim, coalesced, and the counter says 2. Run 3 times, each on a fresh host.
    Control suite-trim-no-coalesce (a request that finds a trim running starts its own):
    a second trim enters the hold."""
    hold_lib = BUILD / "libmemtrim-test-trim-hold.so"
    assert hold_lib.exists(), f"{hold_lib} is missing (built with MEMTRIM_TESTS)"
    for run in range(3):
        hold = tmp_path / f"hold-{run}"
        entered = Path(f"{hold}.entered")
        env = dict(os.environ, LD_PRELOAD=str(hold_lib), MEMTRIM_TEST_TRIM_HOLD=str(hold))
        d = start_demo(dict(QUIET_POLICY, ManualTrimMinIntervalMs=0, HttpThreads=4),
                       workers=1, study_mb=16, pause_ms=50, env=env)
        hold.write_text("held\n")
        results = [None] * 3

        def trim(i):
            results[i] = d.request("POST", "/memory/trim")

        first = threading.Thread(target=trim, args=(0,))
        first.start()
        wait_for(entered.exists, 30, "the first request's trim to be held")
        # Each waits for the held trim before the next is sent: a libmicrohttpd worker takes
        # every connection waiting at the socket when it wakes, and one that then waits for
        # the trim leaves the other queued behind it (cut after 10 s). The control: a second
        # trim enters the hold instead.
        others = []
        try:
            for i in (1, 2):
                others.append(threading.Thread(target=trim, args=(i,)))
                others[-1].start()
                wait_for(lambda: http_waiters(d.proc.pid) >= i or
                         entered.read_text().count("trim") > 1,
                         30, f"request {i + 1} to wait for the held trim")
        except AssertionError as e:
            raise AssertionError(f"{e}; threads {threads_in(d.proc.pid)}; {d.output()[-1500:]}")
        finally:
            trims_entered = entered.read_text().count("trim")
            hold.unlink()
        for t in [first] + others:
            t.join()
        assert trims_entered == 1, f"{trims_entered} trims entered malloc_trim at once"
        assert all(r.status_code == 200 for r in results), [r.text for r in results]
        bodies = [r.json() for r in results]
        assert not bodies[0]["coalesced"], bodies
        assert [b["coalesced"] for b in bodies[1:]] == [True, True], bodies
        assert all(b["id"] == bodies[0]["id"] for b in bodies[1:]), bodies
        total = metric_value(d.get("/metrics").text, "memtrim_manual_trims_coalesced_total")
        assert total == 2, (total, bodies)
        assert d.stop() == 0, d.output()[-2000:]
