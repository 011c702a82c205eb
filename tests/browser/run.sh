#!/usr/bin/env bash
# Browser tests of the dashboard page (Debian's chromium driven by playwright-core
# from npm; no browser is downloaded) and checks of the Prometheus/Grafana kit in
# examples/, against demo hosts from $MEMTRIM_BUILD_DIR (default: build/).
# Screenshots land in tests/artifacts/; MEMTRIM_UPDATE_SCREENSHOT=1 also
# refreshes docs/dashboard.png for docs/dashboard.md.
set -euo pipefail
cd "$(dirname "$0")"
export MEMTRIM_BUILD_DIR="${MEMTRIM_BUILD_DIR:-$(cd ../.. && pwd)/build}"
if [ ! -x "$MEMTRIM_BUILD_DIR/memtrim-demo" ]; then
  echo "tests/browser: $MEMTRIM_BUILD_DIR/memtrim-demo is missing; build memtrim first" >&2
  exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "tests/browser: /usr/bin/chromium is missing (tests/install-deps.sh all installs it)" >&2
  exit 1
fi
# Install the pinned playwright-core unless it is already there.
npm ls playwright-core >/dev/null 2>&1 || npm ci --no-audit --no-fund --loglevel=error
exec timeout -k 10 300 node test_dashboard.mjs
