/*
 * pressure.h - the pressure path: one small thread per instance that trims
 * within milliseconds when RSS nears the memory limit, woken by the kernel
 * where it can be (cgroup v1 memory thresholds, cgroup v2 PSI and
 * memory.events) and polling /proc/self/statm where it cannot. The decision
 * is pressure_policy.c's pure functions; the thread is pressure.c. Private to core/.
 */
#ifndef MEMTRIM_PRESSURE_H
#define MEMTRIM_PRESSURE_H

#include <stdint.h>
#include "types.h"

struct memtrim;

/* What wakes the pressure thread (reported as "pressure_source"). */
enum pressure_source {
    PRESSURE_SOURCE_NONE = 0,     /* no memory limit known: nothing to watch */
    PRESSURE_SOURCE_POLL,         /* /proc/self/statm on a timer */
    PRESSURE_SOURCE_V1_THRESHOLD, /* cgroup v1 memory thresholds (eventfd) */
    PRESSURE_SOURCE_PSI,          /* cgroup v2 PSI trigger + memory.events, zone polled */
    PRESSURE_SOURCE_V2_EVENTS,    /* cgroup v2 memory.events alone, zone polled */
    PRESSURE_SOURCE_COUNT
};
const char *pressure_source_name(int source);

/* ---- the decision (pure; the unit tests drive it directly) -------------- */

struct pressure_input {
    int64_t now_ns;          /* monotonic */
    uint64_t rss;            /* bytes, from statm */
    int64_t limit;           /* effective memory limit, <= 0 none */
    double ratio;            /* PressureRatio */
    uint64_t min_releasable; /* TrimMinReleasableBytes */
    uint64_t estimate;       /* releasable estimate of the last heap reading */
    int estimate_known;      /* a heap reading exists */
    int64_t estimate_ns;     /* monotonic time of that reading */
};

enum pressure_rule {
    PRESSURE_RULE_GROWTH = 0, /* RSS grew by a step inside the zone */
    PRESSURE_RULE_LINE,       /* RSS at PressureRatio of the limit */
    PRESSURE_RULE_ESTIMATE,   /* free-but-resident heap would take it there */
};

struct pressure_state {
    uint64_t base_rss;    /* RSS low-water mark since the last pressure trim; 0 = unset */
    int64_t last_trim_ns; /* monotonic start of the last pressure trim */
    int futile;           /* growth trims in a row that released too little */
    int futile_timed;     /* line and estimate trims in a row that released too little */
    int rule;             /* with PRESSURE_TRIM: enum pressure_rule that fired */
    int zone;             /* the last reading was inside the zone */
    int64_t due_ns;       /* with PRESSURE_TRIM: since when the rule that fired held
                           * by its timing (back-off ended, estimate read); 0 growth */
};

enum pressure_verdict {
    PRESSURE_OUTSIDE = 0, /* below the zone: the slow pace */
    PRESSURE_WATCH,       /* inside the zone, no trim due */
    PRESSURE_TRIM,        /* trim now */
};

/* The zone's floor: half the limit, or the pressure line if that is lower. */
uint64_t pressure_zone_floor(int64_t limit, double ratio);

/* Decide on one reading; updates st (zone, base_rss). */
int pressure_decide(const struct pressure_input *in, struct pressure_state *st);

/* When a rule that waits on time (the line, the estimate) will next allow a trim, or INT64_MAX. */
int64_t pressure_next_due(const struct pressure_input *in, const struct pressure_state *st);

/* Record a pressure trim's outcome in st (futile back-off, growth base). */
void pressure_after_trim(struct pressure_state *st, int64_t start_ns, uint64_t rss_after,
                         int64_t released, uint64_t min_releasable);

/* ---- the thread (the instance calls these) ------------------------------ */

/* The state (at instance creation: readers may ask before the thread runs), then its thread. */
int pressure_create(struct memtrim *mt);
void pressure_free(struct memtrim *mt);
int pressure_start(struct memtrim *mt, char **err);
void pressure_stop(struct memtrim *mt); /* joins the thread; pressure_free() frees */
/* Re-read the configuration now (PATCH /config, resume). */
void pressure_wake(struct memtrim *mt);

/* What /memory/stats and /metrics show (mt_counters_get copies it). */
struct pressure_stats {
    int source;              /* enum pressure_source */
    int zone;                /* inside the zone at the last reading */
    uint64_t checks_inside;  /* readings inside the zone */
    uint64_t checks_outside; /* readings outside it */
    uint64_t kernel_wakeups; /* wakes by a kernel notification */
    uint64_t trims;          /* pressure trims run */
    uint64_t busy;           /* found another trim running */
    uint64_t reaction_hist[MT_REACTION_BUCKETS + 1];
    double reaction_seconds_sum;
    double reaction_last_seconds; /* -1 none yet */
    double cpu_seconds;           /* the pressure thread's CPU time */
};
void pressure_stats_get(struct memtrim *mt, struct pressure_stats *out);

#endif /* MEMTRIM_PRESSURE_H */
