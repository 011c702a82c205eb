"""Named worker groups (issue 21 item 1, docs/groups.md): processes started
separately, each an unmodified /usr/bin/python3 with libmemtrim.so preloaded
and the same GroupName, form one group. The first to take the group's lock
leads (it serves the one port and owns the store); the others join over the
group's unix socket in a private directory and trim themselves when asked.
A leader killed with SIGKILL, or exiting, hands the role to a member; a
member killed leaves no entry and no descriptor; another name is another
group; another uid is refused, with the line that says why."""
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import time

import pytest
import requests

from wait import group_trim
from hosts_util import (build_file, cgroup, channels, free_port, group_member_pids, http_ok, pid_alive,  # noqa: F401
                        preload_env, procs, traversable_dir, wait_for)
from survival_util import control, pairs
from test_groups import group_trimmed

PYTHON = "/usr/bin/python3"
MB = 1 << 20

# Frees 40 MB of small malloc'd blocks below one it keeps (glibc keeps the freed pages
# resident until a trim), says so in its ready file, then waits; SIGTERM ends it with
# exit(0), so memtrim's destructor runs.
HOST = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
blocks = [bytearray(1000) for _ in range(40000)]
keep = bytearray(1000)
del blocks
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
"""

# Only the request trims here (a member's own periodic or burst trim could take the
# memory first).
QUIET = {"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0,
         "ManualTrimMinIntervalMs": 0, "SampleIntervalSeconds": 1}


@pytest.fixture
def base():
    """A directory others may traverse (the uid test needs that), removed after."""
    d = traversable_dir("memtrim-named-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Group:
    def __init__(self, procs, base, name, port=None, config=None):
        self.procs, self.base, self.name = procs, base, name
        self.port = port or free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        self.dir = base / "groups"
        self.cfg = {"HttpPort": self.port, "GroupName": name, "GroupDir": str(self.dir),
                    "Database": str(base / f"{name}.sqlite")}
        self.cfg.update(QUIET)
        self.cfg.update(config or {})
        (base / "host.py").write_text(HOST)
        self.hosts = {}
        self.n = 0

    def start(self, wrap=None, env_extra=None):
        self.n += 1
        ready = self.base / f"{self.name}.{self.n}.ready"
        cmd = [PYTHON, str(self.base / "host.py"), str(ready)]
        log = self.base / f"{self.name}.{self.n}.log"
        if wrap:
            p = self.procs(wrap(cmd), log, env=preload_env(self.cfg, env_extra))
        else:
            p = self.procs(cmd, log, env=preload_env(self.cfg, env_extra))
        pid = int(wait_for(lambda: ready.exists() and ready.read_text(), 30,
                           f"{self.name} host {self.n} to free its memory"))
        self.hosts[pid] = p
        return pid, p

    def stats(self):
        return requests.get(self.api + "/memory/stats", timeout=10).json()

    def members(self):
        return group_member_pids(self.api)

    def leader(self):
        return requests.get(self.api + "/healthz", timeout=5).json()["pid"]

    def wait_members(self, pids, what):
        want = sorted(pids)
        wait_for(lambda: http_ok(self.api + "/healthz") and self.members() == want, 30, what)

    def output(self):
        return "\n".join(p.output() for p in self.hosts.values())


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def listeners(port):
    return subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True,
                          text=True).stdout


def integrity(path):
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def test_one_port_answers_for_processes_started_separately(procs, base):
    """Three python3 processes started one by one with GroupName web: one port
    answers for all three, one trim releases what each one freed in its own
    process, the one store names each pid; a fourth process with GroupName api
    leads a group of its own on its own port."""
    web = Group(procs, base, "web")
    pids = [web.start()[0] for _ in range(3)]
    web.wait_members(pids, "the three processes in one group")
    stats = web.stats()
    g = stats["group"]
    assert g["name"] == "web" and g["member_count"] == 3 and g["joined"] == 2, g
    leader = web.leader()
    assert leader == pids[0]  # the first to start leads
    assert [m["pid"] for m in g["members"] if m["serves"]] == [leader]
    out = listeners(web.port)
    assert f"pid={leader}," in out and all(f"pid={p}," not in out for p in pids if p != leader), out
    sock = web.dir / "web.sock"
    assert sock.is_socket() and (web.dir.stat().st_mode & 0o777) == 0o700

    _, results = group_trim(web.api)
    assert sorted(results) == sorted(pids), results
    for pid in pids:
        assert results[pid]["released_bytes"] > 20 * MB, results[pid]
    # What memtrim saved, per member and summed: the counterfactual is RSS + saved in each.
    def saved_shown():
        g = web.stats()["group"]
        return g if all(m["saved_bytes"] > 10 * MB for m in g["members"]) else None
    g = wait_for(saved_shown, 15, "each member's saving in the group's stats")
    assert g["saved_bytes"] == sum(m["saved_bytes"] for m in g["members"]), g
    assert g["rss_without_memtrim_bytes"] == g["rss_bytes"] + g["saved_bytes"], g
    for m in g["members"]:
        assert m["rss_without_memtrim_bytes"] == m["rss_bytes"] + m["saved_bytes"], m
    for pid in pids:
        wait_for(lambda: requests.get(web.api + f"/memory/trims?pid={pid}", timeout=10)
                 .json()["summary"]["count"] >= 1, 15, f"pid {pid}'s trim in the store")
    metrics = requests.get(web.api + "/metrics", timeout=10).text
    assert "memtrim_group_members 3" in metrics
    for pid in pids:
        assert f'memtrim_member_rss_bytes{{pid="{pid}",program="python3"}}' in metrics

    api = Group(procs, base, "api")
    other = api.start()[0]
    api.wait_members([other], "the api group of one")
    assert api.stats()["group"]["name"] == "api"
    assert web.members() == sorted(pids)  # the web group is as it was
    assert "(error)" not in web.output() + api.output()


def test_leader_killed_hands_over_without_stale_members_or_descriptors(procs, base):
    """SIGKILL the leader: a member takes the role (the port, the store, the
    socket: the dead leader's socket file is replaced only after nobody
    answered on it), the other rejoins; nobody stale, and the member that
    rejoined holds as many descriptors as before. Then a member killed with
    SIGKILL leaves the new leader's registry and descriptors as they were."""
    web = Group(procs, base, "web")
    pids = [web.start()[0] for _ in range(3)]
    web.wait_members(pids, "the group")
    old = web.leader()
    rest = [p for p in pids if p != old]
    before = {p: fd_count(p) for p in rest}
    web.hosts[old].kill()
    wait_for(lambda: http_ok(web.api + "/healthz") and web.leader() in rest and
             web.members() == sorted(rest), 30, "a member to take the group over")
    new = web.leader()
    other = next(p for p in rest if p != new)
    assert "replaced the socket its last leader left" in web.hosts[new].output()
    g = web.stats()["group"]
    assert g["member_count"] == 2 and old not in [m["pid"] for m in g["members"]], g
    wait_for(lambda: fd_count(other) == before[other], 10,
             f"the member that rejoined to hold {before[other]} descriptors again")

    chans = channels(new)
    assert chans == 2, chans  # its socket, and the channel of the member that rejoined
    late = web.start()[0]
    web.wait_members(rest + [late], "a late process to join the new leader")
    assert channels(new) == 3
    web.hosts[late].kill()
    wait_for(lambda: web.members() == sorted(rest), 10, "the killed member to leave")
    wait_for(lambda: channels(new) == chans, 10, f"the leader to hold {chans} channels again")
    r = requests.post(web.api + "/memory/trim", timeout=60)
    assert sorted(m["pid"] for m in r.json()["group"]["members"]) == sorted(rest), r.text
    for p in rest:
        assert web.hosts[p].stop() == 0, web.hosts[p].output()
    assert integrity(base / "web.sqlite") == "ok"
    assert not (web.dir / "web.sock").exists()  # the last leader withdrew its socket


def test_leader_exit_hands_over_and_withdraws_its_socket(procs, base):
    """The leader exits (SIGTERM, exit(0)): it withdraws its socket, stops its
    store, then drops the lock; one member takes over, the other joins it;
    the history of the old leader stays in the one store."""
    web = Group(procs, base, "web")
    pids = [web.start()[0] for _ in range(3)]
    web.wait_members(pids, "the group")
    old = web.leader()
    requests.post(web.api + f"/memory/trim?pid={old}", timeout=60)
    assert web.hosts[old].stop() == 0, web.hosts[old].output()
    rest = [p for p in pids if p != old]
    wait_for(lambda: http_ok(web.api + "/healthz") and web.leader() in rest and
             web.members() == sorted(rest), 30, "a member to take the group over")
    new = web.leader()
    assert "replaced the socket" not in web.hosts[new].output()  # nothing stale was left
    assert requests.get(web.api + f"/memory/trims?pid={old}", timeout=10) \
        .json()["summary"]["count"] >= 1
    assert "(error)" not in web.output()


def test_another_uid_is_refused(procs, base):
    """A process of another uid (nobody) with the same GroupName and GroupDir
    is refused by the directory's owner check, with the line that names the
    key and both uids; a client of another uid that gets past the directory
    (CAP_DAC_OVERRIDE) is refused by the leader's SO_PEERCRED check, said at
    warning level. Neither appears in the group."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv (util-linux) to run a process as nobody")
    web = Group(procs, base, "web")
    pids = [web.start()[0] for _ in range(2)]
    web.wait_members(pids, "the group")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # setpriv itself runs without memtrim: it changes uids thread by thread (PR_SET_KEEPCAPS),
    # which glibc aborts in any process that has threads; the program after it preloads it.
    cmd = nobody + ["env", f"LD_PRELOAD={preload_env(web.cfg, other_uid=True)['LD_PRELOAD']}",
                    "MEMTRIM_CONFIG=" + json.dumps(web.cfg), PYTHON, "-c", "print('ran')"]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MEMTRIM_CONFIG")}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0 and "ran" in r.stdout, r
    assert "memtrim: not started: configuration key GroupDir:" in r.stderr, r.stderr
    assert "owned by uid 0, not by this process's uid 65534" in r.stderr, r.stderr

    sock = web.dir / "web.sock"
    client = ("import socket, sys\n"
              "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
              "s.connect(sys.argv[1]); s.settimeout(20)\n"
              "print('closed' if s.recv(4096) == b'' else 'answered')\n")
    r = subprocess.run(nobody + ["--inh-caps=+dac_override", "--ambient-caps=+dac_override",
                                 PYTHON, "-c", client, str(sock)],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.stdout.strip() == "closed", r
    leader = web.hosts[web.leader()]
    wait_for(lambda: "refused pid" in leader.output(), 10, "the leader's refusal line")
    line = next(l for l in leader.output().splitlines() if "refused pid" in l)
    assert "(uid 65534): only uid 0 and root may join" in line and "(warning)" in line, line
    g = web.stats()["group"]
    assert sorted(m["pid"] for m in g["members"]) == sorted(pids) and g["refused"] == 1, g


def test_a_squatted_default_directory_says_what_to_do(procs, base):
    """Without GroupDir and XDG_RUNTIME_DIR a user's group lives in
    /tmp/memtrim-<uid>, which another user may create first: memtrim refuses
    it (that user could plant the group's socket) and its one line says so and
    what to do: GroupDir, or XDG_RUNTIME_DIR. The program runs on."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv (util-linux) to run a process as nobody")
    squatted = "/tmp/memtrim-65534"
    aside = None
    if os.path.lexists(squatted):  # a real one from an earlier run: put back afterwards
        aside = f"{squatted}.aside-{os.getpid()}"
        os.rename(squatted, aside)
    os.mkdir(squatted, 0o700)  # root's: "another user created it first"
    try:
        cfg = {"GroupName": "web", "HttpPort": free_port(), "Database": None}
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        cmd = nobody + ["env", f"LD_PRELOAD={preload_env(cfg, other_uid=True)['LD_PRELOAD']}",
                        "MEMTRIM_CONFIG=" + json.dumps(cfg), PYTHON, "-c", "print('ran')"]
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "MEMTRIM_CONFIG", "XDG_RUNTIME_DIR")}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode == 0 and "ran" in r.stdout, r
        line = next((l for l in r.stderr.splitlines() if "memtrim: not started:" in l), "")
        assert f"{squatted}: owned by uid 0, not by this process's uid 65534" in line, r.stderr
        assert "another user created it first" in line and "set GroupDir" in line, line
        assert "XDG_RUNTIME_DIR" in line, line
        assert os.stat(squatted).st_uid == 0  # left as it was
    finally:
        os.rmdir(squatted)
        if aside:
            os.rename(aside, squatted)


def test_bad_names_and_directories_are_refused_with_the_key(procs, base, tmp_path):
    """A bad GroupName, a group directory open to others, one that is a
    symbolic link, or one whose socket's path would not fit a unix socket's:
    the program runs on without memtrim, with one line naming the key."""
    loose = base / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    link = base / "link"
    link.symlink_to(loose)
    cases = [({"GroupName": "../etc"}, "configuration key GroupName:"),
             ({"GroupName": "x" * 65}, "configuration key GroupName:"),
             ({"GroupName": "web", "GroupDir": str(loose)}, "mode 0755 lets other users in"),
             ({"GroupName": "web", "GroupDir": str(link)}, "is a symbolic link"),
             ({"GroupName": "web", "GroupDir": "/tmp/" + "d" * 110},
              "a unix socket's path holds 107 at most")]
    for cfg, want in cases:
        cfg = dict(cfg, HttpPort=free_port(), Database=None)
        r = subprocess.run([PYTHON, "-c", "print('ran')"], capture_output=True, text=True,
                           timeout=30, env=preload_env(cfg))
        assert r.returncode == 0 and "ran" in r.stdout, r
        assert want in r.stderr and "memtrim: not started:" in r.stderr, (cfg, r.stderr)


FORKING_HOST = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
child = os.fork()          # a worker, forked after memtrim started here
if child == 0:
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        time.sleep(1)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
"""


def test_named_and_forked(procs, base):
    """GroupName with FollowFork: the leader's forked child joins over the
    socketpair made at fork, a member's forked child joins by name; when the
    leader is killed, its child, the other process and that one's child elect
    a new leader among them and all stay in the group."""
    web = Group(procs, base, "web", config={"FollowFork": True})
    (base / "fork.py").write_text(FORKING_HOST)
    pids = []
    for n in range(2):
        ready = base / f"fork.{n}.ready"
        p = procs([PYTHON, str(base / "fork.py"), str(ready)], base / f"fork.{n}.log",
                  env=preload_env(web.cfg))
        parent, child = map(int, wait_for(lambda: ready.exists() and ready.read_text().split(),
                                          30, f"process {n} and its child"))
        procs.adopt(child)
        web.hosts[parent] = p
        pids += [parent, child]
        web.wait_members(pids, f"process {n} and its child in the group")
    leader = web.leader()
    assert leader == pids[0]
    web.hosts[leader].kill()
    rest = pids[1:]
    wait_for(lambda: http_ok(web.api + "/healthz") and web.leader() in rest and
             web.members() == sorted(rest), 30, "the three others to elect a leader")
    r = requests.post(web.api + "/memory/trim", timeout=60)
    assert sorted(m["pid"] for m in r.json()["group"]["members"]) == sorted(rest), r.text
    for pid in pids[1:]:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not any(pid_alive(p) for p in rest), 20, "the processes to exit")
    assert integrity(base / "web.sqlite") == "ok"


def test_a_connection_that_never_says_hello_is_dropped(procs, base):
    """Any process of this uid may connect to the group's socket; one that never
    says hello (it is no memtrim) must not keep its place: the leader closes it
    after 30 s (else 63 such connections keep every real member out), and a real
    member still joins meanwhile."""
    web = Group(procs, base, "web")
    leader = web.start()[0]
    web.wait_members([leader], "the leader alone")
    silent = []
    for _ in range(3):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(str(web.dir / "web.sock"))
        s.settimeout(0)
        silent.append(s)
    member = web.start()[0]
    web.wait_members([leader, member], "a real member beside the silent connections")

    def closed(s):
        try:
            return s.recv(4096) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    try:
        wait_for(lambda: all(closed(s) for s in silent), 90,
                 "the leader to close the silent connections", interval=0.5)
    finally:
        for s in silent:
            s.close()
    assert web.members() == sorted([leader, member])


def test_a_joiner_refused_while_the_group_is_full_joins_later(procs, base):
    """#31 F8: 63 silent connections of this uid fill a named group's registry; a process
    started meanwhile is refused again and again (its channel closed before a welcome).
    Once the connections go it joins: it asks again on a back-off (5 s at most) instead
    of giving up for good (on 30f456e, after 5 refusals, "memtrim stays off in this
    process" and it never joined)."""
    web = Group(procs, base, "web")
    leader = web.start()[0]
    web.wait_members([leader], "the leader alone")
    silent = []
    try:
        for _ in range(63):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(str(web.dir / "web.sock"))
            silent.append(s)
        late, host = web.start()
        wait_for(lambda: web.stats()["group"]["refused"] >= 6, 60,
                 "the late process to be refused 6 times")
    finally:
        for s in silent:
            s.close()
    web.wait_members([leader, late], "the late process to join once places are free")
    assert "stays off" not in host.output(), host.output()


# ---- named groups under one limit (issue 32 items 3 and 4) ---------------------------

NAMED_WORKERS, NAMED_PAIRS, NAMED_LIMIT = 4, 5, 250 * MB
# test_groups.py's 4-worker cell, each worker a process of its own (memtrim-prefork --solo)
NAMED_WORKLOAD = ["--studies", "20", "--study-mb", "80", "--pause-ms", "400", "--stagger-ms",
                  "100", "--schedule", "absolute"]
START_MS = 3000  # the shared schedule starts this long after the processes do: they join first


def named_runner(procs, base, workers=NAMED_WORKERS, workload=NAMED_WORKLOAD, timeout=240,
                 start_ms=START_MS):
    """survival_util's run() for a named group: `workers` memtrim-prefork --solo processes,
    started one by one inside the cgroup on one shared absolute schedule; "group" preloads
    memtrim with the same GroupName (the first leads: one port, the store in the run's
    directory). Each process's exit status is its worker's."""
    def run(mode, cg, k):
        d = base / f"{mode}-{k + 1}"
        d.mkdir()
        origin = time.monotonic_ns() + start_ms * 1_000_000
        extra = ["--trim-after"] if mode == "trim-after" else []
        cfg = {"HttpPort": free_port(), "GroupName": "cell", "GroupDir": str(d / "groups"),
               "Database": str(d / "m.sqlite"), "SampleIntervalSeconds": 1}
        ps = []
        for i in range(workers):
            cmd = [build_file("memtrim-prefork"), "--solo", str(i), "--origin-ns", str(origin)] + \
                workload + extra
            if mode == "group":
                env = preload_env(cfg)
                cmd = ["/usr/bin/env", "LD_PRELOAD=" + env["LD_PRELOAD"],
                       "MEMTRIM_CONFIG=" + env["MEMTRIM_CONFIG"]] + cmd
            ps.append(procs(cg.wrap(cmd), d / f"{mode}.{i}.log"))
        statuses = []
        for p in ps:
            rc = p.wait(timeout)
            statuses.append(("signal", -rc) if rc < 0 else ("exit", rc))
        (d / "group.log").write_text("\n".join(p.output() for p in ps))
        return statuses, d
    return run


def test_without_memtrim_a_named_cell_is_oom_killed(procs, cgroup, base):
    """The named cell's control: 4 processes started one by one, nothing trims, one
    250 MB limit: the kernel OOM-kills some (oom_kill count and their SIGKILL)."""
    control(named_runner(procs, base), cgroup, NAMED_LIMIT, NAMED_WORKERS, "named, 4 x 250 MB")


@pytest.mark.survival
def test_a_named_group_survives_the_shared_limit(procs, cgroup, base):
    """4 processes with one GroupName under one 250 MB limit, 5 interleaved pairs against
    malloc_trim after each study, every run counted (survival_util). Measured 2026-12-03:
    the group 20 of 20 against 18 (15:10-15:12 UTC, load 2.3-3.4) and 18 of 20 against 15
    (14:12, load 8-10)."""
    pairs(named_runner(procs, base), cgroup, NAMED_LIMIT, NAMED_WORKERS, NAMED_PAIRS,
          "named, 4 x 250 MB", check_group=group_trimmed(NAMED_WORKERS))
