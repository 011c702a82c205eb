"""memtrim installed as a Debian user installs it: the packages built by
packaging/build-debs.sh (CPack) go in with `apt-get install ./...deb`; Debian's
Orthanc, started as the orthanc user on its stock /etc/orthanc configuration
(a copy with four changes, see pkg_util.stock_orthanc_config) plus only the
memtrim.json the package put beside it, loads the plugin; its API answers;
the store is created where Orthanc's user may write. A C program built with
`pkg-config --cflags --libs memtrim` starts and stops memtrim through the ABI.
Every place the version appears is compared with CMake's. lintian has nothing
to say beyond the warnings docs/packaging.md explains. The packages are purged at
the end, whatever happened, and the machine is left as it was found.

Needs root (apt, setpriv), Debian's orthanc, lintian, pkg-config and cc."""
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from pkg_util import (ROOT, apt, build_debs, cmake_version, free_port_from, installed,
                      orthanc_dirs, stock_orthanc_config)
from wait import wait_for

PACKAGES = ["libmemtrim0", "libmemtrim-dev", "orthanc-memtrim", "memtrim"]
PLUGIN_LINK = Path("/usr/share/orthanc/plugins/libOrthancMemTrim.so")
CONFIG = Path("/etc/orthanc/memtrim.json")
# lintian warnings docs/packaging.md explains (section "lintian", each tag named there in
# backquotes; test_lintian checks it): /etc/memtrim/agent.json's mode 0600. Its
# informational notes are listed there too.
LINTIAN_EXPLAINED = {"non-standard-file-perm"}


def why_not():
    if os.geteuid() != 0:
        return "installing packages needs root"
    for tool in ("apt-get", "dpkg-deb", "/usr/sbin/Orthanc", "lintian", "pkg-config", "cc",
                 "setpriv", "cpack"):
        if shutil.which(tool) is None and not Path(tool).exists():
            return f"{tool} is not installed"
    for p in PACKAGES:
        if installed(p):
            return f"{p} is already installed on this machine: the test would replace it"
    if CONFIG.exists() or PLUGIN_LINK.exists() or PLUGIN_LINK.is_symlink():
        return f"{CONFIG} or {PLUGIN_LINK} exists already: the test would overwrite it"
    return None


pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    debs = build_debs(tmp_path_factory.mktemp("debs"))
    assert set(PACKAGES) <= set(debs), f"built {sorted(debs)}, want {PACKAGES}"
    return debs


@pytest.fixture(scope="module")
def install(debs):
    """apt-get install ./... of the four packages; purged at the end even when
    a test failed, and checked gone."""
    before = set(Path("/etc/orthanc").iterdir())
    try:
        # apt-get install ./x.deb: a path, as docs/packaging.md shows
        r = apt("install", *[str(debs[p]) for p in PACKAGES])
        assert r.returncode == 0, f"apt-get install failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        yield debs
    finally:
        r = apt("purge", *PACKAGES)
        left = [p for p in PACKAGES if installed(p)]
        assert not left, f"still installed after purge: {left}\n{r.stdout}\n{r.stderr}"
        assert not PLUGIN_LINK.is_symlink() and not CONFIG.exists()
        assert set(Path("/etc/orthanc").iterdir()) == before


def test_packages_fields_and_files(debs):
    version = cmake_version()
    fields = {p: subprocess.run(["dpkg-deb", "-f", str(debs[p])], capture_output=True, text=True,
                                check=True).stdout for p in PACKAGES}
    for p in PACKAGES:
        assert re.search(rf"^Version: {re.escape(version)}$", fields[p], re.M), fields[p]
    for lib in ("libmicrohttpd12", "libcjson1", "libsqlite3-0", "libc6"):
        assert re.search(rf"^Depends:.*\b{lib}\b", fields["libmemtrim0"], re.M), fields["libmemtrim0"]
        assert re.search(rf"^Depends:.*\b{lib}\b", fields["orthanc-memtrim"], re.M)
    assert re.search(r"^Depends:.*\borthanc \(>= 1\.10\)", fields["orthanc-memtrim"], re.M)
    assert f"libmemtrim0 (= {version})" in fields["libmemtrim-dev"]
    files = {p: subprocess.run(["dpkg-deb", "-c", str(debs[p])], capture_output=True, text=True,
                               check=True).stdout for p in PACKAGES}
    assert f"libmemtrim.so.{version}" in files["libmemtrim0"]
    assert "./usr/include/memtrim.h" in files["libmemtrim-dev"]
    assert "/pkgconfig/memtrim.pc" in files["libmemtrim-dev"]
    assert "./usr/share/orthanc/plugins/libOrthancMemTrim.so -> ../../../lib/orthanc/" \
        in files["orthanc-memtrim"]
    assert "./etc/orthanc/memtrim.json" in files["orthanc-memtrim"]
    # the node agent's unit and configuration ride with the command (docs/agent.md)
    assert "./usr/lib/systemd/system/memtrim-agent.service" in files["memtrim"]
    assert "./etc/memtrim/agent.json" in files["memtrim"]
    cli_conffiles = subprocess.run(f"dpkg-deb --ctrl-tarfile {debs['memtrim']} | tar -xO ./conffiles",
                                   shell=True, capture_output=True, text=True, check=True).stdout
    assert cli_conffiles.split() == ["/etc/memtrim/agent.json"]
    for p in PACKAGES:
        assert f"./usr/share/doc/{p}/copyright" in files[p]
        assert f"./usr/share/doc/{p}/changelog.gz" in files[p]
    # Licences: MIT for the library, GPL-3+ for the plugin (Debian's copyright format).
    def copyright_of(p):
        return subprocess.run(f"dpkg-deb --fsys-tarfile {debs[p]} | tar -xO ./usr/share/doc/{p}/copyright",
                              shell=True, capture_output=True, text=True, check=True).stdout
    assert "License: Expat" in copyright_of("libmemtrim0")
    assert "License: GPL-3+" not in copyright_of("libmemtrim0")
    assert "License: GPL-3+" in copyright_of("orthanc-memtrim")
    conffiles = subprocess.run(f"dpkg-deb --ctrl-tarfile {debs['orthanc-memtrim']} | tar -xO ./conffiles",
                               shell=True, capture_output=True, text=True, check=True).stdout
    assert conffiles.split() == [str(CONFIG)]


def test_lintian(debs):
    doc = (ROOT / "docs" / "packaging.md").read_text().split("## lintian", 1)[1].split("\n## ", 1)[0]
    for tag in LINTIAN_EXPLAINED:
        assert f"`{tag}`" in doc, f"docs/packaging.md's lintian section does not explain {tag}"
    r = subprocess.run(["lintian", "--no-tag-display-limit", *[str(debs[p]) for p in PACKAGES]],
                       capture_output=True, text=True, timeout=600)
    tags = []
    for line in r.stdout.splitlines():
        m = re.match(r"^([EWIPXON]): (\S+): (\S+)", line)
        if m and m.group(1) in "EW":
            tags.append((m.group(1), m.group(3), line))
    errors = [line for level, _, line in tags if level == "E"]
    assert not errors, "lintian errors:\n" + "\n".join(errors)
    unexplained = [line for _, tag, line in tags if tag not in LINTIAN_EXPLAINED]
    assert not unexplained, "lintian warnings docs/packaging.md does not explain:\n" + "\n".join(unexplained)


def test_installed_files(install):
    assert PLUGIN_LINK.is_symlink()
    assert PLUGIN_LINK.resolve() == Path("/usr/lib/orthanc/libOrthancMemTrim.so")
    st = CONFIG.stat()
    import grp
    assert grp.getgrgid(st.st_gid).gr_name == "orthanc" and st.st_mode & 0o777 == 0o640
    assert json.loads(CONFIG.read_text()) == json.loads(
        (ROOT / "examples" / "orthanc" / "memtrim.json").read_text())
    soname = subprocess.run(["pkg-config", "--variable=libdir", "memtrim"], capture_output=True,
                            text=True, check=True).stdout.strip()
    readelf = subprocess.run(["readelf", "-d", f"{soname}/libmemtrim.so"], capture_output=True,
                             text=True, check=True).stdout
    assert "Library soname: [libmemtrim.so.0]" in readelf
    assert Path("/usr/share/man/man1/memtrim.1.gz").is_file()


def test_installed_command_trims_a_running_program(install):
    """/usr/bin/memtrim from the package, on a Debian program that never heard of memtrim."""
    p = subprocess.Popen(["/usr/bin/python3", "-c", "import sys; b = [bytearray(4096) for _ in "
                          "range(20000)]; del b; print('ready', flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        r = subprocess.run(["/usr/bin/memtrim", "trim", str(p.pid)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["pid"] == p.pid and out["allocator"] == "glibc" and out["malloc_trim_return"] == 1
        assert out["thread_syscall"] == "read"
    finally:
        p.kill()
        p.wait()


def test_stock_orthanc_loads_the_installed_plugin(install):
    version = cmake_version()
    top, storage = orthanc_dirs("memtrim-install-")
    proc = None
    try:
        http, dicom = free_port_from(20), free_port_from(21)
        cfg = top / "orthanc"
        stock_orthanc_config(cfg, storage, http, dicom)
        # The package's memtrim.json as docs/packaging.md says, its port moved into this test's range.
        api_port = free_port_from(22)
        section = json.loads((cfg / "memtrim.json").read_text())
        section["MemoryTrim"]["HttpPort"] = api_port
        (cfg / "memtrim.json").write_text(json.dumps(section, indent=2))
        log = open(top / "orthanc.log", "w")
        # As Debian's orthanc.service starts it: User=orthanc, /usr/sbin/Orthanc <config dir>.
        proc = subprocess.Popen(["setpriv", "--reuid=orthanc", "--regid=orthanc", "--init-groups",
                                 "--", "/usr/sbin/Orthanc", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT, cwd="/")
        base, api = f"http://127.0.0.1:{http}", f"http://127.0.0.1:{api_port}"

        def up():
            assert proc.poll() is None, (top / "orthanc.log").read_text()[-4000:]
            return requests.get(base + "/system", timeout=5).status_code == 200
        wait_for(up, 120, "Orthanc to answer /system", interval=0.1, retry_on=Exception)
        plugins = requests.get(base + "/plugins", timeout=10).json()
        assert "memtrim" in plugins, plugins
        assert requests.get(base + "/plugins/memtrim", timeout=10).json()["Version"] == version
        wait_for(lambda: requests.get(api + "/healthz", timeout=5).json()["database"] == "ok",
                 30, "memtrim's store to open", retry_on=Exception)
        health = requests.get(api + "/healthz", timeout=5).json()
        assert health["status"] == "ok" and health["version"] == version, health
        spec = yaml.safe_load(requests.get(api + "/openapi.yaml", timeout=5).text)
        assert spec["info"]["version"] == version
        metrics = requests.get(api + "/metrics", timeout=5).text
        assert f'memtrim_build_info{{version="{version}"}} 1' in metrics
        r = requests.post(api + "/memory/trim", timeout=30)
        assert r.status_code == 200, r.text
        # The same API inside Orthanc's REST API.
        assert requests.get(base + "/memtrim/healthz", timeout=5).json()["version"] == version
        # The store: beside Orthanc's index, made by and for the orthanc user.
        db = storage / "memtrim.sqlite"
        wait_for(db.exists, 10, f"{db} to exist")
        import pwd
        assert pwd.getpwuid(db.stat().st_uid).pw_name == "orthanc"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (top / "orthanc.log").read_text()[-4000:]
        proc = None
        assert "memtrim" in (top / "orthanc.log").read_text()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(top, ignore_errors=True)


HOST_C = r"""
#include <memtrim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    memtrim_t *mt = NULL;
    char *err = NULL, addr[64], line[16];
    if (strcmp(memtrim_version(), MEMTRIM_VERSION) != 0)
        return 3;
    if (memtrim_start(argv[1], &mt, &err) != 0) {
        fprintf(stderr, "memtrim: %s\n", err);
        memtrim_free(err);
        return 1;
    }
    if (memtrim_http_address(mt, addr, sizeof(addr)) != 0)
        return 4;
    printf("%s %s %d\n", MEMTRIM_VERSION, addr, memtrim_http_port(mt));
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin)) /* run until told to stop */
        return 5;
    memtrim_stop(mt);
    puts("stopped");
    return 0;
}
"""


def test_host_built_with_pkg_config(install, tmp_path):
    version = cmake_version()
    (tmp_path / "host.c").write_text(HOST_C)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "memtrim"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert subprocess.run(["pkg-config", "--modversion", "memtrim"], capture_output=True,
                          text=True, check=True).stdout.strip() == version
    header = Path("/usr/include/memtrim.h").read_text()
    assert f'#define MEMTRIM_VERSION "{version}"' in header
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", str(tmp_path / "host.c"), *flags,
                    "-o", str(tmp_path / "host")], check=True, cwd=tmp_path)
    port = free_port_from(23)
    p = subprocess.Popen([str(tmp_path / "host"), json.dumps({"HttpPort": port, "Database": ""})],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        first = p.stdout.readline().split()
        assert first == [version, f"127.0.0.1:{port}", str(port)], (first, p.stderr.read())
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["version"] == version
        out, err = p.communicate("stop\n", timeout=30)
        assert p.returncode == 0 and out.strip() == "stopped", (out, err)
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
