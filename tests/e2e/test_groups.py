"""Worker groups (issue 21, docs/groups.md): a preforking server's processes
with libmemtrim.so preloaded, FollowFork and one HttpPort. The master serves
the API for all of them and owns the store; the workers report over the
socketpair made at fork and trim themselves when asked. Real hosts:
memtrim-prefork (the issue's workload: a master, N workers each with one
long-lived worker thread, studies in small blocks), Debian's gunicorn and
PHP-FPM. The cgroup case needs root and a memory controller (it skips with
the reason otherwise)."""
import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import threading
import time

import pytest
import requests

from wait import group_trim
from survival_util import control, pairs
from hosts_util import (build_file, cgroup, channels, children_of, free_port, http_ok,  # noqa: F401
                        pid_alive, preload_env, procs, wait_for, wait_store)

PYTHON = "/usr/bin/python3"


def group(api):
    return requests.get(api + "/memory/stats", timeout=10).json().get("group")


def member_pids(api):
    g = group(api)
    return sorted(m["pid"] for m in g["members"]) if g else []


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def start_prefork(procs, tmp_path, args, config=None, name="prefork", wrap=None, store=True):
    """memtrim-prefork preloaded with memtrim on a free port; (its Proc, its API's base URL).
    With store, once the master's API answers and its store has opened (hosts_util.wait_store:
    the history routes answer 503 until then); without, at once (the survival runs)."""
    port = free_port()
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite"),
           "SampleIntervalSeconds": 1}
    cfg.update(config or {})
    cmd = [build_file("memtrim-prefork")] + args
    if wrap:
        cmd = wrap(["/usr/bin/env", f"LD_PRELOAD={build_file('libmemtrim.so')}",
                    "MEMTRIM_CONFIG=" + json.dumps(cfg)] + cmd)
        p = procs(cmd, tmp_path / f"{name}.log")
    else:
        p = procs(cmd, tmp_path / f"{name}.log", env=preload_env(cfg))
    api = f"http://127.0.0.1:{port}"
    if store:
        wait_store(api)
    return p, api


def forked(p):
    line = wait_for(lambda: next((l for l in p.output().splitlines() if '"forked"' in l), None),
                    30, "the workers to be forked")
    return json.loads(line)


def stop_group(p, sent=None):
    """Stop memtrim-prefork --hold (SIGTERM; its master then ends each worker with SIGTERM):
    every worker must have ended by the signal it was sent, SIGTERM or what the test sent
    it (sent: {pid: signal}), and the master's exit code must say the same."""
    rc = p.stop()
    last = [ln for ln in p.output().splitlines() if ln.startswith('{"workers"')]
    assert last, f"the master printed no result (rc {rc}):\n{p.output()[-3000:]}"
    res = json.loads(last[-1])
    for st in res["status"]:
        want = (sent or {}).get(st["pid"], signal.SIGTERM)
        assert st.get("signal") == want, f"worker {st}, sent signal {want}:\n{p.output()[-3000:]}"
    assert rc == (0 if res["finished"] == res["workers"] else 1), (rc, res)
    return res


def test_one_port_trims_every_member_and_names_each_pid(procs, tmp_path):
    """Three workers hold 40 MB each that they freed; one port answers for the
    group; one trim releases it in every worker, each in its own process; the
    store names each pid; /metrics labels the live members."""
    # Only the request trims here: a worker's own periodic or burst trim (40 MB freed is
    # past 10 % of its RSS) could take the memory first (CI saw 118 KB left to release).
    quiet = {"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0,
             "ManualTrimMinIntervalMs": 0}
    p, api = start_prefork(procs, tmp_path, ["--workers", "3", "--studies", "1", "--study-mb",
                                             "40", "--hold", "--pid-dir", str(tmp_path)],
                           config=quiet)
    info = forked(p)
    everyone = sorted([info["master"]] + info["pids"])
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == everyone, 20,
             "the workers to join")
    wait_for(lambda: len(list(tmp_path.glob("worker.*"))) == 3, 30, "the studies")
    g = group(api)
    assert g["member_count"] == 4 and g["joined"] == 3 and g["left"] == 0, g
    assert sum(1 for m in g["members"] if m["serves"]) == 1
    assert all(m["program"] == "memtrim-prefork" for m in g["members"]), g
    # Nobody but the master listens: the workers have no socket of memtrim's port.
    port = int(api.rsplit(":", 1)[1])
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    assert f"pid={info['master']}," in out and all(f"pid={w}," not in out for w in info["pids"]), out

    body, results = group_trim(api)
    assert body["pid"] == info["master"]  # the top is the serving process's, as alone
    assert sorted(results) == everyone, body
    assert body["group"]["members_requested"] == 3, body  # the reply waited for none
    for w in info["pids"]:
        assert results[w]["trigger"] == "manual" and results[w]["released_bytes"] > 20 << 20, \
            results[w]
    assert body["group"]["members_trimmed"] == 1

    # One member alone, then one that is no member (no ManualTrimMinIntervalMs here).
    wait_for(lambda: not group(api)["trim_running"], 20, "the group trim's end")
    r = requests.post(api + f"/memory/trim?pid={info['pids'][0]}", timeout=60)
    assert r.status_code == 202 and r.json() == {"pid": info["pids"][0], "status": "requested"}, \
        r.text
    r = requests.post(api + "/memory/trim?pid=1", timeout=60)
    assert r.status_code == 404 and r.json()["error"]["code"] == "no_such_member", r.text

    # The history: every member's trims in the one store, by pid.
    def stored(pid):
        return requests.get(api + f"/memory/trims?pid={pid}", timeout=10).json()["summary"]["count"]
    for pid in everyone:
        wait_for(lambda: stored(pid) >= 1, 10, f"pid {pid}'s trims in the store")
    rows = requests.get(api + "/memory/trims?limit=100", timeout=10).json()["trims"]
    assert set(everyone) <= {t.get("pid") for t in rows}
    w = info["pids"][1]
    series = wait_for(lambda: requests.get(api + "/memory/series", params={
        "metric": "rss_bytes", "pid": w, "step": "1s", "since": "-5m"}, timeout=10).json()["buckets"],
        15, "the member's samples")
    assert series and series[-1]["max"] > 0
    metrics = requests.get(api + "/metrics", timeout=10).text
    assert "memtrim_group_members 4" in metrics
    for pid in everyone:
        assert f'memtrim_member_rss_bytes{{pid="{pid}",program="memtrim-prefork"}}' in metrics
    stop_group(p)


def test_a_stopped_member_holds_no_http_thread(procs, tmp_path):
    """#31 F3: one SIGSTOPped worker and repeated POST /memory/trim leave /healthz
    answering within 1 s. The reply waits for no member (the group thread asks them);
    one group trim at a time (429 while one runs) and ManualTrimMinIntervalMs counts
    from its end. Counted: every one of 30 /healthz polls beside the trims must answer
    within 1 s. (On main each trim waited 10 s for the stopped worker on an HTTP thread,
    both threads were held, and /healthz went unanswered for seconds.)"""
    p, api = start_prefork(procs, tmp_path, ["--workers", "2", "--studies", "1", "--study-mb",
                                             "8", "--hold", "--pid-dir", str(tmp_path)],
                           config={"TrimIntervalSeconds": 0, "PressureRatio": 0,
                                   "ManualTrimMinIntervalMs": 1000, "HttpThreads": 2})
    info = forked(p)
    everyone = sorted([info["master"]] + info["pids"])
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == everyone, 20,
             "the workers to join")
    stopped = info["pids"][0]
    os.kill(stopped, signal.SIGSTOP)

    def all_stopped():  # kill() returns before a running thread stops
        tasks = os.listdir(f"/proc/{stopped}/task")
        return all(open(f"/proc/{stopped}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                   == "T" for t in tasks)
    wait_for(all_stopped, 10, "the worker to stop")
    try:
        slow, codes, posts = [], [], []

        def trim():
            t0 = time.monotonic()
            r = requests.post(api + "/memory/trim", timeout=30)
            codes.append((r.status_code, round(time.monotonic() - t0, 2)))

        for i in range(30):
            if i % 4 == 0:  # a trim every 4 polls (1.2 s apart or more), on its own thread
                posts.append(threading.Thread(target=trim))
                posts[-1].start()
            time.sleep(0.3)
            t0 = time.monotonic()
            r = requests.get(api + "/healthz", timeout=30)
            took = time.monotonic() - t0
            assert r.status_code == 200, r.text
            if took >= 1.0:
                slow.append(round(took, 2))
        for t in posts:
            t.join()
        assert slow == [], f"/healthz took >= 1 s {len(slow)} times of 30: {slow}"
        assert codes[0][0] == 200 and {c for c, _ in codes} == {200, 429}, codes
        assert all(took < 1.0 for _, took in codes), codes  # no reply waits for a member
        body = requests.get(api + "/memory/stats", timeout=10).json()
        assert body["group"]["member_count"] == 3, body["group"]
    finally:
        os.kill(stopped, signal.SIGCONT)
    stop_group(p)


def test_a_killed_member_leaves_no_entry_and_no_descriptor(procs, tmp_path):
    """SIGKILL a worker: its channel closes, the leader forgets it at once (no
    stale entry), and the leader's descriptors are back to what they were."""
    p, api = start_prefork(procs, tmp_path, ["--workers", "3", "--studies", "1", "--study-mb",
                                             "8", "--hold"])
    info = forked(p)
    master = info["master"]
    wait_for(lambda: http_ok(api + "/healthz") and len(member_pids(api)) == 4, 20, "the group")
    before = channels(master)  # its total also counts HTTP connections, which come and go
    assert before >= 3, before
    os.kill(info["pids"][0], signal.SIGKILL)
    wait_for(lambda: info["pids"][0] not in member_pids(api), 5, "the killed member to go")
    g = group(api)
    assert g["member_count"] == 3 and g["left"] == 1, g
    wait_for(lambda: channels(master) == before - 1, 10, f"the master to hold {before - 1} "
             "channels")  # the killed member's closed with its entry
    assert f'pid="{info["pids"][0]}"' not in requests.get(api + "/metrics", timeout=10).text
    stop_group(p, sent={info["pids"][0]: signal.SIGKILL})


def test_200_fork_exit_cycles(procs, tmp_path):
    """200 workers come and go one after the other, each living at least 250 ms (past the 200 ms
    a forked child lives before its member starts: core/group/group_host_int.h): no stale member, the
    leader's descriptors as at the start, the member label does not grow, and
    the store passes its integrity check with every worker's samples or trims
    named by its pid."""
    p, api = start_prefork(procs, tmp_path, ["--workers", "1", "--studies", "2", "--study-mb",
                                             "2", "--pause-ms", "250", "--cycles", "200", "--hold"],
                           config={"TrimIntervalSeconds": 0})
    info = forked(p)
    master = info["master"]
    wait_for(lambda: http_ok(api + "/healthz"), 20, "the API")
    fds_start, chans_start = fd_count(master), channels(master)
    assert chans_start >= 1, "ss shows none of the master's group channels"
    wait_for(lambda: '"cycles"' in p.output(), 300, "200 fork/exit cycles")
    assert '"done":200' in p.output(), p.output()[-2000:]
    wait_for(lambda: member_pids(api) == sorted([master] + info["pids"]), 10, "no stale member")
    g = group(api)
    assert g["joined"] >= 200 and g["left"] == g["joined"] - 1, g
    # The group's channels at most as at the start (one member now; one or two then). The whole table
    # also holds HTTP connections and the store's files, which come and go on their own
    # (a run failed on one more than at the start); a leak per cycle would be 200 more.
    assert channels(master) <= chans_start, (chans_start, channels(master))
    assert fd_count(master) <= fds_start + 8, (fds_start, fd_count(master))
    metrics = requests.get(api + "/metrics", timeout=10).text
    assert metrics.count("memtrim_member_rss_bytes{") == 2
    r = requests.post(api + "/memory/trim", timeout=60)
    assert r.status_code == 200, r.text
    stop_group(p)
    db = sqlite3.connect(tmp_path / "m.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    pids = {r[0] for r in db.execute("SELECT DISTINCT pid FROM member_samples")}
    assert master in pids and len(pids) >= 2, pids
    db.close()


DAEMON = textwrap.dedent("""
    import os, sys, time, signal
    kids = []
    for i in range(int(sys.argv[2])):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
            junk = [bytearray(4096) for _ in range(5000)]
            del junk
            while True:
                time.sleep(0.1)
        kids.append(pid)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(" ".join(map(str, kids)))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        time.sleep(0.1)
""")


def test_children_that_exec_at_once_log_no_error(procs, tmp_path):
    """#31 F13: a FollowFork host whose 200 children exec a new program at once (as a
    shell or a CGI server does): none of them logs at error level (on 30f456e 14 of 200
    did: a member's thread cannot start while exec replaces the process; 6 of 200 in a
    C fork+exec loop here on 728b25f), and the leader still answers."""
    port = free_port()
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite")}
    script = tmp_path / "forker.py"
    script.write_text(textwrap.dedent("""\
        import os
        for i in range(200):
            pid = os.fork()
            if pid == 0:
                os.execv("/bin/true", ["true"])
            os.waitpid(pid, 0)
        print("done", flush=True)
        import time
        time.sleep(600)
        """))
    p = procs([PYTHON, str(script)], tmp_path / "forker.log", env=preload_env(cfg))
    wait_for(lambda: "done" in p.output(), 300, "200 children to fork and exec")
    assert http_ok(f"http://127.0.0.1:{port}/healthz")
    errors = [l for l in p.output().splitlines() if "(error)" in l]
    assert errors == [], errors
    p.stop()


SHORT_LIVED = textwrap.dedent("""\
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None)
    for i in range(int(sys.argv[1])):
        pid = os.fork()
        if pid == 0:
            libc.exit(0)  # C exit() at once: its atexit handlers and destructors run
        os.waitpid(pid, 0)
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(0.1)
    print("long", pid, flush=True)
    time.sleep(600)
    """)


def test_short_lived_children_start_no_member(procs, tmp_path):
    """#31 F13, the cost: a FollowFork leader's 30 children that exit at once never
    start a member (no hello reaches the leader: its joined count stays at the one
    child that lives on), so they pay the fork handlers, not a member's threads, files
    and handshake. On 30f456e each started one and stopped it at its exit (joined 31 on main at 9d9ceee).
    The child that lives on joins, as before."""
    port = free_port()
    script = tmp_path / "short.py"
    script.write_text(SHORT_LIVED)
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite")}
    p = procs([PYTHON, str(script), "30"], tmp_path / "short.log", env=preload_env(cfg))
    line = wait_for(lambda: next((l for l in p.output().splitlines() if l.startswith("long ")),
                                 None), 60, "30 short-lived children, then one that lives")
    long_pid = int(line.split()[1])
    procs.adopt(long_pid)
    api = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(api + "/healthz") and long_pid in member_pids(api), 20,
             "the child that lives on to join")
    g = group(api)
    assert g["joined"] == 1 and g["left"] == 0 and g["member_count"] == 2, g
    assert "(error)" not in p.output(), p.output()
    os.kill(long_pid, signal.SIGTERM)
    p.stop()


def test_master_exit_hands_the_port_to_the_first_member(procs, tmp_path):
    """The master exits while its two workers live on: the first worker to
    have joined takes the port over and serves (a group of one, as a new
    leader); the other finds the port served and stays off, said at info
    level; nothing is an error."""
    port = free_port()
    script = tmp_path / "master.py"
    script.write_text(DAEMON)
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite")}
    p = procs([PYTHON, script, tmp_path / "kids", "2"], tmp_path / "master.log",
              env=preload_env(cfg))
    kids = [int(x) for x in wait_for(lambda: (tmp_path / "kids").exists() and
                                     (tmp_path / "kids").read_text().split(), 20, "the workers")]
    for k in kids:
        procs.adopt(k)
    api = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(api + "/healthz") and len(member_pids(api)) == 3, 20, "the group")
    assert p.stop() == 0, p.output()
    health = wait_for(lambda: http_ok(api + "/healthz") and
                      requests.get(api + "/healthz", timeout=5).json(), 20, "a new leader")
    assert health["pid"] in kids, health
    wait_for(lambda: "memtrim stays off in this process" in p.output(), 20,
             "the other worker to stay off")
    assert member_pids(api) == [health["pid"]]
    assert "(error)" not in p.output(), p.output()
    for k in kids:
        os.kill(k, signal.SIGTERM)
    wait_for(lambda: not any(pid_alive(k) for k in kids), 20, "the workers to exit")
    db = sqlite3.connect(tmp_path / "m.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


# ---- the workload under one cgroup limit ---------------------------------

WORKLOAD = ["--studies", "20", "--study-mb", "80", "--pause-ms", "400", "--stagger-ms", "100"]
PAIRS = 10  # the 4-worker / 250 MB cell: 10 interleaved pairs, every run counted


def ended(res):
    """memtrim-prefork's last line: how each worker ended, as survival_util wants it."""
    return [("exit", s["exit"]) if "exit" in s else ("signal", s["signal"])
            for s in res["status"]]


def prefork_runner(procs, tmp_path, args, timeout=240, config=None):
    """survival_util's run(): memtrim-prefork with args inside the cgroup, alone ("none"),
    with --trim-after, or preloaded with memtrim (config, FollowFork, one port: "group"),
    each run in its own directory with its own database."""
    def run(mode, cg, k):
        d = tmp_path / f"{mode}-{k + 1}"
        d.mkdir()
        if mode == "group":
            p, _ = start_prefork(procs, d, args, config=config or {}, name=mode, wrap=cg.wrap,
                                 store=False)
        else:
            extra = ["--trim-after"] if mode == "trim-after" else []
            p = procs(cg.wrap([build_file("memtrim-prefork")] + args + extra), d / f"{mode}.log")
        rc = p.wait(timeout)
        last = [ln for ln in p.output().splitlines() if ln.startswith('{"workers"')]
        assert last, f"{mode} run {k + 1}: the master printed no result (rc {rc}):\n" + \
            p.output()[-3000:]
        res = json.loads(last[-1])
        assert rc == (0 if res["finished"] == res["workers"] else 1), (rc, res)
        return ended(res), d
    return run


def group_trimmed(workers):
    """check_group for the forked cells: the run's own store holds pressure trims of at
    least workers - 1 pids and passes its integrity check."""
    def check(d, finished):
        db = sqlite3.connect(d / "m.sqlite")
        try:
            pressure = {r[0] for r in db.execute("SELECT DISTINCT pid FROM trims WHERE trigger = 2")}
            assert len(pressure) >= workers - 1, (d, pressure)
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            db.close()
    return check


SKIP_PAIRS = ("issue 32 item 4: the v2 named pairs held without margin (peaks at memory.max; "
              "tests/skips.txt); not measured in the VM since members act on their own (item 2)")


def cell_args(workers, schedule):
    return ["--workers", str(workers)] + WORKLOAD + ["--schedule", schedule]


def test_without_memtrim_4_workers_are_oom_killed(procs, cgroup, tmp_path):
    """The 4-worker / 250 MB cell's control: nothing trims, the kernel OOM-kills workers."""
    control(prefork_runner(procs, tmp_path, cell_args(4, "absolute")), cgroup, 250 << 20, 4,
            "4 workers, 250 MB")


@pytest.mark.survival
def test_the_group_survives_the_shared_limit(procs, cgroup, tmp_path):
    """The issue's cell (survival_util): 4 workers, 20 studies of 80 MB in 1 KB blocks,
    400 ms apart in their own slots (the absolute schedule), 100 ms between workers, in one
    250 MB cgroup; memtrim at its defaults with FollowFork and one port. Over 10
    interleaved pairs, counted in full, the group finishes at least as many workers as
    malloc_trim after each study; each group run's own store holds the pressure trims of
    every worker but at most one. Measured quiet (2026-12-03 15:06-15:09 UTC, load 1.4-3.5):
    the group 40 of 40, malloc_trim after each study 39 of 40. At load 14-33 it did not hold
    (25 of 40 against 30, docs/groups.md), nor at load 6.5-7.5 (2026-12-07 09:36 UTC, with
    survival_util's floors: pair 3 counted, the group 3 of 4 where malloc_trim after each
    study finished 4) or 11-13 (09:39 UTC, pair 1 the same): a loaded machine
    cannot hold it, so it runs in bench/survival.sh (measured, not gating; survival_util's
    floors)."""
    pairs(prefork_runner(procs, tmp_path, cell_args(4, "absolute")), cgroup, 250 << 20, 4,
          PAIRS, "4 workers, 250 MB", check_group=group_trimmed(4))


def test_without_memtrim_8_workers_are_oom_killed(procs, cgroup, tmp_path):
    """The 8-worker / 400 MB cell's control (the relative schedule)."""
    control(prefork_runner(procs, tmp_path, cell_args(8, "relative")), cgroup, 400 << 20, 8,
            "8 workers, 400 MB")


@pytest.mark.survival
def test_more_workers_survive_the_shared_limit(procs, cgroup, tmp_path):
    """The same with 8 workers in 400 MB, the relative schedule, 5 pairs. Measured
    2026-12-03: the group 40 of 40 against 32 (15:12-15:13 UTC, load 2.1-4.5) and 25
    against 25 (14:04-14:09, load 21-23)."""
    pairs(prefork_runner(procs, tmp_path, cell_args(8, "relative")), cgroup, 400 << 20, 8,
          5, "8 workers, 400 MB", check_group=group_trimmed(8))


# ---- Debian's preforking servers ------------------------------------------------

GUNICORN_APP = textwrap.dedent("""
    import os
    def app(environ, start_response):
        junk = [bytearray(1000) for _ in range(40000)]   # 40 MB in small blocks, freed
        del junk
        body = str(os.getpid()).encode()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [body]
""")


def test_gunicorn(procs, tmp_path):
    """gunicorn (sync workers, preforked by its arbiter) with memtrim
    preloaded: the arbiter serves one port for itself and its 3 workers; after
    the workers served requests, one trim reaches each, and the history names
    each worker's pid."""
    if subprocess.run([PYTHON, "-c", "import gunicorn"], capture_output=True).returncode:
        pytest.skip("python3-gunicorn is not installed (tests/install-deps.sh)")
    (tmp_path / "app.py").write_text(GUNICORN_APP)
    port, app_port = free_port(), free_port()
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite")}
    p = procs([PYTHON, "-m", "gunicorn", "--workers", "3", "--bind", f"127.0.0.1:{app_port}",
               "--chdir", str(tmp_path), "app:app"], tmp_path / "gunicorn.log",
              env=preload_env(cfg), cwd=tmp_path)
    api = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(api + "/healthz") and len(member_pids(api)) == 4, 30,
             "gunicorn's arbiter and 3 workers in one group")
    workers = children_of(p.pid)
    assert sorted(workers + [p.pid]) == member_pids(api), (workers, member_pids(api))
    served = set()
    deadline = time.time() + 60
    while served != set(workers) and time.time() < deadline:
        served.add(int(requests.get(f"http://127.0.0.1:{app_port}/", timeout=30).text))
    assert served == set(workers)
    _, results = group_trim(api)
    assert set(workers) <= set(results), results
    assert all("released_bytes" in results[w] for w in workers), results
    for w in workers:
        wait_for(lambda: requests.get(api + f"/memory/trims?pid={w}", timeout=10)
                 .json()["summary"]["count"] >= 1, 10, f"worker {w}'s trim in the store")
    assert p.stop() == 0, p.output()


PHP_FPM_CONF = """
[global]
error_log = {log}
daemonize = no
[www]
listen = 127.0.0.1:{port}
pm = static
pm.max_children = 3
clear_env = no
"""


def test_php_fpm(procs, tmp_path):
    """PHP-FPM (pm = static, 3 children forked by its master) with memtrim
    preloaded: one port answers for the master and its 3 children; one trim
    reaches each child; the history names each pid."""
    fpm = next((f for f in ("/usr/sbin/php-fpm8.2", "/usr/sbin/php-fpm") if os.path.exists(f)),
               None)
    if not fpm:
        pytest.skip("php-fpm is not installed (tests/install-deps.sh)")
    port, fpm_port = free_port(), free_port()
    conf = tmp_path / "fpm.conf"
    conf.write_text(PHP_FPM_CONF.format(log=tmp_path / "fpm-error.log", port=fpm_port))
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite")}
    p = procs([fpm, "--nodaemonize", "--fpm-config", str(conf), "-R"], tmp_path / "fpm.log",
              env=preload_env(cfg))
    api = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(api + "/healthz") and len(member_pids(api)) == 4, 30,
             "php-fpm's master and 3 children in one group")
    kids = children_of(p.pid)
    assert sorted(kids + [p.pid]) == member_pids(api), (kids, member_pids(api))
    _, results = group_trim(api)
    assert set(kids) <= set(results) and all("released_bytes" in results[k] for k in kids), results
    for k in kids:
        wait_for(lambda: requests.get(api + f"/memory/trims?pid={k}", timeout=10)
                 .json()["summary"]["count"] >= 1, 10, f"child {k}'s trim in the store")
    os.kill(kids[0], signal.SIGKILL)  # the master forks a new child; the old one leaves
    wait_for(lambda: kids[0] not in member_pids(api) and len(member_pids(api)) == 4, 20,
             "the replacement child to join")
    assert p.stop(signal.SIGQUIT) == 0, p.output()  # php-fpm's graceful stop exits 0


def test_the_dashboard_lists_the_members(procs, tmp_path):
    """The built-in page, rendered by Debian's chromium, has a row per member
    (the worker group panel; a single process shows none)."""
    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("chromium is not installed (tests/install-deps.sh)")
    p, api = start_prefork(procs, tmp_path, ["--workers", "2", "--studies", "1", "--study-mb",
                                             "4", "--hold"])
    info = forked(p)
    everyone = sorted([info["master"]] + info["pids"])
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == everyone, 20, "the group")
    dom = subprocess.run(["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={tmp_path / 'chromium'}",
                          "--virtual-time-budget=5000", "--dump-dom", api + "/"],
                         capture_output=True, text=True, timeout=120).stdout
    for pid in everyone:
        assert f'<tr data-pid="{pid}">' in dom, dom[-3000:]
    assert f'<td>{info["master"]} (serves)</td>' in dom
    stop_group(p)


def test_metrics_stay_valid_utf8_with_a_program_name_of_other_bytes(procs, tmp_path):
    """#31 F9: a member whose program name held invalid UTF-8 made the whole /metrics page
    unparseable (promtool: invalid label value). Label values, and the JSON, are valid
    UTF-8: each bad byte becomes U+FFFD; promtool accepts the page."""
    import shutil
    exe = tmp_path / os.fsdecode(b"pre\xff\xfefork")  # the comm the kernel gives it
    shutil.copy(build_file("memtrim-prefork"), exe)
    port = free_port()
    cfg = {"HttpPort": port, "FollowFork": True, "Database": str(tmp_path / "m.sqlite"),
           "SampleIntervalSeconds": 1}
    p = procs([exe, "--workers", "2", "--studies", "1", "--study-mb", "4", "--hold",
               "--pid-dir", str(tmp_path)], tmp_path / "prefork.log", env=preload_env(cfg))
    api = f"http://127.0.0.1:{port}"
    info = forked(p)
    everyone = sorted([info["master"]] + info["pids"])
    wait_for(lambda: http_ok(api + "/healthz") and member_pids(api) == everyone, 20,
             "the workers to join")
    raw = requests.get(api + "/metrics", timeout=10).content
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is needed"
    check = subprocess.run([promtool, "check", "metrics"], input=raw, capture_output=True,
                           timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), \
        (check.stdout + check.stderr).decode(errors="replace")
    text = raw.decode("utf-8")  # strict: raises on a byte that is not UTF-8
    for pid in everyone:
        assert f'memtrim_member_rss_bytes{{pid="{pid}",program="pre\ufffd\ufffdfork"}}' in text
    r = requests.get(api + "/memory/stats", timeout=10)
    r.content.decode("utf-8")
    assert {m["program"] for m in r.json()["group"]["members"]} == {"pre\ufffd\ufffdfork"}, r.text
    stop_group(p)
