/*
 * policy.c - the periodic and burst decision (see policy.h): pure functions,
 * called on the housekeeper thread; no state of their own, no locks.
 */
#include "policy.h"
#include "common.h"
#include "control.h"
#include "cost.h"

/* TrimIntervalSeconds, lengthened by the cost gap factor, in ns. */
static int64_t interval_ns(const struct mt_config *c, double gap)
{
    return (int64_t)(c->trim_interval_seconds * gap * MT_SEC);
}

void policy_reset(const struct mt_config *c, struct policy_state *s, int64_t now)
{
    s->next_periodic = s->base_periodic = now + interval_ns(c, 1.0);
}

int policy_periodic_due(const struct mt_config *c, const struct policy_state *s, int64_t now)
{
    return c->trim_interval_seconds > 0 &&
           (now >= s->next_periodic || now >= s->base_periodic);
}

/*
 * The adaptive gap and the trim budget trade RSS for the host's time: memory
 * that comes straight back is left resident. They may hold back at most half
 * of RSS. A host whose RSS is mostly free heap is the host memtrim exists for
 * (glibc's arenas each keeping a past burst): there giving the memory back
 * wins, and the gap factor counts as 1 (a busy host still defers, bounded) --
 * unless what the last trim released came back at once (more than half within
 * about half a second, cost_hk.c) and the host is still at work: memory a
 * working host re-uses that fast was never free for anyone else, and returning
 * it only costs the host page faults. Once the host is quiet (under a quarter
 * of a CPU), its free memory is idle again and the rule holds as before.
 */
static int mostly_free(const struct policy_readings *r)
{
    return r->heap_known && r->releasable > r->rss / 2 && (!r->back_at_once || r->host_quiet);
}

static double gap_factor(const struct policy_readings *r)
{
    return mostly_free(r) ? 1.0 : r->gap_factor;
}

struct policy_decision policy_decide(const struct mt_config *c, const struct policy_state *s,
                                     const struct policy_readings *r, int64_t now)
{
    struct policy_decision d = {.want = POLICY_NOTHING, .trigger = MT_TRIGGER_PERIODIC,
                                .mostly_free = mostly_free(r)};

    /* 1. Burst: much releasable memory; trim now rather than at the next interval. */
    if (c->trim_releasable_trigger_bytes > 0 && r->heap_known && !r->suspended &&
        now - s->last_burst >= (int64_t)(c->trim_min_gap_seconds * gap_factor(r) * MT_SEC)) {
        uint64_t trigger = (uint64_t)c->trim_releasable_trigger_bytes;
        if (trigger < r->rss / 10) /* or 10 % of RSS, whichever is larger */
            trigger = r->rss / 10;
        if (r->releasable >= trigger) {
            d.want = POLICY_TRIM;
            d.trigger = MT_TRIGGER_BURST;
            return d;
        }
    }
    /* 2. Periodic, skipped when not worth it. The gap factor lengthened the interval
     * while the host worked; a heap found mostly free once the base interval has passed
     * is decided on then (the host went quiet since: its free memory is idle now), not
     * up to TrimGapMaxFactor intervals later. */
    if (!policy_periodic_due(c, s, now))
        return d;
    if (now < s->next_periodic && !d.mostly_free) {
        d.looked = 1;
        return d;
    }
    d.want = POLICY_SKIP;
    if (r->suspended)
        d.skip_reason = MT_SKIP_SUSPENDED;
    else if (!r->heap_known)
        d.skip_reason = MT_SKIP_NO_HEAP_STATS;
    else if (r->releasable < (uint64_t)c->trim_min_releasable_bytes)
        d.skip_reason = MT_SKIP_BELOW_MIN_RELEASABLE;
    else
        d.want = POLICY_TRIM;
    return d;
}

/* The next periodic decision: one interval on, lengthened by the gap factor; the base
 * interval's look then too. */
static void reschedule(const struct mt_config *c, struct policy_state *s,
                       const struct policy_readings *r, int64_t now)
{
    s->next_periodic = now + interval_ns(c, gap_factor(r));
    s->base_periodic = now + interval_ns(c, 1.0);
}

void policy_update(const struct mt_config *c, struct policy_state *s,
                   const struct policy_decision *d, const struct policy_outcome *out,
                   const struct policy_readings *r, int64_t now)
{
    int gate = d->want == POLICY_TRIM && out ? out->gate : COST_GATE_RUN;
    if (d->looked) /* the next look one base interval on; the lengthened decision stays */
        s->base_periodic = now + interval_ns(c, 1.0);
    if (d->want == POLICY_NOTHING)
        return;
    if (d->trigger == MT_TRIGGER_BURST) {
        /* Held back (budget, busy host): nothing moves; the periodic trim waits with it. */
        if (gate != COST_GATE_RUN)
            return;
        if (out && out->ran)
            s->last_burst = now;
        reschedule(c, s, r, now);
        return;
    }
    /* A busy host keeps the periodic trim due: it is asked again next tick. */
    if (gate == COST_GATE_WAIT)
        return;
    reschedule(c, s, r, now);
    /* Skipped for the budget: the trim was due, only the budget's pause held it. It is asked
     * again when the pause ends, not a whole interval on (up to TrimGapMaxFactor of them:
     * 960 s at the defaults while releases came back). */
    if (gate == COST_GATE_SKIP && out && out->budget_ns > now &&
        out->budget_ns < s->next_periodic && !mt_control("eng-budget-whole-interval"))
        s->next_periodic = out->budget_ns;
}
