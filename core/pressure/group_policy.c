/*
 * group_policy.c - the pure part of a worker group's pressure decision:
 * which member trims next. No locks, no threads, no clock of its own: the
 * group thread (core/group/group_pressure.c) hands it the readings; tests/unit/test_group.c
 * drives it directly.
 *
 * Why the group decides on the cgroup's usage and not on each member's RSS:
 * a worker that freed what it studied keeps the pages resident, its RSS no
 * longer grows, and its own pressure rule never fires, while the others
 * under the same limit need that memory. So the group looks at the shared
 * usage and at what each member holds free, and the cost rules of a
 * member's own policy ("came back at once", the budget, the gap) do not
 * apply: the memory that comes back is another member's.
 */
#include "group_policy.h"
#include "pressure_policy.h"

int64_t group_growth_step(int64_t limit)
{
    int64_t step = limit / 32;
    return step > GROUP_GROWTH_MIN ? step : GROUP_GROWTH_MIN;
}

/* May c be asked now? urgent: at the line or after growth (not only the estimate rule). */
static int candidate(const struct group_pressure_in *in, const struct group_candidate *c,
                     int urgent)
{
    if (c->busy)
        return 0;
    /* it said what it holds, lately and after its last trim */
    if (c->estimate_fresh && c->releasable >= in->min_releasable)
        return 1;
    if (!urgent)
        return 0;
    int64_t since = c->last_trim_ns ? in->now_ns - c->last_trim_ns : INT64_MAX;
    /* ...little, but its RSS grew since that reading: what it grew by may be free now */
    if (c->estimate_fresh)
        return since >= GROUP_RETRIM_STALE_NS && c->rss_since_estimate >= in->min_releasable;
    /* Said nothing lately: it may hold what it grew by since its last trim. */
    return since >= GROUP_RETRIM_STALE_NS &&
           (c->rss_after_trim == 0 || c->rss >= c->rss_after_trim + in->min_releasable);
}

/* What c is thought to hold free: its estimate once read after its last trim (and what
 * its RSS grew by since that reading), else what its RSS grew by since the trim. */
static uint64_t held(const struct group_candidate *c)
{
    if (c->estimate_fresh || c->estimate_after_trim)
        return c->releasable + c->rss_since_estimate;
    return c->rss > c->rss_after_trim ? c->rss - c->rss_after_trim : 0;
}

static void q_expire(struct group_rise_q *q, int64_t since)
{
    while (q->n > 0 && q->t[q->head] < since) {
        q->head = (q->head + 1) % GROUP_RISE_SLOTS;
        q->n--;
    }
}

/* Push (t, v) at the back after dropping the entries behind which v makes useless:
 * those >= v in the increasing queue (keep_greater 0), <= v in the decreasing one. */
static void q_push(struct group_rise_q *q, int64_t t, int64_t v, int keep_greater)
{
    while (q->n > 0) {
        int back = (q->head + q->n - 1) % GROUP_RISE_SLOTS;
        if (keep_greater ? q->v[back] > v : q->v[back] < v)
            break;
        q->n--;
    }
    if (q->n == GROUP_RISE_SLOTS) { /* full: the oldest goes */
        q->head = (q->head + 1) % GROUP_RISE_SLOTS;
        q->n--;
    }
    int at = (q->head + q->n) % GROUP_RISE_SLOTS;
    q->t[at] = t;
    q->v[at] = v;
    q->n++;
}

void group_rise_note(struct group_rise *r, int64_t now, int64_t usage)
{
    if (usage < 0)
        return;
    int64_t since = now - GROUP_RISE_WINDOW_NS;
    q_expire(&r->low, since);
    int64_t climb = r->low.n > 0 && usage > r->low.v[r->low.head] ? usage - r->low.v[r->low.head]
                                                                   : 0;
    q_push(&r->low, now, usage, 0);
    q_expire(&r->climb, since);
    q_push(&r->climb, now, climb, 1);
}

uint64_t group_rise(struct group_rise *r, int64_t now)
{
    q_expire(&r->climb, now - GROUP_RISE_WINDOW_NS);
    return r->climb.n > 0 ? (uint64_t)r->climb.v[r->climb.head] : 0;
}

uint64_t group_kept(int64_t usage, uint64_t rss_sum, uint64_t peak_sum)
{
    if (usage < 0)
        return 0;
    uint64_t u = (uint64_t)usage, twice = rss_sum > u ? rss_sum - u : 0;
    uint64_t kept = peak_sum > twice ? peak_sum - twice : 0;
    return kept > u ? kept : u;
}

int group_ahead(const struct group_pressure_in *in)
{
    if (in->limit <= 0 || in->usage < 0 || in->ratio <= 0)
        return 0;
    uint64_t floor = pressure_zone_floor(in->limit, in->ratio);
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    /* Inside the zone kept >= usage >= floor always: there the members at their peaks
     * must reach the line (a worker that kept what it freed would reuse it, and its
     * next request would not climb: trimmed, it faults it back in, a climb that keeps
     * the group ahead for ever). */
    uint64_t peaks_reach = (uint64_t)in->usage >= floor ? line : floor;
    return in->rise >= (uint64_t)group_growth_step(in->limit) &&
           in->rise >= in->min_releasable && (uint64_t)in->usage + in->rise >= floor &&
           in->kept >= peaks_reach;
}

int group_pressure_pick(const struct group_pressure_in *in, const struct group_candidate *c,
                        int n, int *rule)
{
    *rule = GROUP_RULE_NONE;
    if (in->limit <= 0 || in->usage < 0 || in->ratio <= 0 || n <= 0)
        return -1;
    uint64_t floor = pressure_zone_floor(in->limit, in->ratio);
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    uint64_t usage = (uint64_t)in->usage;
    int ahead = group_ahead(in);
    if (usage < floor && !ahead)
        return -1;
    int at_line = usage >= line;
    int grew = usage >= floor && in->base_usage >= 0 &&
               in->usage - in->base_usage >= group_growth_step(in->limit);
    int urgent = at_line || grew;
    int best = -1;
    uint64_t fresh_sum = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].estimate_fresh && c[i].releasable >= in->min_releasable)
            fresh_sum += c[i].releasable;
        if (!candidate(in, &c[i], urgent))
            continue;
        /* The most held free first; then the largest RSS (it may hold the most). */
        if (best < 0 || held(&c[i]) > held(&c[best]) ||
            (held(&c[i]) == held(&c[best]) && c[i].rss > c[best].rss))
            best = i;
    }
    if (best < 0)
        return -1;
    if (urgent) {
        *rule = at_line ? GROUP_RULE_LINE : GROUP_RULE_GROWTH;
        return best;
    }
    /* Below the line: only when what the members hold free exceeds the headroom,
     * i.e. a member growing into memory another keeps would cross the line. */
    if (fresh_sum >= line - usage || (usage >= floor && in->burst_bytes &&
                                       c[best].estimate_fresh &&
                                       c[best].releasable >= in->burst_bytes)) {
        *rule = GROUP_RULE_ESTIMATE;
        return best;
    }
    /* Ahead of the next climb: what a member freed goes back before that climb needs it
     * (candidate() took only a fresh estimate of min_releasable, and more than nothing). */
    if (ahead && c[best].estimate_fresh && c[best].releasable > 0) {
        *rule = GROUP_RULE_AHEAD;
        return best;
    }
    return -1;
}

uint64_t group_act_threshold(const struct group_pressure_in *in)
{
    if (in->limit <= 0 || in->usage < 0 || in->ratio <= 0)
        return 0;
    uint64_t floor = pressure_zone_floor(in->limit, in->ratio);
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    uint64_t usage = (uint64_t)in->usage, min = in->min_releasable ? in->min_releasable : 1;
    if (usage >= line || group_ahead(in))
        return min;
    if (usage < floor)
        return 0;
    uint64_t t = line - usage;
    if (in->burst_bytes && in->burst_bytes < t)
        t = in->burst_bytes;
    return t > min ? t : min;
}
