/*
 * saved.h - what memtrim saved: the RSS the host would have had without it (the
 * counterfactual), kept as a ledger of what trims released and what came back,
 * from readings memtrim takes anyway (each trim's RSS before and after, the
 * snapshot cache's cheap and heap readings). No allocator call of its own.
 * Pure: the snapshot cache keeps one under its lock (cache->lock) and feeds it;
 * docs/policy.md ("What memtrim saved") has the estimator and where it cannot hold.
 */
#ifndef MEMTRIM_SAVED_H
#define MEMTRIM_SAVED_H

#include <stdint.h>
#include "types.h"

#define SAVED_TRANCHES 8 /* releases kept apart for the allocator's decay; older ones merge */

struct saved_ledger {
    uint64_t outstanding;   /* released by trims and not come back: counterfactual - RSS,
                             * the sum of the tranches' amounts */
    struct saved_tranche {
        uint64_t amount;    /* of this release, not come back and not decayed */
        uint64_t released;  /* what the release gave back: the decay's start */
        int64_t at_ns;      /* when */
    } tranche[SAVED_TRANCHES]; /* oldest first */
    int ntranches;
    int64_t decay_ms;       /* the allocator returns free pages by itself within this
                             * (MT_HEAP_HAS_DECAY of the last heap reading); -1 never */
    uint64_t rss, rss_peak; /* the last RSS fed, the highest */
    uint64_t rss_at_heap;   /* RSS when the last heap reading (or trim) bounded it */
    uint64_t cf_peak;       /* the highest counterfactual */
    double byte_seconds;    /* outstanding integrated over time */
    int64_t last_ns;        /* monotonic time of the last reading fed; 0 = none */
    uint64_t retained;      /* the allocator's retained bytes at the last heap reading, plus
                             * what trims since released (their purge moved it there) */
    int has_retained;       /* the last heap reading had a retained figure */
    int clamp;              /* the last heap reading reported free memory: bound by it */
};

/* Start empty. */
void saved_init(struct saved_ledger *l);

/* An RSS reading at monotonic time now_ns; it also ages the releases by the allocator's
 * decay (what it would have returned by itself by now is not saved) (peak_rss: the kernel's VmHWM, 0 unknown). */
void saved_on_rss(struct saved_ledger *l, uint64_t rss, uint64_t peak_rss, int64_t now_ns);

/* A trim: RSS right before and right after the release, at now_ns; bounded: a heap
 * reading taken after it follows (saved_on_heap). */
void saved_on_trim(struct saved_ledger *l, uint64_t rss_before, uint64_t rss_after,
                   int bounded, int64_t now_ns);

/* A heap reading: what memtrim released and is not back is still free in the allocator
 * (glibc's fordblks counts madvised chunks; jemalloc and tcmalloc move it to retained)
 * and not resident: bounded by that free memory less resident_free (the snapshot's
 * releasable estimate, read with it). rss: the RSS read with it. */
void saved_on_heap(struct saved_ledger *l, const struct mt_heap *h, uint64_t resident_free,
                   uint64_t rss);

/* The view at rss (the snapshot's), into *out. */
void saved_view(const struct saved_ledger *l, uint64_t rss, struct mt_saved *out);

#endif /* MEMTRIM_SAVED_H */
