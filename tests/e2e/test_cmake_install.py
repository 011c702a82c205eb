"""`cmake --install` of the build under test into a DESTDIR: the library with
its SONAME links, the generated header with CMake's version, memtrim.pc, the
Orthanc plugin in lib/orthanc linked from Orthanc's plugin folder (relative
link), memtrim.json beside Orthanc's configuration, and README, licence and
changelog under share/doc/<package>/ (cmake/install.cmake)."""
import os
import re
import subprocess

from conftest import BUILD
from pkg_util import cmake_version


def cache(name):
    m = re.search(rf"^{name}:[A-Z]+=(.*)$", (BUILD / "CMakeCache.txt").read_text(), re.M)
    return m.group(1) if m else None


def test_cmake_install_layout(tmp_path):
    version = cmake_version()
    dest = tmp_path / "root"
    r = subprocess.run(["cmake", "--install", str(BUILD)], capture_output=True, text=True,
                       env=dict(os.environ, DESTDIR=str(dest)))
    assert r.returncode == 0, r.stdout + r.stderr
    prefix = dest / cache("CMAKE_INSTALL_PREFIX").lstrip("/")
    libs = list(prefix.glob(f"lib*/**/libmemtrim.so.{version}"))
    assert len(libs) == 1, list(prefix.rglob("*"))
    libdir = libs[0].parent
    assert os.readlink(libdir / "libmemtrim.so.0") == f"libmemtrim.so.{version}"
    assert os.readlink(libdir / "libmemtrim.so") == "libmemtrim.so.0"
    assert oct(libs[0].stat().st_mode & 0o777) == oct(0o644)
    header = (prefix / "include" / "memtrim.h").read_text()
    assert f'#define MEMTRIM_VERSION "{version}"' in header and "@PROJECT_VERSION@" not in header
    pc = (libdir / "pkgconfig" / "memtrim.pc").read_text()
    assert f"Version: {version}" in pc and "-lmemtrim" in pc
    for pkg in ("libmemtrim0", "libmemtrim-dev"):
        doc = prefix / "share" / "doc" / pkg
        assert (doc / "copyright").exists() and (doc / "changelog.gz").exists()
    if (BUILD / "libOrthancMemTrim.so").exists():
        plugin_dir = dest / cache("MEMTRIM_ORTHANC_PLUGIN_DIR").lstrip("/")
        link = plugin_dir / "libOrthancMemTrim.so"
        assert link.is_symlink() and not os.readlink(link).startswith("/")
        assert link.resolve() == (prefix / "lib" / "orthanc" / "libOrthancMemTrim.so").resolve()
        assert (dest / cache("MEMTRIM_ORTHANC_CONFIG_DIR").lstrip("/") / "memtrim.json").exists()
        assert "License: GPL-3+" in (prefix / "share/doc/orthanc-memtrim/copyright").read_text()
    # A second install keeps an operator's memtrim.json.
    cfg = dest / cache("MEMTRIM_ORTHANC_CONFIG_DIR").lstrip("/") / "memtrim.json"
    if cfg.exists():
        cfg.write_text('{"MemoryTrim": {"HttpPort": 9999}}')
        r = subprocess.run(["cmake", "--install", str(BUILD)], capture_output=True, text=True,
                           env=dict(os.environ, DESTDIR=str(dest)))
        assert r.returncode == 0 and "9999" in cfg.read_text()
