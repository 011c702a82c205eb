/*
 * decide.c - the agent's side of the pressure decision over one cgroup's members, processes
 * reached from outside (docs/agent.md, "Under pressure"). The decision itself is the one
 * pressure engine's (core/pressure/: group_pressure_pick over outside members, outside.h):
 * here are the aim it is handed (the lower of the limit and memory.high, so that the kernel
 * never throttles), the readings of each member, a trim's time as the decision reads it (its
 * start) and when a member trimmed lately may be picked again (a refusal for want of room
 * held until the cgroup has room), each member's own budget of trims' time inside it, the
 * trims' CPU budget, and the opt-in idle pick outside the zone. Pure functions of their arguments (no clock, no file);
 * any thread.
 */
#include "agent_int.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "control.h"
#include "outside.h"
#include "target.h"

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
 * (a passing refusal, no safe thread, a timeout or no room in its cgroup for the call, keeps
 * it a member). */
static int left_alone(const struct agent_proc *p)
{
    return p->reason != AR_NONE && p->reason != AR_NO_THREAD && p->reason != AR_TIMEOUT &&
           p->reason != AR_FAILED && p->reason != AR_NO_ROOM;
}

int64_t agent_room(const struct agent_cgroup *cg)
{
    return target_room_of(agent_aim(cg), cg->usage, cg->reclaimable);
}

int agent_held_no_room(const struct agent_cgroup *cg, const struct agent_proc *p,
                       int64_t now_ns)
{
    /* Refused for want of room, it is asked again once its cgroup (one of the levels the
     * command reads) has room for a call as the agent reads it, its clean page cache
     * counted as the command counts it: asked every retrim gap at its limit, each ask
     * forked and ran the command for one more refusal, 40 a second. Where the command saw
     * less than the agent read (its usage grew meanwhile, or on v2 the process sits in a
     * child whose own cache is less than its limited cgroup's), it waits a while instead. */
    if (p->reason != AR_NO_ROOM || mt_control("agent-no-room-asked-again"))
        return 0;
    if (p->no_room_read >= (int64_t)CLI_CALL_CHARGE && now_ns >= p->no_room_ns &&
        now_ns - p->no_room_ns < AGENT_NO_ROOM_HOLD_NS)
        return 1;
    int64_t room = agent_room(cg);
    if (room < 0)
        return 0; /* unknown: the retrim gap alone */
    return room < (int64_t)CLI_CALL_CHARGE;
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
            .busy = p->in_flight || left_alone(p) || agent_held_no_room(cg, p, now_ns) ||
                    p->anon < 0 ||
                    agent_inside_left(p, now_ns) <= 0 ||
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

void agent_trimmed(struct agent_proc *p, int64_t started_ns, int64_t answered_ns)
{
    /* The decision's retrim gap runs from a trim's start (outside.h). From its answer, the
     * gap came after the command's own 10-50 ms, and the next look at the zone's 20 ms
     * poll: puma growing 1.5 MB a millisecond in its burst was trimmed every 60-160 ms, and
     * reached its limit between two trims (its next trim refused for want of room). */
    p->last_trim_ns = mt_control("agent-retrim-from-end") ? answered_ns : started_ns;
}

static double seconds_ns(double s)
{
    return s > 0 && s < 3600 ? s * 1e9 : 0; /* (a NaN compares false) */
}

int64_t agent_in_target_ns(double stopped_s, double threads_s)
{
    return (int64_t)(seconds_ns(stopped_s) + seconds_ns(threads_s) + 0.5); /* (nearest ns) */
}

int64_t agent_answer_inside_ns(const char *code, int answered, double stopped_s,
                               double threads_s, int64_t released, int64_t started_ns,
                               int64_t ended_ns)
{
    /* A trim that gave back at least AGENT_INSIDE_PAID_BYTES paid for its time with what it
     * gave (the zone: the kernel's OOM kill costs the process more than any stall); the
     * control charges it too, and puma in 300 MiB, whose first trim from outside spent
     * 863 ms inside it on a loaded machine, was held after 7 trims and OOM-killed */
    if (answered && !code && released >= AGENT_INSIDE_PAID_BYTES &&
        !mt_control("agent-inside-charged-when-paid"))
        return 0;
    /* the control: a call past its deadline counted as the answer's figures (none: 0), so
     * the longest calls were free and the member asked again at the retrim gap */
    int whole = (!answered || (code && !strcmp(code, "timeout"))) &&
                !mt_control("agent-timeout-uncharged");
    if (!whole)
        return agent_in_target_ns(stopped_s, threads_s);
    return ended_ns > started_ns ? ended_ns - started_ns : 0;
}

double agent_inside_left(const struct agent_proc *p, int64_t now_ns)
{
    /* the control: no bound, each member asked at the retrim gap however long its trims
     * stay inside it (back to back on one whose trims outlast the gap) */
    if (!p->inside_at_ns || mt_control("agent-stall-unbounded"))
        return AGENT_INSIDE_CAP_NS;
    double left = p->inside_ns;
    if (now_ns > p->inside_at_ns)
        left += (double)(now_ns - p->inside_at_ns) * AGENT_INSIDE_SHARE;
    return left < AGENT_INSIDE_CAP_NS ? left : AGENT_INSIDE_CAP_NS;
}

void agent_inside_charge(struct agent_proc *p, int64_t now_ns, int64_t in_target_ns)
{
    p->last_in_target_ns = in_target_ns;
    p->inside_charged_ns += in_target_ns > 0 ? in_target_ns : 0;
    p->inside_ns = agent_inside_left(p, now_ns) - (double)in_target_ns;
    p->inside_at_ns = now_ns > 0 ? now_ns : 1;
}

int64_t agent_next_due(const struct agent_cgroup *cg, int64_t now_ns)
{
    int64_t due = INT64_MAX;
    if (mt_control("agent-retrim-from-end")) /* the defect: the next poll, whenever it comes */
        return due;
    for (size_t i = 0; i < cg->nprocs; i++) {
        const struct agent_proc *p = &cg->procs[i];
        if (p->in_flight || left_alone(p) || agent_held_no_room(cg, p, now_ns) || !p->last_trim_ns)
            continue; /* (held for room: the zone's poll reads the room again) */
        int64_t at = p->last_trim_ns + outside_retrim_ns();
        double left = agent_inside_left(p, now_ns);
        if (left <= 0) { /* its budget inside it refills past 0 then */
            int64_t refill = now_ns + (int64_t)(-left / AGENT_INSIDE_SHARE) + 1;
            at = refill > at ? refill : at;
        }
        if (at > now_ns && at < due)
            due = at;
    }
    return due;
}

/* What 10 s of CpuBudgetPercent earn: the bucket's size (1 s of CPU at the default 10 %). */
static double budget_cap(double percent)
{
    return 1e9 * (percent / 100.0) * 10;
}

double agent_budget_start(double percent)
{
    /* Full, as a token bucket starts: it bounds the trims' CPU over time, and an agent
     * (re)started on a node under pressure may spend its burst at once. Empty, the agent
     * started beside puma's burst had earned 0.1-0.2 s of CPU by then: after 15-25 trims of
     * 7-9 ms it trimmed every 90 ms, the budget's pace, and puma outgrew it. */
    return mt_control("agent-budget-starts-empty") ? 0 : budget_cap(percent);
}

int agent_budget_take(double *budget_ns, int64_t *at_ns, int64_t now_ns, double percent)
{
    *budget_ns += (double)(now_ns - *at_ns) * (percent / 100.0);
    *at_ns = now_ns;
    if (*budget_ns > budget_cap(percent))
        *budget_ns = budget_cap(percent);
    return *budget_ns > 0;
}

long agent_pick_idle(const struct agent_proc *procs, size_t n, int64_t now_ns, int64_t gap_ns,
                     int64_t min_bytes)
{
    long best = -1;
    int64_t best_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct agent_proc *p = &procs[i];
        if (left_alone(p) || p->in_flight || agent_inside_left(p, now_ns) <= 0 ||
            (p->last_trim_ns && now_ns - p->last_trim_ns < gap_ns))
            continue; /* (its budget inside it binds idle trims too: IdleIntervalSeconds may be 1) */
        int64_t e = agent_expected(p);
        if (e < min_bytes || (best >= 0 && e <= best_bytes))
            continue;
        best = (long)i;
        best_bytes = e;
    }
    return best;
}
