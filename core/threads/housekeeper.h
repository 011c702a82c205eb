/*
 * housekeeper.h - the housekeeper thread of an instance (housekeeper.c):
 * what it is handed at start (struct housekeeper_deps: the parts it uses, as
 * server_start is handed its routes), its wakeups, its stop flag and its
 * counters. Locks: hk->lock guards the stop flag, the counters and the
 * published gauges, and is held only to read or bump them; deps is set before
 * the thread starts and read-only after.
 */
#ifndef MEMTRIM_HOUSEKEEPER_H
#define MEMTRIM_HOUSEKEEPER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "common.h"
#include "config.h"

struct snapshot_cache;
struct trim_service;
struct arenas_cache;
struct store;

/* What the housekeeper uses, each part with its own lock (the instance fills it). */
struct housekeeper_deps {
    struct mt_config_feed config;     /* re-read when PATCH /config changed it */
    const atomic_int *suspend_depth;  /* mt_suspend's nesting: > 0 holds trims off */
    struct snapshot_cache *cache;     /* the readings, on the probe budget */
    struct trim_service *trims;       /* runs the trims; counts skips and re-faults */
    struct arenas_cache *arenas;      /* the per-arena view, refreshed now and then */
    struct store *store;              /* takes the samples */
    void (*wake_pressure)(void *arg); /* a new limit, or a new estimate inside the zone */
    void *pressure;                   /* its argument: the engine (struct pressure), whose
                                       * zone holds a worker group's (pressure_set_zone) */
    const atomic_int *record_pid;     /* the pid stamped on samples (a leader's), NULL = 0 */
};

struct hk_state;

struct housekeeper {
    pthread_t thread;
    int started;
    struct hk_state *state;       /* made by housekeeper_start, the thread's from then on */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop, kicked;             /* guarded by lock, with: */
    uint64_t ticks;
    double cpu_seconds;
    /* published by cost_hk.c */
    double gap_factor, host_cpu_share, deferred_seconds;
    int deferring, back_at_once;
    int64_t back_after_ns;        /* the release of that verdict was read back this long
                                   * after its trim's end (-1: not back, or none yet) */
    struct mt_log_limit trim_log; /* burst trims' lines: 5 per 10 s (its own lock) */
    /* Tests only (housekeeper_test_tick): the wake interval, 0 = the product's 250 ms. */
    int64_t test_tick_ns;
    /* Tests only (housekeeper_test_host_cpu): the host's CPU time to read each tick. */
    int64_t (*test_host_cpu)(void *arg, int64_t now_ns);
    void *test_host_cpu_arg;
    struct housekeeper_deps deps; /* set by housekeeper_start, before the thread runs */
};

void housekeeper_init(struct housekeeper *hk);
void housekeeper_destroy(struct housekeeper *hk);
/* Start the thread, handed what it uses. */
int housekeeper_start(struct housekeeper *hk, const struct housekeeper_deps *deps, char **err);
void housekeeper_stop(struct housekeeper *hk);
void housekeeper_wake(struct housekeeper *hk);
/* Tests only, never set by the product: wake every `ns` instead of every
 * 250 ms (0 restores it), the heap probes' age limits (1 s calm, 250 ms near
 * the limit) shortened in proportion, so unit tests run in fewer seconds. */
void housekeeper_test_tick(struct housekeeper *hk, int64_t ns);
/* Tests only, never set by the product: each tick the host's CPU time (ns, memtrim's own
 * left out) is fn(arg, the tick's monotonic time) instead of /proc/self/stat's, so a test
 * chooses how busy the host is instead of depending on the scheduler (NULL restores it). */
void housekeeper_test_host_cpu(struct housekeeper *hk, int64_t (*fn)(void *arg, int64_t now_ns),
                               void *arg);
/* Fill the housekeeper's counters of *out. */
void housekeeper_counters(struct housekeeper *hk, struct mt_counters *out);

#endif /* MEMTRIM_HOUSEKEEPER_H */
