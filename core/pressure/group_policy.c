/*
 * group_policy.c - the pressure decision over a set of members: the set's zone
 * (struct pressure_zone) and which member trims next. No locks, no threads, no clock
 * of its own: the group thread (core/group/group_pressure.c) keeps the zone under its
 * lock and hands it the readings; tests/unit/test_group.c drives it directly.
 *
 * Why the group decides on the cgroup's usage and not on each member's RSS:
 * a worker that freed what it studied keeps the pages resident, its RSS no
 * longer grows, and its own pressure rule never fires, while the others
 * under the same limit need that memory. So the group looks at the shared
 * usage and at what each member holds free, and the cost rules of a
 * member's own policy ("came back at once", the budget, the gap) do not
 * apply: the memory that comes back is another member's.
 */
#include <string.h>

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

/* ---- the set's zone ------------------------------------------------------------ */

void pressure_zone_init(struct pressure_zone *z)
{
    memset(z, 0, sizeof(*z));
    z->usage = -1;
    z->limit = -1;
    z->base_usage = -1;
    z->usage_source = "none";
}

void pressure_zone_inputs(struct pressure_zone *z, int64_t now, int64_t limit, int64_t usage,
                          const struct pressure_sums *sum, struct group_pressure_in *in)
{
    in->limit = limit;
    in->usage = usage >= 0 ? usage : sum->rss;
    if (z->base_usage < 0 || in->usage < z->base_usage)
        z->base_usage = in->usage;
    in->base_usage = z->base_usage;
    group_rise_note(&z->rise, now, in->usage);
    in->rise = group_rise(&z->rise, now);
    /* The members at their peaks, less what their RSS counts twice, or the usage if more
     * (group_kept): the usage less the members' RSS is no measure of the rest (their
     * reports lag the cgroup's reading mid-study). */
    in->kept = group_kept(in->usage, (uint64_t)sum->now, (uint64_t)sum->peak);
    z->usage = in->usage;
    /* Climbing above a quarter of the limit, or by a growth step since the last reading
     * (a study starting far below it: its climb is what group_ahead learns from): the
     * next readings at the zone's tick for a second (a worker fills 80 MB in 50 ms: the
     * 100 ms tick saw the zone half of that late, and a first study's climb not at all). */
    if (in->usage - z->moved_usage >= PZ_USAGE_MOVED_BYTES ||
        z->moved_usage - in->usage >= PZ_USAGE_MOVED_BYTES) {
        if (in->limit > 0 && in->usage > z->moved_usage &&
            (in->usage >= in->limit / 4 ||
             in->usage - z->moved_usage >= group_growth_step(in->limit)))
            z->moving_until_ns = now + 1000LL * 1000 * 1000;
        z->moved_usage = in->usage;
    }
    z->limit = in->limit > 0 ? in->limit : -1;
    z->usage_source = usage >= 0 ? "cgroup" : "members";
}

/* Inside the zone, or ahead of it (the last climb, again from here, would reach it):
 * there the members watch their heap, so that a freed study is seen at once; and
 * PZ_ZONE_HOLD_NS after the usage left it: a group's usage swings in and out with every
 * study, and the next one must find them fast. */
int pressure_zone_inside(struct pressure_zone *z, int64_t now, double ratio,
                         const struct group_pressure_in *in)
{
    int inside = (in->limit > 0 && ratio > 0 &&
                  (uint64_t)in->usage >= pressure_zone_floor(in->limit, ratio)) ||
                 group_ahead(in);
    if (inside)
        z->zone_seen_ns = now;
    return inside || (z->zone && now - z->zone_seen_ns < PZ_ZONE_HOLD_NS);
}

int pressure_zone_news(const struct pressure_zone *z, int zone, uint64_t threshold,
                       int64_t width_ns, int at_line, int64_t now, uint64_t min,
                       uint64_t members_gen)
{
    int act = zone && threshold > 0;
    if (zone != z->zone || act != z->act)
        return 1;
    if (!act)
        return 0;
    if (at_line != z->act_line)
        return 1;
    uint64_t moved = threshold > z->act_threshold ? threshold - z->act_threshold
                                                  : z->act_threshold - threshold;
    return now - z->act_sent_ns >= PZ_ACT_RENEW_NS || z->act_gen != members_gen ||
           z->act_width_ns != width_ns ||
           (now - z->act_sent_ns >= PZ_ACT_RESEND_NS && moved >= (min ? min : 1));
}

void pressure_zone_told(struct pressure_zone *z, int zone, int act, int at_line,
                        uint64_t threshold, int64_t width_ns, int64_t now, uint64_t members_gen)
{
    z->zone = zone;
    z->act = act;
    z->act_line = at_line;
    z->act_threshold = threshold;
    z->act_sent_ns = now;
    z->act_width_ns = width_ns;
    z->act_gen = members_gen;
}

void pressure_zone_trimmed(struct pressure_zone *z)
{
    z->base_usage = INT64_MAX;
}

/* ---- the stagger --------------------------------------------------------------- */

void pressure_slot_window(const struct pressure_slots *sl, int64_t now, int64_t *open,
                          int64_t *close)
{
    int64_t w = sl->width_ns, since = now > sl->epoch_ns ? now - sl->epoch_ns : 0;
    int64_t k = since / w, pos = k % sl->slots;
    int64_t ahead = (sl->slot - pos + sl->slots) % sl->slots;
    *open = sl->epoch_ns + (k + ahead) * w;
    *close = *open + w < sl->until_ns ? *open + w : sl->until_ns;
}

void pressure_slot_take(const struct pressure_slots *sl, int64_t now, int at_line,
                        int64_t waited_at, int moved_is_missed, int64_t *open, int64_t *close)
{
    pressure_slot_window(sl, now, open, close);
    /* missed: the slot it waited for closed (not a slot a new grant moved: a member joined
     * or left, and the one it waited for may not have opened yet) */
    int missed = waited_at && now >= waited_at + sl->width_ns && *open > now;
    if (moved_is_missed) /* 1feda56's defect: a moved slot "missed" */
        missed = waited_at && now >= waited_at && *open > now;
    if (at_line || missed) {
        *open = now;
        *close = sl->until_ns;
    }
}
