"""The constrained-memory reproduction (the seed's 2nd test): an Orthanc-like
workload (the demo host: 8 worker threads, each with its own glibc arena,
take 100 MB studies in turn and keep 2 % until their next) in a memory
cgroup limited to 400 MB. Freed memory stays resident in the arenas, so
without memtrim the kernel kills the process; with memtrim preloaded (its
pressure trigger reads the cgroup's limit) every study completes and the
peak RSS stays under the limit. Skips only where no memory cgroup can be
created (not root, no controller)."""
import re
import signal

from hosts_util import build_file, cgroup, preload_env, procs  # noqa: F401

LIMIT = 400 << 20
STUDIES = 16
WORKLOAD = ["--workers", "8", "--study-mb", "100", "--keep-percent", "2", "--concurrency", "1",
            "--pause-ms", "300", "--studies", str(STUDIES)]
SUMMARY = re.compile(r"memtrim-demo: (\d+) studies done, peak RSS (\d+) MB")


def run_in_cgroup(procs, cg, tmp_path, name, env_prefix, timeout=120):
    args = ["/usr/bin/env"] + env_prefix + [build_file("memtrim-demo"), "--no-memtrim"] + WORKLOAD
    p = procs(cg.wrap(args), tmp_path / f"{name}.log")
    rc = p.wait(timeout)
    return rc, p.output()


def test_without_memtrim_the_kernel_kills_it(procs, cgroup, tmp_path):
    cg = cgroup(LIMIT)
    rc, out = run_in_cgroup(procs, cg, tmp_path, "without", [])
    print(f"\nwithout memtrim: exit {rc}, cgroup v{cg.version} peak "
          f"{(cg.peak_bytes() or 0) >> 20} MB, oom kills {cg.oom_kills()}")
    assert rc == -signal.SIGKILL, f"expected the OOM killer (exit 137), got {rc}:\n{out[-2000:]}"
    assert not SUMMARY.search(out), out[-2000:]
    kills = cg.oom_kills()
    assert kills is None or kills >= 1


def test_with_memtrim_every_study_completes(procs, cgroup, tmp_path):
    cg = cgroup(LIMIT)
    env = preload_env({"HttpPort": 0, "Database": str(tmp_path / "memtrim.sqlite")})
    prefix = [f"LD_PRELOAD={env['LD_PRELOAD']}", f"MEMTRIM_CONFIG={env['MEMTRIM_CONFIG']}"]
    rc, out = run_in_cgroup(procs, cg, tmp_path, "with", prefix)
    m = SUMMARY.search(out)
    pressure = out.count("pressure trim released")
    print(f"\nwith memtrim: exit {rc}, {m.group(0) if m else 'no summary'}, cgroup v{cg.version} "
          f"peak {(cg.peak_bytes() or 0) >> 20} MB, {pressure} pressure trims, "
          f"oom kills {cg.oom_kills()}")
    assert rc == 0, out[-3000:]
    assert m and int(m.group(1)) == STUDIES, out[-3000:]
    assert int(m.group(2)) << 20 < LIMIT, m.group(0)
    assert pressure >= 1, out[-3000:]
    assert cg.oom_kills() in (None, 0)
