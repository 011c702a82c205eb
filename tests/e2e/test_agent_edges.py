"""The node agent's edges (issue 39): processes that come and go while a trim runs, and the
agent killed in the middle of one. The target is the command's test program
(memtrim-cli-target: holder threads that fill their arenas and free 90 %, churn threads that
check every block they write, a sleeper that counts sleeps cut short), unmodified, in a memory
cgroup it fills past the agent's line with freed heap. The test sees a trim start by the
command the agent runs (its Command is a wrapper that holds each trim until the test lets it
run the real `memtrim trim`) and acts while the trim is in flight."""
import json
import os
import signal
import subprocess
from pathlib import Path

from agent_util import Agent
from hosts_util import build_file, cgroup, procs  # noqa: F401
from wait import wait_for

LIMIT = 192 << 20
HOLD = ["--hold-mb", "30", "--holders", "4"]  # about 150 MB at its peak, freed 90 %


class Target:
    """memtrim-cli-target in cg, driven on its stdin."""

    def __init__(self, cg, args=()):
        self.proc = subprocess.Popen(cg.wrap([build_file("memtrim-cli-target"), *HOLD, *args]),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("ready "), line
        self.pid = int(line.split()[1])

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def state(self):
        status = Path(f"/proc/{self.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return fields["State"].split()[0], int(fields["TracerPid"])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class Held:
    """The agent's Command: a wrapper that says which process a trim is for and holds it until
    the test lets it run the real command (exec), so the test acts while the agent's trim of
    that process is in flight."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "held"
        self.dir.mkdir()
        self.path = tmp_path / "memtrim-held"
        self.path.write_text(
            "#!/bin/sh\n"
            f'echo $$ > "{self.dir}/trim.$2"\n'
            f'while [ ! -e "{self.dir}/go.$2" ]; do sleep 0.01; done\n'
            f'exec {build_file("memtrim")} "$@"\n')
        self.path.chmod(0o755)

    def started(self, pid):
        """The wrapper's pid once a trim of pid is in flight, else None."""
        f = self.dir / f"trim.{pid}"
        return f.exists() and f.read_text().strip() and int(f.read_text())

    def release(self, pid):
        (self.dir / f"go.{pid}").touch()


def agent_for(procs, cgroup_path, tmp_path, held):
    agent = Agent(procs, tmp_path / "agent.log", {"AllowCgroups": ["/" + cgroup_path.name],
                                                   "ScanIntervalMs": 200, "Command": str(held.path)})
    wait_for(lambda: "/" + cgroup_path.name in agent.cgroups(), 20, "the agent to watch the cgroup")
    return agent


def gone(pid):
    """pid has exited (and was reaped, or is a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_process_that_dies_during_its_trim_and_one_that_appears(procs, cgroup, tmp_path):
    cg = cgroup(LIMIT)
    path = "/" + cg.path.name
    held = Held(tmp_path)
    agent = agent_for(procs, cg.path, tmp_path, held)
    a = Target(cg)
    try:
        # A dies while the agent's trim of it is in flight; B appears meanwhile.
        wait_for(lambda: held.started(a.pid), 30, "the agent's trim of the first target")
        os.kill(a.pid, signal.SIGKILL)
        a.proc.wait(10)
        b = Target(cg)
        held.release(a.pid)
        held.release(b.pid)
        wait_for(lambda: any(p["pid"] == b.pid and p["trims"] >= 1
                             for p in agent.cgroups()[path]["processes"]), 30,
                 "the agent to trim the process that appeared")
        view = wait_for(lambda: (lambda v: v if all(p["pid"] != a.pid for p in v["processes"])
                                 else None)(agent.cgroups()[path]), 10, "the dead one to be dropped")
        log = agent.output()
        said = [line for line in log.splitlines() if f"process {a.pid} " in line]
        print(f"\nthe first target died during its trim: {said[-1:]}")
        assert said and "not trimmed" in said[-1], said
        print(f"the one that appeared: {[p for p in view['processes'] if p['pid'] == b.pid]}")
        assert agent.proc.running()
        assert b.ask("report").startswith("{")
        b.stop()
        agent.stop()
    finally:
        a.stop()


def test_the_agent_killed_mid_trim_harms_no_target(procs, cgroup, tmp_path):
    cg = cgroup(LIMIT)
    held = Held(tmp_path)
    agent = agent_for(procs, cg.path, tmp_path, held)
    t = Target(cg, ["--churn", "2", "--sleeper"])
    try:
        cmd = wait_for(lambda: held.started(t.pid), 30, "the agent's trim of the target")
        held.release(t.pid)  # the command runs now...
        agent.proc.proc.kill()  # ...and the agent is SIGKILLed while its trim is in flight
        agent.proc.proc.wait(10)
        # The command runs on alone to its end; then nothing of it is left in the target.
        wait_for(lambda: gone(cmd), 30, "the orphaned command to end")
        state, tracer = wait_for(lambda: (lambda s: s if s[1] == 0 else None)(t.state()), 10,
                                 "no tracer left on the target")
        assert state in ("S", "R"), state
        report = json.loads(t.ask("report"))
        print(f"\nagent killed mid-trim of {t.pid}: target {state}, tracer {tracer}, {report}")
        assert report["corrupt"] == 0 and report["early_sleeps"] == 0, report
        assert report["iterations"] > 0
        again = json.loads(t.ask("report"))  # its threads run on: the churn goes on counting
        assert again["iterations"] >= report["iterations"] and again["corrupt"] == 0
        assert t.ask("quit") == "" and t.proc.wait(10) == 0
    finally:
        t.stop()


def test_a_process_that_runs_another_program_is_read_again(procs, cgroup, tmp_path):
    """A shell the agent sees first, which then execs the target (the same pid and start
    time, another program and heap): what it is is read again, and it is trimmed as what it
    runs now."""
    cg = cgroup(LIMIT)
    path = "/" + cg.path.name
    agent = Agent(procs, tmp_path / "agent.log", {"AllowCgroups": [path], "ScanIntervalMs": 100})
    wait_for(lambda: path in agent.cgroups(), 20, "the agent to watch the cgroup")
    flag = tmp_path / "exec"
    shell = f'while [ ! -e "{flag}" ]; do sleep 0.05; done; exec "$@"'
    proc = subprocess.Popen(cg.wrap(["/bin/sh", "-c", shell, "sh", build_file("memtrim-cli-target"),
                                     *HOLD]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        seen = wait_for(lambda: [p for p in agent.cgroups()[path]["processes"]
                                 if p["pid"] == proc.pid], 20, "the agent to see the shell")
        assert seen[0]["program"] == "sh", seen
        flag.touch()
        assert proc.stdout.readline().startswith("ready ")
        view = wait_for(lambda: [p for p in agent.cgroups()[path]["processes"]
                                 if p["pid"] == proc.pid and p["trims"] >= 1], 30,
                        "the agent to trim the target")
        print(f"\nfirst seen as {seen[0]['program']}, trimmed as {view[0]['program']}: {view}")
        assert view[0]["program"] == "memtrim-cli-tar", view
        agent.stop()
    finally:
        proc.kill()
        proc.wait(10)


def test_the_agent_takes_its_whole_descriptor_limit(tmp_path):
    """Each limited cgroup costs the agent one or two descriptors (its wake-ups) and each trim a
    pipe: a node's 200 pods pass a service's usual soft limit of 1024 (systemd's default
    LimitNOFILE=1024:524288), past which its trims, store and server fail. The agent, which
    never uses select(), raises its soft RLIMIT_NOFILE to the hard one: started under 64:4096,
    it runs with 4096. Control agent-fd-soft-limit: it keeps 64."""
    from agent_util import LISTENING
    log = tmp_path / "agent.log"
    none = str(tmp_path / "no-cgroups")
    cfg = {"HttpPort": 0, "CgroupV1Root": none, "CgroupV2Root": none}
    with open(log, "w") as out:
        p = subprocess.Popen(["prlimit", "--nofile=64:4096", str(build_file("memtrim")), "agent",
                              "--config", json.dumps(cfg)], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: p.poll() is None and LISTENING.search(log.read_text()), 20,
                 "the agent to listen")
        line = next(x for x in open(f"/proc/{p.pid}/limits") if x.startswith("Max open files"))
        assert line.split()[3:5] == ["4096", "4096"], line
    finally:
        p.terminate()
        assert p.wait(20) == 0, log.read_text()[-2000:]


def python_beside_an_agent(procs, cg, tmp_path, script, config):
    """An agent on cg alone (scanning every 100 ms, with config) and a python3 running script in
    cg, its stdin and stdout pipes: (agent, the cgroup's path, the process)."""
    path = "/" + cg.path.name
    agent = Agent(procs, tmp_path / "agent.log", dict({"AllowCgroups": [path], "ScanIntervalMs": 100},
                                                      **config))
    wait_for(lambda: path in agent.cgroups(), 20, "the agent to watch the cgroup")
    proc = subprocess.Popen(cg.wrap(["/usr/bin/python3", "-c", script]), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    return agent, path, proc


RENAMER = r"""
import ctypes, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
held = [b"\x01" * (24 << 20)]
renames = 0
go = threading.Event()
def serve():
    for line in sys.stdin:
        if line.strip() == "rename":
            go.set()
        if line.strip() == "grow":
            held.append(b"\x01" * (48 << 20))
        print("renames", renames, flush=True)
threading.Thread(target=serve, daemon=True).start()
print("ready", flush=True)
go.wait()
while True:  # the main thread's Name is the process's (/proc/PID/status)
    renames += 1
    libc.prctl(15, ("r%d" % renames).encode(), 0, 0, 0)  # PR_SET_NAME
"""


def test_a_process_that_renames_itself_is_not_read_again(procs, cgroup, tmp_path):
    """Any process may change its Name (prctl(PR_SET_NAME)) as often as it likes; that is not
    another program. A process renaming itself in a loop, in a cgroup in the agent's zone (its
    processes are refreshed at every decision): what it is (its maps, its learnt refusals) is
    read once, not at each new name. The agent's refresh after the renames began is seen by
    its RssAnon (grown after them). Control agent-reread-on-rename: keyed on the Name, it is
    read again at every refresh."""
    agent, path, proc = python_beside_an_agent(procs, cgroup(128 << 20), tmp_path, RENAMER,
                                               {"DryRun": True, "PressureRatio": 0.1})
    try:
        assert proc.stdout.readline().strip() == "ready"

        def view():
            return [p for p in agent.cgroups()[path]["processes"] if p["pid"] == proc.pid]
        # seen as the program it runs (the shell of wrap() may have been seen first: an exec)
        first = wait_for(lambda: [p for p in view() if p["program"] == "python3"], 20,
                         "the agent to see python3")[0]

        def ask(command):
            proc.stdin.write(command + "\n")
            proc.stdin.flush()
            return int(proc.stdout.readline().split()[1])
        ask("rename")
        before = wait_for(lambda: (n := ask("count")) >= 1000 and n, 20, "1,000 renames")
        after = ask("grow")
        # the agent refreshed it after it grew (and after thousands of new names)
        last = wait_for(lambda: [p for p in view() if (p["anon_bytes"] or 0) >= 64 << 20], 30,
                        "the agent to refresh the renaming process")[0]
        print(f"\nrenames {before} .. {after}, reads {first['reads']} -> {last['reads']}: {last}")
        assert after >= before >= 1000, (before, after)
        assert last["reads"] == first["reads"], (first, last)
        assert last["program"] == "python3", last
        agent.stop()
    finally:
        proc.kill()
        proc.wait(10)


class Subtree:
    """A limited cgroup whose directory is the agent's only hierarchy (CgroupV1Root or
    CgroupV2Root, the other one absent: `roots`), and limited children made in it by name."""

    def __init__(self, cgroup, tmp_path):
        self.parent = cgroup(1 << 30)
        none = str(tmp_path / "no-cgroups")
        self.roots = ({"CgroupV1Root": str(self.parent.path), "CgroupV2Root": none}
                      if self.parent.version == 1 else
                      {"CgroupV1Root": none, "CgroupV2Root": str(self.parent.path)})
        if self.parent.version == 2:
            (self.parent.path / "cgroup.subtree_control").write_text("+memory")
        self.children = []

    def make(self, name):
        child = self.parent.path / name
        child.mkdir()
        self.children.append(child)
        limit = "memory.limit_in_bytes" if self.parent.version == 1 else "memory.max"
        (child / limit).write_text(str(64 << 20))

    def remove(self):
        for child in reversed(self.children):
            child.rmdir()


def test_the_agent_watches_at_most_max_cgroups(procs, cgroup, tmp_path):
    """A local user with a delegated cgroup subtree can make thousands of limited cgroups, each
    of which would cost the agent its records, one or two descriptors and its series, until the
    agent passes its own MemoryMax. It watches MaxCgroups at most (here 4); the others are not
    watched, counted (memtrim_agent_cgroups_unwatched) and logged, once a while (not at each
    scan). 24 then 64 limited cgroups under the agent's root: 4 watched both times, no more
    descriptors than 4 cgroups' wake-ups, the same series. Control agent-cgroups-uncapped:
    every one is watched."""
    cap = 4
    tree = Subtree(cgroup, tmp_path)
    children = tree.children
    agent = Agent(procs, tmp_path / "agent.log",
                  {"MaxCgroups": cap, "ScanIntervalMs": 100, **tree.roots})
    pid = agent.proc.proc.pid

    def make(n):
        for _ in range(n):
            tree.make(f"c{len(children)}")

    def scans():
        return agent.value("memtrim_agent_scans_total")

    def fds():
        agent.cgroups()  # the same state of the server as each count (no request in flight)
        return len(os.listdir(f"/proc/{pid}/fd"))

    def series():
        return sorted(line.rsplit(" ", 1)[0] for line in agent.get("/metrics").splitlines()
                      if 'cgroup="' in line)

    def rss():
        status = Path(f"/proc/{pid}/status").read_text()
        return int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1])
    try:
        s0 = scans()
        wait_for(lambda: scans() >= s0 + 2, 20, "two scans")
        base = fds()
        make(6 * cap)
        def counted():  # every limited cgroup watched or counted unwatched, at one scan
            n = agent.value("memtrim_agent_cgroups_unwatched")
            return len(children) == len(agent.cgroups()) + n and [n]
        assert wait_for(counted, 20, "every cgroup seen") == [5 * cap]
        first = (fds(), series(), rss())
        assert len(agent.cgroups()) == cap, sorted(agent.cgroups())
        make(10 * cap)
        assert wait_for(counted, 20, "every cgroup seen") == [15 * cap]
        s1 = scans()
        wait_for(lambda: scans() >= s1 + 10, 30, "ten scans more")
        second = (fds(), series(), rss())
        watched = agent.cgroups()
        print(f"\n{len(children)} limited cgroups, {len(watched)} watched; descriptors {base} at "
              f"rest, {first[0]} with {len(children) - 10 * cap}, {second[0]} with {len(children)}; "
              f"VmRSS {first[2]} then {second[2]} kB")
        assert len(watched) == cap, sorted(watched)
        assert base <= first[0] <= base + 2 * cap, (base, first[0])
        assert second[0] == first[0], (first[0], second[0])
        assert second[1] == first[1]  # the same series: one set per watched cgroup
        lines = [x for x in agent.output().splitlines() if "are not watched" in x]
        assert len(lines) == 1, lines  # once, not at each of the scans since
        assert f"MaxCgroups ({cap})" in lines[0], lines[0]
        agent.stop()
    finally:
        tree.remove()


def test_cgroups_the_lists_deny_never_keep_an_allowed_one_out(procs, cgroup, tmp_path):
    """A denied cgroup is only listed (no wake-up, no process read), and takes half of
    MaxCgroups at most: a user who makes cgroups outside AllowCgroups first cannot keep the
    allowed ones that come after out. MaxCgroups 4, AllowCgroups /a*: 8 denied cgroups, then 2
    allowed ones: the 2 allowed and 2 denied are watched, 6 denied counted unwatched. Control
    agent-denied-fill: the denied ones fill the room and the allowed ones are not watched."""
    tree = Subtree(cgroup, tmp_path)
    children = tree.children
    agent = Agent(procs, tmp_path / "agent.log", {"MaxCgroups": 4, "ScanIntervalMs": 100,
                                                  "AllowCgroups": ["/a*"], **tree.roots})
    make = tree.make

    def counted():
        n = agent.value("memtrim_agent_cgroups_unwatched")
        return len(children) == len(agent.cgroups()) + n and [n]
    try:
        for i in range(8):
            make(f"d{i}")
        assert wait_for(counted, 20, "every denied cgroup seen") == [6]
        for i in range(2):
            make(f"a{i}")
        assert wait_for(counted, 20, "every cgroup seen") == [6]
        watched = agent.cgroups()
        print(f"\nwatched: {sorted(watched)}")
        assert sorted(c for c in watched if watched[c]["allowed"]) == ["/a0", "/a1"], watched
        assert len(watched) == 4, sorted(watched)
        agent.stop()
    finally:
        tree.remove()


REEXEC = r"""
import os, sys
held = []
print("ready", os.getpid(), flush=True)
for line in sys.stdin:
    if line.strip() == "grow":  # live memory: a trim gives nothing of it back
        held.append(b"\x01" * (24 << 20))
    if line.strip() == "exec":  # the same file again (a server's re-exec on reload)
        os.execv(sys.executable, sys.orig_argv)
    print("ok", flush=True)
"""


def test_a_process_that_runs_its_own_file_again_is_forgotten(procs, cgroup, tmp_path):
    """A process that runs its own program again (execve of the same file: the same pid, start
    time and /proc/PID/exe, a new image and heap) is another one to the agent: what it learnt
    of the old image, here 'gives_nothing' (three trims that gave back nothing while it grew
    by live memory), is dropped, and it is read again. Idle trims every second (the cgroup is
    far from its limit). Control agent-exec-same-file (keyed on the file alone): the refusal
    stays."""
    agent, path, proc = python_beside_an_agent(procs, cgroup(512 << 20), tmp_path, REEXEC,
                                               {"IdleTrims": True, "IdleIntervalSeconds": 1})

    def view():
        return next((p for p in agent.cgroups()[path]["processes"] if p["pid"] == proc.pid), None)

    def say(command):
        proc.stdin.write(command + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() in ("ok", f"ready {proc.pid}")
    try:
        assert proc.stdout.readline().split()[0] == "ready"
        wait_for(lambda: (v := view()) and v["program"] == "python3", 20, "the agent to see python3")
        for n in range(1, 4):  # three trims, each after a growth of live memory
            say("grow")
            wait_for(lambda: (v := view()) and (v["trims"] >= n or v.get("reason")), 30,
                     f"trim {n}")
        learnt = wait_for(lambda: (v := view()) and v.get("reason") and v, 30, "the refusal")
        assert learnt["reason"] == "gives_nothing", learnt
        proc.stdin.write("exec\n")
        proc.stdin.flush()
        assert proc.stdout.readline().split() == ["ready", str(proc.pid)]  # the same pid
        again = wait_for(lambda: (v := view()) and v["reads"] > learnt["reads"] and v, 20,
                         "the agent to read the re-executed process again")
        print(f"\nlearnt: {learnt['reason']} after {learnt['trims']} trims, reads "
              f"{learnt['reads']}; after its exec: reads {again['reads']}, reason "
              f"{again.get('reason')}")
        assert again.get("reason") is None, again
        agent.stop()
    finally:
        proc.kill()
        proc.wait(10)
