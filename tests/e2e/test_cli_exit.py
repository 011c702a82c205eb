"""Every exit status of the memtrim command against docs/memtrim.1's EXIT STATUS (review of
issue 29): a table with a row for each way out of cli/main.c and cli/load.c that a test can
reach from outside, each with its exit code, the JSON error code that goes with it and a word
of its message. The man page must list every code the table uses, and no code without a
row; the paths that need a tracer or a lock held inside the target are rows of the tests
named in COVERED_ELSEWHERE.
"""
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import BUILD, ROOT
from hosts_util import free_port
from wait import wait_for

TOOL = BUILD / "memtrim"
TARGET = BUILD / "memtrim-cli-target"
MAN = ROOT / "docs" / "memtrim.1"
NAMES = {1: "usage", 2: "refused", 3: "unsupported", 4: "no_safe_thread", 5: "timeout",
         6: "failed", 7: "already_loaded"}  # main.c's cli_fail table, by exit code
PY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"

# (exit code, the man page's words for it, where) proven by other tests, not repeated here
COVERED_ELSEWHERE = [
    (2, "a tracer already attached", "test_cli.c test_traced_and_stopped"),
    (2, "another uid", "test_cli.c test_permissions"),
    (2, "ptrace_scope 1, 2 or 3", "tests/vm/test_cli_yama.py"),
    (2, "capabilities the process holds", "test_cli_container.py"),
    (2, "a seccomp filter of the process", "test_cli_seccomp.py"),
    (2, "a seccomp filter memtrim cannot read", "test_cli_seccomp.py"),
    (2, "a memory cgroup without room", "test_cli_cgroup_room.py"),
    (2, "a pids cgroup that may start fewer than 4 more tasks", "test_cli_pids_room.py"),
    (2, "an RLIMIT_NPROC that leaves the process's real uid fewer", "test_cli_pids_room.py"),
    (6, "a result that could not be written to standard output", "test_cli_load_quiet.py"),
    (4, "another memtrim is acting", "test_cli_lock.py"),
    (3, "stats on jemalloc", "test_cli_allocators.py"),
    (3, "its release call collects the calling thread's heap only", "test_cli_allocators.py"),
    (3, "a sanitizer allocator", "test_cli_allocators.py test_a_sanitizer_allocator_is_refused"),
    (3, "neither the library's own path nor a helper's memfd", "test_cli_load.py"),
    (4, "a timed wait that fails with EINTR", "test_cli_hazards.py test_no_spurious_eintr"),
    (5, "did not return within --timeout", "test_cli_load.py"),
    (6, "a pid reused", "test_cli_tree.py"),
]


class Env:
    """The processes a row needs, made when asked and ended after it."""

    def __init__(self, tmp_path):
        self.tmp, self.procs, self.dirs = tmp_path, [], []

    def spawn(self, argv):
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        assert p.stdout.readline().startswith("ready")
        return p.pid

    def target(self, *args):
        return self.spawn([str(TARGET), *args])

    def python(self):
        return self.spawn(["/usr/bin/python3", "-c", PY])

    def gone(self):
        p = subprocess.Popen(["/bin/true"])
        p.wait()
        return p.pid  # reaped: no such process (until the pid is reused)

    def zombie(self):
        p = subprocess.Popen(["/bin/true"])
        self.procs.append(p)
        wait_for(lambda: open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                 what="a zombie")
        return p.pid

    def stopped(self):
        pid = self.target()
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T",
                 what="stopped")
        return pid

    def config_file(self, text):
        f = self.tmp / "config.json"
        f.write_text(text)
        return str(f)

    def end(self):
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait()
        for d in self.dirs:
            shutil.rmtree(d)


def tool(*args):
    r = subprocess.run([str(TOOL), *map(str, args), "--json"], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def holding_the_lock(env):
    """Another memtrim acting on the process: its lock (root's, cli/lock.c) held here."""
    pid = env.target()
    start = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    os.makedirs("/run/memtrim-command", mode=0o700, exist_ok=True)
    path = f"/run/memtrim-command/inject-{pid}-{start}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        return tool("trim", pid, "--thread-wait", "0.1")
    finally:
        os.unlink(path)
        os.close(fd)


def page_of(pid):
    """Our page in the target: an rwx anonymous mapping with the magic at 0x800 (cli/tramp.h;
    its guard pages split it: the head is 0x7000 long)."""
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for line in open(f"/proc/{pid}/maps"):
            f = line.split()
            if f[1] == "rwxp" and len(f) == 5:
                start, end = (int(x, 16) for x in f[0].split("-"))
                for at in range(start, end - 0x7000 + 1, 4096):
                    mem.seek(at + 0x800)
                    if mem.read(8) == b"MTINJ002":
                        return at
    return None


def earlier_call_unfinished(env):
    """A page whose call has not finished (a killed memtrim's): its raw thread's tid word (whose
    address is at 0x870) not yet cleared by the kernel."""
    pid = env.target()
    assert tool("trim", pid)[0] == 0
    page = page_of(pid)
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
        mem.seek(page + 0x870)
        word = int.from_bytes(mem.read(8), "little")
        mem.seek(word)
        mem.write((1).to_bytes(4, "little"))
        try:
            return tool("trim", pid, "--thread-wait", "0.1")
        finally:
            mem.seek(word)
            mem.write((0).to_bytes(4, "little"))


def itself(env):
    r = subprocess.run(["/bin/sh", "-c", f"exec '{TOOL}' trim $$ --json"], capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def loaded_twice(env):
    pid = env.python()
    assert tool("load", pid, "--config", json.dumps({"HttpPort": free_port()}))[0] == 0
    return tool("load", pid, "--config", json.dumps({"HttpPort": free_port()}))


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


NOT_DUMPABLE = """
import ctypes, sys
ctypes.CDLL(None).prctl(4, int(sys.argv[1]), 0, 0, 0)  # PR_SET_DUMPABLE
print('ready', flush=True)
sys.stdin.read()
"""


def not_dumpable(env):
    """nobody's tool on nobody's process: the control, dumpable, is trimmed; the same
    process after prctl(PR_SET_DUMPABLE, 0) is the kernel's to refuse (CAP_SYS_PTRACE only)."""
    bin_dir = Path(tempfile.mkdtemp(prefix="memtrim-exit-"))  # pytest's are 0700
    env.dirs.append(bin_dir)
    bin_dir.chmod(0o755)
    shutil.copy(TOOL, bin_dir / "memtrim")
    runs = []
    for dumpable in (1, 0):
        p = subprocess.Popen(["/usr/bin/python3", "-c", NOT_DUMPABLE, str(dumpable)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             preexec_fn=as_nobody, cwd="/")
        env.procs.append(p)
        assert p.stdout.readline().startswith("ready")
        r = subprocess.run([str(bin_dir / "memtrim"), "trim", str(p.pid), "--json"],
                           capture_output=True, text=True, timeout=60, preexec_fn=as_nobody)
        runs.append((r.returncode, r.stdout, r.stderr))
        assert open(f"/proc/{p.pid}/status").read().count("TracerPid:\t0\n") == 1
    assert runs[0][0] == 0, runs[0]  # the control
    return runs[1]


SECCOMP_C = r"""
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
/* argv[1]: a system call refused with EPERM from now on; then runs argv[2..] */
int main(int argc, char **argv)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)atoi(argv[1]), 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (argc < 3 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        return 125;
    execv(argv[2], argv + 2);
    return 126;
}
"""


def tool_under_seccomp(env):
    """The tool under a seccomp filter of its own that refuses process_vm_readv (Docker's
    default profile without CAP_SYS_PTRACE): refused by name before any ptrace; the control,
    a filter that refuses another call (syslog), trims."""
    pid = env.target()
    control = wrapped(env, "seccomp", SECCOMP_C, 103, pid)  # syslog
    assert control[0] == 0, control
    assert open(f"/proc/{pid}/status").read().count("TracerPid:\t0\n") == 1
    return wrapped(env, "seccomp", SECCOMP_C, 310, pid)  # process_vm_readv


LANDLOCK_C = r"""
#include <linux/landlock.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
/* argv[1] 1: runs argv[2..] in a Landlock sandbox of its own (it only forbids making
 * character devices; its ptrace scope is what counts), with no_new_privs as Landlock wants */
int main(int argc, char **argv)
{
    struct landlock_ruleset_attr attr = {.handled_access_fs = LANDLOCK_ACCESS_FS_MAKE_CHAR};
    if (argc < 3)
        return 125;
    if (atoi(argv[1])) {
        int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
        if (fd < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
            syscall(SYS_landlock_restrict_self, fd, 0))
            return 125;
    }
    execv(argv[2], argv + 2);
    return 126;
}
"""


def wrapped(env, name, source, setting, pid):
    """The tool run by a wrapper built from source with argv[1] = setting."""
    src, exe = env.tmp / f"{name}.c", env.tmp / name
    if not exe.exists():
        src.write_text(source)
        subprocess.run(["gcc", "-O", "-o", str(exe), str(src)], check=True)
    r = subprocess.run([str(exe), str(setting), str(TOOL), "trim", str(pid), "--json"],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def tool_in_landlock(env):
    """The tool in a Landlock sandbox (no_new_privs) against a process outside it: the kernel
    refuses it the process's memory; refused by name before any ptrace. The control, the same
    wrapper without the sandbox, trims."""
    pid = env.target()
    assert wrapped(env, "landlock", LANDLOCK_C, 0, pid)[0] == 0  # the control
    return wrapped(env, "landlock", LANDLOCK_C, 1, pid)


ROWS = {  # id: (how, exit code, a word of its message, the man page's words for it)
    "help": (lambda e: tool("--help"), 0, None, "done"),
    "trim": (lambda e: tool("trim", e.target()), 0, None, "done"),
    "config-file-longer-than-the-page-compacts-to-fit": (lambda e: tool(
        "load", e.python(), "--config", e.config_file(
            "{" + " " * 3000 + json.dumps({"HttpPort": free_port()})[1:])), 0, None, "done"),
    "no-command": (lambda e: tool(), 1, "no command", "the command line"),
    "unknown-command": (lambda e: tool("frob", "1"), 1, "unknown command", "the command line"),
    "not-a-pid": (lambda e: tool("trim", "abc"), 1, "is not a process id", "the command line"),
    "unknown-option": (lambda e: tool("trim", "1", "--frob"), 1, "unknown option",
                       "the command line"),
    "bad-seconds": (lambda e: tool("trim", "1", "--thread-wait", "0"), 1, "wants seconds",
                    "the command line"),
    "bad-pad": (lambda e: tool("trim", "1", "--pad", "-1"), 1, "wants a byte count",
                "the command line"),
    "bad-raise": (lambda e: tool("trim", "1", "--raise", "21"), 1, "wants nice levels",
                  "the command line"),
    "tree-with-load": (lambda e: tool("load", "1", "--tree"), 1, "--tree is for trim and stats",
                       "the command line"),
    "raise-with-load": (lambda e: tool("load", "1", "--raise", "3"), 1, "--raise is for trim and stats",
                        "the command line"),
    "itself": (itself, 1, "cannot act on itself", "memtrim's own pid"),
    "config-not-json": (lambda e: tool("load", e.python(), "--config", "{x"), 1,
                        "not a JSON object", "not a JSON object"),
    "config-unreadable": (lambda e: tool("load", e.python(), "--config", "/nonexistent.json"), 1,
                          "cannot read /nonexistent.json", "cannot be read"),
    "config-too-long": (lambda e: tool("load", e.python(), "--config", json.dumps(
        {"HttpPort": free_port(), "Program": "p" * 2000})), 1, "at most 1535",
        "longer than 1,535 bytes once compacted"),
    "stopped": (lambda e: tool("trim", e.stopped()), 2, "is stopped", "a stopped process"),
    "not-dumpable": (not_dumpable, 2, "is not dumpable", "not dumpable"),
    "tool-under-seccomp": (tool_under_seccomp, 2, "seccomp filter that refuses process_vm_readv",
                           "a seccomp filter of memtrim's own"),
    "tool-in-landlock": (tool_in_landlock, 2, "runs with no_new_privs", "a Landlock sandbox"),
    "config-disables-it": (lambda e: tool("load", e.python(), "--config",
                                          json.dumps({"Enabled": False})), 2, "did not start",
                           "Enabled false"),
    "static": (lambda e: tool("trim", e.spawn([str(BUILD / "memtrim-cli-target-static")])),
               3, "static binary", "a static binary"),
    "no-safe-thread": (lambda e: tool("trim", e.target("--churn", "1", "--busy-main"),
                                      "--thread-wait", "0.05"), 4, "no thread of process",
                       "no thread was in a system call the kernel restarts exactly"),
    "another-memtrim": (holding_the_lock, 4, "another memtrim is acting",
                        "another memtrim is acting"),
    "earlier-call-unfinished": (earlier_call_unfinished, 5, "has not finished", "an earlier call"),
    "no-process": (lambda e: tool("trim", e.gone()), 6, "no process", "no such process"),
    "tree-no-process": (lambda e: tool("stats", "--tree", e.gone()), 6, "no process",
                        "no such process"),
    "zombie": (lambda e: tool("trim", e.zombie()), 6, "zombie", "zombie"),
    "no-library": (lambda e: tool("load", e.python(), "--library", "/nonexistent.so"), 6,
                   "cannot find libmemtrim.so.0", "library not found"),
    "already-loaded": (loaded_twice, 7, "already loaded", "already runs"),
}


def man_exit_codes():
    """EXIT STATUS of docs/memtrim.1: {code: its paragraph, as one line of words}."""
    text = MAN.read_text().split(".SH EXIT STATUS", 1)[1].split("\n.SH ", 1)[0]
    text = text.replace("\\-", "-")
    return {int(m.group(1)): " ".join(re.sub(r"^\.[A-Z]+ ?", "", m.group(2), flags=re.M).split())
            for m in re.finditer(r"^\.TP\n\.B (\d+)\n(.*?)(?=^\.TP|\Z)", text, re.M | re.S)}


@pytest.mark.parametrize("row", ROWS)
def test_exit_status(row, tmp_path):
    how, code, word, man_words = ROWS[row]
    assert man_words in man_exit_codes()[code], (row, code, man_words)
    env = Env(tmp_path)
    try:
        rc, out, err = how(env)
    finally:
        env.end()
    assert rc == code, (row, rc, out, err)
    if code == 0:
        return
    assert word in err, (row, err)
    if man_words != "the command line":  # those print the usage on stderr only
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines and lines[-1]["error"]["code"] == NAMES[code], (row, out)


def test_the_man_page_lists_every_code_and_no_other():
    man = man_exit_codes()
    used = {row[1] for row in ROWS.values()} | {code for code, _, _ in COVERED_ELSEWHERE}
    assert set(man) == used, (sorted(man), sorted(used))
    assert set(NAMES) == set(man) - {0}
    for code, words, where in COVERED_ELSEWHERE:
        assert words in man[code], (code, words, where)
