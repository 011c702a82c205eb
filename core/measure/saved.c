/*
 * saved.c - the counterfactual ledger (saved.h): outstanding = what trims released
 * (RSS before less after, never below 0) and has not come back. It comes back when
 * the allocator's free memory falls below it (the released chunks were reused; a
 * heap reading shows it), or, under an allocator that reports no free memory, as
 * RSS grows. Pure, on whichever thread holds the ledger (the snapshot cache locks it).
 */
#include <string.h>

#include "saved.h"

void saved_init(struct saved_ledger *l)
{
    memset(l, 0, sizeof(*l));
}

/* Move the clock to now_ns: the time since the last reading saved `outstanding` bytes. */
static void advance(struct saved_ledger *l, int64_t now_ns)
{
    if (l->last_ns && now_ns > l->last_ns)
        l->byte_seconds += (double)l->outstanding * (double)(now_ns - l->last_ns) / 1e9;
    if (now_ns > l->last_ns)
        l->last_ns = now_ns;
}

static void note_peaks(struct saved_ledger *l)
{
    if (l->rss > l->rss_peak)
        l->rss_peak = l->rss;
    uint64_t cf = l->rss + l->outstanding;
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
    if (peak_rss > l->rss_peak)
        l->rss_peak = peak_rss; /* the kernel's high-water mark sees between readings */
    note_peaks(l);
}

void saved_on_trim(struct saved_ledger *l, uint64_t rss_before, uint64_t rss_after,
                   int64_t now_ns)
{
    if (rss_before == 0 || rss_after == 0)
        return;
    saved_on_rss(l, rss_before, 0, now_ns);
    if (rss_before > rss_after)
        l->outstanding += rss_before - rss_after;
    l->rss = rss_after; /* not a growth: the release itself */
    note_peaks(l);
}

void saved_on_heap(struct saved_ledger *l, const struct mt_heap *h)
{
    if (!h || !h->timestamp_ms)
        return;
    l->clamp = (h->known & MT_HEAP_HAS_FREE) != 0; /* mimalloc: no free figure */
    if (!l->clamp)
        return;
    uint64_t bound = h->heap_free_bytes;
    if (h->known & MT_HEAP_HAS_RETAINED)
        bound += h->heap_retained_bytes;
    if (l->outstanding > bound)
        l->outstanding = bound;
}

void saved_view(const struct saved_ledger *l, uint64_t rss, struct mt_saved *out)
{
    memset(out, 0, sizeof(*out));
    out->saved_bytes = l->outstanding;
    out->rss_without_memtrim_bytes = rss + l->outstanding;
    out->rss_peak_bytes = l->rss_peak > rss ? l->rss_peak : rss;
    uint64_t cf_peak = l->cf_peak > out->rss_without_memtrim_bytes
                           ? l->cf_peak
                           : out->rss_without_memtrim_bytes;
    out->rss_without_memtrim_peak_bytes =
        cf_peak > out->rss_peak_bytes ? cf_peak : out->rss_peak_bytes;
    out->saved_byte_seconds_total = l->byte_seconds;
}
