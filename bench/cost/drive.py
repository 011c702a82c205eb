#!/usr/bin/env python3
"""One run of memtrim-demo for bench/cost/run.sh: starts the demo with the
arguments given after --, samples its RSS every 0.25 s from /proc, reads
memtrim's /metrics (loopback, the demo's ephemeral port) just before the run
ends, and prints one JSON line: throughput, the workers' and the canary's
allocation latency, mean and peak RSS, and memtrim's trim, skip and cost
counters. Usage: drive.py NAME DEMO SECONDS -- DEMO-ARGS..."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def metrics(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError as e:
        return {"error": str(e)}
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(memtrim_[a-z_]+)(\{[^}]*\})?\s+(\S+)$', line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def by_label(m, name):
    return {re.search(r'="([^"]*)"', k).group(1): v for k, v in m.items() if k.startswith(name + "{")}


def main():
    name, demo, seconds = sys.argv[1], os.path.abspath(sys.argv[2]), float(sys.argv[3])
    args = sys.argv[sys.argv.index("--") + 1:]
    tmp = tempfile.mkdtemp(prefix="memtrim-cost-")
    port_file = os.path.join(tmp, "port")
    memtrim = "--no-memtrim" not in args
    cmd = [demo, "--quiet", "--seconds", str(int(seconds))] + args
    if memtrim:
        cmd += ["--port-file", port_file]
    log = open(os.path.join(tmp, "out"), "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=tmp)
    t0 = time.monotonic()
    rss, m = [], {}
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                kb = re.search(r"VmRSS:\s+(\d+)", f.read())
            if kb:
                rss.append(int(kb.group(1)) * 1024)
        except OSError:
            pass
        if memtrim and not m and time.monotonic() - t0 >= seconds - 0.6 and os.path.exists(port_file):
            m = metrics(int(open(port_file).read()))
        time.sleep(0.25)
    log.seek(0)
    out = log.read()
    res = {"name": name, "exit": proc.returncode}
    tp = re.search(r"throughput: (\d+) studies in ([\d.]+) s", out)
    if tp:
        res["studies"] = int(tp.group(1))
        res["studies_per_s"] = int(tp.group(1)) / float(tp.group(2))
    for who in ("workers", "canary"):
        lat = re.search(who + r": (\d+) allocations, p50_ns=(\d+) p99_ns=(\d+) p999_ns=(\d+) max_ns=(\d+)", out)
        if lat:
            res[who] = dict(zip(["n", "p50_ns", "p99_ns", "p999_ns", "max_ns"], map(int, lat.groups())))
    # The first second is start-up (the live set being touched): RSS from then on.
    steady = rss[4:] or rss
    if steady:
        res["rss_mean"] = sum(steady) / len(steady)
        res["rss_peak"] = max(steady)
    if m:
        res["trims"] = by_label(m, "memtrim_trims_total")
        res["skips"] = {k: v for k, v in by_label(m, "memtrim_trim_skips_total").items() if v}
        res["released"] = sum(by_label(m, "memtrim_released_bytes_total").values())
        res["refaulted"] = sum(by_label(m, "memtrim_refaulted_bytes_total").values())
        res["trim_seconds"] = sum(by_label(m, "memtrim_trim_seconds_total").values())
        res["gap_factor"] = m.get("memtrim_trim_gap_factor")
        res["host_cpu_share"] = m.get("memtrim_host_cpu_share")
        res["deferred_s"] = m.get("memtrim_trim_deferred_seconds_total")
        res["heap_probe_s"] = m.get("memtrim_heap_probe_seconds_total")
    if proc.returncode != 0:
        res["output"] = out[-2000:]
    print(json.dumps(res), flush=True)
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
