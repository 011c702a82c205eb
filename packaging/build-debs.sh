#!/usr/bin/env bash
# Build memtrim's Debian packages (libmemtrim0, libmemtrim-dev, orthanc-memtrim,
# memtrim)
# with CPack into DIR (default: build-deb/), with Debian's build flags
# (dpkg-buildflags, hardening=+all), prefix /usr, stripped. Prints the .deb
# paths. Install them with: apt-get install ./build-deb/orthanc-memtrim_*.deb
# Usage: packaging/build-debs.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/build-deb}")
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
eval "$(dpkg-buildflags --export=sh)"
# CMake does not read CPPFLAGS (-D_FORTIFY_SOURCE=2 is there), and reads CFLAGS
# and LDFLAGS only when it first configures DIR: pass them every time.
export CFLAGS="$CPPFLAGS $CFLAGS"
cmake -S "$root" -B "$out" -DCMAKE_BUILD_TYPE=None -DCMAKE_INSTALL_PREFIX=/usr \
  -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_SHARED_LINKER_FLAGS="$LDFLAGS" -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" \
  -DMEMTRIM_TESTS=OFF -DMEMTRIM_SANITIZE= >/dev/null
cmake --build "$out" -j"$(nproc)" >/dev/null
rm -f "$out"/*.deb
(cd "$out" && cpack -G DEB >/dev/null)
# CPack adds direct ldconfig calls to the maintainer scripts of any package with
# a library under /usr/lib unless the package brings its own scripts: ours are
# placeholders (cmake/debian/*.post*), taken out here, so that the packages
# carry neither (ldconfig runs through dpkg's trigger, the libmemtrim0 triggers file).
for deb in "$out"/*.deb; do
  tmp=$(mktemp -d)
  dpkg-deb -R "$deb" "$tmp"
  changed=0
  for script in postinst postrm; do
    if [ -f "$tmp/DEBIAN/$script" ] && grep -q '^# memtrim: placeholder' "$tmp/DEBIAN/$script"; then
      rm "$tmp/DEBIAN/$script"
      changed=1
    fi
  done
  if [ "$changed" = 1 ]; then
    (cd "$tmp" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
      xargs -0r md5sum > DEBIAN/md5sums)
    dpkg-deb --root-owner-group -b "$tmp" "$deb" >/dev/null
  fi
  rm -rf "$tmp"
done
ls "$out"/*.deb
