"""Real containers for the node agent's tests (issue 39, docs/agent.md): Debian's podman with
runc (crun refuses this machine's hybrid cgroups), images built offline from Debian's own
packages (mmdebstrap --variant=minbase, then `podman import`), and containers run with a
memory limit and podman's default seccomp profile. One Images per test module (each image
built at its first use, every tag removed at the end); one Container per `podman run`,
removed by its remove(). Functions of their arguments; no state beyond those two classes.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from wait import wait_for

# runc, not the default crun: crun fails on this machine's hybrid cgroups. The rlimits are
# given as they are: without --ulimit the runtime sets podman's defaults and fails on
# setrlimit (no CAP_SYS_RESOURCE here, as in a CI runner's container).
PODMAN = ["podman", "--runtime", "runc"]
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
NEEDS = ("podman", "runc", "mmdebstrap")


def unavailable():
    """Why real containers cannot run here (a sentence), or None."""
    missing = [n for n in NEEDS if not shutil.which(n)]
    if missing:
        return f"{', '.join(missing)} not installed (tests/install-deps.sh all)"
    if os.geteuid() != 0:
        return "podman's containers with a memory limit need root here (cgroup v1)"
    return None


def podman(*args, timeout=120, check=True, cwd=None):
    """podman ARGS with runc: its stdout (stripped); raises with podman's stderr when check.
    cwd: where podman runs, and so a container's conmon, which writes a file "oom" in its
    working directory when the container is OOM-killed (conmon 2.1.6): never the checkout."""
    p = subprocess.run([*PODMAN, *[str(a) for a in args]], capture_output=True, text=True,
                       timeout=timeout, cwd=cwd or tempfile.gettempdir())
    if check and p.returncode != 0:
        raise AssertionError(f"podman {' '.join(map(str, args[:3]))}... exited {p.returncode}: "
                             f"{p.stderr.strip()[-2000:]}")
    return p.stdout.strip()


def sweep():
    """Remove what a killed session left: containers (memtrim-e2e-<pid>-...) and images
    (localhost/memtrim-e2e-...:<pid>) whose session's pid is gone (a live one's are its own)."""
    def gone(pid):
        return not Path(f"/proc/{pid}").exists()
    for name in podman("ps", "--all", "--format", "{{.Names}}").split():
        m = re.fullmatch(r"memtrim-e2e-(\d+)-.*", name)
        if m and gone(m.group(1)):
            podman("rm", "--force", "--time", "0", name, check=False)
    for ref in podman("images", "--format", "{{.Repository}}:{{.Tag}}").split():
        m = re.fullmatch(r"localhost/memtrim-e2e-[a-z]+:(\d+)", ref)
        if m and gone(m.group(1)):
            podman("rmi", "--force", ref, check=False)


class Images:
    """Debian bookworm images (minbase plus the packages asked for), built by mmdebstrap into
    a tar under dir and imported as localhost/memtrim-e2e-<key>:<pid>; get(key, packages)
    builds on first use, remove() drops every tag made."""

    def __init__(self, dir):
        self.dir = Path(dir)
        self.tags = {}
        self.seconds = {}

    def get(self, key, packages):
        if key in self.tags:
            return self.tags[key]
        tar = self.dir / f"{key}.tar"
        t0 = time.monotonic()
        p = subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase",
                            "--include=" + ",".join(packages), "bookworm", str(tar)],
                           capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise AssertionError(f"mmdebstrap exited {p.returncode}: {p.stderr.strip()[-2000:]}")
        tag = f"localhost/memtrim-e2e-{key}:{os.getpid()}"
        podman("import", "--quiet", tar, tag, timeout=300)
        tar.unlink()
        self.tags[key] = tag
        self.seconds[key] = time.monotonic() - t0
        print(f"\nimage {tag} ({', '.join(packages)}): built and imported in "
              f"{self.seconds[key]:.0f} s, load {open('/proc/loadavg').read().split()[0]}")
        return tag

    def remove(self):
        for tag in self.tags.values():
            podman("rmi", "--force", tag, check=False)
        self.tags.clear()


class Container:
    """One `podman run` (in the foreground: its client is the server's process for
    runtimes_util.Server, and its exit code the container's) of image under a memory limit
    (memory and swap: swap must not hide the kill), on the host's network (the test's clients
    reach it on loopback, as a host-network pod's), with folders mounted at their own paths
    [(host path, "ro"|"rw")] (a runtime's command and configuration name them as on the host);
    its name unique (memtrim-e2e-<pid>-<label>). command() is what to run; attach() reads the
    running container. Not --rm: podman's record of it is read after its end; remove() drops
    it, running or not."""

    def __init__(self, image, label, limit_bytes, mounts):
        self.name = f"memtrim-e2e-{os.getpid()}-{label}"
        podman("rm", "--force", "--time", "0", self.name, check=False)  # a leftover of a killed run
        vols = []
        for host, mode in mounts:
            vols += ["--volume", f"{host}:{host}:{mode}"]
        self.run = [*PODMAN, "run", "--name", self.name, "--memory", str(limit_bytes),
                    "--memory-swap", str(limit_bytes), "--network", "host", *ULIMITS, *vols, image]
        self.id = self.pid = self.cgroup = None

    def command(self, args):
        """The podman command that runs args in the container (runtimes_util.Server's wrap)."""
        return [*self.run, *args]

    def attach(self, timeout=60):
        """Once it runs: its ID, its first process's host pid and its memory cgroup as the
        host names it (what the agent watches; v1's memory hierarchy, else v2's)."""
        state = wait_for(lambda: self.running() and self.inspect(), timeout,
                         f"container {self.name} to run", interval=0.1,
                         retry_on=(AssertionError,))
        self.id, self.pid = state["Id"], int(state["State"]["Pid"])
        paths = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in
                 Path(f"/proc/{self.pid}/cgroup").read_text().splitlines()}
        self.cgroup = paths.get("memory", paths.get(""))
        return self

    def inspect(self):
        return json.loads(podman("inspect", "--type", "container", self.name))[0]

    def running(self):
        return self.inspect()["State"]["Running"]

    def memory(self, name):
        """The first number of its v1 memory cgroup's file name (None once it is gone)."""
        try:
            return int((Path("/sys/fs/cgroup/memory") / self.cgroup.lstrip("/") / name)
                       .read_text().split()[0])
        except FileNotFoundError:
            return None

    def oom_kill_count(self):
        stat = (Path("/sys/fs/cgroup/memory") / self.cgroup.lstrip("/") /
                "memory.oom_control").read_text()
        return int(re.search(r"^oom_kill (\d+)$", stat, re.M).group(1))

    def oom_killed(self):
        """The pids the kernel's OOM killer took in its cgroup, from the kernel's log (its
        "oom-kill:" line names the cgroup and the task). podman's State.OOMKilled is not
        it: on cgroup v1 here podman 4.3 with conmon 2.1.6 records an OOM-killed container
        as exit 137 with OOMKilled false (conmon saw it: its "oom" file, podman()), and its
        cgroup, with its oom_kill count, goes with the container."""
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30)
        if log.returncode != 0:
            raise AssertionError(f"dmesg exited {log.returncode}: {log.stderr.strip()}")
        return [int(m.group(1)) for m in re.finditer(
            rf"oom-kill:.*,oom_memcg={re.escape(self.cgroup)},.*,pid=(\d+),", log.stdout)]

    def seccomp(self):
        """The Seccomp line of its first process's status ("2": a filter applies)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("Seccomp:"):
                return line.split()[1]
        return None

    def remove(self):
        podman("rm", "--force", "--time", "0", self.name, check=False)
