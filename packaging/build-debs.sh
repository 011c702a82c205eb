#!/usr/bin/env bash
# Build memtrim's Debian packages (libmemtrim0, libmemtrim-dev, orthanc-memtrim)
# with CPack into DIR (default: build-deb/), with Debian's build flags
# (dpkg-buildflags, hardening=+all), prefix /usr, stripped. Prints the .deb
# paths. Install them with: apt-get install ./build-deb/orthanc-memtrim_*.deb
# Usage: packaging/build-debs.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/build-deb}")
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
eval "$(dpkg-buildflags --export=sh)"
# CMake reads CFLAGS but not CPPFLAGS (-D_FORTIFY_SOURCE=2 is there).
export CFLAGS="$CPPFLAGS $CFLAGS"
cmake -S "$root" -B "$out" -DCMAKE_BUILD_TYPE=None -DCMAKE_INSTALL_PREFIX=/usr \
  -DMEMTRIM_TESTS=OFF -DMEMTRIM_SANITIZE= >/dev/null
cmake --build "$out" -j"$(nproc)" >/dev/null
rm -f "$out"/*.deb
(cd "$out" && cpack -G DEB >/dev/null)
ls "$out"/*.deb
