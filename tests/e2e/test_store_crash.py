"""The store survives the host's death: kill -9 the demo host while the
housekeeper writes samples and trims; afterwards the database passes
PRAGMA integrity_check and keeps what was committed before the kill (at most
the last unflushed batch is missing). Then a new host opens the same file and
carries on."""
import os
import signal
import sqlite3

from conftest import Demo
from wait import wait_for


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
        # Committed rows we must find again after the kill: enough of both kinds.
        before = wait_for(lambda: (c := counts(db))[1] > 5 and c[2] > 3 and c, 30,
                          "more than 5 samples and 3 trims committed")
        # Kill while the writer is in its stream of writes: right after it committed more.
        wait_for(lambda: counts(db)[1] > before[1], 30, "the writer to commit again")
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
        wait_for(lambda: counts(db)[1] > samples, 10, "the new host to store a sample")
        assert again.get("/healthz").json()["database"] == "ok"
    finally:
        again.stop()
    assert counts(db)[0] == "ok"
