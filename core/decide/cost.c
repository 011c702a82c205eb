/*
 * cost.c - the cost of trimming, as pure functions (see cost.h): re-fault
 * windows, the adaptive gap, the host's CPU share, deferral while it is
 * busy, and the trim budget. No clocks, no locks, no I/O: the housekeeper
 * passes readings and times, and owns the state; its thread (memtrim-hk) is
 * the only caller.
 */
#include <math.h>
#include <string.h>

#include "cost.h"

/* ---- re-faults ------------------------------------------------------------- */

void cost_refault_open(struct cost_refault *w, const struct mt_trim_result *r,
                       uint64_t own_minflt, int64_t now_ns)
{
    memset(w, 0, sizeof(*w));
    w->open = 1;
    w->id = r->id;
    w->start_ms = r->start_ms;
    w->trigger = r->trigger;
    w->released = r->released_bytes;
    w->minflt0 = r->minflt_after;
    w->own_minflt0 = own_minflt;
    w->rss0 = w->rss_peak = r->rss_after_bytes;
    w->opened_ns = w->ended_ns = now_ns;
}

void cost_refault_observe(struct cost_refault *w, uint64_t rss)
{
    if (w->open && rss > w->rss_peak)
        w->rss_peak = rss;
}

int64_t cost_back_after(const struct cost_refault *w, int64_t refaulted, int64_t now_ns)
{
    if (w->released <= 0)
        return -1;
    int64_t half = w->released / 2;
    int64_t grown = w->rss_peak > w->rss0 ? (int64_t)(w->rss_peak - w->rss0) : 0;
    if (refaulted <= half || grown <= half)
        return -1;
    return now_ns > w->ended_ns ? now_ns - w->ended_ns : 0;
}

int cost_back_at_once(const struct cost_refault *w, int64_t refaulted, int64_t now_ns,
                      int64_t at_once_ns)
{
    int64_t after = cost_back_after(w, refaulted, now_ns);
    return after >= 0 && after <= at_once_ns;
}

int cost_refault_due(const struct cost_refault *w, int64_t now_ns, int64_t window_ns)
{
    return w->open && now_ns - w->opened_ns >= window_ns;
}

int64_t cost_refault_bytes(const struct cost_refault *w, uint64_t minflt, uint64_t own_minflt,
                           long page_size)
{
    if (!w->open || w->released <= 0)
        return 0;
    uint64_t faults = minflt > w->minflt0 ? minflt - w->minflt0 : 0;
    uint64_t own = own_minflt > w->own_minflt0 ? own_minflt - w->own_minflt0 : 0;
    faults = faults > own ? faults - own : 0;
    uint64_t page = page_size > 0 ? (uint64_t)page_size : 4096;
    uint64_t max = (uint64_t)w->released;
    /* faults * page without overflow: anything past the release is the release */
    uint64_t bytes = faults > max / page ? max : faults * page;
    uint64_t grown = w->rss_peak > w->rss0 ? w->rss_peak - w->rss0 : 0;
    if (grown > bytes)
        bytes = grown;
    return (int64_t)(bytes < max ? bytes : max);
}

/* ---- the adaptive gap --------------------------------------------------------- */

static int max_shift(double max_factor)
{
    if (!(max_factor > 1))
        return 0;
    int s = (int)floor(log2(max_factor));
    return s > 30 ? 30 : s;
}

double cost_gap_factor(const struct cost_gap *g, double max_factor)
{
    int m = max_shift(max_factor), s = g->shift < m ? g->shift : m;
    return s > 0 ? (double)(1 << s) : 1.0;
}

double cost_gap_update(struct cost_gap *g, int64_t released, int64_t refaulted, int64_t min_bytes,
                       double max_factor)
{
    if (released > 0 && released >= min_bytes) {
        if (refaulted > released / 2) {
            if (g->shift < max_shift(max_factor))
                g->shift++;
        } else {
            g->shift = 0;
        }
    }
    if (g->shift > max_shift(max_factor))
        g->shift = max_shift(max_factor); /* the bound was lowered meanwhile */
    return cost_gap_factor(g, max_factor);
}

double cost_gap_saturate(struct cost_gap *g, double max_factor)
{
    g->shift = max_shift(max_factor);
    return cost_gap_factor(g, max_factor);
}

/* ---- the host's CPU share ------------------------------------------------------ */

void cost_cpu_push(struct cost_cpu *c, int64_t wall_ns, int64_t host_cpu_ns)
{
    unsigned size = COST_CPU_TICKS + 1;
    c->head = (c->head + 1) % size;
    c->wall[c->head] = wall_ns;
    c->cpu[c->head] = host_cpu_ns;
    if (c->n < size)
        c->n++;
}

double cost_cpu_share(const struct cost_cpu *c, double ncpu)
{
    unsigned size = COST_CPU_TICKS + 1;
    if (c->n < 2 || !(ncpu > 0))
        return -1;
    unsigned oldest = (c->head + size - (c->n - 1)) % size;
    int64_t wall = c->wall[c->head] - c->wall[oldest];
    int64_t cpu = c->cpu[c->head] - c->cpu[oldest];
    if (wall <= 0)
        return -1;
    if (cpu < 0)
        cpu = 0;
    double share = (double)cpu / ((double)wall * ncpu);
    return share > 1 ? 1 : share;
}

int cost_host_quiet(double share, double ncpu, double quiet_cpus)
{
    return share >= 0 && ncpu > 0 && share * ncpu < quiet_cpus && share < quiet_cpus;
}

/* ---- deferral --------------------------------------------------------------------- */

int cost_defer_check(struct cost_defer *d, int busy, int64_t now_ns, int64_t max_ns)
{
    if (!busy || max_ns <= 0) {
        d->since = 0;
        return COST_DEFER_RUN;
    }
    if (d->since == 0) {
        d->since = now_ns ? now_ns : 1;
        return COST_DEFER_START;
    }
    if (now_ns - d->since >= max_ns) {
        d->since = 0;
        return COST_DEFER_RUN; /* waited long enough: run anyway */
    }
    return COST_DEFER_WAIT;
}

void cost_defer_clear(struct cost_defer *d)
{
    d->since = 0;
}

/* ---- the trim budget ----------------------------------------------------------------- */

int cost_budget_allows(const struct cost_budget *b, int64_t now_ns)
{
    return now_ns >= b->next_ns;
}

void cost_budget_charge(struct cost_budget *b, int64_t end_ns, int64_t duration_ns,
                        double percent)
{
    if (duration_ns < 0)
        duration_ns = 0;
    double pause = percent > 0 && percent < 100 ? (double)duration_ns * 100.0 / percent : 0;
    if (pause > 4e18)
        pause = 4e18;
    b->next_ns = end_ns > INT64_MAX - (int64_t)pause ? INT64_MAX : end_ns + (int64_t)pause;
    b->skip_counted = 0;
}
