/*
 * decide.c - the agent's side of the pressure decision over one cgroup's members, processes
 * reached from outside (docs/agent.md, "Under pressure"). The decision itself is the one
 * pressure engine's (core/pressure/: group_pressure_pick over outside members, outside.h):
 * here are the aim it is handed (the lower of the limit and memory.high, so that the kernel
 * never throttles), the readings of each member, and the opt-in idle pick outside the zone.
 * Pure functions of their arguments (no clock, no file); any thread.
 */
#include "agent_int.h"

#include <stdlib.h>

#include "outside.h"

int64_t agent_aim(const struct agent_cgroup *cg)
{
    if (cg->limit > 0 && cg->high > 0)
        return cg->limit < cg->high ? cg->limit : cg->high;
    return cg->limit > 0 ? cg->limit : cg->high > 0 ? cg->high : -1;
}

int agent_in_zone(int64_t usage, int64_t aim, double ratio)
{
    return outside_in_zone(usage, aim, ratio);
}

int64_t agent_expected(const struct agent_proc *p)
{
    if (p->anon < 0)
        return 0;
    if (p->anon_after_trim < 0)
        return p->anon;
    return p->anon > p->anon_after_trim ? p->anon - p->anon_after_trim : 0;
}

/* Left alone for good: unreleasable, denied, its own memtrim, refused by the kernel's rules
 * (a passing refusal, no safe thread or a timeout, keeps it a member). */
static int left_alone(const struct agent_proc *p)
{
    return p->reason != AR_NONE && p->reason != AR_NO_THREAD && p->reason != AR_TIMEOUT &&
           p->reason != AR_FAILED;
}

long agent_decide(const struct agent_cgroup *cg, int64_t now_ns, double ratio,
                  uint64_t min_releasable, int *rule)
{
    *rule = GROUP_RULE_NONE;
    if (cg->nprocs == 0 || cg->nprocs > (size_t)INT32_MAX)
        return -1;
    struct group_candidate *c = malloc(cg->nprocs * sizeof *c);
    if (!c)
        return -1;
    for (size_t i = 0; i < cg->nprocs; i++) {
        const struct agent_proc *p = &cg->procs[i];
        struct outside_reading r = {
            .anon = p->anon > 0 ? (uint64_t)p->anon : 0,
            .anon_after_trim = p->anon_after_trim > 0 ? (uint64_t)p->anon_after_trim : 0,
            .last_trim_ns = p->last_trim_ns,
            /* one that cannot give the least worth a trim is no candidate: never trimmed, the
             * decision would count all its memory (a container's pid 1 shell, its unshare) */
            .busy = p->in_flight || left_alone(p) || p->anon < 0 ||
                    agent_expected(p) < (int64_t)min_releasable,
        };
        outside_candidate(&c[i], &r);
    }
    struct group_pressure_in in;
    outside_input(&in, now_ns, cg->usage, cg->base_usage, agent_aim(cg), ratio, min_releasable);
    int pick = group_pressure_pick(&in, c, (int)cg->nprocs, rule);
    free(c);
    return pick;
}

long agent_pick_idle(const struct agent_proc *procs, size_t n, int64_t now_ns, int64_t gap_ns,
                     int64_t min_bytes)
{
    long best = -1;
    int64_t best_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct agent_proc *p = &procs[i];
        if (left_alone(p) || p->in_flight || (p->last_trim_ns && now_ns - p->last_trim_ns < gap_ns))
            continue;
        int64_t e = agent_expected(p);
        if (e < min_bytes || (best >= 0 && e <= best_bytes))
            continue;
        best = (long)i;
        best_bytes = e;
    }
    return best;
}
