"""The node agent's e2e helpers (issue 39, docs/agent.md): `memtrim agent` started beside
"containers", each an unmodified program in its own cgroup and its own pid and mount
namespaces (unshare(1), made by the test itself; real podman containers: podman_util.py; the
agent sees a container's processes exactly as on a node, by their host pids in cgroup.procs), and what the
agent serves (/metrics, /agent/cgroups). Functions of their arguments and an Agent process.
"""
import json
import os
import re
import urllib.request
from pathlib import Path

from hosts_util import build_file
from wait import wait_for

LISTENING = re.compile(r"memtrim/agent: listening on (\S+)")
ROOT = Path(__file__).resolve().parents[2]


def unit_nice():
    """The Nice= of packaging/memtrim-agent.service."""
    m = re.search(r"^Nice=(-?\d+)$", (ROOT / "packaging" / "memtrim-agent.service").read_text(), re.M)
    return int(m.group(1)) if m else 0


EXITED = re.compile(r"^container: exit (\d+)$", re.M)


def container(cg, args):
    """args as a container: inside cg (Cgroup.wrap), in a pid namespace of its own with a
    private mount namespace and its own /proc. Its pid 1 is a shell that runs the program and
    says how it ended ("container: exit 137" for SIGKILL: exit_status reads it), as a
    runtime's shim reports its container's end."""
    return cg.wrap(["/usr/bin/unshare", "--pid", "--fork", "--kill-child", "--mount",
                    "--propagation", "private", "--mount-proc", "/bin/sh", "-c",
                    '"$@"; echo "container: exit $?"', "container", *[str(a) for a in args]])


def exit_status(out):
    """The program's end as its container's pid 1 said it: ("exit", code), ("signal", n), or
    None when the container itself did not say (it was killed whole)."""
    m = EXITED.search(out)
    if not m:
        return None
    code = int(m.group(1))
    return ("signal", code - 128) if code > 128 else ("exit", code)


class Agent:
    """`memtrim agent` with config (a dict; HttpPort 0 unless given), its log in log_path, at
    the priority its unit gives it (memtrim-agent.service: Nice=-5; its commands inherit it)."""

    def __init__(self, procs, log_path, config, args=()):
        cfg = {"HttpPort": 0}
        cfg.update(config)
        # nice -n is relative: the unit's Nice= whatever the test runs at (a niced lane)
        self.proc = procs(["/usr/bin/nice", "-n", str(unit_nice() - os.nice(0)), build_file("memtrim"), "agent",
                           "--config", json.dumps(cfg), *args], log_path)
        self.log_path = log_path

        def listening():
            if not self.proc.running():
                raise AssertionError(f"the agent exited {self.proc.proc.returncode}:\n"
                                     f"{self.proc.output()[-3000:]}")
            m = LISTENING.search(self.proc.output())
            return m and m.group(1)
        self.address = wait_for(listening, 20, "the agent to listen")

    def get(self, path):
        with urllib.request.urlopen(f"http://{self.address}{path}", timeout=10) as r:
            return r.read().decode()

    def cgroups(self):
        return {c["cgroup"]: c for c in json.loads(self.get("/agent/cgroups"))["cgroups"]}

    def metric(self, name, cgroup):
        """The sample of name labelled cgroup="cgroup", None when there is none."""
        text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + "{") and f'cgroup="{cgroup}"' in line:
                return float(line.rsplit(" ", 1)[1])
        return None

    def value(self, name):
        """An unlabelled sample of /metrics."""
        for line in self.get("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def output(self):
        return self.proc.output()

    def stop(self):
        """SIGTERM; it must exit 0."""
        self.proc.proc.terminate()
        rc = self.proc.wait(20)
        assert rc == 0, f"the agent exited {rc}:\n{self.output()[-3000:]}"
