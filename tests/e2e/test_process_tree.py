"""LD_PRELOAD in real process trees (issue 16): every process a wrapper
script, /usr/bin/time, env or a shell starts inherits LD_PRELOAD and
MEMTRIM_CONFIG. memtrim must run in the process the operator meant
("Program"), stay silent in the others, say once (info) that an ancestor
already serves its port, and keep a genuine clash an error."""
import os
import re
import signal
import socket
import stat
import sys
import textwrap

import pytest
import requests

from hosts_util import build_file, free_port, http_ok, pid_alive, preload_env, procs, wait_for  # noqa: F401

DEMO_ARGS = ["--no-memtrim", "--workers", "1", "--study-mb", "8", "--pause-ms", "200",
             "--studies", "0", "--quiet"]


def health(port):
    return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()


def memtrim_lines(text):
    return [ln for ln in text.splitlines() if "memtrim" in ln]


def error_lines(text):
    return [ln for ln in text.splitlines() if ln.endswith("(error)") or "memtrim: not started" in ln]


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


WRAPPER = textwrap.dedent("""\
    #!/bin/sh
    # The common service wrapper: prepare, start the server in the background, wait.
    echo "wrapper: starting the server"
    "$DEMO" "$@" > "$DEMO_LOG" 2>&1 &
    trap 'kill -TERM $!' TERM
    echo $! > "$PID_FILE.tmp" && mv "$PID_FILE.tmp" "$PID_FILE"
    wait
    wait
    echo "wrapper: the server is gone"
""")


def start_wrapper(procs, tmp_path, config, extra_env=None):
    script = tmp_path / "start-demo.sh"
    script.write_text(WRAPPER)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    pid_file = tmp_path / "demo.pid"
    env = preload_env(config, {"DEMO": str(build_file("memtrim-demo")),
                               "DEMO_LOG": str(tmp_path / "demo.log"),
                               "PID_FILE": str(pid_file), **(extra_env or {})})
    p = procs([script] + DEMO_ARGS, tmp_path / "wrapper.log", env=env)
    demo_pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20,
                            "the wrapper to start the demo"))
    return p, demo_pid


@pytest.mark.parametrize("program", ["memtrim-demo", ["sh", "*/memtrim-demo"]])
def test_wrapper_script_memtrim_in_the_server(procs, tmp_path, program):
    """A wrapper script starts the demo (no memtrim linked) in the background
    and waits, all under LD_PRELOAD with Program naming the demo: memtrim
    answers from the demo's process, the shell logs nothing."""
    port = free_port()
    config = {"HttpPort": port, "Database": str(tmp_path / "m.sqlite"), "Program": program}
    p, demo_pid = start_wrapper(procs, tmp_path, config)
    wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 20, "memtrim in the demo")
    h = health(port)
    assert h["pid"] == demo_pid and h["program"] == "memtrim-demo", h
    assert h["pid"] != p.pid
    stats = requests.get(f"http://127.0.0.1:{port}/memory/stats", timeout=5).json()
    assert stats["rss_bytes"] > 0
    demo_log = (tmp_path / "demo.log").read_text()
    assert "started; API on" in demo_log and not error_lines(demo_log), demo_log
    # The wrapper's own stop: TERM to the shell, which passes it on and waits.
    assert p.stop(signal.SIGTERM) == 0, p.output()
    wait_for(lambda: not pid_alive(demo_pid), 20, "the demo to exit")
    out = p.output()
    assert "wrapper: the server is gone" in out, out
    assert memtrim_lines(out) == [], out
    assert "memtrim/core: stopped" in (tmp_path / "demo.log").read_text()


def test_wrapper_script_debug_line(procs, tmp_path):
    """MEMTRIM_DEBUG=1: a process Program does not name says so in one debug line."""
    port = free_port()
    config = {"HttpPort": port, "Database": "", "Program": "memtrim-demo"}
    p, demo_pid = start_wrapper(procs, tmp_path, config, {"MEMTRIM_DEBUG": "1"})
    wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 20, "memtrim in the demo")
    assert health(port)["pid"] == demo_pid
    assert p.stop(signal.SIGTERM) == 0, p.output()
    # one line per process that is not the demo: the shell, and the mv it runs
    lines = memtrim_lines(p.output())
    assert lines and all(ln.endswith("Program does not name it (debug)") for ln in lines), lines
    shell = [ln for ln in lines if f"pid {p.pid} (start-demo.sh, " in ln]
    assert len(shell) == 1, lines


@pytest.mark.parametrize("front", [["/usr/bin/time"], ["/usr/bin/env", "A=1"],
                                   ["/usr/bin/time", "/usr/bin/env", "A=1"]])
def test_time_and_env_in_front(procs, tmp_path, front):
    """`/usr/bin/time` (forks and waits) and `env` (execs) in front of the
    program: with Program set, memtrim is in the program, nowhere else."""
    port = free_port()
    config = {"HttpPort": port, "Database": "", "Program": "memtrim-demo"}
    p = procs(front + [build_file("memtrim-demo")] + DEMO_ARGS, tmp_path / "out.log",
              env=preload_env(config))
    wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 20, "memtrim in the demo")
    # the API serves before the start steps' last line is written: wait for that line, or a
    # SIGTERM sent in between finds no line to count (r18 beside two busy loops, load 10)
    wait_for(lambda: "started; API on" in p.output(), 20, "memtrim's start line")
    h = health(port)
    assert h["program"] == "memtrim-demo", h
    if front[0] == "/usr/bin/time":
        assert children(p.pid) == [h["pid"]], (p.pid, h)
    else:  # env execs: the same process
        assert h["pid"] == p.pid
    os.kill(h["pid"], signal.SIGTERM)
    p.wait(20)
    out = p.output()
    assert not error_lines(out), out
    assert out.count("started; API on") == 1, out


def test_time_without_program_names_the_holder(procs, tmp_path):
    """Without Program, /usr/bin/time is the first to start and takes the
    port; the program under it is not in error: one info line names the
    holder (pid and comm), and it stays off."""
    port = free_port()
    config = {"HttpPort": port, "Database": ""}
    p = procs(["/usr/bin/time", build_file("memtrim-demo")] + DEMO_ARGS, tmp_path / "out.log",
              env=preload_env(config))
    wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 20, "memtrim")
    assert health(port)["pid"] == p.pid  # in time, not in the demo
    (demo,) = wait_for(lambda: children(p.pid), 20, "the demo under time")
    line = wait_for(lambda: [ln for ln in p.output().splitlines() if "not started in pid" in ln],
                    20, "the demo's line")
    assert line == [f"memtrim/preload: not started in pid {demo} (memtrim-demo): port {port} is "
                    f"served by memtrim in its ancestor pid {p.pid} (time); set Program to "
                    f"choose the process memtrim belongs in (info)"], line
    os.kill(demo, signal.SIGTERM)
    p.wait(20)
    assert not error_lines(p.output()), p.output()


RUNNER = textwrap.dedent("""\
    import subprocess, sys
    for i in range(int(sys.argv[1])):
        subprocess.run(["/bin/true"], check=True)
    print("runner: done", flush=True)
""")


@pytest.mark.parametrize("host", ["bash", "python"])
def test_helpers_run_50_times_no_error(procs, tmp_path, host):
    """A program that runs /bin/true 50 times under LD_PRELOAD without
    Program: memtrim runs in the program, every /bin/true stays off with an
    info line naming the program, and nothing is logged as an error."""
    port = free_port()
    config = {"HttpPort": port, "Database": ""}
    if host == "bash":
        args = ["/bin/bash", "-c", 'for i in $(seq 50); do /bin/true; done; echo "runner: done"']
    else:
        (tmp_path / "runner.py").write_text(RUNNER)
        args = [sys.executable, tmp_path / "runner.py", "50"]
    p = procs(args, tmp_path / "out.log", env=preload_env(config))
    assert p.wait(120) == 0, p.output()
    out = p.output()
    assert "runner: done" in out
    assert out.count("started; API on") == 1, out
    assert not error_lines(out), out
    comm = "bash" if host == "bash" else "python3"
    said = re.findall(r"not started in pid (\d+) \(true\): port (\d+) is served by memtrim in "
                      r"its ancestor pid (\d+) \((\S+)\)", out)
    assert len(said) == 50, out[-3000:]
    assert {(int(pt), int(holder), c) for _, pt, holder, c in said} == {(port, p.pid, comm)}
    assert len({pid for pid, _, _, _ in said}) == 50


def test_a_genuine_clash_stays_an_error(procs, tmp_path):
    """The port held by another program (here the test itself, an ancestor
    without memtrim): the error is logged as before, the program runs on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = procs(["/bin/sh", "-c", "echo program: ran"], tmp_path / "out.log",
                  env=preload_env({"HttpPort": port, "Database": ""}))
        assert p.wait(30) == 0, p.output()
    out = p.output()
    assert "program: ran" in out
    errors = error_lines(out)
    assert errors and "Address already in use" in out, out
    assert "ancestor" not in out, out


def test_program_not_matching_anything_is_silent(procs, tmp_path):
    """Program naming none of the processes: memtrim runs nowhere and says nothing."""
    port = free_port()
    config = {"HttpPort": port, "Database": "", "Program": "no-such-server"}
    p = procs(["/usr/bin/time", "/bin/sh", "-c", "/bin/true; echo program: ran"],
              tmp_path / "out.log", env=preload_env(config))
    assert p.wait(30) == 0, p.output()
    out = p.output()
    assert "program: ran" in out and memtrim_lines(out) == [], out
    assert not http_ok(f"http://127.0.0.1:{port}/healthz")


def test_port_file_per_process(procs, tmp_path):
    """A preforking server (the parent keeps running, two children work):
    with HttpPort 0, FollowFork and PortFile ".../memtrim.%p.port", each
    process serves memtrim on its own port and publishes it in its own file;
    a child that exits removes its file."""
    from test_preload import start_daemon, stop_pid
    config = {"HttpPort": 0, "FollowFork": True, "Database": "",
              "PortFile": str(tmp_path / "memtrim.%p.port")}
    p, kids = start_daemon(procs, tmp_path, config, 2, "stay")
    files = {pid: tmp_path / f"memtrim.{pid}.port" for pid in [p.pid] + kids}
    wait_for(lambda: all(f.exists() for f in files.values()), 30, "the three port files")
    ports = set()
    for pid, f in files.items():
        port = int(f.read_text())
        ports.add(port)
        h = health(port)
        assert h["pid"] == pid and h["program"] == "python3", (pid, h)
    assert len(ports) == 3
    assert not list(tmp_path.glob("*.tmp"))
    stop_pid(kids[0])
    assert not files[kids[0]].exists()
    assert files[kids[1]].exists() and files[p.pid].exists()
    stop_pid(kids[1])
    assert p.stop() == 0, p.output()
    assert not any(f.exists() for f in files.values())
    assert not error_lines(p.output()), p.output()


def test_port_file_wrapper_ephemeral(procs, tmp_path):
    """The wrapper case with HttpPort 0: the port file tells the operator's
    scripts where the demo's memtrim listens."""
    port_file = tmp_path / "demo.port"
    config = {"HttpPort": 0, "Database": "", "Program": "memtrim-demo",
              "PortFile": str(port_file)}
    p, demo_pid = start_wrapper(procs, tmp_path, config)
    port = int(wait_for(lambda: port_file.exists() and port_file.read_text(), 20, "the port file"))
    assert health(port)["pid"] == demo_pid
    assert p.stop(signal.SIGTERM) == 0, p.output()
    wait_for(lambda: not pid_alive(demo_pid), 20, "the demo to exit")
    assert not port_file.exists()
    assert memtrim_lines(p.output()) == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
