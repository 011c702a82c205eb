"""examples/systemd/memtrim-preload.conf, the drop-in that preloads memtrim
into an unmodified service, checked by systemd itself (systemd-analyze
verify reads unit files offline; no running systemd needed)."""
import os
import shutil
import subprocess

import pytest

from pkg_util import ROOT


def test_systemd_drop_in_verifies(tmp_path):
    """examples/systemd/memtrim-preload.conf as a drop-in of a service:
    systemd-analyze verify reads it (StateDirectory=memtrim/%N shows as the
    var-lib-memtrim-memtrimexample.mount it needs) and has nothing to say about it."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "memtrimexample.service"
    unit.write_text("[Unit]\nDescription=a service memtrim is preloaded into\n"
                    "[Service]\nExecStart=/bin/sleep infinity\nDynamicUser=yes\n")
    (tmp_path / "memtrimexample.service.d").mkdir()
    shutil.copy(ROOT / "examples" / "systemd" / "memtrim-preload.conf",
                tmp_path / "memtrimexample.service.d" / "memtrim.conf")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, SYSTEMD_LOG_LEVEL="debug"))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "var-lib-memtrim-memtrimexample.mount" in out, "the drop-in was not read:\n" + out[-3000:]
    complaints = [line for line in out.splitlines() if "memtrim.conf:" in line]
    assert not complaints, "\n".join(complaints)
