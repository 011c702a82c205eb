/*
 * saved.c - the counterfactual ledger (saved.h): outstanding = what trims released
 * (RSS before less after, never below 0) and has not come back. It comes back when
 * the allocator's free memory falls below it (the released chunks were reused; a
 * heap reading shows it), or, under an allocator that reports no free memory, as
 * RSS grows. Between two heap readings, RSS growth is taken off what is shown (it may be
 * the released memory coming back: the view errs low until the next reading says).
 * Each release is kept as a tranche: an allocator that returns free pages by itself
 * (jemalloc with background threads, MT_HEAP_HAS_DECAY) would have given it back along
 * its own decay curve, so a tranche is held under that curve (decay()); what comes back
 * is taken from the newest tranches first (the older decay sooner: the view errs low).
 * Pure, on whichever thread holds the ledger (the snapshot cache locks it).
 */
#include <string.h>

#include "control.h"
#include "saved.h"

void saved_init(struct saved_ledger *l)
{
    memset(l, 0, sizeof(*l));
    l->decay_ms = -1;
}

/* outstanding = the tranches' sum; empty tranches dropped. */
static void settle(struct saved_ledger *l)
{
    int n = 0;
    l->outstanding = 0;
    for (int i = 0; i < l->ntranches; i++) {
        if (l->tranche[i].amount == 0)
            continue;
        l->tranche[n++] = l->tranche[i];
        l->outstanding += l->tranche[i].amount;
    }
    l->ntranches = n;
}

/* bytes came back (or the bound says they cannot still be out): newest tranches first. */
static void cut(struct saved_ledger *l, uint64_t bytes)
{
    for (int i = l->ntranches - 1; i >= 0 && bytes; i--) {
        uint64_t take = bytes < l->tranche[i].amount ? bytes : l->tranche[i].amount;
        l->tranche[i].amount -= take;
        bytes -= take;
    }
    settle(l);
}

static void keep_at_most(struct saved_ledger *l, uint64_t bytes)
{
    if (l->outstanding > bytes)
        cut(l, l->outstanding - bytes);
}

/* A release of bytes at now_ns: a tranche of its own; when full, the two oldest merge
 * under the older's time (it decays sooner: errs low). */
static void add(struct saved_ledger *l, uint64_t bytes, int64_t now_ns)
{
    if (bytes == 0)
        return;
    if (l->ntranches == SAVED_TRANCHES) {
        l->tranche[0].amount += l->tranche[1].amount;
        l->tranche[0].released += l->tranche[1].released;
        memmove(&l->tranche[1], &l->tranche[2], (SAVED_TRANCHES - 2) * sizeof(l->tranche[0]));
        l->ntranches--;
    }
    l->tranche[l->ntranches++] = (struct saved_tranche){bytes, bytes, now_ns};
    settle(l);
}

/* The allocator's own decay (jemalloc's smootherstep, decay.c there): of a release at
 * age x (in decay windows) it would still hold 1 - (6x^5 - 15x^4 + 10x^3). */
static void decay(struct saved_ledger *l, int64_t now_ns)
{
    if (l->decay_ms < 0 || l->ntranches == 0)
        return;
    for (int i = 0; i < l->ntranches; i++) {
        struct saved_tranche *t = &l->tranche[i];
        double age_ms = now_ns > t->at_ns ? (double)(now_ns - t->at_ns) / 1e6 : 0;
        double x = l->decay_ms > 0 ? age_ms / (double)l->decay_ms : 1;
        double held = x >= 1 ? 0 : 1 - x * x * x * (10 - 15 * x + 6 * x * x);
        uint64_t limit = (uint64_t)((double)t->released * held);
        if (t->amount > limit)
            t->amount = limit;
    }
    settle(l);
}

/* What is shown as saved at RSS rss: the ledger less the growth since its last bound. */
static uint64_t shown(const struct saved_ledger *l, uint64_t rss)
{
    uint64_t grown = rss > l->rss_at_heap ? rss - l->rss_at_heap : 0;
    return l->outstanding > grown ? l->outstanding - grown : 0;
}

/* Move the clock to now_ns: the time since the last reading saved `outstanding` bytes. */
static void advance(struct saved_ledger *l, int64_t now_ns)
{
    if (l->last_ns && now_ns > l->last_ns)
        l->byte_seconds += (double)shown(l, l->rss) * (double)(now_ns - l->last_ns) / 1e9;
    if (now_ns > l->last_ns)
        l->last_ns = now_ns;
    decay(l, l->last_ns);
}

static void note_peaks(struct saved_ledger *l)
{
    if (l->rss > l->rss_peak)
        l->rss_peak = l->rss;
    uint64_t cf = l->rss + shown(l, l->rss);
    if (cf > l->cf_peak)
        l->cf_peak = cf;
}

void saved_on_rss(struct saved_ledger *l, uint64_t rss, uint64_t peak_rss, int64_t now_ns)
{
    if (rss == 0)
        return; /* a failed reading */
    advance(l, now_ns);
    /* No free figure to bound it by: growth is taken for released memory coming back
     * (under-counts a thread pool whose next study lands in another arena). */
    if (!l->clamp && l->rss && rss > l->rss) {
        cut(l, rss - l->rss);
    }
    l->rss = rss;
    if (!l->clamp || !l->rss_at_heap)
        l->rss_at_heap = rss; /* no heap reading will say: growth was taken off above */
    if (peak_rss > l->rss_peak)
        l->rss_peak = peak_rss; /* the kernel's high-water mark sees between readings */
    note_peaks(l);
}

void saved_on_trim(struct saved_ledger *l, uint64_t rss_before, uint64_t rss_after,
                   int bounded, int64_t now_ns)
{
    if (rss_before == 0 || rss_after == 0)
        return;
    saved_on_rss(l, rss_before, 0, now_ns);
    /* Without a heap reading after it, what grew since the last bound is taken for come
     * back; with one, that reading bounds the ledger (saved_on_heap) */
    if (!bounded)
        keep_at_most(l, shown(l, rss_before));
    if (rss_before > rss_after) {
        add(l, rss_before - rss_after, now_ns);
        /* jemalloc's, tcmalloc's purge puts the released pages in retained: without a
         * reading after the trim, the next one must see the host taking them out again
         * as a fall from there, not from the figure before the trim */
        if (!bounded && l->has_retained)
            l->retained += rss_before - rss_after;
    }
    l->rss = l->rss_at_heap = rss_after; /* not a growth: the release itself */
    note_peaks(l);
}

void saved_on_heap(struct saved_ledger *l, const struct mt_heap *h, uint64_t resident_free,
                   uint64_t rss)
{
    if (!h || !h->timestamp_ms)
        return;
    l->decay_ms = (h->known & MT_HEAP_HAS_DECAY) && h->decay_ms <= INT64_MAX / 1000000
                      ? (int64_t)h->decay_ms
                      : -1;
    l->clamp = (h->known & MT_HEAP_HAS_FREE) != 0; /* mimalloc: no free figure */
    if (!l->clamp)
        return;
    uint64_t bound = h->heap_free_bytes;
    l->has_retained = (h->known & MT_HEAP_HAS_RETAINED) != 0;
    if (l->has_retained) {
        /* jemalloc, tcmalloc: purged pages go to retained, and the host reusing them takes
         * them out again; retained also holds address space reserved ahead, so it bounds
         * loosely, and a fall in it is released memory back in use */
        uint64_t r = h->heap_retained_bytes;
        if (l->retained > r)
            cut(l, l->retained - r);
        l->retained = r;
        bound += r;
    }
    bound = bound > resident_free ? bound - resident_free : 0;
    if (!mt_control("suite-saved-unbounded")) /* 34123c3's control: the ledger unbounded */
        keep_at_most(l, bound);
    if (rss)
        l->rss_at_heap = rss;
    note_peaks(l);
}

void saved_view(const struct saved_ledger *l, uint64_t rss, struct mt_saved *out)
{
    memset(out, 0, sizeof(*out));
    out->saved_bytes = shown(l, rss);
    out->rss_without_memtrim_bytes = rss + out->saved_bytes;
    out->rss_peak_bytes = l->rss_peak > rss ? l->rss_peak : rss;
    uint64_t cf_peak = l->cf_peak > out->rss_without_memtrim_bytes
                           ? l->cf_peak
                           : out->rss_without_memtrim_bytes;
    out->rss_without_memtrim_peak_bytes =
        cf_peak > out->rss_peak_bytes ? cf_peak : out->rss_peak_bytes;
    out->saved_byte_seconds_total = l->byte_seconds;
}
