/*
 * cost_hk.h - the housekeeper's side of cost.c: readings each tick
 * (/proc/self/stat), the re-fault windows of every trim, the adaptive gap,
 * the busy-host deferral and the trim budget, behind a few calls the policy
 * makes. Runs on the housekeeper thread only; its state is that thread's;
 * it takes hk->lock only to publish its gauges and to read a test's CPU hook
 * (housekeeper_test_host_cpu); skips are counted by the trim service.
 */
#ifndef MEMTRIM_COST_HK_H
#define MEMTRIM_COST_HK_H

#include <stdint.h>
#include "config.h"
#include "cost.h"

struct housekeeper;

struct cost_hk {
    struct cost_refault window; /* the last trim's re-fault window */
    struct cost_gap gap;
    struct cost_cpu cpu;
    struct cost_defer defer;
    struct cost_budget budget;
    uint64_t trim_generation;   /* of the trim service, at the last look */
    double cpus;                /* processors the host may use */
    unsigned ticks;
    int64_t process_cpu_ns;     /* the process's CPU at this tick's /proc/self/stat, -1 unknown */
    int gated;                  /* a periodic/burst trim asked to run since the last tick */
    int back_at_once;           /* the last periodic/burst release came back at once
                                 * (cost_back_at_once, within COST_AT_ONCE_NS of the trim's end) */
    int64_t back_after_ns;      /* that release read back this long after its trim's end
                                 * (cost_back_after; -1 not back, or no verdict yet) */
    double deferred_seconds;
};

/* Memory that comes back this soon after a trim ends was never worth returning:
 * the adaptive gap goes to its bound, and it and the budget hold trims back
 * however free the heap is -- until the host is quiet (below COST_QUIET_CPUS).
 * With 250 ms ticks, the reading two ticks after the trim is the one that can tell. */
#define COST_AT_ONCE_NS (600 * MT_MS)
#define COST_QUIET_CPUS 0.25 /* under a quarter of one CPU (and of its allowance) lately */

void cost_hk_init(struct cost_hk *h);

/* Every tick, before the policy: readings, re-fault windows, the gap. */
void cost_hk_tick(struct housekeeper *hk, struct cost_hk *h, const struct mt_config *c, int64_t now);

/* The factor on TrimIntervalSeconds and TrimMinGapSeconds now (1 = none). */
double cost_hk_gap_factor(const struct cost_hk *h, const struct mt_config *c);
/* Whether the last periodic or burst trim's release came back at once (see back_at_once). */
int cost_hk_back_at_once(const struct cost_hk *h);
/* Whether the host used less than COST_QUIET_CPUS over the CPU-share window (0 when unknown). */
int cost_hk_host_quiet(const struct cost_hk *h);

/* A periodic or burst trim wants to run now: may it? Counts the skips. With
 * mostly_free (policy.c: more than half of RSS is releasable, and the last release
 * did not come back at once) the budget does not hold it back (it is still
 * charged); a busy host still defers it, bounded. */
int cost_hk_gate(struct housekeeper *hk, struct cost_hk *h, const struct mt_config *c, int trigger,
                 int mostly_free, int64_t now);

/* A periodic or burst trim that took duration_ns has just ended: charge the budget. */
void cost_hk_charge(struct cost_hk *h, const struct mt_config *c, int64_t duration_ns);

#endif /* MEMTRIM_COST_HK_H */
