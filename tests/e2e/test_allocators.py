"""Other allocators: the demo host under Debian's jemalloc, tcmalloc and
mimalloc (LD_PRELOAD before memtrim, which the demo loads with dlopen; and
memtrim preloaded first, the allocator after it). The allocator is detected
and named in /memory/stats and /metrics (which promtool accepts), its stats
are non-zero and follow a 64 MB allocation, and a manual trim runs its
release call, measured like any trim. RSS falls after a churn burst under
jemalloc and tcmalloc; under mimalloc 2.0 a release from memtrim's thread
cannot purge the pages that the host's idle threads hold (mimalloc has no
cross-thread purge: each thread decommits its own pages on its next
operation), so there the test checks that the release ran and was measured,
and says so."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from conftest import metric_value
from hosts_util import build_file, preload_env, procs  # noqa: F401
from wait import wait_for, wait_for_stats

QUIET_POLICY = {"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0,
                "ManualTrimMinIntervalMs": 0, "StatsMaxAgeMs": 0, "ProbeBudgetPercent": 10}
LIBS = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4",
        "mimalloc": "libmimalloc.so.2"}
MB = 1 << 20


def lib_path(name):
    """The library in Debian's multiarch directory (found from libc's own path)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "/libc.so" in line:
            path = Path(line.split()[-1]).parent / LIBS[name]
            for p in (path, Path("/usr") / path.relative_to("/")):
                if p.exists():
                    return str(p)
    pytest.skip(f"{LIBS[name]} is not installed (tests/install-deps.sh all installs it)")


def env_with(lib):
    env = os.environ.copy()
    env["LD_PRELOAD"] = lib
    return env


def heap_figure(stats):
    """What the allocator says it holds: in use where it knows, else mapped."""
    v = stats["heap_in_use_bytes"]
    return v if v is not None else stats["heap_mapped_bytes"]


@pytest.mark.parametrize("name", sorted(LIBS))
def test_detected_stats_follow_a_64mb_allocation(start_demo, name):
    # Two workers keep their whole 64 MB study: the second study, 6 s after
    # the first, adds 64 MB that stays allocated.
    d = start_demo(QUIET_POLICY, workers=2, study_mb=64, keep_percent=100, pause_ms=6000,
                   env=env_with(lib_path(name)))
    s = wait_for_stats(d, lambda s: s["heap_timestamp_ms"] is not None and
                   (heap_figure(s) or 0) >= 60 * MB, "a 64 MB heap figure")
    a = s["allocator"]
    assert a["name"] == name and a["version"], a
    assert a["stats"] and all(isinstance(v, int) for v in a["stats"].values()), a
    assert s["mallinfo2"] is None and s["arena_bytes"] is None, s
    assert s["heap_mapped_bytes"] > 0
    if name == "mimalloc":
        assert s["heap_in_use_bytes"] is None and s["heap_free_bytes"] is None
    else:
        assert s["heap_in_use_bytes"] > 0 and s["heap_free_bytes"] is not None
    if name == "jemalloc":
        assert s["heap_resident_bytes"] > 0 and s["arena_count"] >= 1
        # memtrim's threads allocate from an arena of their own, made after the automatic
        # ones (4 per CPU): none of the host's threads is given it (alloc_jemalloc.c)
        own = a["stats"]["memtrim_arena"]
        assert 4 * len(os.sched_getaffinity(0)) <= own < a["stats"]["narenas"], a["stats"]
    first = heap_figure(s)
    s2 = wait_for_stats(d, lambda s: heap_figure(s) >= first + 60 * MB,
                    f"the heap figure growing by 64 MB from {first}")
    print(f"\n{name} {a['version']}: heap figure {first >> 20} -> {heap_figure(s2) >> 20} MB, "
          f"own figures {a['stats']}")
    # /metrics names it, and promtool accepts the page.
    text = d.get("/metrics").text
    assert metric_value(text, "memtrim_allocator_info",
                        f'allocator="{name}",version="{a["version"]}"') == 1, text
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is needed"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), \
        check.stdout + check.stderr


@pytest.mark.parametrize("name", sorted(LIBS))
def test_manual_trim_after_churn(start_demo, name):
    d = start_demo(QUIET_POLICY, workers=4, study_mb=64, keep_percent=2, pause_ms=3000,
                   env=env_with(lib_path(name)))
    # Wait for the memory of a churned study to sit freed in the allocator.
    if name == "mimalloc":
        wait_for_stats(d, lambda s: s["rss_bytes"] >= 100 * MB, "RSS of 100 MB after a study")
    else:
        wait_for_stats(d, lambda s: (s["heap_free_bytes"] or 0) >= 32 * MB, "32 MB of free heap")
    r = d.request("POST", "/memory/trim")
    assert r.status_code == 200, r.text
    t = r.json()
    assert t["malloc_trim_result"] == 1, t
    # Measured and stored like any trim (the store thread writes it, woken at once).
    wait_for(lambda: any(x["id"] == t["id"] for x in
                         d.get("/memory/trims", params={"trigger": "manual"}).json()["trims"]),
             10, f"manual trim {t['id']} in /memory/trims")
    print(f"\n{name}: manual trim released {t['released_bytes'] >> 20} MB in "
          f"{t['duration_seconds'] * 1e3:.1f} ms (RSS {t['rss_before_bytes'] >> 20} -> "
          f"{t['rss_after_bytes'] >> 20} MB)")
    if name == "mimalloc":
        print("mimalloc: its release (mi_collect) cannot purge other threads' pages; "
              "the RSS fall is not asserted here (docs/allocators.md)")
        return
    assert t["released_bytes"] >= 16 * MB, t
    assert t["rss_after_bytes"] < t["rss_before_bytes"], t


def test_memtrim_preloaded_before_the_allocator(procs, tmp_path):
    """LD_PRELOAD=libmemtrim.so:libjemalloc.so.2: jemalloc comes after memtrim
    in the list and still serves malloc; detection says so."""
    lib = lib_path("jemalloc")
    env = preload_env({"HttpPort": 0, "Database": ""})
    env["LD_PRELOAD"] = f"{env['LD_PRELOAD']}:{lib}"
    p = procs([build_file("memtrim-demo"), "--no-memtrim", "--workers", "1", "--study-mb", "8",
               "--pause-ms", "500"], tmp_path / "demo.log", env=env)
    port = p.api_port()
    s = requests.get(f"http://127.0.0.1:{port}/memory/stats", timeout=10).json()
    assert s["allocator"]["name"] == "jemalloc", s["allocator"]
    assert "allocator: jemalloc" in p.output()


# Debian's python3 and node are non-PIE executables that take malloc's address: each holds an
# undefined `malloc` with a value (its PLT entry), which dlsym returns. They import malloc
# (`U malloc@GLIBC_2.2.5`); they do not serve it.
NON_PIE = {"python3": ["/usr/bin/python3", "-c", "pass"], "node": ["/usr/bin/node", "-e", "0"]}


def non_pie_importing_malloc(argv):
    exe = argv[0]
    if not Path(exe).exists():
        pytest.skip(f"{exe} is not installed")
    head = Path(exe).read_bytes()[:18]
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[16:18], "little") == 2, \
        f"{exe} is not a non-PIE executable (ET_EXEC) any more: this case tests nothing"
    return argv


def run_preloaded(argv, preload, tmp_path):
    env = preload_env({"HttpPort": 0, "Database": ""})
    env["LD_PRELOAD"] = preload(env["LD_PRELOAD"])
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout + r.stderr


@pytest.mark.parametrize("name", sorted(NON_PIE))
def test_non_pie_executable_importing_malloc_is_glibc(name, tmp_path):
    """No 'none of glibc' warning: malloc is glibc's, and detection says so."""
    argv = non_pie_importing_malloc(NON_PIE[name])
    out = run_preloaded(argv, lambda lib: lib, tmp_path)
    assert "none of glibc" not in out, out
    assert "memtrim/alloc: allocator: glibc" in out, out


@pytest.mark.parametrize("name", sorted(NON_PIE))
def test_non_pie_executable_under_a_preloaded_jemalloc(name, tmp_path):
    """The same executables under LD_PRELOAD=libjemalloc.so.2: their PLT binds to jemalloc,
    the first object after them that defines malloc; detection follows that order, it does
    not assume libc."""
    argv = non_pie_importing_malloc(NON_PIE[name])
    out = run_preloaded(argv, lambda lib: f"{lib_path('jemalloc')}:{lib}", tmp_path)
    assert "none of glibc" not in out, out
    assert "memtrim/alloc: allocator: jemalloc" in out, out
