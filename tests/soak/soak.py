"""The soak (issue 15): two demo hosts built with ASan+UBSan run the same
workload side by side, the attacked one and a control. After a baseline
window (no clients), the attacked one gets 60 s of 64 clients polling the
API (each once a second, a new connection each time, as dashboards and
scrapers do), a manual trim every second and a slowloris client holding
more connections than its address may have waiting (every loopback address
is one address to the limits: pollers and slowloris share it). It passes when:

- no sanitizer report (the host's output, and its exit at SIGTERM: leaks too);
- no response other than 200, 403 or 429, and no refused connection, for the
  pollers and the trimmer (the slowloris client is cut, which is the point);
  a 400 for each of issue 24's hostile PATCHes (one a second: MemoryLimitBytes 1,
  2 GiB tunables, a trim a second, 999-deep JSON bodies), which the ratio below
  then covers too;
- memtrim's own memory, what its threads hold on the heap (measured by
  memcount.so through ASan's allocation hooks), is flat: the last 10 s of the
  window's last third holds (median) at most max(256 KiB, 10 %) more than the
  third after its first sixth (warm-up);
- the host's descriptors stay below its limit;
- memtrim's own threads (memtrim-*, MHD-*) use at most 25 % of one core
  under the clients (SOAK_MAX_OWN_CPU_PCT): the ratio below cannot see that
  CPU, because the scheduler takes it from both hosts' workers alike;
- the attacked host's throughput (studies completed per second) under the
  clients is within 2 % of the same host without them. Two identical hosts run
  side by side, each host's workers pinned one per CPU; the clients attack one
  of them at a time, in ROUNDS slices each (SOAK_S of clients per host: 16 of 7.5 s), in the
  order A B B A A B B A ... (A: the clients on the host, B: on the control; one
  uncounted second after each switch), and both hosts' studies are counted over
  the same seconds (so both see the same machine: other load cancels out). In
  A slices the host's count over the control's is k*e, in B slices the
  control's over the host's is e/k, where k is the pair's own speed ratio (two
  processes are never exactly alike) and e the clients' effect:
  e = sqrt(k*e * e/k). Each slice is a measurement of e, none is spent on a
  baseline, and the order cancels a drift of k linear in time. The interleaved
  baseline/clients design before (6 slices of each, the pair's ratio corrected
  by the baseline's) read 0.9771 at load 10 beside two busy loops: its
  per-slice ratios spread 0.92-1.07, and it spent half its time on baselines.
  SOAK_MIN_RATIO overrides 0.98.

Usage: MEMTRIM_BUILD_DIR=build-asan MEMCOUNT_SO=... python3 tests/soak/soak.py
"""
import http.client
import json
import math
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from conftest import BUILD, Demo  # noqa: E402
from test_hostile import HOSTILE_PATCHES  # noqa: E402

# of clients on each host: 60 s read a standard error of 0.0135 beside two busy loops (r17,
# load 10.6), too near the 2 % bound; twice as many slices halve its variance
SOAK_S = float(os.environ.get("SOAK_SECONDS", 120))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", 64))
MIN_RATIO = float(os.environ.get("SOAK_MIN_RATIO", 0.98))
ROUNDS = int(os.environ.get("SOAK_ROUNDS", 16))  # slices of clients on each host, A B B A ...
SETTLE_S = 1.0  # not counted, after each switch between baseline and clients
# memtrim's own threads under the clients, % of one core: 5.8-6.3 % measured here under
# ASan beside the control (3.7-4.7 % on a host alone, 2.6-2.9 % in a release build),
# most of it the kernel's work for 65 new connections a second; the bound catches a
# busy loop or a handler gone slow, not the noise
MAX_OWN_CPU_PCT = float(os.environ.get("SOAK_MAX_OWN_CPU_PCT", 25))
NOFILE = 1024
PATHS = ["/memory/stats", "/metrics", "/healthz", "/memory/series?metric=rss_bytes&since=-5m",
         "/memory/trims?limit=20", "/config", "/memory/stats", "/"]
SANITIZER = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
             "SUMMARY: UndefinedBehaviorSanitizer", "WARNING: ThreadSanitizer")


class Clients:
    def __init__(self, port):
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.statuses = {}
        self.errors = []
        self.requests = 0
        self.cuts = 0
        self.patches = 0
        self.threads = []

    def count(self, status):
        with self.lock:
            self.requests += 1
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def fail(self, what):
        with self.lock:
            self.errors.append(what)

    def request(self, method, path, src="127.0.0.1"):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20,
                                       source_address=(src, 0))
        try:
            c.request(method, path, headers={"Connection": "close"})
            r = c.getresponse()
            r.read()
            self.count(r.status)
            if r.status not in (200, 403, 429):
                self.fail(f"{method} {path}: {r.status}")
        except OSError as e:
            self.fail(f"{method} {path}: {e!r}")
        finally:
            c.close()

    def poller(self, i):
        rng = random.Random(i)
        next_t = time.monotonic() + rng.random()
        k = i
        while not self.stop.is_set():
            self.stop.wait(max(0.0, next_t - time.monotonic()))
            if self.stop.is_set():
                break
            # four loopback addresses, which the limits count as one, shared with the
            # slowloris client: it displaces its own connections, never theirs
            self.request("GET", PATHS[k % len(PATHS)], f"127.0.0.{1 + i % 4}")
            k += 1
            next_t += 1.0

    def patcher(self):
        """Issue 24's hostile PATCHes, one a second: the audit's trim storm
        (MemoryLimitBytes 1), the tunables that kept the peak (2 GiB), a trim
        a second, deep JSON bodies. Each must be a 400; the host's throughput is
        the ratio's to defend."""
        bodies = [json.dumps(b).encode() for b, _ in HOSTILE_PATCHES]
        bodies += [b"[" * 999 + b"]" * 999, b'{"a":' * 999 + b"1" + b"}" * 999]
        k = 0
        while not self.stop.wait(1.0):
            body = bodies[k % len(bodies)]
            k += 1
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
            try:
                c.request("PATCH", "/config", body=body,
                          headers={"Connection": "close", "Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                with self.lock:
                    self.patches += 1
                if r.status != 400:
                    self.fail(f"PATCH {body[:60]!r}: {r.status}, not 400")
            except OSError as e:
                self.fail(f"PATCH: {e!r}")
            finally:
                c.close()

    def trimmer(self):
        while not self.stop.wait(1.0):
            self.request("POST", "/memory/trim")

    def slowloris(self, n=120):
        """Up to n connections from 127.0.0.9 (more than the 96 one address may
        have waiting at NOFILE 1024), a header byte every 2 s each; what is cut
        (displaced by a newer connection, or at the request deadline) is opened
        again."""
        socks = []
        while not self.stop.is_set():
            while len(socks) < n and not self.stop.is_set():
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                                 source_address=("127.0.0.9", 0))
                    s.sendall(b"GET /memory/stats HTTP/1.1\r\nX-a: ")
                    socks.append(s)
                except OSError:
                    break  # its share is full: refused, as it should be
            alive = []
            for s in socks:
                try:
                    s.sendall(b"a")
                    alive.append(s)
                except OSError:
                    self.cuts += 1
                    s.close()
            socks = alive
            self.stop.wait(2.0)
        for s in socks:
            s.close()

    def start(self):
        self.stop.clear()
        self.threads = []
        targets = [(self.poller, (i,)) for i in range(CLIENTS)]
        targets += [(self.trimmer, ()), (self.slowloris, ()), (self.patcher, ())]
        for fn, args in targets:
            t = threading.Thread(target=fn, args=args, daemon=True)
            t.start()
            self.threads.append(t)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)


def studies(demo):
    return sum(1 for line in demo.output().splitlines() if line.startswith("study "))


def memtrim_bytes(path):
    try:
        live, blocks, untracked = Path(path).read_text().split()
        return int(live), int(untracked)
    except (OSError, ValueError):
        return None, None


def window(demos, seconds, sample=None):
    """Studies each host completed over the next `seconds`; sample() each second."""
    n0 = [studies(d) for d in demos]
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(1.0)
        if sample:
            sample()
        for d in demos:
            assert d.proc.poll() is None, d.output()[-3000:]
    return [studies(d) - n for d, n in zip(demos, n0)]


def comm(pid, tid):
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:  # the thread ended between the listing and the read
        return ""


def memtrim_cpu_ns(pid):
    """CPU time of memtrim's threads in the host (memtrim-*, and MHD-* for the
    HTTP server), from each thread's schedstat, by thread name."""
    by = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        name = comm(pid, tid)
        if name.startswith(("memtrim-", "MHD-")) and name != "memtrim-demo":
            try:
                ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # the thread ended between the listing and the read
            by[name] = by.get(name, 0) + ns
    return by


def pin_workers(demo, cpus, n):
    """Each host's k-th worker on CPU k (mod the CPUs): the host's and the
    control's workers then share each CPU's run queue one for one. Left to
    the load balancer, which worker shared a CPU with which changed every few
    seconds and moved the pair's ratio by 5-9 % from one 10 s slice to the
    next (2-4 % pinned), which is more than the 2 % the check is about. The
    host's other threads (memtrim's among them) are not pinned. Both hosts
    are in one scheduler group, so the CPU that memtrim's threads take comes
    from both hosts' workers alike and the ratio does not see it: that is
    measured on its own (memtrim_cpu_ns)."""
    tids = []
    for _ in range(500):  # the workers start with the host, a few ms after its port file
        tids = sorted(t for t in map(int, os.listdir(f"/proc/{demo.proc.pid}/task"))
                      if comm(demo.proc.pid, t) == "demo-worker")
        if len(tids) == n:
            break
        time.sleep(0.01)
    assert len(tids) == n, f"host {demo.proc.pid}: workers {tids}"
    for k, tid in enumerate(tids):
        os.sched_setaffinity(tid, {cpus[k % len(cpus)]})
    return tids


def throughput_ratio(host_a, control_a, host_b, control_b):
    """The clients' effect on a host's studies: (host/control while the clients are on the
    host) times (control/host while they are on the control), square-rooted (the pair's
    own speed ratio cancels)."""
    if not (control_a and host_b and host_a and control_b):
        return 0.0
    return math.sqrt(host_a / control_a * control_b / host_b)


def spread(slices):
    """The standard error of the effect from the slices' own spread (log scale): a
    diagnostic printed beside the ratio, never a bound."""
    logs = [math.log(h / c if on_host else c / h) for on_host, h, c in slices if h and c]
    if len(logs) < 2:
        return float("nan")
    mean = sum(logs) / len(logs)
    var = sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)
    # the effect's log is half the A mean plus half the B mean; k's log cancels
    return 0.5 * math.sqrt(var * 4 / len(logs))


def main():
    memcount = os.environ.get("MEMCOUNT_SO")
    libasan = os.environ.get("LIBASAN_SO")
    assert memcount and libasan, "run through tests/soak/run.sh (MEMCOUNT_SO, LIBASAN_SO)"
    counter = Path(os.environ.get("TMPDIR", "/tmp")) / f"memtrim-soak-{os.getpid()}.count"
    env = dict(os.environ, LD_PRELOAD=f"{libasan} {memcount}", MEMCOUNT_FILE=str(counter),
               ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    config = {"SampleIntervalSeconds": 1, "ManualTrimMinIntervalMs": 1000}
    workload = dict(workers=2, study_mb=16, pause_ms=0, concurrency=1, quiet=False, nofile=NOFILE)
    demo = Demo(config, env=env, **workload)
    control = Demo(config, env=dict(env, MEMCOUNT_FILE=str(counter) + ".control"), **workload)
    fds = [0]
    own_cpu = [{}, 0.0]  # ns of CPU memtrim's threads used under the clients, over seconds
    mem = []
    ok = True
    try:
        # the clients run on the last CPU; the workers on the others when there are
        # enough, else on all of them (with 2 CPUs: one worker of each host beside
        # the clients, alike for both)
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > 1:
            os.sched_setaffinity(0, {cpus[-1]})
        wcpus = cpus[:-1] if len(cpus) > workload["workers"] else cpus
        pinned = [pin_workers(d, wcpus, workload["workers"]) for d in (demo, control)]
        print(f"soak: workers pinned one per CPU, host {pinned[0]}, control {pinned[1]}")

        def sample():
            fds[0] = max([fds[0]] + [len(os.listdir(f"/proc/{d.proc.pid}/fd"))
                                     for d in (demo, control)])

        def sample_mem():
            sample()
            live, untracked = memtrim_bytes(counter)
            if live is not None:
                mem.append((live, untracked))

        time.sleep(3)  # warm-up: arenas, the store, the first samples
        clients = Clients(demo.port)
        clients_control = Clients(control.port)
        # The clients' own warm-up, not counted: their first slice read low in CI
        # (first measurements 0.947 and 0.911, each re-measurement of the same
        # hosts 1.017 and 0.992): the host's first connections and the clients'
        # start are not the steady state the check is about.
        for warm, each in ((clients, sample_mem), (clients_control, sample)):
            warm.start()
            window([demo, control], 7.5, each)
            warm.finish()

        def measure():
            """ROUNDS slices of SOAK_S / ROUNDS with the clients on each host, in the
            order A B B A A B B A ... (A on the host, B on the control), both hosts'
            studies counted over the same seconds. memtrim's CPU and heap are read on
            the host, under its clients (A slices)."""
            totals = [0, 0, 0, 0]  # host, control in A slices; host, control in B
            slices = []
            for i in range(2 * ROUNDS):
                on_host = (i + 1) // 2 % 2 == 0  # A B B A A B B A ...
                attacked = clients if on_host else clients_control
                each = sample_mem if on_host else sample  # the host's heap under its clients
                attacked.start()
                window([demo, control], SETTLE_S, each)  # 66 threads start, connect
                c0, t0 = memtrim_cpu_ns(demo.proc.pid), time.monotonic()
                h, c = window([demo, control], SOAK_S / ROUNDS, each)
                if on_host:
                    for name, ns in memtrim_cpu_ns(demo.proc.pid).items():
                        own_cpu[0][name] = own_cpu[0].get(name, 0) + ns - c0.get(name, 0)
                    own_cpu[1] += time.monotonic() - t0
                attacked.finish()
                k = 0 if on_host else 2
                totals[k] += h
                totals[k + 1] += c
                slices.append((on_host, h, c))
            print("soak: slices, host/control, (A) the clients on the host, (B) on the "
                  "control: " + ", ".join(f"{'A' if a else 'B'} {h}/{c}" for a, h, c in slices)
                  + f": ratio {throughput_ratio(*totals):.4f}, its standard error from the "
                  f"slices' spread {spread(slices):.4f}", flush=True)
            return totals

        # One measurement, judged once: no second chance when it falls short (a best of
        # two passes a host that is slower half the time).
        host_a, control_a, host_b, control_b = measure()
        ratio = throughput_ratio(host_a, control_a, host_b, control_b)
    finally:
        rc = demo.stop()
        rc = rc or control.stop()
    out = demo.output() + control.output()
    for k in ("requests", "cuts", "patches"):  # the control's clients count as the host's
        setattr(clients, k, getattr(clients, k) + getattr(clients_control, k))
    for st, n in clients_control.statuses.items():
        clients.statuses[st] = clients.statuses.get(st, 0) + n
    clients.errors += [f"control: {e}" for e in clients_control.errors]
    print(f"soak: {CLIENTS} pollers + trimmer + slowloris for {SOAK_S:.0f} s on each host; "
          f"{clients.requests} requests {dict(sorted(clients.statuses.items()))}; "
          f"{clients.cuts} slowloris connections cut; {clients.patches} hostile PATCHes refused; "
          f"fds at most {fds[0]}/{NOFILE}")
    print(f"soak: studies, host/control: the clients on the host {host_a}/{control_a}, on the "
          f"control {host_b}/{control_b} ({SOAK_S:.0f} s each): throughput ratio "
          f"{ratio:.4f} (must be >= {MIN_RATIO}); load {open('/proc/loadavg').read().split()[:3]}")
    pct = {k: v / 1e9 / own_cpu[1] * 100 for k, v in own_cpu[0].items()} if own_cpu[1] else {}
    own_pct = sum(pct.values())
    print(f"soak: memtrim's threads used {own_pct:.2f} % of one core under the clients "
          f"(must be <= {MAX_OWN_CPU_PCT}; the ratio above cannot see it): " +
          ", ".join(f"{k} {v:.2f} %" for k, v in sorted(pct.items(), key=lambda x: -x[1])))
    if own_pct <= 0:
        print("FAIL: no CPU reading of memtrim's threads (are they named memtrim-*, MHD-*?)")
        ok = False
    if own_pct > MAX_OWN_CPU_PCT:
        print(f"FAIL: memtrim's threads used {own_pct:.2f} % of one core under the clients")
        ok = False
    print("soak: memtrim's threads, KiB each second: " +
          " ".join(str(m[0] // 1024) for m in mem))
    if len(mem) >= 20:
        # medians of a third of the window each (after a sixth of warm-up): requests in
        # flight come and go, what stays is what grows
        def median(xs):
            xs = sorted(x[0] for x in xs)
            return xs[len(xs) // 2]
        n = len(mem)
        early, late = median(mem[n // 6:n // 2]), median(mem[-(n // 3):])
        print(f"soak: memtrim's threads hold {early / 1024:.0f} KiB after warm-up (median), "
              f"{late / 1024:.0f} KiB at the end (untracked allocations: {mem[-1][1]})")
        if late > early + max(256 * 1024, early * 0.10):
            print("FAIL: memtrim's own memory grew")
            ok = False
        if mem[-1][1] != 0:
            print("FAIL: some of memtrim's allocations were not tracked")
            ok = False
    else:
        print(f"FAIL: only {len(mem)} readings of memtrim's memory (is memcount.so loaded?)")
        ok = False
    if rc != 0:
        print(f"FAIL: the host exited {rc}")
        ok = False
    reports = [line for line in out.splitlines() if any(s in line for s in SANITIZER)]
    if reports:
        print("FAIL: sanitizer reports:\n" + "\n".join(reports[:20]))
        print(out[-5000:])
        ok = False
    if clients.errors:
        print(f"FAIL: {len(clients.errors)} errors, e.g. " + "; ".join(clients.errors[:10]))
        ok = False
    if clients.cuts == 0:
        print("FAIL: the slowloris client was never cut")
        ok = False
    if clients.patches == 0:
        print("FAIL: no hostile PATCH was sent")
        ok = False
    if fds[0] >= NOFILE:
        print("FAIL: the host reached its descriptor limit")
        ok = False
    if ratio < MIN_RATIO:
        print(f"FAIL: the host's throughput fell to {ratio:.4f} of the baseline")
        ok = False
    counter.unlink(missing_ok=True)
    Path(str(counter) + ".control").unlink(missing_ok=True)
    print("soak: " + ("passed" if ok else "FAILED") + f" ({BUILD})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
