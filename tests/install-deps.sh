#!/usr/bin/env bash
# Install the Debian packages memtrim needs (as root), or print the exact line to run.
#   tests/install-deps.sh build   what building memtrim and running the demo needs
#   tests/install-deps.sh all     that plus what the whole test suite needs
set -euo pipefail
build_pkgs="build-essential cmake pkg-config libmicrohttpd-dev libgnutls28-dev libcjson-dev libsqlite3-dev curl"
test_pkgs="sqlite3 libcurl4-openssl-dev python3-pytest python3-requests python3-jsonschema python3-hypothesis
 python3-yaml orthanc orthanc-dev dcmtk python3-pydicom prometheus chromium wrk valgrind
 iproute2 util-linux clang libclang-rt-14-dev
 libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
 lintian dpkg-dev file systemd
 qemu-system-x86 busybox-static gnutls-bin
 python3-gunicorn php-fpm apache2 puma ruby gdb
 podman runc mmdebstrap uidmap"
want=$build_pkgs
[ "${1:-build}" = all ] && want="$build_pkgs $test_pkgs"
command -v node >/dev/null 2>&1 || { [ "${1:-build}" = all ] && want="$want nodejs npm"; }

missing=""
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "memtrim: missing Debian packages. Run:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "memtrim: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends$missing >/dev/null
