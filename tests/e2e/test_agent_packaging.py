"""The agent's packaging (issue 39): the systemd unit that the memtrim package installs, checked
by systemd itself (systemd-analyze verify, offline), and the Kubernetes DaemonSet manifest held
to docs/agent.md's table of privileges. No manifest validator works offline here (kubectl's
client-side dry run asks the API server for its schema; kubeconform is not packaged), so the
test reads the manifest's privileges and requires that each one is in the table, with what it
is for, and that the table claims none the manifest does not take."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

from pkg_util import ROOT

DOC = ROOT / "docs" / "agent.md"
MANIFEST = ROOT / "packaging" / "memtrim-agent-daemonset.yaml"
UNIT = ROOT / "packaging" / "memtrim-agent.service"


def privilege_table():
    """docs/agent.md's "What each privilege is for" table: {privilege: what it is for}."""
    text = DOC.read_text()
    section = text.split("## What each privilege is for", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


# The ConfigMap as it was before the Secret (control agent-daemonset-open): every read open to
# whoever reaches the pod.
OPEN_CONFIG = {"HttpBind": "0.0.0.0", "HttpPort": 8044, "AllowUnauthenticatedRemote": True,
               "CgroupV1Root": "/host/sys/fs/cgroup/memory", "CgroupV2Root": "/host/sys/fs/cgroup",
               "AllowCgroups": ["/kubepods*"], "Database": "/var/lib/memtrim/agent.sqlite"}


def agent_config():
    """The ConfigMap's MemoryTrimAgent object (under control agent-daemonset-open: the open one)."""
    import json
    if os.environ.get("MEMTRIM_CONTROL") == "agent-daemonset-open":
        return dict(OPEN_CONFIG)
    cm = next(d for d in yaml.safe_load_all(MANIFEST.read_text()) if d and d.get("kind") == "ConfigMap")
    return json.loads(cm["data"]["agent.json"])["MemoryTrimAgent"]


def manifest_privileges():
    """The privileges the DaemonSet's pod takes, in the table's words."""
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    ds = next(d for d in docs if d and d.get("kind") == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    taken = set()
    if pod.get("hostPID"):
        taken.add("hostPID")
    for key in ("hostNetwork", "hostIPC"):
        if pod.get(key):
            taken.add(key)
    if sc.get("privileged"):
        taken.add("privileged")
    if sc.get("allowPrivilegeEscalation", True):
        taken.add("allowPrivilegeEscalation")
    if sc.get("runAsUser") == 0:
        taken.add("runAsUser: 0")
    assert sc["capabilities"]["drop"] == ["ALL"], "every capability not named is dropped"
    taken |= {f"CAP_{cap}" for cap in sc["capabilities"].get("add", [])}
    if not sc.get("readOnlyRootFilesystem"):
        taken.add("a writable root filesystem")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = volumes[m["name"]]
        if "hostPath" in v:
            taken.add(f"hostPath {v['hostPath']['path']}" + ("" if m.get("readOnly") else " (read-write)"))
        if "secret" in v:
            taken.add(f"Secret {v['secret']['secretName']}" +
                      (" (read-only)" if m.get("readOnly") else " (read-write)"))
    # the port: on the pod's address without a token is a privilege given to every client
    agent = agent_config()
    if agent.get("HttpBind", "127.0.0.1") not in ("127.0.0.1", "::1", "localhost") and \
            (agent.get("AllowUnauthenticatedRemote") or
             not (agent.get("AuthToken") or agent.get("AuthTokenFile"))):
        taken.add("a port open without a token")
    if sc.get("seccompProfile", {}).get("type") == "Unconfined":
        taken.add("seccomp Unconfined")
    return pod, c, taken


def test_every_privilege_of_the_daemonset_is_in_the_table():
    table = privilege_table()
    _, _, taken = manifest_privileges()
    missing = taken - set(table)
    assert not missing, f"the manifest takes privileges docs/agent.md does not explain: {missing}"
    claimed = {p for p in table if not p.startswith("CapabilityBoundingSet")} - taken
    assert not claimed, f"docs/agent.md explains privileges the manifest does not take: {claimed}"
    for p in taken:
        assert len(table[p]) > 20, f"'{p}': say what it is for"


def test_the_daemonset_is_bounded_and_probed():
    pod, c, _ = manifest_privileges()
    res = c["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(res[kind]), res
    probe = c["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    assert pod.get("automountServiceAccountToken") is False
    assert not pod.get("hostNetwork")
    config = yaml.safe_load_all(MANIFEST.read_text())
    cm = next(d for d in config if d and d.get("kind") == "ConfigMap")
    import json
    agent = json.loads(cm["data"]["agent.json"])["MemoryTrimAgent"]
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == probe["port"])
    assert agent["HttpPort"] == port


def test_the_store_is_on_a_writable_volume():
    """The ConfigMap's Database lies on a volume the pod may write: its root filesystem is
    read-only, where the store could not be made (the agent would log it and keep no history).
    Control agent-store-unmounted (the test drops the volume's mount, as the manifest had it)."""
    import json
    _, c, _ = manifest_privileges()
    cm = next(d for d in yaml.safe_load_all(MANIFEST.read_text()) if d and d.get("kind") == "ConfigMap")
    db = json.loads(cm["data"]["agent.json"])["MemoryTrimAgent"].get("Database")
    mounts = [m for m in c.get("volumeMounts", []) if not m.get("readOnly")]
    if os.environ.get("MEMTRIM_CONTROL") == "agent-store-unmounted":
        mounts = [m for m in mounts if m["mountPath"] != "/var/lib/memtrim"]
    assert c["securityContext"].get("readOnlyRootFilesystem") and db
    assert any(db.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts), (db, mounts)


def test_the_units_capabilities_trim_another_users_process():
    """The command as the agent's unit runs it (root with the unit's CapabilityBoundingSet
    alone, by setpriv) trims a process of another uid (nobody): it opens that process's
    /proc/PID/mem for the per-target lock, which root may only with CAP_DAC_READ_SEARCH (without
    it: 'Permission denied', and the agent refused every process not root's). Control
    agent-unit-no-dac (the set without it, as the unit had it)."""
    from hosts_util import build_file, readable_build
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", UNIT.read_text(), re.M).group(1).split()
    if os.environ.get("MEMTRIM_CONTROL") == "agent-unit-no-dac":
        caps = [cap for cap in caps if cap != "CAP_DAC_READ_SEARCH"]
    bounding = "-all," + ",".join("+" + cap[4:].lower() for cap in caps)

    def as_nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    exe = readable_build("memtrim-cli-target") / "memtrim-cli-target"
    p = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         preexec_fn=as_nobody, cwd="/")
    try:
        assert p.stdout.readline()
        r = subprocess.run(["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all",
                            str(build_file("memtrim")), "trim", str(p.pid), "--json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "released_bytes" in r.stdout, (bounding, r.stdout, r.stderr)
    finally:
        p.kill()
        p.wait()


def test_the_unit_takes_what_the_table_says():
    table = privilege_table()
    unit = UNIT.read_text()
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split()
    assert f"CapabilityBoundingSet={' '.join(caps)}" in table, (caps, list(table))
    assert re.search(r"^ExecStart=/usr/bin/memtrim agent --config /etc/memtrim/agent.json$", unit, re.M)


def test_the_unit_verifies(tmp_path):
    """systemd-analyze verify reads the unit offline, with ExecStart pointing at the build's
    memtrim (verify checks that the program exists)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    from hosts_util import build_file
    unit = tmp_path / "memtrim-agent.service"
    unit.write_text(UNIT.read_text().replace("/usr/bin/memtrim", str(build_file("memtrim"))))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, SYSTEMD_LOG_LEVEL="info"))
    out = r.stdout + r.stderr
    complaints = [line for line in out.splitlines() if "memtrim-agent.service" in line]
    assert r.returncode == 0 and not complaints, out


def test_the_daemonsets_configuration_asks_for_its_token(tmp_path):
    """The ConfigMap's agent.json as the pod reads it (its port made ephemeral, its cgroup roots
    absent here, its AuthTokenFile a file like the Secret's mount: root's, 0400): the agent
    listens on every address; /healthz, the probe's path (a probe cannot send a Secret, and the
    manifest's sends no header), answers without the token; every read route asks for it
    (401), and answers with it. The token lies on a read-only Secret mount, mode 0400.
    Control agent-daemonset-open: the ConfigMap as it was (AllowUnauthenticatedRemote, no
    token): /metrics answers anyone."""
    import json
    import urllib.error
    import urllib.request
    from hosts_util import build_file
    pod, c, _ = manifest_privileges()
    probe = c["livenessProbe"]["httpGet"]
    assert not probe.get("httpHeaders"), "a probe's header is in the manifest, in clear"
    cfg = agent_config()
    assert not cfg.get("AuthToken") and not cfg.get("ReadToken"), "a token in a ConfigMap"
    token_path = cfg.get("AuthTokenFile") or cfg.get("ReadTokenFile")
    if token_path:
        mount = next(m for m in c["volumeMounts"] if token_path.startswith(m["mountPath"].rstrip("/") + "/"))
        vol = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert mount.get("readOnly") and "secret" in vol and vol["secret"]["defaultMode"] == 0o400, (mount, vol)
        assert not vol["secret"].get("optional"), "the pod must not start without its token"
        token = "t0ken-" + os.urandom(12).hex()
        f = tmp_path / "token"
        f.write_text(token + "\n")
        f.chmod(0o400)
        cfg["AuthTokenFile" if cfg.get("AuthTokenFile") else "ReadTokenFile"] = str(f)
    else:
        token = None
    cfg["HttpPort"] = 0
    cfg["Database"] = str(tmp_path / "agent.sqlite")
    log = tmp_path / "agent.log"
    with open(log, "w") as out:
        p = subprocess.Popen([str(build_file("memtrim")), "agent", "--config",
                              json.dumps({"MemoryTrimAgent": cfg})], stdout=out, stderr=subprocess.STDOUT)

    def status(path, tok=None):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {tok}"} if tok else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
    try:
        from wait import wait_for
        addr = wait_for(lambda: p.poll() is None and re.search(r"listening on (\S+)", log.read_text()),
                        20, "the agent to listen").group(1)
        assert addr.startswith("0.0.0.0:"), addr
        port = addr.rsplit(":", 1)[1]
        assert status(probe["path"]) == 200
        for path in ("/metrics", "/agent/cgroups", "/agent/history"):
            assert status(path) == 401, f"{path} answers without the token"
            assert status(path, "wrong") == 401
            assert status(path, token) == 200, path
    finally:
        p.terminate()
        assert p.wait(20) == 0, log.read_text()[-2000:]
