"""What a new user meets in the first minutes: trim ids that stay unique
across restarts of the same store (and agree between the trim response and
/memory/trims), PATCH /config taking the configuration file's
{"MemoryTrim": {...}} wrapper, and the demo printing the address memtrim
actually bound (nothing when it could not start), with its state in
--state-dir."""
import json
import re
import socket
import subprocess
from pathlib import Path


from conftest import BUILD, find_lib


def test_trim_ids_unique_across_restarts(start_demo, tmp_path):
    db = str(tmp_path / "memtrim.sqlite")
    cfg = {"Database": db, "ManualTrimMinIntervalMs": 0, "TrimIntervalSeconds": 0}
    answered = []
    for run in range(2):
        d = start_demo(cfg, studies=0, study_mb=4)
        for _ in range(3):
            r = d.request("POST", "/memory/trim")
            assert r.status_code == 200, r.text
            answered.append(r.json()["id"])
        assert d.stop() == 0
    assert len(set(answered)) == 6, f"trim ids repeat across a restart: {answered}"
    d = start_demo(cfg, studies=0, study_mb=4)
    listed = [t["id"] for t in d.get("/memory/trims", params={"trigger": "manual"}).json()["trims"]]
    assert sorted(listed) == sorted(answered), (listed, answered)
    assert listed == sorted(listed, reverse=True), "newest first, ids increasing with time"


def test_patch_config_takes_the_file_wrapper(demo):
    r = demo.request("PATCH", "/config", json={"MemoryTrim": {"TrimMinGapSeconds": 7}})
    assert r.status_code == 200, r.text
    assert r.json()["TrimMinGapSeconds"] == 7
    assert demo.get("/config").json()["TrimMinGapSeconds"] == 7
    r = demo.request("PATCH", "/config", json={"MemoryTrim": {}, "TrimMinGapSeconds": 3})
    assert r.status_code == 400
    assert "stands beside MemoryTrim" in r.json()["error"]["message"]
    r = demo.request("PATCH", "/config", json={"MemoryTrim": {"HttpPort": 1}})
    assert r.status_code == 400
    assert "HttpPort" in r.json()["error"]["message"]
    assert demo.get("/config").json()["TrimMinGapSeconds"] == 7


def run_demo(tmp_path, config, *extra):
    """memtrim-demo as examples/run-demo.sh starts it (--state-dir), one
    study; returns (process, port file)."""
    port_file = tmp_path / "port"
    args = [str(BUILD / "memtrim-demo"), "--lib", str(find_lib()), "--config", json.dumps(config),
            "--workers", "1", "--study-mb", "4", "--pause-ms", "0", "--studies", "1",
            "--port-file", str(port_file), "--state-dir", str(tmp_path / "state" / "demo"), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=60), port_file


def test_demo_prints_the_bound_address_and_keeps_state_in_its_dir(tmp_path):
    p, port_file = run_demo(tmp_path, {"HttpPort": 0, "TrimIntervalSeconds": 0})
    assert p.returncode == 0, p.stderr
    port = int(port_file.read_text())
    lines = [line for line in p.stdout.splitlines() if "API on" in line]
    assert len(lines) == 1, p.stdout
    assert f"http://127.0.0.1:{port}/" in lines[0], lines[0]
    assert "8043" not in lines[0] or port == 8043
    # The relative default "Database" went into the state directory.
    assert (tmp_path / "state" / "demo" / "memtrim.sqlite").exists()


def test_demo_prints_no_address_when_memtrim_cannot_start(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        p, port_file = run_demo(tmp_path, {"HttpPort": port})
    finally:
        taken.close()
    assert p.returncode != 0
    assert "API on" not in p.stdout and "http://" not in p.stdout, p.stdout
    assert "Address already in use" in p.stderr, p.stderr
    assert not port_file.exists()


def test_run_demo_script_passes_a_state_dir_and_prints_no_address_itself():
    text = (Path(__file__).resolve().parents[2] / "examples" / "run-demo.sh").read_text()
    assert "--state-dir build/demo-state" in text
    assert not re.search(r"^\s*echo .*http://", text, re.M), "the script must not guess the address"
