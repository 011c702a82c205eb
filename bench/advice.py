#!/usr/bin/python3
"""Advice benchmark (docs/benchmarks.md, "Advice: glibc's tunables and the doctor"):
peak RSS, RSS after a burst and the host's throughput, on the demo workload
and on Debian's Orthanc (uploads + anonymizations, as tests/e2e/test_orthanc.py),
in five set-ups, one run each, in this order:

  none           the host alone (no memtrim; Orthanc without the plugin)
  arena2, arena4 memtrim with only MallocArenaMax 2 / 4 (every trim off)
  memtrim        memtrim at its defaults
  doctor         memtrim at its defaults plus what its doctor recommended
                 after the `memtrim` run (its first finding with a config key)

RSS "after" is read AFTER_S seconds after the burst, the host idle.
Usage: bench/advice.py [build-dir] [demo|orthanc|both|throughput]
throughput: ROUNDS (default 5) alternating rounds of the demo and 3 of Orthanc,
memtrim alone vs memtrim + MallocArenaMax 2, medians (the 2 % question).
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if len(sys.argv) > 1:
    os.environ["MEMTRIM_BUILD_DIR"] = str(Path(sys.argv[1]).resolve())
WHICH = sys.argv[2] if len(sys.argv) > 2 else "both"
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import requests  # noqa: E402
from hosts_util import BUILD, Proc, wait_for  # noqa: E402

AFTER_S = int(os.environ.get("AFTER_S", "10"))
NO_TRIMS = {"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0}
DEMO = dict(workers=8, study_mb=100, concurrency=4, pause_ms=20, studies=48)


def loadavg():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def status(pid, key):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def mib(b):
    return b / (1 << 20)


def doctor(api):
    r = requests.get(api + "/memory/doctor", timeout=30).json()
    pick = next((f for f in r["findings"] if f["recommendation"]["kind"] == "config"
                 and f["recommendation"]["key"] and f["recommendation"]["value"] is not None),
                None)
    return pick, [f["id"] for f in r["findings"]]


def arenas(api):
    for _ in range(60):
        r = requests.get(api + "/memory/arenas", timeout=30)
        if r.status_code == 200:
            return r.json()["arena_count"]
        time.sleep(min(float(r.headers.get("Retry-After", "1")), 2))
    return None


def report(host, name, tp, unit, peak, after, extra=""):
    print(f"{host:8} {name:8} throughput {tp:8.3f} {unit:10} peak RSS {mib(peak):7.1f} MiB  "
          f"RSS {AFTER_S} s after {mib(after):7.1f} MiB  load {loadavg()}  {extra}", flush=True)


# ---- the demo ------------------------------------------------------------------

def demo_run(name, config, want_doctor=False):
    """One burst of DEMO['studies'] studies, then AFTER_S s idle (--linger): the
    demo prints its throughput, peak RSS and RSS at the end of the idle time.
    want_doctor: ask the doctor as soon as the burst is over."""
    d = Path(tempfile.mkdtemp(prefix="memtrim-bench-"))
    args = [BUILD / "memtrim-demo", "--workers", DEMO["workers"], "--study-mb", DEMO["study_mb"],
            "--concurrency", DEMO["concurrency"], "--pause-ms", DEMO["pause_ms"],
            "--studies", DEMO["studies"], "--linger", AFTER_S, "--quiet"]
    if config is None:
        args.append("--no-memtrim")
    else:
        args += ["--config", json.dumps({"HttpPort": 0, "Database": "", **config}),
                 "--port-file", d / "port"]
    p = Proc(args, d / "demo.log")
    extra, pick = "", None
    if config and "MallocArenaMax" in config:
        extra = f"MallocArenaMax {config['MallocArenaMax']}"
    if want_doctor:
        port = wait_for(lambda: (d / "port").exists() and (d / "port").read_text().strip(), 30,
                        "the port")
        api = f"http://127.0.0.1:{port}"
        wait_for(lambda: "workload done" in p.output(), 900, "the burst", interval=0.2)
        pick, ids = doctor(api)
        extra = f"arenas {arenas(api)}; doctor: {ids}"
    assert p.wait(900) == 0, p.output()[-2000:]
    out = p.output()
    peak = int(out.split("(peak ")[1].split()[0]) << 20
    after = int(out.split("memtrim-demo: RSS ")[1].split()[0]) << 20
    tp = float(out.split("throughput: ")[1].split("= ")[1].split()[0])
    report("demo", name, tp, "studies/s", peak, after, extra)
    return pick


# ---- Orthanc ------------------------------------------------------------------

ORTHANC_STUDIES, ORTHANC_PER_STUDY, ORTHANC_ROUNDS = 4, 24, 2


def orthanc_burst(section):
    """Start Debian's Orthanc (section None = without the plugin) and run the burst:
    96 uploads (8 threads), then 2 anonymizations of each study, as
    tests/e2e/test_orthanc.py. Returns the running Proc and the burst's seconds."""
    import orthanc_util as to
    tmp = Path(tempfile.mkdtemp(prefix="memtrim-bench-orthanc-"))
    extra_cfg = {"Plugins": []} if section is None else None
    base = to.write_config(tmp / "config", None if section is None else
                           {"HttpPort": 0, "Database": "", **section}, extra_cfg)
    p = Proc([to.ORTHANC, "--verbose", tmp / "config"], tmp / "orthanc.log")
    try:
        to.wait_ready(p, base)
        t0 = time.time()
        studies = to.upload_studies(base, ORTHANC_STUDIES, ORTHANC_PER_STUDY)
        to.anonymize_all(base, studies, rounds=ORTHANC_ROUNDS)
        return p, time.time() - t0
    except BaseException:
        p.stop(grace=60)
        raise


def orthanc_run(name, section, want_doctor=False):
    p, elapsed = orthanc_burst(section)
    try:
        time.sleep(AFTER_S)  # the host idle, memtrim (if any) on its own
        after, peak = status(p.pid, "VmRSS:"), status(p.pid, "VmHWM:")
        pick, extra = None, ""
        if section and "MallocArenaMax" in section:
            extra = f"MallocArenaMax {section['MallocArenaMax']}"
        if section is not None:
            api = f"http://127.0.0.1:{p.api_port()}"
            extra += f"; arenas {arenas(api)}"
            if want_doctor:
                pick, ids = doctor(api)
                extra += f"; doctor: {ids}"
        work = ORTHANC_STUDIES * ORTHANC_PER_STUDY
        report("orthanc", name, work / elapsed, "uploads/s", peak, after,
               f"(burst {elapsed:.1f} s incl. {ORTHANC_STUDIES * ORTHANC_ROUNDS} anonymizations) "
               + extra)
        return pick
    finally:
        p.stop(grace=60)


def throughput():
    import statistics
    global AFTER_S
    AFTER_S = 1
    rounds = int(os.environ.get("ROUNDS", "5"))
    sets = [("memtrim", {}), ("doctor", {"MallocArenaMax": 2})]
    got = {n: [] for n, _ in sets}
    for i in range(rounds):
        for n, c in (sets if i % 2 == 0 else sets[::-1]):
            got[n].append(demo_tp(n, c))
    for n, v in got.items():
        print(f"demo     {n:8} median {statistics.median(v):.3f} studies/s of {rounds}: "
              f"{', '.join(f'{x:.2f}' for x in v)}; load {loadavg()}", flush=True)
    if not Path("/usr/sbin/Orthanc").exists():
        return
    got = {n: [] for n, _ in sets}
    for i in range(3):
        for n, c in (sets if i % 2 == 0 else sets[::-1]):
            got[n].append(orthanc_tp(n, c))
    for n, v in got.items():
        print(f"orthanc  {n:8} median {statistics.median(v):.3f} uploads/s of 3: "
              f"{', '.join(f'{x:.2f}' for x in v)}; load {loadavg()}", flush=True)


def demo_tp(name, config):
    d = Path(tempfile.mkdtemp(prefix="memtrim-bench-"))
    args = [BUILD / "memtrim-demo", "--workers", DEMO["workers"], "--study-mb", DEMO["study_mb"],
            "--concurrency", DEMO["concurrency"], "--pause-ms", DEMO["pause_ms"],
            "--studies", DEMO["studies"], "--quiet", "--config",
            json.dumps({"HttpPort": 0, "Database": "", **config})]
    p = Proc(args, d / "demo.log")
    assert p.wait(900) == 0, p.output()[-2000:]
    return float(p.output().split("throughput: ")[1].split("= ")[1].split()[0])


def orthanc_tp(name, section):
    p, elapsed = orthanc_burst(section)
    p.stop(grace=60)
    return ORTHANC_STUDIES * ORTHANC_PER_STUDY / elapsed


def main():
    if WHICH == "throughput":
        print(f"# advice throughput {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
              f"load average {loadavg()}")
        throughput()
        return
    print(f"# advice benchmark {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
          f"load average {loadavg()}")
    if WHICH in ("demo", "both"):
        print(f"# demo: {DEMO}, RSS read {AFTER_S} s after the last study")
        demo_run("none", None)
        demo_run("arena2", {"MallocArenaMax": 2, **NO_TRIMS})
        demo_run("arena4", {"MallocArenaMax": 4, **NO_TRIMS})
        pick = demo_run("memtrim", {}, want_doctor=True)
        print(f"#   the doctor recommended: {pick['recommendation'] if pick else None}")
        if pick:
            rec = pick["recommendation"]
            demo_run("doctor", {rec["key"]: rec["value"]})
    if WHICH in ("orthanc", "both") and Path("/usr/sbin/Orthanc").exists():
        print(f"# orthanc: {ORTHANC_STUDIES} studies x {ORTHANC_PER_STUDY} 2 MB instances "
              f"uploaded by 8 threads, {ORTHANC_ROUNDS} anonymizations of each study; RSS read "
              f"{AFTER_S} s after")
        orthanc_run("none", None)
        orthanc_run("arena2", {"MallocArenaMax": 2, **NO_TRIMS})
        orthanc_run("arena4", {"MallocArenaMax": 4, **NO_TRIMS})
        pick = orthanc_run("memtrim", {}, want_doctor=True)
        print(f"#   the doctor recommended: {pick['recommendation'] if pick else None}")
        if pick:
            rec = pick["recommendation"]
            orthanc_run("doctor", {rec["key"]: rec["value"]})
    print(f"# load average after: {loadavg()}")


if __name__ == "__main__":
    main()
