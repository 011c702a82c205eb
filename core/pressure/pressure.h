/*
 * pressure.h - the pressure path: one small thread per instance that trims
 * within milliseconds when RSS nears the memory limit, woken by the kernel
 * where it can be (cgroup v1 memory thresholds, cgroup v2 PSI and
 * memory.events) and polling /proc/self/statm where it cannot. The decision
 * is decision.h's pure functions (this room); the thread is engine.c, its kernel
 * sources kernel.c.
 */
#ifndef MEMTRIM_PRESSURE_H
#define MEMTRIM_PRESSURE_H

#include <stdint.h>
#include "config.h"
#include "decision.h"
#include "zone.h"
#include "types.h"

struct pressure;
struct snapshot_cache;
struct trim_service;

/* What the pressure path uses, each part with its own lock (the instance fills it). */
struct pressure_deps {
    struct mt_config_feed config; /* re-read when PATCH /config changed it (and woken) */
    struct snapshot_cache *cache; /* the housekeeper's readings; its cgroup, found at start */
    struct trim_service *trims;   /* runs the trims (refuses them while suspended) */
};

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

/* ---- the thread (the instance calls these) ------------------------------ */

/* The state (at instance creation: readers may ask before the thread runs; NULL when out of
 * memory), handed what it uses; then its thread. Each takes NULL as "no pressure path". */
struct pressure *pressure_create(const struct pressure_deps *deps);
void pressure_free(struct pressure *p);
int pressure_start(struct pressure *p, char **err);
void pressure_stop(struct pressure *p); /* joins the thread; pressure_free() frees */
/* Re-read the configuration now (PATCH /config, resume). */
void pressure_wake(struct pressure *p);
/* The set whose decision this engine's kernel wake-ups drive (a worker group's leader: its
 * thread looks at the set at once, not at its next tick). woke(arg, 1) runs on the pressure
 * thread right after each kernel wake-up (v1 threshold, PSI trigger, memory.events), and
 * woke(arg, 0) when it handed its verdict to the set (zone.h's pressure_zone_hand), under
 * p->lock: it takes no lock of ours and never blocks. woke NULL takes it off; once
 * that returned it is not running and never runs again (the set may be freed). */
void pressure_kernel_listen(struct pressure *p, void (*woke)(void *arg, int kernel), void *arg);

/* ---- the zone: one per instance, the engine's ----------------------------
 * What the engine's thread last read of this process (its charge inside its zone), and the
 * set's: a worker group leader's look at its members (pressure_look), or, in a member,
 * what its leader told it (pressure_zone_heard). The housekeeper paces its heap probes by
 * it, the group thread its looks and reports. Guarded by p->lock (a leaf); any thread.
 * Each takes NULL as "no pressure path" (outside the zone, nothing known). */
struct pressure_zone_view {
    int own;                  /* this process's charge in its zone (the engine thread's reading) */
    int set;                  /* the set inside (or ahead of, or holding) its zone */
    int64_t usage, limit;     /* the set's, as the leader's last look read them; -1 none */
    const char *usage_source; /* "cgroup", "members" or "none" (static) */
    int64_t moving_until_ns;  /* the set's usage climbs: looks at the zone's pace until then */
};
void pressure_zone_view(struct pressure *p, struct pressure_zone_view *v);
int pressure_set_zone(struct pressure *p); /* the view's set alone */
/* A leader's look at its set (zone.h's pressure_zone_look on the engine's zone). */
void pressure_look(struct pressure *p, const struct pressure_look_in *li,
                   struct group_candidate *c, int n, const struct pressure_sums *sum,
                   struct pressure_look *out);
/* The leader told its members the zone and the grant (pressure_zone_told). */
void pressure_told(struct pressure *p, int zone, int act, int at_line, uint64_t threshold,
                   int64_t width_ns, int64_t now, uint64_t members_gen);
/* A member trimmed on its own: the set's growth counts from the low after it. */
void pressure_set_trimmed(struct pressure *p);
/* A member's leader said whether the set is in its zone; returns what it was before. */
int pressure_zone_heard(struct pressure *p, int zone);
/* The set's zone anew (a group starts or stops); this process's reading stays. */
void pressure_zone_forget(struct pressure *p);

/* What /memory/stats and /metrics show (mt_counters_get copies it). */
struct pressure_stats {
    int source;              /* enum pressure_source */
    int zone;                /* inside the zone at the last reading (the zone's own) */
    uint64_t checks_inside;  /* readings inside the zone */
    uint64_t checks_outside; /* readings outside it */
    uint64_t kernel_wakeups; /* wakes by a kernel notification */
    uint64_t trims;          /* pressure trims run */
    uint64_t last_chance_trims; /* of those, at a new memory.events max/oom (the limit reached) */
    uint64_t busy;           /* found another trim running */
    /* What pressure trims bought (pressure_judge_last): of the releases judged at the next
     * pressure trim, the bytes released, those that came back before it, and the trims
     * more than half of whose release came back; the growth rule's gap now. */
    uint64_t judged_released_bytes;
    uint64_t returned_bytes;
    uint64_t returned_trims;
    double backoff_seconds;
    uint64_t reaction_hist[MT_REACTION_BUCKETS + 1];
    double reaction_seconds_sum;
    double reaction_last_seconds; /* -1 none yet */
    double cpu_seconds;           /* the pressure thread's CPU time */
};
void pressure_stats_get(struct pressure *p, struct pressure_stats *out);

#endif /* MEMTRIM_PRESSURE_H */
