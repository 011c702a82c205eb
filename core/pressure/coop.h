/*
 * coop.h - the cooperative kind of member of the one pressure decision: a process that
 * reports its own readings, its heap's included (a worker group's member over its channel,
 * or the leader itself; core/group/). coop_candidate makes one member's report a candidate
 * of group_pressure_pick (decision.h) and adds it to the set's sums (zone.h), as outside.h does
 * for a process reached from outside. Pure; any thread (the group thread calls it under
 * g->lock).
 */
#ifndef MEMTRIM_COOP_H
#define MEMTRIM_COOP_H

#include <stdint.h>

#include "zone.h"

#define COOP_PEAK_NS (10LL * 1000 * 1000 * 1000) /* a member's peak RSS: over about this long */

struct coop_reading {
    uint64_t rss;             /* its report's RSS */
    uint64_t peak_rss;        /* its peak RSS since peak_ns */
    int64_t peak_ns;          /* ...which started again then */
    int64_t report_ns;        /* its report arrived then (monotonic) */
    int64_t heap_ms;          /* its heap reading's time (0 none) */
    uint64_t releasable;      /* that reading's releasable estimate */
    uint64_t rss_at_heap;     /* its RSS when that reading was taken */
    uint64_t rss_after;       /* its RSS right after its last trim, 0 none */
    int64_t last_trim_ns, last_trim_ms; /* its last pressure trim by the set, 0 none */
    int busy;                 /* a request to it in flight, or the set waits on another */
};

/* c as group_pressure_pick reads a cooperative member; its RSS now, at its recent peak and
 * after its trims added to sum. */
void coop_candidate(struct group_candidate *c, struct pressure_sums *sum,
                    const struct coop_reading *r, int64_t now_ns, int64_t now_ms);

#endif /* MEMTRIM_COOP_H */
