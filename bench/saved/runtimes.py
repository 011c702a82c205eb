#!/usr/bin/python3
"""What memtrim saved, held against a real runtime (issue 41): the runtimes benchmark's apps
(bench/runtimes/, tests/e2e/runtimes_util.py) take their burst, then idle 30 s, interleaved in
three modes: `plain` (no memtrim: the truth), `observed` (memtrim preloaded with every trim
off: the host's heap as glibc left it, read by memtrim's own probe) and `memtrim` (its
defaults). At 30 s each run's RSS and, where memtrim is loaded, /memory/stats: the
counterfactual (rss_without_memtrim_bytes), glibc's heap (mallinfo2 arena, in use, free).

Prints one JSON line a run, then the medians and the counterfactual's error against plain's
idle RSS (docs/policy.md, "What memtrim saved").

  MEMTRIM_BUILD_DIR=build bench/saved/runtimes.py --runtime python --rounds 5
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import requests  # noqa: E402
from runtimes_util import Server, burst, mode_env  # noqa: E402

MODES = ("plain", "observed", "memtrim")
NO_TRIMS = {"TrimIntervalSeconds": 0, "TrimReleasableTriggerBytes": 0, "PressureRatio": 0}
MB = 1 << 20
IDLE_S = 30


def run(runtime, mode, tmp):
    env = mode_env("memtrim", NO_TRIMS) if mode == "observed" else mode_env(mode)
    s = Server(runtime, tmp, env=env)
    try:
        b = burst(s)
        time.sleep(IDLE_S)  # the idle itself is what is measured
        out = {"mode": mode, "errors": len(b.errors), "peak_mib": s.peak() // MB,
               "rss_mib": s.rss() // MB}
        api = s.api()
        if api:
            st = requests.get(api + "/memory/stats", timeout=10).json()
            for k in ("rss_without_memtrim_bytes", "saved_bytes", "arena_bytes",
                      "heap_in_use_bytes", "heap_free_bytes"):
                out[k.replace("_bytes", "_mib")] = (st[k] or 0) // MB
        return out
    finally:
        s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", default="python", choices=("python", "ruby", "node"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tmp", default="/tmp/memtrim-saved-runtimes")
    a = ap.parse_args()
    rows = []
    for r in range(a.rounds):
        for mode in MODES:
            row = run(a.runtime, mode, Path(a.tmp) / f"{mode}{r}")
            rows.append(row)
            print(json.dumps(row), flush=True)

    def med(mode, key):
        values = [x[key] for x in rows if x["mode"] == mode and key in x]
        return statistics.median(values) if values else None
    truth, cf = med("plain", "rss_mib"), med("memtrim", "rss_without_memtrim_mib")
    print(f"{a.runtime}, {a.rounds} rounds: idle RSS plain {truth} MiB "
          f"(runs {sorted(x['rss_mib'] for x in rows if x['mode'] == 'plain')}), "
          f"observed {med('observed', 'rss_mib')} (arena {med('observed', 'arena_mib')}); "
          f"memtrim RSS {med('memtrim', 'rss_mib')}, counterfactual {cf} "
          f"(runs {sorted(x['rss_without_memtrim_mib'] for x in rows if x['mode'] == 'memtrim')}, "
          f"arena {med('memtrim', 'arena_mib')}); error {100 * (cf - truth) / truth:+.1f} %")


if __name__ == "__main__":
    main()
