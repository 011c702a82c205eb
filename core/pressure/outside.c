/*
 * outside.c - a process reached from outside as a member of the one pressure decision
 * (outside.h): its readings mapped onto group_pressure_pick's candidate and input. Pure
 * functions of their arguments: any thread (the agent's loop thread calls them), no locks.
 */
#include "outside.h"

#include "control.h"

#include <string.h>

void outside_candidate(struct group_candidate *c, const struct outside_reading *r)
{
    memset(c, 0, sizeof *c);
    c->rss = r->anon;                     /* anonymous memory: what the heap lives in */
    c->rss_after_trim = r->anon_after_trim; /* 0 before its first: all of it may be free */
    c->last_trim_ns = r->last_trim_ns;
    c->busy = r->busy;
}

void outside_input(struct group_pressure_in *in, int64_t now_ns, int64_t usage, int64_t base_usage,
                   int64_t aim, double ratio, uint64_t min_releasable)
{
    memset(in, 0, sizeof *in);
    in->now_ns = now_ns;
    in->usage = usage;
    in->base_usage = base_usage;
    in->limit = aim;
    in->ratio = ratio;
    in->min_releasable = min_releasable;
    in->retrim_ns = outside_retrim_ns();
    /* no burst, rise or kept: those read heap estimates an outside member never gives */
}

int64_t outside_retrim_ns(void)
{
    /* the control: the group's gap, 50 ms, as for a worker that said nothing */
    return mt_control("agent-retrim-gap-50") ? GROUP_RETRIM_STALE_NS : 25LL * 1000 * 1000;
}

int outside_in_zone(int64_t usage, int64_t aim, double ratio)
{
    return aim > 0 && usage >= 0 && ratio > 0 && (uint64_t)usage >= pressure_zone_floor(aim, ratio);
}
