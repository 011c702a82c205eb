#!/usr/bin/env python3
"""Markdown tables from bench/cost/run.sh's JSON lines (medians over rounds)."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
by = defaultdict(list)
for r in rows:
    by[r["name"]].append(r)


def med(name, *path):
    vals = []
    for r in by.get(name, []):
        v = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if v is not None:
            vals.append(v)
    return statistics.median(vals) if vals else None


def us(ns):
    return "–" if ns is None else f"{ns / 1e3:.1f}"


def mb(b):
    return "–" if b is None else f"{b / 1048576:.0f}"


def ntrims(r):
    t = r.get("trims") or {}
    return t.get("periodic", 0) + t.get("burst", 0) + t.get("pressure", 0)


print("\n## 1. Host allocation latency and throughput (medians of %d rounds)\n" %
      max(len(v) for v in by.values()))
print("| arenas | memtrim | studies/s | vs off | worker malloc p50 / p99 / p99.9 / max (µs) "
      "| canary p50 / p99 / max (µs) | trims | time in trims (ms) |")
print("|---|---|---|---|---|---|---|---|")
for arenas in (2, 8, 32):
    base = med(f"off/{arenas}", "studies_per_s")
    for m in ("off", "defaults", "aggressive", "orthanc"):
        n = f"{m}/{arenas}"
        if n not in by:
            continue
        tp = med(n, "studies_per_s")
        trims = statistics.median([ntrims(r) for r in by[n]]) if m in ("defaults", "aggressive") else None
        ts = med(n, "trim_seconds")
        print(f"| {arenas} | {m} | {tp:.2f} | {100 * tp / base:.1f} % | "
              f"{us(med(n, 'workers', 'p50_ns'))} / {us(med(n, 'workers', 'p99_ns'))} / "
              f"{us(med(n, 'workers', 'p999_ns'))} / {us(med(n, 'workers', 'max_ns'))} | "
              f"{us(med(n, 'canary', 'p50_ns'))} / {us(med(n, 'canary', 'p99_ns'))} / "
              f"{us(med(n, 'canary', 'max_ns'))} | "
              f"{'–' if trims is None else f'{trims:.0f}'} | {'–' if ts is None else f'{ts * 1e3:.1f}'} |")
print("\nPer round (studies/s, worker p99 µs), to see the spread:\n")
for arenas in (2, 8, 32):
    for m in ("off", "defaults", "aggressive", "orthanc"):
        n = f"{m}/{arenas}"
        if n in by:
            print(f"- {n}: " + ", ".join(f"{r.get('studies_per_s', 0):.2f} ({us(r.get('workers', {}).get('p99_ns'))})"
                                          for r in by[n]))

print("\n## 2. Re-faults: 128 MB freed and re-allocated every 3 s beside a 1 GB live set\n")
print("| gap | trims | released (MB) | came back, upper bound (MB) | mean RSS (MB) | peak RSS (MB) "
      "| gap factor at the end | studies |")
print("|---|---|---|---|---|---|---|---|")
for n in ("refault/fixed", "refault/adaptive", "refault/defaults", "refault/off"):
    for r in by.get(n, []):
        print(f"| {n.split('/')[1]} | {ntrims(r) if 'trims' in r else '–'} | {mb(r.get('released'))} | "
              f"{mb(r.get('refaulted'))} | {mb(r.get('rss_mean'))} | {mb(r.get('rss_peak'))} | "
              f"{r.get('gap_factor', '–')} | {r.get('studies')} |")
f, a = by.get("refault/fixed", [{}])[0], by.get("refault/adaptive", [{}])[0]
if f.get("trims") and a.get("trims") and ntrims(a):
    print(f"\nadaptive vs fixed: {ntrims(f) / ntrims(a):.1f}x fewer trims; mean RSS "
          f"{100 * (a['rss_mean'] / f['rss_mean'] - 1):+.1f} %, peak RSS "
          f"{100 * (a['rss_peak'] / f['rss_peak'] - 1):+.1f} %")

print("\n## 3. A host at full CPU: trims deferred while it is busy, or not\n")
print("| deferral | studies/s | host CPU share | trims | deferrals | deferred (s) | time in trims (ms) |")
print("|---|---|---|---|---|---|---|")
for n in ("busy/defer", "busy/nodefer"):
    for r in by.get(n, []):
        sk = r.get("skips") or {}
        print(f"| {n.split('/')[1]} | {r.get('studies_per_s', 0):.2f} | {r.get('host_cpu_share') or 0:.2f} | "
              f"{ntrims(r)} | {sk.get('host_busy', 0):.0f} | {r.get('deferred_s') or 0:.1f} | "
              f"{(r.get('trim_seconds') or 0) * 1e3:.1f} |")
d, nd = med("busy/defer", "studies_per_s"), med("busy/nodefer", "studies_per_s")
if d and nd:
    print(f"\nmedian throughput with deferral / without: {100 * d / nd:.1f} %")

print("\n## 4. The long run: off vs defaults\n")
print("| arenas | memtrim | studies/s | worker malloc p50 / p99 / p99.9 / max (µs) | canary p99 / max (µs) "
      "| trims | skips | gap factor | mean RSS (MB) |")
print("|---|---|---|---|---|---|---|---|---|")
long_arenas = sorted({int(k.split("/")[1]) for k in by if k.startswith("long-")})
for n in [f"long-{m}/{a}" for a in long_arenas for m in ("off", "defaults")]:
    for r in by.get(n, []):
        w, c = r.get("workers", {}), r.get("canary", {})
        print(f"| {n.split('/')[1]} | {n[5:].split('/')[0]} | {r.get('studies_per_s', 0):.2f} | {us(w.get('p50_ns'))} / "
              f"{us(w.get('p99_ns'))} / {us(w.get('p999_ns'))} / {us(w.get('max_ns'))} | "
              f"{us(c.get('p99_ns'))} / {us(c.get('max_ns'))} | {ntrims(r) if 'trims' in r else '–'} | "
              f"{r.get('skips', '–')} | {r.get('gap_factor', '–')} | {mb(r.get('rss_mean'))} |")
