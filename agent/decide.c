/*
 * decide.c - the pressure decision over one cgroup's members, processes reached from
 * outside (docs/agent.md, "Under pressure"): the aim (the lower of the limit and memory.high,
 * so that the kernel never throttles), the zone (PressureRatio of the aim), and which member
 * goes first: the one whose heap grew most since its last trim (all of its anonymous memory
 * before its first), never one refused or left alone, never one trimmed within the gap.
 * Pure functions of their arguments (no clock, no file), written to be adopted by the one
 * pressure engine (core/pressure/, issue 38) as its "outside" member's rules; any thread.
 */
#include "agent_int.h"

int64_t agent_aim(const struct agent_cgroup *cg)
{
    if (cg->limit > 0 && cg->high > 0)
        return cg->limit < cg->high ? cg->limit : cg->high;
    return cg->limit > 0 ? cg->limit : cg->high > 0 ? cg->high : -1;
}

int agent_in_zone(int64_t usage, int64_t aim, double ratio)
{
    return aim > 0 && usage >= 0 && (double)usage >= ratio * (double)aim;
}

int64_t agent_expected(const struct agent_proc *p)
{
    if (p->anon < 0)
        return 0;
    if (p->anon_after_trim < 0)
        return p->anon;
    return p->anon > p->anon_after_trim ? p->anon - p->anon_after_trim : 0;
}

long agent_pick(const struct agent_proc *procs, size_t n, int64_t now_ns, int64_t gap_ns,
                int64_t min_bytes)
{
    long best = -1;
    int64_t best_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct agent_proc *p = &procs[i];
        if (p->reason != AR_NONE && !(p->reason == AR_NO_THREAD || p->reason == AR_TIMEOUT ||
                                      p->reason == AR_FAILED))
            continue; /* left alone for good: unreleasable, denied, its own memtrim */
        if (p->last_trim_ns && now_ns - p->last_trim_ns < gap_ns)
            continue;
        int64_t e = agent_expected(p);
        if (e < min_bytes || (best >= 0 && e <= best_bytes))
            continue;
        best = (long)i;
        best_bytes = e;
    }
    return best;
}
