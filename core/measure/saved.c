/*
 * saved.c - the counterfactual ledger (saved.h): outstanding = what trims released
 * (RSS before less after, never below 0) and has not come back. It comes back when
 * the allocator's free memory falls below it (the released chunks were reused; a
 * heap reading shows it), or, under an allocator that reports no free memory, as
 * RSS grows. Between two heap readings, RSS growth is taken off what is shown (it may be
 * the released memory coming back: the view errs low until the next reading says).
 * Pure, on whichever thread holds the ledger (the snapshot cache locks it).
 */
#include <string.h>

#include "saved.h"

void saved_init(struct saved_ledger *l)
{
    memset(l, 0, sizeof(*l));
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
        uint64_t back = rss - l->rss;
        l->outstanding = back < l->outstanding ? l->outstanding - back : 0;
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
        l->outstanding = shown(l, rss_before);
    if (rss_before > rss_after)
        l->outstanding += rss_before - rss_after;
    l->rss = l->rss_at_heap = rss_after; /* not a growth: the release itself */
    note_peaks(l);
}

void saved_on_heap(struct saved_ledger *l, const struct mt_heap *h, uint64_t resident_free,
                   uint64_t rss)
{
    if (!h || !h->timestamp_ms)
        return;
    l->clamp = (h->known & MT_HEAP_HAS_FREE) != 0; /* mimalloc: no free figure */
    if (!l->clamp)
        return;
    uint64_t bound = h->heap_free_bytes;
    if (h->known & MT_HEAP_HAS_RETAINED) {
        /* jemalloc, tcmalloc: purged pages go to retained, and the host reusing them takes
         * them out again; retained also holds address space reserved ahead, so it bounds
         * loosely, and a fall in it is released memory back in use */
        uint64_t r = h->heap_retained_bytes;
        if (l->retained > r) {
            uint64_t back = l->retained - r;
            l->outstanding = back < l->outstanding ? l->outstanding - back : 0;
        }
        l->retained = r;
        bound += r;
    }
    bound = bound > resident_free ? bound - resident_free : 0;
    if (l->outstanding > bound)
        l->outstanding = bound;
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
