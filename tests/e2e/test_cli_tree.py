"""memtrim trim --tree / stats --tree against Debian's gunicorn, unmodified (issue 29).

gunicorn's arbiter preforks 3 sync workers; each has served requests that left ~36 MB of freed
small blocks in its heap (one block in ten kept). The control: `memtrim trim ARBITER` without
--tree answers for the arbiter alone and leaves every worker's RSS where it was. Then, with one
worker stopped (SIGSTOP), `--tree` gives one JSON line per process: the stopped worker's says
it was refused because it is stopped, every other worker released memory, all are alive and
serve on; after SIGCONT a second `--tree` trims that worker too. `stats --tree` answers for
the same pids. And Debian's apache2 prefork (root master, www-data children): a line each,
none refused, the same children alive after. And a pid reused between the tree's reading and
its turn: in a pid namespace of its own (ns_last_pid picks the pid) a child of the tree exits
while the tool waits on its parent, and another process takes its pid: that pid's line says it
is not the process read and the newcomer is untouched; the control, the same tree without the
swap, trims the child at that pid.
"""
import json
import os
import signal
import subprocess
import textwrap

import pytest
import requests

from conftest import BUILD
from hosts_util import children_of, free_port, procs  # noqa: F401
from wait import wait_for

PYTHON = "/usr/bin/python3"
TOOL = BUILD / "memtrim"

APP = textwrap.dedent("""
    import os
    pinned = []
    def app(environ, start_response):
        junk = [bytearray(1000) for _ in range(40000)]   # 40 MB in small blocks
        pinned[:] = junk[::10]                            # one in ten kept: no top to trim
        del junk
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(os.getpid()).encode()]
""")


def rss(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tool(*args):
    r = subprocess.run([str(TOOL), *args, "--json"], capture_output=True, text=True, timeout=120)
    return r.returncode, [json.loads(line) for line in r.stdout.splitlines()], r.stderr


def serve_all(app_port, workers):
    served = set()

    def more():
        served.add(int(requests.get(f"http://127.0.0.1:{app_port}/", timeout=30).text))
        return served == set(workers)
    wait_for(more, 60, f"a request served by each of {workers}")


def test_tree_trims_gunicorns_workers(procs, tmp_path):  # noqa: F811
    if subprocess.run([PYTHON, "-c", "import gunicorn"], capture_output=True).returncode:
        pytest.skip("python3-gunicorn is not installed (tests/install-deps.sh)")
    (tmp_path / "app.py").write_text(APP)
    app_port = free_port()
    p = procs([PYTHON, "-m", "gunicorn", "--workers", "3", "--bind", f"127.0.0.1:{app_port}",
               "--chdir", str(tmp_path), "app:app"], tmp_path / "gunicorn.log", cwd=tmp_path)
    workers = wait_for(lambda: len(children_of(p.pid)) == 3 and children_of(p.pid), 30,
                       "gunicorn's 3 workers")
    serve_all(app_port, workers)
    tree = [p.pid] + workers

    # Control: without --tree only the arbiter is acted on; the workers keep their heaps.
    before = {w: rss(w) for w in workers}
    rc, lines, err = tool("trim", str(p.pid))
    assert rc == 0, err
    assert [x["pid"] for x in lines] == [p.pid]
    for w in workers:
        assert rss(w) > before[w] - (4 << 20), (w, before[w], rss(w))

    rc, lines, err = tool("stats", "--tree", str(p.pid))
    assert rc == 0, err
    assert sorted(x["pid"] for x in lines) == sorted(tree) and lines[0]["pid"] == p.pid
    for x in lines:
        if x["pid"] in workers:
            assert x["heap_free_bytes"] > 20 << 20, x

    stopped = workers[0]
    os.kill(stopped, signal.SIGSTOP)
    try:
        wait_for(lambda: open(f"/proc/{stopped}/stat").read().rsplit(")", 1)[1].split()[0]
                 in "Tt", 10, f"worker {stopped} stopped")
        rc, lines, err = tool("trim", "--tree", str(p.pid))
    finally:
        os.kill(stopped, signal.SIGCONT)
    by_pid = {x["pid"]: x for x in lines}
    assert len(lines) == len(tree) and sorted(by_pid) == sorted(tree), lines
    assert rc == 2, (rc, err)  # the first failure's code: refused
    assert by_pid[stopped]["error"]["code"] == "refused", by_pid[stopped]
    assert "stopped" in by_pid[stopped]["error"]["message"]
    for w in workers[1:]:
        assert by_pid[w]["released_bytes"] > 10 << 20, by_pid[w]
        assert by_pid[w]["thread"] == w
    assert all(os.path.exists(f"/proc/{pid}") for pid in tree)

    rc, lines, err = tool("trim", "--tree", str(p.pid))
    assert rc == 0, err
    by_pid = {x["pid"]: x for x in lines}
    assert by_pid[stopped]["released_bytes"] > 10 << 20, by_pid[stopped]

    assert children_of(p.pid) == workers  # none died and none was replaced
    for pid in tree:
        with open(f"/proc/{pid}/status") as f:
            assert "TracerPid:\t0\n" in f.read()
    serve_all(app_port, workers)
    assert p.stop() == 0, p.output()


def test_tree_trims_apache_prefork_children(procs, tmp_path):  # noqa: F811
    """Debian's apache2 prefork (root master, 3 www-data children, no memtrim in it), after
    requests: `trim --tree MASTER` gives the master and each child a line with its release,
    none refused; every child is alive after, the same ones, untraced, and Apache serves on
    and stops cleanly."""
    import shutil
    from test_apache_prefork import APACHE, PAGE, configure, need_apache
    from hosts_util import traversable_dir
    need_apache()
    root = traversable_dir("memtrim-cli-apache-")
    try:
        _, web, _ = configure(root)
        p = procs([APACHE, "-f", str(root / "httpd.conf"), "-DFOREGROUND"], root / "apache.log",
                  cwd=root, start_new_session=True)
        kids = wait_for(lambda: len(children_of(p.pid)) == 3 and children_of(p.pid), 30,
                        "Apache's 3 children")
        site = f"http://127.0.0.1:{web}/"
        for _ in range(30):
            r = requests.get(site, timeout=10)
            assert r.status_code == 200 and r.text == PAGE
        rc, lines, err = tool("trim", "--tree", str(p.pid))
        assert rc == 0, (lines, err)
        assert lines[0]["pid"] == p.pid and sorted(x["pid"] for x in lines[1:]) == kids, lines
        for x in lines:
            assert x["allocator"] == "glibc" and "released_bytes" in x, x
        print("apache2 --tree:", [(x["pid"], x["thread_syscall"], x["released_bytes"]) for x in lines])
        assert children_of(p.pid) == kids
        for pid in [p.pid] + kids:
            with open(f"/proc/{pid}/status") as f:
                assert "TracerPid:\t0\n" in f.read()
        for _ in range(6):
            r = requests.get(site, timeout=10)
            assert r.status_code == 200 and r.text == PAGE
        assert p.stop() == 0, p.output()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# What both scripts below run with (in a pid namespace of their own).
SCRIPT_HELPERS = r"""
def wait_for(f):
    for _ in range(2000):
        v = f()
        if v:
            return v
        time.sleep(0.005)
    raise SystemExit("timed out")

def syscall(pid):
    try:
        return open(f"/proc/{pid}/syscall").read().split()[0]
    except OSError:
        return None

def start(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
"""
# pid 1 of a pid namespace of its own: sh (in wait: rt_sigsuspend, never a safe thread: the
# tool spends --thread-wait there) with two children in sleep; the tool's --tree on sh; when
# asked, once the tool holds its lock on sh (the tree is read), the first sleep is killed and
# a new sleep, not of the tree, is given its pid (ns_last_pid). Prints one JSON line.
REUSE = r"""
import glob, json, os, subprocess, sys, time
tool, swap = sys.argv[1], sys.argv[2] == "1"
""" + SCRIPT_HELPERS + r"""
sh = subprocess.Popen(["/bin/sh", "-c", "sleep 1000 & echo $!; sleep 1000 & wait"],
                      stdout=subprocess.PIPE, text=True)
b = int(sh.stdout.readline())
wait_for(lambda: syscall(sh.pid) == "130" and syscall(b) == "230")  # rt_sigsuspend, clock_nanosleep
b_start = start(b)
t = subprocess.Popen([tool, "trim", "--tree", str(sh.pid), "--json", "--thread-wait", "1"],
                     stdout=subprocess.PIPE, text=True)
newcomer = None
if swap:
    wait_for(lambda: glob.glob(f"/run/memtrim-command/inject-{sh.pid}-*"))  # its lock: it acts on sh
    os.kill(b, 9)
    wait_for(lambda: not os.path.exists(f"/proc/{b}"))  # sh reaped it; it waits on the other
    ticks = lambda: float(open("/proc/uptime").read().split()[0]) * os.sysconf("SC_CLK_TCK")
    wait_for(lambda: ticks() > b_start + 1)  # a later start time than b's
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(b - 1))
    newcomer = subprocess.Popen(["sleep", "1000"])
out, _ = t.communicate(timeout=60)
lines = [json.loads(line) for line in out.splitlines()]
result = {"rc": t.returncode, "b": b, "lines": lines, "newcomer": newcomer and newcomer.pid}
if newcomer:
    result["newcomer_rwx"] = sum(" rwxp " in m for m in open(f"/proc/{newcomer.pid}/maps"))
    result["newcomer_tracer"] = [l.split()[1] for l in open(f"/proc/{newcomer.pid}/status")
                                 if l.startswith("TracerPid:")][0]
print(json.dumps(result), flush=True)
"""


def reuse_run(swap):
    r = subprocess.run(["/usr/bin/unshare", "--pid", "--fork", "--mount-proc", PYTHON, "-c", REUSE,
                        str(TOOL), "1" if swap else "0"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_tree_never_acts_on_a_reused_pid():
    control = reuse_run(False)
    at_b = [line for line in control["lines"] if line["pid"] == control["b"]]
    assert len(control["lines"]) == 3 and at_b and "released_bytes" in at_b[0], control
    swapped = reuse_run(True)
    b = swapped["b"]
    assert swapped["newcomer"] == b, swapped  # the pid was reused
    (at_b,) = [line for line in swapped["lines"] if line["pid"] == b]
    assert at_b["error"]["code"] == "failed", swapped
    assert "the pid was reused" in at_b["error"]["message"], swapped
    assert swapped["newcomer_rwx"] == 0 and swapped["newcomer_tracer"] == "0", swapped
    assert [line for line in swapped["lines"] if "released_bytes" in line], swapped  # the other


# pid 1 of a pid namespace of its own: a python3 whose only thread waits on a futex (never a
# safe thread: the tool looks again every 2 ms); once the tool has read it and holds its lock,
# it is killed and the hazard program (its main thread alone, in epoll_wait(-1), counting
# EINTR) is given its pid: the tool's next look finds a thread it may take there, and seizes
# it. Prints one JSON line.
SEIZE_REUSED = r"""
import glob, json, os, subprocess, sys, time
tool, hazard = sys.argv[1], sys.argv[2]
""" + SCRIPT_HELPERS + r"""
old = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
wait_for(lambda: open(f"/proc/{old.pid}/syscall").read().split()[0] == "202")  # futex
b, b_start = old.pid, start(old.pid)
t = subprocess.Popen([tool, "trim", str(b), "--json", "--thread-wait", "10"],
                     stdout=subprocess.PIPE, text=True)
wait_for(lambda: glob.glob(f"/run/memtrim-command/inject-{b}-*"))  # read, locked, looking
old.kill()
old.wait()
ticks = lambda: float(open("/proc/uptime").read().split()[0]) * os.sysconf("SC_CLK_TCK")
wait_for(lambda: ticks() > b_start + 1)  # a later start time than b's
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(b - 1))
new = subprocess.Popen([hazard, "epollmain"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       text=True)
assert new.stdout.readline().startswith("ready")
out, _ = t.communicate(timeout=60)
new.stdin.write("report\n")
new.stdin.flush()
result = {"rc": t.returncode, "out": out, "b": b, "new": new.pid,
          "eintr": json.loads(new.stdout.readline())["eintr_epoll"],
          "rwx": sum(" rwxp " in m for m in open(f"/proc/{new.pid}/maps"))}
new.kill()
print(json.dumps(result), flush=True)
"""


def test_a_reused_pid_is_released_before_any_interrupt():
    """The pid reused between the tool's reading and its seize: the thread is released as
    soon as it is seized, never interrupted (a PTRACE_INTERRUPT alone makes an epoll_wait(-1)
    return EINTR). Exit 6 'the pid was reused', no page, no EINTR in the newcomer. Control
    cmd-reused-interrupt (checked after the interrupt stop, as before): one EINTR."""
    r = subprocess.run(["/usr/bin/unshare", "--pid", "--fork", "--mount-proc", PYTHON, "-c",
                        SEIZE_REUSED, str(TOOL), str(BUILD / "memtrim-cli-hazard")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["new"] == res["b"], res  # the pid was reused
    assert res["rc"] == 6 and "the pid was reused" in res["out"], res
    assert res["rwx"] == 0 and res["eintr"] == 0, res
