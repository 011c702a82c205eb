"""memtrim trim on jemalloc, tcmalloc and mimalloc targets (issue 29): Debian's libjemalloc2,
libtcmalloc-minimal4 and libmimalloc2.0 preloaded into Debian's python3, whose main thread
made and dropped 120 MB of 1 KB bytearrays (malloc's, not pymalloc's) and then reads stdin,
while a second thread churns: allocates, fills, checks and drops blocks in a loop.

The tool finds the allocator's library in the target's maps and calls its own release call
(jemalloc mallctl("arena.4096.purge"), its name copied into our page; tcmalloc
MallocExtension_ReleaseFreeMemory) on memtrim's own thread, started from the main thread in
read. mimalloc's mi_collect(true) collects the calling thread's heap only: trim refuses it by
name (exit 3) and its RSS stays. The control: `memtrim stats` on the same target is refused by
name (it reads glibc's mallinfo2 only) and the RSS stays where it was; the trim then releases
> 40 MB, the churn
finds no changed block; `memtrim load` then starts memtrim there (dlopen is glibc's libc's,
whichever malloc serves), nobody traces the target and it reads its input on and exits 0.
"""
import json
import os
import subprocess

import pytest
import requests

from conftest import BUILD
from hosts_util import free_port

TOOL = BUILD / "memtrim"
LIBDIR = "/usr/lib/x86_64-linux-gnu"

PROGRAM = r"""
import sys, threading
stop, bad, n = False, 0, 0
def churn():
    global bad, n
    while not stop:
        b = bytearray(b"m" * 1000)
        if b.count(b"m") != 1000:
            bad += 1
        n += 1
t = threading.Thread(target=churn)
t.start()
x = [bytearray(1000) for _ in range(120000)]
del x
print("ready", flush=True)
sys.stdin.readline()
stop = True
t.join()
print(n, bad, flush=True)
"""


def rss(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tool(*args):
    r = subprocess.run([str(TOOL), *args, "--json"], capture_output=True, text=True, timeout=60)
    return r.returncode, json.loads(r.stdout.splitlines()[-1])


def check_trim(rc, out, alloc, call, before, pid):
    assert rc == 0, out
    assert out["allocator"] == alloc and out["release_call"] == call, out
    assert out["thread"] == pid and out["thread_syscall"] == "read", out
    assert out["call_thread"] not in (0, pid) and out["call_threads_ended"], out
    assert out["released_bytes"] > 40 << 20, out
    if alloc == "jemalloc":
        assert out["mallctl_return"] == 0, out


@pytest.mark.parametrize("alloc,lib,call", [
    ("jemalloc", "libjemalloc.so.2", 'mallctl("arena.4096.purge")'),
    ("tcmalloc", "libtcmalloc_minimal.so.4", "MallocExtension_ReleaseFreeMemory"),
    ("mimalloc", "libmimalloc.so.2", "mi_collect(true)"),
])
def test_allocator_release_call(alloc, lib, call):
    path = os.path.join(LIBDIR, lib)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed (tests/install-deps.sh)")
    p = subprocess.Popen(["/usr/bin/python3", "-c", PROGRAM], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "LD_PRELOAD": path})
    try:
        assert p.stdout.readline() == "ready\n"
        before = rss(p.pid)
        assert before > 100 << 20, before
        rc, out = tool("stats", str(p.pid))  # the control: refused, nothing called
        assert rc == 3 and out["error"]["code"] == "unsupported", out
        assert alloc in out["error"]["message"] and "mallinfo2" in out["error"]["message"]
        assert rss(p.pid) > before - (20 << 20), (before, rss(p.pid))

        rc, out = tool("trim", str(p.pid))
        if alloc == "mimalloc":  # mi_collect collects the caller's heap: refused by name
            assert rc == 3 and "mi_collect(true) collects the calling thread" in \
                out["error"]["message"], out
            assert rss(p.pid) > before - (20 << 20), (before, rss(p.pid))
        else:
            check_trim(rc, out, alloc, call, before, p.pid)
        # load finds dlopen in glibc's libc whichever malloc serves (it took jemalloc's,
        # tcmalloc's or mimalloc's library for it and refused, exit 3)
        port = free_port()
        rc, out = tool("load", str(p.pid), "--config", json.dumps({"HttpPort": port}))
        assert rc == 0 and out["allocator"] == alloc and out["listen"] == f"127.0.0.1:{port}", out
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()["pid"] == p.pid
        with open(f"/proc/{p.pid}/status") as f:
            assert "TracerPid:\t0\n" in f.read()
        out, _ = p.communicate("\n", timeout=30)
        iterations, corrupt = map(int, out.split())
        assert p.returncode == 0 and corrupt == 0 and iterations > 0, out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


SANITIZED = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(void)
{
    char *keep = malloc(1 << 20);
    memset(keep, 1, 1 << 20);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin))
        printf("%s", line), fflush(stdout);
    free(keep);
    return 0;
}
"""


@pytest.mark.parametrize("compiler,sanitizer", [("gcc", "address"), ("clang", "address"),
                                                ("gcc", "thread")])
def test_a_sanitizer_allocator_is_refused(tmp_path, compiler, sanitizer):
    """A program built with -fsanitize=address (gcc: libasan.so mapped; clang: its runtime
    linked in, __asan_init exported by the executable) or -fsanitize=thread: its runtime
    replaces malloc and keeps its own registry of threads, which a thread started with
    glibc's own pthread_create bypasses. trim, stats and load are refused by name (exit 3,
    'sanitizer allocator'), nothing mapped, nobody tracing, the program echoes on and exits
    0. Control cmd-sanitizer (the check skipped): they ran, trim and stats exiting 0 and
    load starting memtrim inside ASan's process."""
    src, exe = tmp_path / "san.c", tmp_path / "san"
    src.write_text(SANITIZED)
    subprocess.run([compiler, f"-fsanitize={sanitizer}", "-g", "-o", str(exe), str(src)],
                   check=True, capture_output=True)
    p = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        for verb in ("trim", "stats", "load"):
            args = ["--config", json.dumps({"HttpPort": free_port()})] if verb == "load" else []
            r = subprocess.run([str(TOOL), verb, str(p.pid), "--json", *args],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 3, (verb, r.returncode, r.stdout, r.stderr)
            err = json.loads(r.stdout)["error"]
            assert err["code"] == "unsupported" and "sanitizer allocator" in err["message"], err
        maps = open(f"/proc/{p.pid}/maps").read()
        assert " rwxp " not in maps and "libmemtrim" not in maps
        assert "TracerPid:\t0\n" in open(f"/proc/{p.pid}/status").read()
        p.stdin.write("still here\n")
        p.stdin.flush()
        assert p.stdout.readline() == "still here\n"
        p.stdin.close()
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
