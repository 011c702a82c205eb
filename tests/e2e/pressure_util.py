"""The pressure issue's workload (issue 9), shared by tests/e2e/test_cgroup.py, the
cgroup v2 tests of tests/vm and bench/pressure/bench.py: the demo host's pool of 8
long-lived worker threads (each with its own glibc arena) taking studies of 150 MB in
1-64 KB blocks, one at a time, each keeping 2 % until its next; and what the demo's log
says of a run (studies completed, memtrim's pressure source, its pressure trims and their
reaction times). Functions of their arguments; no state.
"""
import json
import re
import signal
from pathlib import Path

from hosts_util import DEMO_SUMMARY, build_file

STUDIES = 24
STUDY_MB = 150
STUDY = re.compile(r"^study (\d+) on worker", re.M)
SOURCE = re.compile(r"memtrim/pressure: pressure source: (\S+)")
REACTION = re.compile(r"([0-9.]+) ms after the crossing")
# memtrim's exit summary counts every trim by trigger; its log lines of pressure trims are
# rate-limited, so they are a sample, not a count.
PRESSURE_COUNT = re.compile(r"exit summary: .*? pressure (\d+),")


NOBODY = 65534


def docker_like(args, uid=NOBODY):
    """args run the way Docker runs a container on a v2 host: an unshared cgroup namespace
    rooted at the cgroup the caller is in (/proc/self/cgroup reads 0::/), cgroup2 mounted
    afresh, read-only, in its own mount namespace (the inherited mount is lazily unmounted
    there first: mount(8) refuses a second cgroup2 on the same target), as uid (None: stay
    root). Needs root and a cgroup v2 host."""
    become = (f"exec /usr/bin/setpriv --reuid={uid} --regid={uid} --clear-groups "
              '--no-new-privs "$@"') if uid is not None else 'exec "$@"'
    return ["/usr/bin/unshare", "--cgroup", "--mount", "--propagation", "private",
            "/bin/sh", "-c",
            "umount -l /sys/fs/cgroup && "
            "mount -t cgroup2 -o ro,nosuid,nodev,noexec cgroup /sys/fs/cgroup && " + become,
            "docker-like", *[str(a) for a in args]]


def workload(pause_ms, studies=STUDIES, study_mb=STUDY_MB):
    """The demo's arguments for the pool workload."""
    return ["--workers", "8", "--study-mb", str(study_mb), "--keep-percent", "2",
            "--concurrency", "1", "--pause-ms", str(pause_ms), "--studies", str(studies)]


def memtrim_vars(config, build=None):
    """The variables that preload libmemtrim.so (from build, else the build under test) with
    config (a dict, or a string: inline JSON or a file path)."""
    lib = Path(build) / "libmemtrim.so" if build else build_file("libmemtrim.so")
    return {"LD_PRELOAD": str(lib),
            "MEMTRIM_CONFIG": config if isinstance(config, str) else json.dumps(config)}


def demo_command(pause_ms, studies=STUDIES, env=None, args=(), build=None, study_mb=STUDY_MB):
    """The demo without its own memtrim (--no-memtrim) on the pool workload, through
    /usr/bin/env with env's variables (memtrim's preload, an allocator's): they reach the
    demo alone, not the shell that puts itself into a cgroup first (Cgroup.wrap)."""
    demo = Path(build) / "memtrim-demo" if build else build_file("memtrim-demo")
    return ["/usr/bin/env", *[f"{k}={v}" for k, v in (env or {}).items()], str(demo),
            "--no-memtrim", *workload(pause_ms, studies, study_mb), *[str(a) for a in args]]


def stored_reactions(db):
    """Reaction times in ms of the pressure trims (trigger 2) in memtrim's store at db."""
    import sqlite3
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT reaction_seconds FROM trims WHERE trigger = 2 "
                            "ORDER BY rowid").fetchall()
    return [round(r[0] * 1000, 3) for r in rows if r[0] is not None]


class Outcome:
    """One run of the workload, read from its exit code and its log, and from memtrim's
    store when db names it (the log's pressure-trim lines are rate-limited: a sample)."""

    def __init__(self, rc, out, db=None):
        self.rc, self.out = rc, out
        self.summary = DEMO_SUMMARY.search(out)
        self.completed = int(self.summary.group(1)) if self.summary else len(STUDY.findall(out))
        self.peak_rss_mb = int(self.summary.group(2)) if self.summary else None
        self.sources = SOURCE.findall(out)  # every choice logged, in order
        self.source = self.sources[0] if self.sources else None
        self.reactions = [float(x) for x in REACTION.findall(out)]
        if db is not None and Path(db).exists():
            self.reactions = stored_reactions(db)
        m = PRESSURE_COUNT.search(out)
        self.pressure_trims = int(m.group(1)) if m else out.count("pressure trim released")

    @property
    def ok(self):
        """Exited 0 with its summary line."""
        return self.rc == 0 and self.summary is not None

    @property
    def killed(self):
        """SIGKILL (the OOM killer) before the summary."""
        return self.rc == -signal.SIGKILL and self.summary is None

    def reaction_median(self):
        r = sorted(self.reactions)
        return r[len(r) // 2] if r else None

    def describe(self):
        end = f"exit {self.rc}" if self.rc != -signal.SIGKILL else "killed"
        text = f"{end} after {self.completed} studies"
        if self.summary:
            text += f", peak RSS {self.peak_rss_mb} MB"
        if self.source:
            text += f", pressure source {self.source}"
        if self.reactions:
            text += (f", {len(self.reactions)} pressure trims (reaction median "
                     f"{self.reaction_median()} ms, max {max(self.reactions)} ms)")
        return text
