"""Survival cells (issue 32 item 3, docs/groups.md): a group of workers under one memory
limit, proven by a fixed number of counted runs, never tuned.

A cell is: one control (nothing trims) that the kernel must OOM-kill (control()), and a
fixed number of interleaved pairs of runs (pairs()), malloc_trim after each study
("trim-after") against memtrim's group ("group"), the order within a pair alternating
(trim-after first in even pairs). Every run
counts: no run is left out, none is run again, no median. Each run has its own cgroup and
its own directory (so its own database). The cell holds when the group's runs finished, in
total, at least as many workers as malloc_trim's.

How a worker ended is checked in every run: it finished (exit 0), or the kernel's OOM killer
ended it (SIGKILL, and the cgroup's oom_kill counter, memory.oom_control on v1 and
memory.events on v2, counts exactly as many kills as there are such workers). Anything else
(another signal, another exit code, a SIGKILL the counter does not account for) fails the
test at once.

A runner is run(mode, cg, index) -> (statuses, run_dir): mode "none", "trim-after" or
"group"; statuses one ("exit", code) or ("signal", number) per worker."""
import signal

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


def pairs(run, cgroup, limit_bytes, workers, count, label, check_group=None):
    """The cell's count interleaved pairs (see the top of this file). check_group(run_dir,
    finished) checks each group run further (its store, its log). Returns
    {"trim-after": [...], "group": [...]}, the workers each run finished."""
    done = {m: [] for m in MODES}
    for k in range(count):
        for mode in (MODES if k % 2 == 0 else MODES[::-1]):
            cg = cgroup(limit_bytes)
            statuses, run_dir = run(mode, cg, k)
            n = judge(f"{label}, {mode} run {k + 1}", statuses, cg)
            done[mode].append(n)
            load = open("/proc/loadavg").read().split()[0]
            print(f"{label}: pair {k + 1} {mode}: {n}/{workers} finished, oom_kill "
                  f"{cg.oom_kills()}, peak {(cg.peak_bytes() or 0) >> 20} MB, load {load}")
            if mode == "group" and check_group:
                check_group(run_dir, n)
    print(f"{label}: group {done['group']} (total {sum(done['group'])}), malloc_trim after "
          f"each study {done['trim-after']} (total {sum(done['trim-after'])}), "
          f"of {count} x {workers}")
    assert sum(done["group"]) >= sum(done["trim-after"]), \
        f"{label}: the group finished fewer workers than malloc_trim after each study: {done}"
    return done
