/*
 * coop.c - a cooperative member's report as the one pressure decision reads it (coop.h).
 * Pure functions of their arguments; any thread, no locks.
 */
#include "coop.h"

void coop_candidate(struct group_candidate *c, struct pressure_sums *sum,
                    const struct coop_reading *r, int64_t now_ns, int64_t now_ms)
{
    sum->rss += (int64_t)r->rss;
    sum->peak += (int64_t)(now_ns - r->peak_ns <= COOP_PEAK_NS && r->peak_rss > r->rss
                               ? r->peak_rss
                               : r->rss);
    /* its RSS now: after a pressure trim since its report, what that trim left (its
     * report says what it held before; or the last trim's, lower: less taken off) */
    sum->now += (int64_t)(r->last_trim_ns > r->report_ns && r->rss_after > 0 &&
                                  r->rss_after < r->rss
                              ? r->rss_after
                              : r->rss);
    *c = (struct group_candidate){
        .releasable = r->heap_ms ? r->releasable : 0,
        .estimate_fresh = r->heap_ms > r->last_trim_ms &&
                          now_ms - r->heap_ms < GROUP_ESTIMATE_STALE_NS / (1000 * 1000),
        .estimate_after_trim = r->heap_ms > r->last_trim_ms,
        .rss = r->rss,
        .rss_since_estimate = r->heap_ms && r->rss > r->rss_at_heap ? r->rss - r->rss_at_heap : 0,
        .rss_after_trim = r->rss_after,
        .last_trim_ns = r->last_trim_ns,
        .busy = r->busy,
    };
}
