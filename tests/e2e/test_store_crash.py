"""The store survives the host's death: kill -9 the demo host while the
housekeeper writes samples and trims; afterwards the database passes
PRAGMA integrity_check and keeps what was committed before the kill (at most
the last unflushed batch is missing). Then a new host opens the same file and
carries on."""
import os
import signal
import sqlite3
import time

from conftest import Demo


def counts(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        check = con.execute("PRAGMA integrity_check").fetchone()[0]
        samples = con.execute("SELECT count(*) FROM samples").fetchone()[0]
        trims = con.execute("SELECT count(*) FROM trims").fetchone()[0]
        return check, samples, trims
    finally:
        con.close()


def test_kill_9_mid_write_keeps_the_store_intact():
    # Samples every 50 ms and a trim every 100 ms: the writer is almost always busy.
    # (The trim budget, the busy-host deferral and the adaptive gap, which would space
    # the trims out, are off: this test is about the store.)
    config = {"SampleIntervalSeconds": 0.05, "TrimIntervalSeconds": 0.1,
              "TrimMinReleasableBytes": 0, "StatsMaxAgeMs": 0, "TrimBudgetPercent": 100,
              "TrimBusyCpuPercent": 0, "TrimGapMaxFactor": 1}
    demo = Demo(config, workers=2, study_mb=32, pause_ms=50)
    db = demo.config["Database"]
    try:
        time.sleep(1.5)
        seen = demo.get("/metrics").text
        stored = [l for l in seen.splitlines() if l.startswith("memtrim_samples_stored_total")]
        assert stored and float(stored[0].split()[-1]) > 5
        before = counts(db)  # committed rows we must find again after the kill
        time.sleep(0.73)  # an arbitrary moment inside a stream of writes
        os.kill(demo.proc.pid, signal.SIGKILL)
        demo.proc.wait(timeout=10)
        assert demo.proc.returncode == -signal.SIGKILL
    finally:
        demo.stop()
    check, samples, trims = counts(db)
    assert check == "ok"
    assert samples >= before[1] and trims >= before[2]
    assert samples > 5 and trims > 3  # one sample per 250 ms housekeeper tick at most

    # A new host opens the same store and goes on writing.
    again = Demo({**config, "Database": db}, workers=1, study_mb=8, pause_ms=200)
    try:
        deadline = time.time() + 10
        while time.time() < deadline and counts(db)[1] <= samples:
            time.sleep(0.1)
        assert counts(db)[1] > samples
        assert again.get("/healthz").json()["database"] == "ok"
    finally:
        again.stop()
    assert counts(db)[0] == "ok"
