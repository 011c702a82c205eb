"""The VM itself (tests/vm/run.sh): Debian's kernel with a pure cgroup v2 hierarchy,
the memory controller enabled, and a child cgroup's memory.max enforced by the OOM
killer. Everything else in tests/vm stands on this."""
import os
import platform
import signal
import sys
from pathlib import Path

HOG = [sys.executable, "-c", "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096]); "
       "print('survived', flush=True)"]


def test_the_kernel_is_debians_with_cgroup2_alone():
    assert platform.release().endswith("-amd64"), platform.release()
    assert Path("/proc/self/cgroup").read_text() == "0::/\n"
    assert "memory" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    assert Path("/sys/fs/cgroup/memory.pressure").exists()  # PSI is on
    assert os.geteuid() == 0


def test_memory_max_kills_a_process_over_it(procs, cgroup, tmp_path):
    small = cgroup(64 << 20)
    p = procs(small.wrap(HOG), tmp_path / "small.log")
    assert p.wait(120) == -signal.SIGKILL, p.output()
    assert "survived" not in p.output()
    assert small.oom_kills() >= 1
    # The control: the same process under a limit it fits in lives.
    big = cgroup(512 << 20)
    p = procs(big.wrap(HOG), tmp_path / "big.log")
    assert p.wait(120) == 0, p.output()
    assert "survived" in p.output()
    assert big.oom_kills() == 0
