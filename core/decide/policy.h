/*
 * policy.h - the periodic and burst trim decision as pure functions of
 * (configuration, state, readings, now): no clock, no probe, no lock, so the
 * tests drive it on synthetic time (tests/unit/test_policy.c). The
 * housekeeper (housekeeper.c) takes the readings, asks policy_decide, runs
 * what it decides through the cost gate (cost_hk.c) and the trim service,
 * and reports the outcome to policy_update. Pressure trims are decided
 * elsewhere (core/pressure/decision.c). A new input is a field of struct
 * policy_readings (or of the configuration), a new outcome a field of
 * struct policy_outcome: the two functions stay pure.
 */
#ifndef MEMTRIM_POLICY_H
#define MEMTRIM_POLICY_H

#include <stdint.h>
#include "config.h"

/* What the policy remembers between ticks (monotonic ns). */
struct policy_state {
    int64_t next_periodic; /* the next periodic decision is due then (the gap factor's) */
    int64_t base_periodic; /* one interval after the last decision, whatever the factor: a
                            * heap found mostly free then is decided on at once (policy.c) */
    int64_t last_burst;    /* start of the last burst trim that ran */
};

/* What the housekeeper read this tick. */
struct policy_readings {
    int suspended;          /* memtrim_suspend() depth > 0 */
    int heap_known;         /* a heap reading exists (else no estimate) */
    uint64_t releasable;    /* the releasable estimate, bytes */
    uint64_t rss;           /* RSS with that reading, bytes */
    double gap_factor;      /* cost_hk.c: TrimIntervalSeconds and TrimMinGapSeconds times this */
    int back_at_once;       /* cost_hk.c: the last periodic/burst release came back at once */
    int host_quiet;         /* cost_hk.c: the host used under a quarter of a CPU lately */
};

enum policy_want {
    POLICY_NOTHING = 0, /* nothing due */
    POLICY_TRIM,        /* run a trim of `trigger` (through the cost gate) */
    POLICY_SKIP,        /* a periodic decision that skips, counted as `skip_reason` */
};

struct policy_decision {
    int want;        /* enum policy_want */
    int trigger;     /* MT_TRIGGER_BURST or MT_TRIGGER_PERIODIC */
    int skip_reason; /* POLICY_SKIP: enum mt_skip_reason */
    int mostly_free; /* more than half of RSS is releasable, and the last release did not come
                      * back at once or the host is quiet: the adaptive gap and the trim
                      * budget do not hold this trim back (see policy.c) */
    int looked;      /* the base interval passed before the lengthened one and the heap was
                      * not mostly free: nothing decided, the next look an interval on */
};

/* What became of a POLICY_TRIM: the cost gate's answer, and whether the trim ran. */
struct policy_outcome {
    int gate; /* enum cost_gate: COST_GATE_RUN, _WAIT (host busy), _SKIP (budget) */
    int ran;  /* the trim ran (not refused as busy: another trim was running) */
    int64_t budget_ns; /* with COST_GATE_SKIP: when the budget allows the next trim */
};

/* The schedule at start, or after TrimIntervalSeconds changed (the first decision one
 * interval after now). */
void policy_reset(const struct mt_config *c, struct policy_state *s, int64_t now);

/* Whether a periodic decision may be due now (then it wants a fresh estimate): the
 * lengthened interval has passed, or the base one has (a mostly free heap does not wait
 * for the gap factor, and only a reading tells). */
int policy_periodic_due(const struct mt_config *c, const struct policy_state *s, int64_t now);

/* The decision: burst when much is releasable (at most one per TrimMinGapSeconds),
 * else the periodic trim when due, skipped with a reason when not worth it. */
struct policy_decision policy_decide(const struct mt_config *c, const struct policy_state *s,
                                     const struct policy_readings *r, int64_t now);

/* After the decision (out may be NULL for POLICY_NOTHING and POLICY_SKIP): the schedule. */
void policy_update(const struct mt_config *c, struct policy_state *s,
                   const struct policy_decision *d, const struct policy_outcome *out,
                   const struct policy_readings *r, int64_t now);

#endif /* MEMTRIM_POLICY_H */
