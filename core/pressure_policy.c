/*
 * pressure_policy.c - the pressure path's decision, as pure functions of a
 * reading and the state the pressure thread keeps (pressure.c): the zone,
 * growth by a step since the last trim, the line, the heap estimate, and the
 * back-off while trims find nothing. No locks, no clocks, no I/O.
 */
#include "common.h"
#include "pressure.h"

#define HARD_REPEAT_NS (1 * MT_SEC)   /* at the line: again after 1 s, doubling per futile trim */
#define EARLY_REPEAT_NS (500 * MT_MS) /* by the heap estimate: 500 ms, doubling likewise */
#define FUTILE_MAX 6

uint64_t pressure_zone_floor(int64_t limit, double ratio)
{
    uint64_t line = (uint64_t)((double)limit * ratio), half = (uint64_t)limit / 2;
    return line < half ? line : half;
}

static int64_t backoff(int64_t base, int futile)
{
    return base << (futile < FUTILE_MAX ? futile : FUTILE_MAX);
}

int pressure_decide(const struct pressure_input *in, struct pressure_state *st)
{
    if (st->base_rss == 0 || in->rss < st->base_rss)
        st->base_rss = in->rss; /* growth counts from the low-water mark */
    if (in->limit <= 0 || in->ratio <= 0 || in->rss == 0) {
        st->zone = 0;
        return PRESSURE_OUTSIDE;
    }
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    st->zone = in->rss >= pressure_zone_floor(in->limit, in->ratio);
    if (!st->zone)
        return PRESSURE_OUTSIDE;
    /*
     * Climbing: what the host took since the last pressure trim may already
     * be free again and kept resident by glibc (a worker fills 150 MB in
     * 20 ms), so one step of growth inside the zone is reason to trim now,
     * as soon as the last trim ended. A step is 5 % of the limit (at least
     * TrimMinReleasableBytes), doubled for every two trims in a row that
     * found nothing: a host growing live memory to its limit costs a handful.
     */
    uint64_t step = (uint64_t)in->limit / 20;
    if (step < in->min_releasable)
        step = in->min_releasable;
    step <<= (st->futile / 2 < 4 ? st->futile / 2 : 4);
    st->due_ns = 0;
    if (in->rss - st->base_rss >= step)
        return PRESSURE_TRIM;
    int64_t since = in->now_ns - st->last_trim_ns;
    /* At the line: trim, and again while it holds, backing off while trims find nothing. */
    if (in->rss >= line && since >= backoff(HARD_REPEAT_NS, st->futile)) {
        st->due_ns = st->last_trim_ns + backoff(HARD_REPEAT_NS, st->futile);
        return PRESSURE_TRIM;
    }
    /* Free-but-resident memory (the last heap reading) that would cross the line if reused. */
    if (in->estimate_known && in->estimate > 0 && in->estimate >= in->min_releasable &&
        in->rss + in->estimate >= line && since >= backoff(EARLY_REPEAT_NS, st->futile)) {
        int64_t due = st->last_trim_ns + backoff(EARLY_REPEAT_NS, st->futile);
        st->due_ns = due > in->estimate_ns ? due : in->estimate_ns;
        return PRESSURE_TRIM;
    }
    return PRESSURE_WATCH;
}

void pressure_after_trim(struct pressure_state *st, int64_t start_ns, uint64_t rss_after,
                         int64_t released, uint64_t min_releasable)
{
    st->last_trim_ns = start_ns;
    st->base_rss = rss_after;
    if (released < 0 || (uint64_t)released < min_releasable) {
        if (st->futile < FUTILE_MAX)
            st->futile++;
    } else {
        st->futile = 0;
    }
}

int64_t pressure_next_due(const struct pressure_input *in, const struct pressure_state *st)
{
    if (!st->zone || in->limit <= 0)
        return INT64_MAX;
    uint64_t line = (uint64_t)((double)in->limit * in->ratio);
    int early = in->estimate_known && in->estimate >= in->min_releasable && in->estimate > 0 &&
                in->rss + in->estimate >= line;
    int64_t due = INT64_MAX;
    if (in->rss >= line)
        due = st->last_trim_ns + backoff(HARD_REPEAT_NS, st->futile);
    if (early) {
        int64_t e = st->last_trim_ns + backoff(EARLY_REPEAT_NS, st->futile);
        due = e < due ? e : due;
    }
    return due;
}
