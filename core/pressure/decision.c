/*
 * decision.c - the pressure engine's decisions (decision.h), pure functions.
 *
 * One decision, group_pressure_pick: which member of a set trims next. A process
 * alone is the set of one member that is itself (pressure_as_set; pressure_decide keeps
 * its state and asks group_pressure_pick), a group's members and the agent's cgroups are
 * sets of many. A process alone keeps its own pace (struct pressure_pace), of a reading
 * and the state the pressure thread keeps (engine.c): the zone,
 * growth by a step since the last trim, the line, the heap estimate, and the
 * back-off while trims find nothing or leave RSS above the line (per rule: a
 * climb's growth trims that find live memory do not hold off the estimate's),
 * the back-off below the line while each trim's release comes back before the
 * next (pressure_judge_last: what a trim bought), the last chance when the
 * kernel reports the limit reached, and what the limit sees (pressure_charge:
 * RSS, or the cgroup's charge less the page cache the kernel reclaims itself).
 * No locks, no clocks, no I/O (mt_control reads the environment once, in
 * MEMTRIM_CONTROLS builds only).
 *
 * Over a set of members: which member trims next.
 * Why the group decides on the cgroup's usage and not on each member's RSS:
 * a worker that freed what it studied keeps the pages resident, its RSS no
 * longer grows, and its own pressure rule never fires, while the others
 * under the same limit need that memory. So the group looks at the shared
 * usage and at what each member holds free, and the cost rules of a
 * member's own policy ("came back at once", the budget, the gap) do not
 * apply: the memory that comes back is another member's.
 */
#include "common.h"
#include "control.h"
#include "decision.h"

#define HARD_REPEAT_NS (1 * MT_SEC)   /* at the line: again after 1 s, doubling per futile trim */
#define EARLY_REPEAT_NS (500 * MT_MS) /* by the heap estimate: 500 ms, doubling likewise */
#define GROWTH_GAP_NS (1 * MT_MS)     /* by growth: 1 ms after a futile one, doubling likewise */
#define FUTILE_MAX 6                  /* the time-based rules: up to 64 s */
#define GROWTH_FUTILE_MAX 10          /* growth: up to ~1 s */
#define RETURNED_GAP_NS (50 * MT_MS)  /* below the line, after a release that came back: 50 ms, */
#define RETURNED_MAX 8                /* doubling per such trim in a row, up to 6.4 s */

uint64_t pressure_zone_floor(int64_t limit, double ratio)
{
    uint64_t line = (uint64_t)((double)limit * ratio), half = (uint64_t)limit / 2;
    return line < half ? line : half;
}

static int64_t backoff(int64_t base, int futile, int max)
{
    return base << (futile < max ? futile : max);
}

static uint64_t growth_step(const struct pressure_input *in)
{
    uint64_t step = (uint64_t)in->limit / 20;
    return step < in->min_releasable ? in->min_releasable : step;
}

/*
 * How full the limit is by its own count, for the returned wait's exception: the cgroup's
 * whole charge when its limit is in force (memory.current, page cache and other processes
 * included: a cgroup kept at its limit by page cache that the kernel reclaims as the host
 * grows, Orthanc's under 340 MiB, is where an OOM comes next), else RSS. Not RSS where the
 * cgroup is read: RSS counts file pages the process maps that are charged elsewhere (node's
 * RSS is 40 MB above its cgroup's charge).
 */
static uint64_t limit_fill(const struct pressure_input *in)
{
    return in->cg_current >= 0 ? (uint64_t)in->cg_current : in->rss;
}

/*
 * Trims whose release came straight back bought no headroom: the host re-used the pages
 * (node's worker_threads: 37-55 pressure trims in 4 s under a 560 MiB limit it survives
 * alone, 1-1.3 s of trimming, 86 % of each release back before the next). The growth and
 * estimate rules then wait 50 ms after such a trim, doubling per one in a row, up to 6.4 s.
 * Once the limit is full to the line by its own count survival comes first: no doubling
 * (ruby/puma in 300 MiB needs a trim each 70-150 ms there, each release back before the
 * next; with a second's wait it is OOM-killed), and no wait at all once what the kernel
 * cannot take back by itself (pressure_charge: RSS, or the charge less its page cache)
 * reaches the line. Full to the line by page cache alone (file I/O keeps the cgroup at its
 * limit, the kernel reclaims that cache as the host grows) the wait stays at its 50 ms
 * base: without it the growth rule trimmed at each step, every release back before the
 * next; with the doubling wait (judged on the charge less page cache) Orthanc in 340 MiB,
 * its cgroup held there by its storage's page cache, was OOM-killed 1 of 7. RSS alone at
 * the line is not full either: node's RSS crosses it with its cgroup's charge 35 MB under
 * it, and the growth rule trimmed it every 130-510 ms; there the line rule's own repeat
 * (once a second) holds. None where other processes hold most of the limit's charge.
 */
static int64_t returned_gap(const struct pressure_input *in, const struct pressure_state *st)
{
    if (!st->returned || mt_control("rt-no-backoff"))
        return 0;
    uint64_t charge = pressure_charge(in);
    /* Others hold more of the limit than this process (a worker group's members, sharing
     * one cgroup): what it releases serves them until it re-uses it, so a release that
     * came back to it still bought them room. No returned wait. */
    if (charge > 2 * in->rss)
        return 0;
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    uint64_t at = mt_control("eng-line-growth") ? charge : limit_fill(in);
    if (at >= line) /* full to the line: by page cache alone, the base wait */
        return charge < line && !mt_control("eng-cache-line-nowait") ? RETURNED_GAP_NS : 0;
    return backoff(RETURNED_GAP_NS, st->returned - 1, RETURNED_MAX - 1);
}

/* The growth rule's gap: none after a trim that found something and kept it. */
static int64_t growth_gap(const struct pressure_input *in, const struct pressure_state *st)
{
    int64_t gap = st->futile ? backoff(GROWTH_GAP_NS, st->futile - 1, GROWTH_FUTILE_MAX) : 0;
    int64_t r = returned_gap(in, st);
    return r > gap ? r : gap;
}

/* The estimate rule's wait: its own futile back-off, or the returned one. */
static int64_t early_gap(const struct pressure_input *in, const struct pressure_state *st)
{
    int64_t early = backoff(EARLY_REPEAT_NS, st->futile_timed, FUTILE_MAX);
    int64_t r = returned_gap(in, st);
    return r > early ? r : early;
}

int64_t pressure_growth_gap(const struct pressure_input *in, const struct pressure_state *st)
{
    return growth_gap(in, st);
}

int64_t pressure_judge_last(struct pressure_state *st, uint64_t rss_now)
{
    uint64_t released = st->last_released;
    if (!released)
        return -1;
    st->last_released = 0;
    /* Regrown from the lowest reading since (another trim may have lowered it further). */
    uint64_t low = st->base_rss && st->base_rss < st->last_rss_after ? st->base_rss
                                                                      : st->last_rss_after;
    uint64_t back = rss_now > low ? rss_now - low : 0;
    if (st->regrown > back)
        back = st->regrown;
    st->regrown = 0;
    if (back > released)
        back = released;
    if (back * 2 > released) {
        if (st->returned < RETURNED_MAX)
            st->returned++;
    } else {
        st->returned = 0;
    }
    return (int64_t)back;
}

static int estimate_holds(const struct pressure_input *in, uint64_t line)
{
    return in->estimate_known && in->estimate > 0 && in->estimate >= in->min_releasable &&
           pressure_charge(in) + in->estimate >= line;
}

uint64_t pressure_charge(const struct pressure_input *in)
{
    uint64_t level = in->rss;
    if (in->cg_current < 0)
        return level;
    int64_t cache = in->cg_file > 0 ? in->cg_file - (in->cg_shmem > 0 ? in->cg_shmem : 0) : 0;
    int64_t hard = in->cg_current - (cache > 0 ? cache : 0);
    return hard > 0 && (uint64_t)hard > level ? (uint64_t)hard : level;
}

int pressure_heap_may_hold(const struct pressure_input *in, const struct pressure_state *st)
{
    if (!st->trimmed)
        return 1;
    if (st->base_rss && in->rss >= st->base_rss + in->min_releasable)
        return 1;
    return in->estimate_known && in->estimate_ns > st->last_trim_ns &&
           in->estimate >= in->min_releasable;
}

void pressure_as_set(const struct pressure_input *in, const struct pressure_state *st,
                     struct group_pressure_in *gin, struct group_candidate *c,
                     struct pressure_pace *pace)
{
    *pace = (struct pressure_pace){
        .since_ns = in->now_ns - st->last_trim_ns,
        .growth_gap_ns = growth_gap(in, st),
        .line_gap_ns = backoff(HARD_REPEAT_NS, st->futile_timed, FUTILE_MAX),
        .estimate_gap_ns = early_gap(in, st),
        .grown = in->rss > st->base_rss ? in->rss - st->base_rss : 0,
        .growth_step = growth_step(in),
        .last_chance = in->last_chance && pressure_heap_may_hold(in, st),
    };
    *gin = (struct group_pressure_in){
        .now_ns = in->now_ns,
        .usage = in->rss ? (int64_t)pressure_charge(in) : -1,
        .base_usage = -1,
        .limit = in->limit,
        .ratio = in->ratio,
        .min_releasable = in->min_releasable,
        /* the control: the rules without the process's pace (futile and returned waits,
         * the line's repeat, its growth step, the last chance) */
        .pace = mt_control("eng-one-no-pace") ? NULL : pace,
    };
    /* Its estimate counts while a heap reading is known: its own pace spaces the trims it
     * asks for (the estimate rule's wait), not the reading's age. */
    int known = in->estimate_known && in->estimate > 0;
    *c = (struct group_candidate){
        .releasable = known ? in->estimate : 0,
        .estimate_fresh = known,
        .estimate_after_trim = known,
        .rss = in->rss,
        .rss_after_trim = st->trimmed ? st->base_rss : 0,
        .last_trim_ns = st->trimmed ? st->last_trim_ns : 0,
    };
}

int pressure_decide(const struct pressure_input *in, struct pressure_state *st)
{
    if (st->base_rss == 0 || in->rss < st->base_rss)
        st->base_rss = in->rss; /* growth counts from the low-water mark */
    /* What came back of the last release so far: the housekeeper's burst trim may take it
     * again before the next pressure trim judges it, which would then see a release that
     * stayed out and reset the returned wait (node: 5 more trims at 50, 100, 200 ms...). */
    if (st->last_released && !mt_control("eng-returned-reset")) {
        uint64_t low = st->base_rss < st->last_rss_after ? st->base_rss : st->last_rss_after;
        if (in->rss > low && in->rss - low > st->regrown)
            st->regrown = in->rss - low;
    }
    /* The decision: the set of one member that is this process, by the one rule table. */
    struct group_pressure_in gin;
    struct group_candidate self;
    struct pressure_pace pace;
    pressure_as_set(in, st, &gin, &self, &pace);
    int rule;
    int pick = group_pressure_pick(&gin, &self, 1, &rule);
    st->due_ns = 0;
    if (in->limit <= 0 || in->ratio <= 0 || in->rss == 0) {
        st->zone = 0;
        return PRESSURE_OUTSIDE;
    }
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    st->zone = (uint64_t)gin.usage >= pressure_zone_floor(in->limit, in->ratio);
    if (pick >= 0 && rule == GROUP_RULE_LAST_CHANCE) {
        st->rule = PRESSURE_RULE_LAST_CHANCE;
        return PRESSURE_TRIM;
    }
    if (!st->zone)
        return PRESSURE_OUTSIDE;
    st->line = line;
    if (pick < 0)
        return PRESSURE_WATCH;
    /* Since when the rule that fired held by its timing (a reaction counts from there). */
    switch (rule) {
    case GROUP_RULE_GROWTH:
        st->rule = PRESSURE_RULE_GROWTH;
        if (pace.growth_gap_ns)
            st->due_ns = st->last_trim_ns + pace.growth_gap_ns;
        break;
    case GROUP_RULE_LINE:
        st->rule = PRESSURE_RULE_LINE;
        st->due_ns = st->last_trim_ns + pace.line_gap_ns;
        break;
    default: { /* GROUP_RULE_ESTIMATE: no burst, no climb ahead for a set with its pace */
        st->rule = PRESSURE_RULE_ESTIMATE;
        int64_t due = st->last_trim_ns + pace.estimate_gap_ns;
        st->due_ns = due > in->estimate_ns ? due : in->estimate_ns;
        break;
    }
    }
    return PRESSURE_TRIM;
}

void pressure_handed(struct pressure_state *st, int64_t now_ns, uint64_t rss)
{
    st->last_trim_ns = now_ns;
    st->base_rss = rss;
}

void pressure_after_trim(struct pressure_state *st, int64_t start_ns, uint64_t rss_after,
                         int64_t released, uint64_t min_releasable)
{
    st->last_trim_ns = start_ns;
    st->trimmed = 1;
    st->base_rss = rss_after;
    st->last_released = released >= 0 && (uint64_t)released >= min_releasable && min_releasable
                            ? (uint64_t)released : 0;
    st->last_rss_after = rss_after;
    st->regrown = 0;
    /* Useful: it found something, and it took RSS under the line. One that leaves the
     * process above the line found live memory there (a limit below the host's working
     * set: MemoryLimitBytes 1 gave 2,500 trims in 20 s): it backs off like one that found
     * nothing, whatever it released, and so does the next until one gets under. */
    if (released >= 0 && (uint64_t)released >= min_releasable && rss_after < st->line) {
        st->futile = st->futile_timed = 0;
    } else if (st->rule == PRESSURE_RULE_GROWTH) {
        if (st->futile < GROWTH_FUTILE_MAX + 1)
            st->futile++;
    } else if (st->futile_timed < FUTILE_MAX) {
        st->futile_timed++;
    }
}

int64_t pressure_next_due(const struct pressure_input *in, const struct pressure_state *st)
{
    if (!st->zone || in->limit <= 0)
        return INT64_MAX;
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    int64_t due = INT64_MAX;
    if (in->rss - (in->rss < st->base_rss ? in->rss : st->base_rss) >= growth_step(in))
        due = st->last_trim_ns + growth_gap(in, st);
    if (pressure_charge(in) >= line) {
        int64_t h = st->last_trim_ns + backoff(HARD_REPEAT_NS, st->futile_timed, FUTILE_MAX);
        due = h < due ? h : due;
    }
    if (estimate_holds(in, line)) {
        int64_t e = st->last_trim_ns + early_gap(in, st);
        due = e < due ? e : due;
    }
    return due;
}

/* ---- the decision over a set of members ----------------------------------------- */

int64_t group_growth_step(int64_t limit)
{
    int64_t step = limit / 32;
    return step > GROUP_GROWTH_MIN ? step : GROUP_GROWTH_MIN;
}

/* May c be asked now? urgent: at the line or after growth (not only the estimate rule). */
static int candidate(const struct group_pressure_in *in, const struct group_candidate *c,
                     int urgent)
{
    /* Its own reading: it grew by its step since its last trim, and it trims in its own
     * process (a leader): no request of the stagger's is in flight to it. */
    if (c->grew)
        return 1;
    if (c->busy)
        return 0;
    /* it said what it holds, lately and after its last trim */
    if (c->estimate_fresh && c->releasable >= in->min_releasable)
        return 1;
    if (!urgent)
        return 0;
    if (in->pace)
        return 1; /* the set's pace is the only one */
    int64_t since = c->last_trim_ns ? in->now_ns - c->last_trim_ns : INT64_MAX;
    int64_t gap = in->retrim_ns > 0 ? in->retrim_ns : GROUP_RETRIM_STALE_NS;
    /* ...little, but its RSS grew since that reading: what it grew by may be free now */
    if (c->estimate_fresh)
        return since >= gap && c->rss_since_estimate >= in->min_releasable;
    /* Said nothing lately: it may hold what it grew by since its last trim. */
    return since >= gap &&
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
    const struct pressure_pace *pace = in->pace;
    /*
     * The kernel reached the limit (a new memory.events max or oom): the last chance
     * before the OOM killer. Trim now, whatever the back-off and the zone, unless the
     * last trim already took what the heap held (a cgroup full of page cache hits max
     * all the time; trimming then is futile: pace->last_chance says so).
     */
    if (pace && pace->last_chance) {
        int any = -1;
        for (int i = 0; i < n; i++)
            if (!c[i].busy && (any < 0 || c[i].rss > c[any].rss))
                any = i;
        if (any >= 0) {
            *rule = GROUP_RULE_LAST_CHANCE;
            return any;
        }
    }
    uint64_t floor = pressure_zone_floor(in->limit, in->ratio);
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    uint64_t usage = (uint64_t)in->usage;
    int ahead = group_ahead(in);
    /* A set's members: the kernel's last chance is the line's rule, whatever the zone (the
     * most held first, a member that said nothing after its retrim gap: not the largest
     * RSS, a worker at its study's peak holds it live, and a request to it holds the
     * stagger from one that freed its study). */
    int last_chance = !pace && in->last_chance;
    if (usage < floor && !ahead && !last_chance)
        return -1;
    int at_line, grew;
    if (pace) {
        /*
         * Climbing: what the host took since the last trim may already be free again and
         * kept resident by glibc (a worker fills 150 MB in 20 ms), so one step of growth
         * inside the zone is reason to trim now, once the growth gap passed (none after a
         * trim that found something and kept it; 1 ms, 2 ms, 4 ms ... up to ~1 s after
         * futile ones; the returned wait). At the line: trim, and again while it holds,
         * backing off while trims find nothing.
         */
        grew = usage >= floor && pace->grown >= pace->growth_step &&
               pace->since_ns >= pace->growth_gap_ns;
        at_line = usage >= line && pace->since_ns >= pace->line_gap_ns;
    } else {
        at_line = usage >= line || last_chance;
        grew = usage >= floor && in->base_usage >= 0 &&
               in->usage - in->base_usage >= group_growth_step(in->limit);
    }
    int urgent = at_line || grew;
    int best = -1, grown = -1;
    uint64_t fresh_sum = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].estimate_fresh && c[i].releasable >= in->min_releasable)
            fresh_sum += c[i].releasable;
        if (!candidate(in, &c[i], urgent))
            continue;
        if (c[i].grew && (grown < 0 || held(&c[i]) > held(&c[grown])))
            grown = i;
        /* The most held free first; then the largest RSS (it may hold the most). */
        if (best < 0 || held(&c[i]) > held(&c[best]) ||
            (held(&c[i]) == held(&c[best]) && c[i].rss > c[best].rss))
            best = i;
    }
    if (best < 0)
        return -1;
    if (urgent) {
        /* a set with its pace: growth first (its futile back-off is the growth rule's) */
        *rule = last_chance       ? GROUP_RULE_LAST_CHANCE
                : at_line && !(pace && grew) ? GROUP_RULE_LINE
                                             : GROUP_RULE_GROWTH;
        return best;
    }
    /* Below the line: only when what the members hold free exceeds the headroom,
     * i.e. a member growing into memory another keeps would cross the line (at it,
     * with its pace: the line's repeat not yet due, any free memory the estimate's). */
    if (pace && pace->since_ns < pace->estimate_gap_ns)
        return -1;
    int estimate = (fresh_sum > 0 && fresh_sum >= (usage < line ? line - usage : 0)) ||
                   (usage >= floor && in->burst_bytes && c[best].estimate_fresh &&
                    c[best].releasable >= in->burst_bytes);
    if (estimate) {
        *rule = GROUP_RULE_ESTIMATE;
        return best;
    }
    /* A member that grew by its own step (its reading, now): the growth it took may be
     * free again already (a worker fills 150 MB in 20 ms), inside the zone. */
    if (grown >= 0 && usage >= floor) {
        *rule = GROUP_RULE_GROWTH;
        return grown;
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
