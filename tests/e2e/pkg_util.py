"""Helpers of the packaging and fleet tests (test_install.py, test_fleet.py):
ports, the version CMake declares, building the Debian packages, apt under a
lock, and a stock-like Orthanc configuration folder."""
import fcntl
import os
import re
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# memtrim's e2e tests that install packages or run Prometheus take their fixed
# ports from 19500-19599 (each test also checks the port is free first).
PORT_BASE = int(os.environ.get("MEMTRIM_PKG_PORT_BASE", "19500"))


def free_port_from(offset):
    """The first free loopback port at or above PORT_BASE + offset (within 100)."""
    for port in range(PORT_BASE + offset, PORT_BASE + 100):
        s = socket.socket()
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError(f"no free port in {PORT_BASE + offset}..{PORT_BASE + 99}")


def cmake_version():
    """The version project(VERSION) declares: the one place it is written."""
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*memtrim\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
    assert m, "project(memtrim VERSION x.y.z) not found in CMakeLists.txt"
    return m.group(1)


def build_debs(out):
    """packaging/build-debs.sh into out; {package name: path}. MEMTRIM_DEB_DIR
    reuses packages already built there."""
    given = os.environ.get("MEMTRIM_DEB_DIR")
    if given:
        out = Path(given)
    else:
        r = subprocess.run([str(ROOT / "packaging" / "build-debs.sh"), str(out)],
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"build-debs.sh failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    debs = {}
    for deb in Path(out).glob("*.deb"):
        name = subprocess.run(["dpkg-deb", "-f", str(deb), "Package"], capture_output=True,
                              text=True, check=True).stdout.strip()
        debs[name] = deb
    return debs


@contextmanager
def apt_lock():
    """apt and dpkg one at a time among the tests of this machine (and the
    helpers that share it: /work/apt.lock when it exists)."""
    path = os.environ.get("MEMTRIM_APT_LOCK") or (
        "/work/apt.lock" if os.path.exists("/work/apt.lock") else
        os.path.join(tempfile.gettempdir(), "memtrim-apt.lock"))
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def apt(*args):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with apt_lock():
        return subprocess.run(["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", *args],
                              capture_output=True, text=True, env=env, timeout=900)


def installed(package):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                       text=True)
    return r.returncode == 0 and "installed" in r.stdout.split()


def stock_orthanc_config(folder, storage, http_port, dicom_port):
    """A copy of /etc/orthanc (every file, with its owner and mode: Orthanc
    reads them as its user) with four changes in orthanc.json: HttpPort and
    DicomPort (ports of this test), StorageDirectory and IndexDirectory
    (a temporary folder owned by orthanc, not the machine's /var/lib/orthanc).
    Everything else, "Plugins" included, is Debian's."""
    shutil.copytree("/etc/orthanc", folder, copy_function=shutil.copy2)
    st = os.stat("/etc/orthanc")
    os.chown(folder, st.st_uid, st.st_gid)
    os.chmod(folder, 0o755)
    for f in Path("/etc/orthanc").iterdir():
        s = f.stat()
        os.chown(Path(folder) / f.name, s.st_uid, s.st_gid)
    cfg = Path(folder) / "orthanc.json"
    text = cfg.read_text()
    changes = {"HttpPort": str(http_port), "DicomPort": str(dicom_port),
               "StorageDirectory": f'"{storage}"', "IndexDirectory": f'"{storage}"'}
    for key, value in changes.items():
        text, n = re.subn(r'^(\s*"%s"\s*:\s*)[^,\n]+' % key, r"\g<1>" + value.replace("\\", "\\\\"),
                          text, count=1, flags=re.M)
        assert n == 1, f"{key} not found in /etc/orthanc/orthanc.json"
    cfg.write_text(text)
    return changes


def orthanc_dirs(prefix):
    """A world-traversable temporary folder (the orthanc user must reach its
    configuration) holding a storage folder owned by orthanc, mode 0750 like
    /var/lib/orthanc."""
    import pwd
    top = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(top, 0o755)
    storage = top / "db"
    storage.mkdir()
    pw = pwd.getpwnam("orthanc")
    os.chown(storage, pw.pw_uid, pw.pw_gid)
    os.chmod(storage, 0o750)
    return top, storage


