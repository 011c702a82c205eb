#!/usr/bin/python3
"""The window left when the command and its tracer are both killed (docs/command.md): the
taken thread, in the page's code, restores itself after its 250 ms wait. A signal that comes
during that wait makes its read return EINTR, the handler run at the read's return, as the
kernel would; the old restore (MEMTRIM_CONTROL=cmd-restore-pending with build-controls) ran
the handler in the page's code, then restarted the call even without SA_RESTART: a lost
wake-up. tests/unit/cli_hazard.c's wakeup target (a reader with a
handler without SA_RESTART, signalled every 200 us); after one trim (the page exists), RUNS
trims in each of which the tracer is stopped, the command SIGKILLed, then the tracer, as soon as the reader is
seen in the page's ppoll. Counts the runs so caught, the wake-ups lost, and how long the
reader stayed away (from the kill until it is back in its read).

usage: bench/cli/both_killed.py BUILD_DIR [--runs N]
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import time


def main():
    build = sys.argv[1]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 20
    p = subprocess.Popen([f"{build}/memtrim-cli-hazard", "wakeup"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    tid = int(p.stdout.readline().split()[1])

    def report():
        p.stdin.write("report\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    sysfile = os.open(f"/proc/{p.pid}/task/{tid}/syscall", os.O_RDONLY)
    status = f"/proc/{p.pid}/task/{tid}/status"
    try:
        assert subprocess.run([f"{build}/memtrim", "trim", str(p.pid)],
                              capture_output=True).returncode == 0
        caught, away, lost0 = 0, [], report()["lost"]
        for _ in range(runs):
            call = subprocess.Popen([f"{build}/memtrim", "trim", str(p.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            hit = False
            while call.poll() is None:
                if os.pread(sysfile, 64, 0).startswith(b"271 "):  # the page's ppoll
                    tracer = [int(l.split()[1]) for l in open(status)
                              if l.startswith("TracerPid:")][0]
                    if not tracer:
                        continue
                    for pid, sig in ((tracer, signal.SIGSTOP), (call.pid, signal.SIGKILL),
                                     (tracer, signal.SIGKILL)):  # the tracer frozen first,
                        with contextlib.suppress(ProcessLookupError):  # then the client (no
                            os.kill(pid, sig)  # rescue), then the tracer
                    t0, hit = time.monotonic(), True
                    break
            call.wait()
            if hit:
                caught += 1
                while os.pread(sysfile, 64, 0).startswith(b"271 "):
                    time.sleep(0.001)
                away.append(time.monotonic() - t0)
        lost = report()["lost"] - lost0
    finally:
        os.close(sysfile)
        p.kill()
        p.wait()
    away.sort()
    selfr = sum(a >= 0.2 for a in away)  # the others were given back before the kills landed
    print(f"{runs} trims, the tracer and the command killed in the page's wait in {caught}, "
          f"{selfr} of them self-restored (the reader away 0.2 s or more): {lost} wake-ups lost; "
          f"the reader away {away[len(away) // 2] * 1e3:.0f} ms (median), "
          f"{away[-1] * 1e3:.0f} ms at most" if away else f"{runs} trims, none caught")


main()
