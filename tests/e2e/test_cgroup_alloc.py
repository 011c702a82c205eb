"""The issue's reproduction under jemalloc: the demo's pool workload (8
worker threads, studies of 150 MB in 1-64 KB blocks, 2 % kept, a second
between studies) in a 400 MB memory cgroup, with Debian's jemalloc preloaded
and its background purge thread on (MALLOC_CONF=background_thread:true).
jemalloc's decay does not know the cgroup's limit: without memtrim the kernel
kills the process; with memtrim preloaded its pressure trims (jemalloc's
arena purge) keep it alive through every study. The cgroups are named
memtrim-alloc-*. Skips only where no memory cgroup can be made (not root)."""

import pytest

from hosts_util import DEMO_SUMMARY, assert_oom_killed, build_file, cgroups, preload_env, procs  # noqa: F401
from test_allocators import lib_path

LIMIT = 400 << 20
STUDIES = 24
WORKLOAD = ["--workers", "8", "--study-mb", "150", "--keep-percent", "2", "--concurrency", "1",
            "--pause-ms", "1000", "--studies", str(STUDIES)]
SUMMARY = DEMO_SUMMARY


@pytest.fixture
def alloc_cgroup():
    """Factory: alloc_cgroup(limit_bytes) -> Cgroup (memtrim-alloc-*), removed at the end."""
    yield from cgroups("memtrim-alloc")


def run(procs, cg, tmp_path, name, preload, extra_env=None, timeout=180):
    env = ["MALLOC_CONF=background_thread:true", f"LD_PRELOAD={preload}"] + (extra_env or [])
    args = ["/usr/bin/env"] + env + [build_file("memtrim-demo"), "--no-memtrim"] + WORKLOAD
    p = procs(cg.wrap(args), tmp_path / f"{name}.log")
    rc = p.wait(timeout)
    return rc, p.output()


def test_jemalloc_without_memtrim_is_killed(procs, alloc_cgroup, tmp_path):
    cg = alloc_cgroup(LIMIT)
    rc, out = run(procs, cg, tmp_path, "without", lib_path("jemalloc"))
    print(f"\njemalloc without memtrim: exit {rc}, peak {(cg.peak_bytes() or 0) >> 20} MB, "
          f"oom kills {cg.oom_kills()}")
    assert_oom_killed(rc, out, cg)


def test_jemalloc_with_memtrim_completes_every_study(procs, alloc_cgroup, tmp_path):
    cg = alloc_cgroup(LIMIT)
    env = preload_env({"HttpPort": 0, "Database": str(tmp_path / "memtrim.sqlite")})
    rc, out = run(procs, cg, tmp_path, "with", f"{lib_path('jemalloc')}:{env['LD_PRELOAD']}",
                  [f"MEMTRIM_CONFIG={env['MEMTRIM_CONFIG']}"])
    m = SUMMARY.search(out)
    pressure = out.count("pressure trim released")
    print(f"\njemalloc with memtrim: exit {rc}, {m.group(0) if m else 'no summary'}, peak "
          f"{(cg.peak_bytes() or 0) >> 20} MB, {pressure} pressure trims, "
          f"oom kills {cg.oom_kills()}")
    assert "allocator: jemalloc" in out, out[-3000:]
    assert rc == 0, out[-3000:]
    assert m and int(m.group(1)) == STUDIES, out[-3000:]
    assert pressure >= 1, out[-3000:]
    assert cg.oom_kills() == 0
