"""The memtrim command never lets a target's seccomp filter kill it (issue 37, item 2). Real
filtered targets (tests/e2e's seccomp_target.c: a glibc program that frees 64 MiB, installs its
filter, then answers "ping" lines on stdin in read): an OpenSSH pre-auth style filter (an
allow-list with argument rules, mmap without PROT_EXEC; KILL otherwise), a plain allow-list
without prctl (KILL_PROCESS), a rule that kills prctl only, and a filter that allows
everything. The tool reads each filter (PTRACE_SECCOMP_GET_FILTER) and evaluates it for every
system call the injection and the call make: the first three are refused (exit 2) with the call
and the action named, the target alive, never traced, with no page; the last, and one of
Docker's default profile's shape (privileged calls fail with EPERM, clone3 with ENOSYS: a
failed call is what memtrim's engine contains), are trimmed, read and loaded. A filter the tool
may not read (nobody's tool: no CAP_SYS_ADMIN) is refused by name. load, whose engine makes any
system call, is refused by the prctl rule. Control cmd-seccomp (the check skipped): the refused
targets die of SIGSYS.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from conftest import BUILD
from hosts_util import free_port

TOOL = BUILD / "memtrim"

SOURCE = r"""
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define ARG_LO(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define ALLOW(n) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), RET(SECCOMP_RET_ALLOW)
#define DENY(n, e) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), RET(SECCOMP_RET_ERRNO | (e))
/* OpenSSH's SC_ALLOW_ARG_MASK: allowed when arg i has no bit outside mask */
#define ALLOW_MASK(n, i, mask) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 4), ARG_LO(i), \
    BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~(unsigned)(mask)), \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1), RET(SECCOMP_RET_ALLOW), NR
/* OpenSSH's SC_ALLOW_ARG: allowed when arg i is v */
#define ALLOW_ARG(n, i, v) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 3), ARG_LO(i), \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (v), 0, 1), RET(SECCOMP_RET_ALLOW), NR
#define ARCH BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)), \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0), RET(SECCOMP_RET_KILL_PROCESS)

static struct sock_filter openssh[] = { /* sandbox-seccomp-filter.c's shape */
    ARCH, NR,
    DENY(SYS_openat, EACCES), DENY(SYS_stat, EACCES), DENY(SYS_newfstatat, EACCES),
    ALLOW(SYS_brk), ALLOW(SYS_clock_gettime), ALLOW(SYS_close), ALLOW(SYS_exit),
    ALLOW(SYS_exit_group), ALLOW(SYS_futex), ALLOW(SYS_getpid), ALLOW(SYS_getrandom),
    ALLOW(SYS_gettimeofday), ALLOW_ARG(SYS_madvise, 2, MADV_NORMAL),
    ALLOW_ARG(SYS_madvise, 2, MADV_DONTFORK), ALLOW_ARG(SYS_madvise, 2, MADV_DONTDUMP),
    ALLOW_MASK(SYS_mmap, 2, PROT_READ | PROT_WRITE | PROT_NONE),
    ALLOW_MASK(SYS_mprotect, 2, PROT_READ | PROT_WRITE | PROT_NONE),
    ALLOW(SYS_munmap), ALLOW(SYS_nanosleep), ALLOW(SYS_clock_nanosleep), ALLOW(SYS_poll),
    ALLOW(SYS_ppoll), ALLOW(SYS_pselect6), ALLOW(SYS_read), ALLOW(SYS_rt_sigprocmask),
    ALLOW(SYS_select), ALLOW(SYS_shutdown), ALLOW(SYS_write), ALLOW(SYS_writev),
    RET(SECCOMP_RET_KILL),
};
static struct sock_filter allowlist[] = {
    ARCH, NR,
    ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_exit_group), ALLOW(SYS_exit),
    ALLOW(SYS_futex), ALLOW(SYS_brk), ALLOW(SYS_mmap), ALLOW(SYS_munmap), ALLOW(SYS_madvise),
    ALLOW(SYS_mprotect), ALLOW(SYS_rt_sigprocmask), ALLOW(SYS_rt_sigreturn),
    RET(SECCOMP_RET_KILL_PROCESS),
};
static struct sock_filter prctl_rule[] = {
    NR, BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 1), RET(SECCOMP_RET_KILL_PROCESS),
    RET(SECCOMP_RET_ALLOW),
};
static struct sock_filter allow_all[] = {ARCH, RET(SECCOMP_RET_ALLOW)};
/* Docker's default profile's shape: privileged calls fail (EPERM), clone3 says ENOSYS (glibc
 * falls back to clone), the rest is allowed */
static struct sock_filter docker_like[] = {
    ARCH, NR,
    DENY(SYS_mount, EPERM), DENY(SYS_umount2, EPERM), DENY(SYS_reboot, EPERM),
    DENY(SYS_ptrace, EPERM), DENY(SYS_bpf, EPERM), DENY(SYS_perf_event_open, EPERM),
    DENY(SYS_keyctl, EPERM), DENY(SYS_unshare, EPERM), DENY(SYS_clone3, ENOSYS),
    RET(SECCOMP_RET_ALLOW),
};

#define PROG(f) {sizeof f / sizeof f[0], f}
int main(int argc, char **argv)
{
    struct sock_fprog progs[] = {PROG(openssh), PROG(allowlist), PROG(prctl_rule),
                                 PROG(allow_all), PROG(docker_like)};
    const char *names[] = {"openssh", "allowlist", "prctl", "allowall", "dockerlike"};
    int which = -1;
    for (int i = 0; i < 5; i++)
        if (argc > 1 && !strcmp(argv[1], names[i]))
            which = i;
    if (which < 0)
        return 125;
    enum { N = 65536 };
    static char *b[N];
    for (int i = 0; i < N; i++)
        b[i] = malloc(1000);
    for (int i = 0; i < N; i++)
        free(b[N - 1 - i]);
    b[0] = malloc(1000); /* the top stays in use: only malloc_trim gives the rest back */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &progs[which]))
        return 124;
    /* "epoll": each line waited for in epoll_wait first, which an interrupt ends with EINTR
     * unless the kernel is told to restart it: EINTR here is a wake-up nothing sent */
    int ep = argc > 2 && !strcmp(argv[2], "epoll") ? epoll_create1(0) : -1;
    struct epoll_event ev = {.events = EPOLLIN};
    if (ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev))
        return 123;
    write(1, "ready\n", 6);
    char line[64];
    ssize_t n;
    while ((ep < 0 || epoll_wait(ep, &ev, 1, -1) == 1 || (write(1, "eintr\n", 6), 0)) &&
           (n = read(0, line, sizeof line)) > 0)
        if (!strncmp(line, "ping", 4))
            write(1, "pong\n", 5);
    return 0;
}
"""


@pytest.fixture(scope="module")
def bin_dir():
    """A directory nobody may read (pytest's are 0700): the target, and the tool's copy."""
    d = Path(tempfile.mkdtemp(prefix="memtrim-seccomp-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


@pytest.fixture(scope="module")
def target_exe(bin_dir):
    src, exe = bin_dir / "seccomp_target.c", bin_dir / "seccomp_target"
    src.write_text(SOURCE)
    subprocess.run(["gcc", "-O", "-Wall", "-o", str(exe), str(src)], check=True)
    return exe


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


class Target:
    def __init__(self, exe, kind, *mode, **kw):
        self.p = subprocess.Popen([str(exe), kind, *mode], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, **kw)
        assert self.p.stdout.readline() == "ready\n"
        self.pid = self.p.pid
        self.maps = self.rwx()

    def rwx(self):
        return sum(" rwxp " in line for line in open(f"/proc/{self.pid}/maps"))

    def alive_and_whole(self):
        """It answers, was never left traced and has no page of ours."""
        self.p.stdin.write("ping\n")
        self.p.stdin.flush()
        assert self.p.stdout.readline() == "pong\n", self.p.poll()
        status = open(f"/proc/{self.pid}/status").read()
        assert "TracerPid:\t0\n" in status
        return self.rwx()

    def end(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            assert self.p.wait(30) == 0
        return self.p.returncode


def tool(*args, **kw):
    r = subprocess.run([str(TOOL), *map(str, args), "--json", "--thread-wait", "2"],
                       capture_output=True, text=True, timeout=60, **kw)
    return r.returncode, r.stdout, r.stderr


REFUSED = [  # (filter, verb, the call named, the action named)
    ("openssh", "trim", "mmap(NULL, 1 MiB, PROT_READ|PROT_WRITE|PROT_EXEC", "KILL_THREAD"),
    ("openssh", "stats", "mmap(NULL, 1 MiB, PROT_READ|PROT_WRITE|PROT_EXEC", "KILL_THREAD"),
    ("allowlist", "trim", "prctl(PR_SET_VMA", "KILL_PROCESS"),
    ("prctl", "stats", "prctl(PR_SET_VMA", "KILL_PROCESS"),
    ("prctl", "load", "prctl(PR_SET_VMA", "KILL_PROCESS"),
]


@pytest.mark.parametrize("kind,verb,call,action", REFUSED,
                         ids=[f"{r[0]}-{r[1]}" for r in REFUSED])
def test_a_filter_that_would_kill_is_refused(target_exe, kind, verb, call, action):
    t = Target(target_exe, kind)
    try:
        rc, out, err = tool(verb, t.pid)
        assert t.p.poll() is None, f"the target died: {t.p.returncode} ({rc}, {err})"
        assert rc == 2, (rc, out, err)
        assert "seccomp filter (1 of 1) answers" in err and call in err and action in err, err
        assert json.loads(out)["error"]["code"] == "refused"
        assert t.alive_and_whole() == t.maps  # no page mapped
    finally:
        code = t.end()
    assert code == 0, code


def test_a_refused_thread_waiting_in_epoll_is_not_woken(target_exe):
    """A refusal changes nothing the target observes: its thread, interrupted in epoll_wait
    (which returns EINTR to an interrupt unless the kernel restarts it) and then refused, waits
    on, and answers the next line. Control cmd-release-eintr (released as interrupted):
    epoll_wait returns EINTR and the target says so and exits 0 without answering."""
    t = Target(target_exe, "prctl", "epoll")
    try:
        rc, out, err = tool("trim", t.pid)
        assert rc == 2 and "seccomp filter (1 of 1) answers" in err, (rc, out, err)
        assert t.alive_and_whole() == t.maps
    finally:
        code = t.end()
    assert code == 0, code


@pytest.mark.parametrize("kind", ["allowall", "dockerlike"])
def test_a_filter_that_allows_what_memtrim_does_is_trimmed_and_loaded(target_exe, kind):
    """Everything allowed, or Docker's shape (privileged calls fail with EPERM, clone3 with
    ENOSYS, which memtrim's engine survives): trim, stats and load all run, the API answers."""
    t = Target(target_exe, kind)
    try:
        rc, out, err = tool("trim", t.pid)
        assert rc == 0, (rc, out, err)
        result = json.loads(out)
        assert result["malloc_trim_return"] == 1 and result["released_bytes"] > 32 << 20, result
        rc, out, err = tool("stats", t.pid)
        assert rc == 0, (rc, out, err)
        rc, out, err = tool("load", t.pid, "--config", json.dumps({"HttpPort": free_port()}))
        assert rc == 0, (rc, out, err)
        listen = json.loads(out)["listen"]
        assert requests.get(f"http://{listen}/healthz", timeout=10).json()["pid"] == t.pid
        t.alive_and_whole()
    finally:
        assert t.end() == 0


def test_a_filter_the_tool_cannot_read_is_refused(target_exe, bin_dir):
    """nobody's tool on nobody's filtered process: no CAP_SYS_ADMIN, so the filter cannot be
    read; refused with the reason, untouched."""
    exe = bin_dir / "memtrim"
    shutil.copy(TOOL, exe)
    t = Target(target_exe, "allowall", preexec_fn=as_nobody, cwd="/")
    try:
        r = subprocess.run([str(exe), "trim", str(t.pid), "--json", "--thread-wait", "2"],
                           capture_output=True, text=True, timeout=60, preexec_fn=as_nobody,
                           cwd="/")
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert "seccomp filters cannot be read" in r.stderr and "CAP_SYS_ADMIN" in r.stderr, \
            r.stderr
        assert t.alive_and_whole() == t.maps
    finally:
        if t.p.poll() is None:
            os.kill(t.pid, signal.SIGKILL)
        t.p.wait()
