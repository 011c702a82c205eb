"""Survival cells (issue 32 item 3, docs/groups.md): a group of workers under one memory
limit, proven by a fixed number of counted runs, never tuned.

A cell is: one control (nothing trims) that the kernel must OOM-kill (control()), and a
fixed number of interleaved pairs of runs (pairs()), malloc_trim after each study
("trim-after") against memtrim's group ("group"), the order within a pair alternating
(trim-after first in even pairs). Every run
counts: no run is left out, none is run again, no median. Each run has its own cgroup and
its own directory (so its own database).

Each mode has a floor. malloc_trim after each study is the reference: a pair in which it did
not finish every worker is void (the machine could not hold the reference: nothing to compare
with), counted and printed as void, never as passed. In every counted pair the group must
finish every worker too. A pair in which both modes lost every worker fails the cell at once,
void or not. The cell holds when at least half its pairs (rounded up) are counted and the
group finished every worker in each; with fewer counted pairs the cell is void: a skip
(pytest.skip, "void cell: ..."), which fails the stage unless tests/skips.txt lists it with its
measured reason. The load average (1 min) before and after each pair is printed beside it.

How a worker ended is checked in every run: it finished (exit 0), or the kernel's OOM killer
ended it (SIGKILL, and the cgroup's oom_kill counter, memory.oom_control on v1 and
memory.events on v2, counts exactly as many kills as there are such workers). Anything else
(another signal, another exit code, a SIGKILL the counter does not account for) fails the
test at once.

A runner is run(mode, cg, index) -> (statuses, run_dir): mode "none", "trim-after" or
"group"; statuses one ("exit", code) or ("signal", number) per worker."""
import signal

import pytest

MODES = ("trim-after", "group")


def judge(what, statuses, cg):
    """The workers that finished; fails unless every other one was OOM-killed."""
    kills = cg.oom_kills()
    assert kills is not None, f"{what}: {cg.path} has no oom_kill count"
    other = [s for s in statuses if s != ("exit", 0) and s != ("signal", signal.SIGKILL)]
    assert not other, f"{what}: workers ended by something else than the OOM killer: {statuses}"
    sigkilled = sum(1 for s in statuses if s == ("signal", signal.SIGKILL))
    assert sigkilled == kills, \
        f"{what}: {sigkilled} workers ended by SIGKILL, the cgroup counts {kills} OOM kills"
    return sum(1 for s in statuses if s == ("exit", 0))


def control(run, cgroup, limit_bytes, workers, label):
    """The cell's control: nothing trims; the kernel must OOM-kill workers (the cgroup's
    oom_kill count and each unfinished worker's SIGKILL), else the cell proves nothing."""
    cg = cgroup(limit_bytes)
    statuses, _ = run("none", cg, 0)
    finished = judge(f"{label}, control", statuses, cg)
    print(f"\n{label}: control (no memtrim) finished {finished}/{workers}, "
          f"oom_kill {cg.oom_kills()}, peak {(cg.peak_bytes() or 0) >> 20} MB")
    assert finished < workers and cg.oom_kills() >= 1, \
        f"{label}: the control was not OOM-killed ({statuses}): the cell proves nothing"
    return finished


def load_average():
    return float(open("/proc/loadavg").read().split()[0])


def pairs(run, cgroup, limit_bytes, workers, count, label, check_group=None):
    """The cell's count interleaved pairs (see the top of this file). check_group(run_dir,
    finished) checks each group run further (its store, its log). Returns
    {"trim-after": [...], "group": [...], "counted": [pair indexes], "void": [...],
    "load": [(before, after) a pair]}."""
    done = {m: [] for m in MODES}
    done.update(counted=[], void=[], load=[])
    for k in range(count):
        before = load_average()
        for mode in (MODES if k % 2 == 0 else MODES[::-1]):
            cg = cgroup(limit_bytes)
            statuses, run_dir = run(mode, cg, k)
            n = judge(f"{label}, {mode} run {k + 1}", statuses, cg)
            done[mode].append(n)
            print(f"{label}: pair {k + 1} {mode}: {n}/{workers} finished, oom_kill "
                  f"{cg.oom_kills()}, peak {(cg.peak_bytes() or 0) >> 20} MB, "
                  f"load {load_average():.2f}")
            if mode == "group" and check_group:
                check_group(run_dir, n)
        load = (before, load_average())
        done["load"].append(load)
        ref, group = done["trim-after"][k], done["group"][k]
        counted = ref == workers
        (done["counted"] if counted else done["void"]).append(k + 1)
        print(f"{label}: pair {k + 1}: group {group}/{workers}, malloc_trim after each study "
              f"{ref}/{workers}: {'counted' if counted else 'VOID (the reference lost workers)'}"
              f", load {load[0]:.2f} -> {load[1]:.2f}")
        assert ref or group, (f"{label}: pair {k + 1}: both modes lost every worker "
                              f"(load {load[0]:.2f} -> {load[1]:.2f})")
        assert not counted or group == workers, (
            f"{label}: pair {k + 1}: the group finished {group} of {workers} workers where "
            f"malloc_trim after each study finished all (load {load[0]:.2f} -> {load[1]:.2f})")
    need = (count + 1) // 2
    loads = ", ".join(f"{a:.1f}-{b:.1f}" for a, b in done["load"])
    print(f"{label}: group {done['group']}, malloc_trim after each study {done['trim-after']}, "
          f"of {count} x {workers}; counted pairs {done['counted']}, void {done['void']}; "
          f"load per pair {loads}")
    if len(done["counted"]) < need:
        pytest.skip(f"void cell: {label}: {len(done['counted'])} of {count} pairs counted "
                    f"(need {need}), the reference lost workers in pairs {done['void']}; "
                    f"load per pair {loads}")
    return done
