/*
 * instance.h - struct memtrim, the one object that owns everything an
 * instance runs: configuration, snapshot cache, trim service, housekeeper,
 * HTTP server. Private to core/; other modules use core.h.
 *
 * Locks, never nested: cfg_lock (the configuration), health_lock (the
 * store's state), the cache's and the trim service's own locks, hk_lock
 * (the housekeeper's wakeups and counters) and store_lock (the store
 * thread's queue and counters). suspend_depth and db_available are atomics.
 */
#ifndef MEMTRIM_INSTANCE_H
#define MEMTRIM_INSTANCE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "arenas.h"
#include "config.h"
#include "snapshot.h"
#include "trim.h"
#include "types.h"

struct server;
struct pressure;

struct hk_counters {
    uint64_t skips[MT_SKIP_COUNT];
    uint64_t ticks;
    double cpu_seconds;
    /* published by cost_hk.c */
    double gap_factor, host_cpu_share, deferred_seconds;
    int deferring;
};

#define STORE_SAMPLE_QUEUE 16

struct memtrim {
    pthread_mutex_t cfg_lock;
    struct mt_config cfg;
    uint64_t cfg_generation; /* bumped by PATCH /config; the housekeeper re-reads */
    int64_t patch_logged_ns;    /* cfg_lock: when a PATCH was last logged (rate limit) */
    unsigned patch_unlogged;    /* cfg_lock: PATCHes since then, not logged */

    struct snapshot_cache cache;
    struct trim_service trims;

    /* housekeeper */
    pthread_t hk_thread;
    int hk_started;
    pthread_mutex_t hk_lock;
    pthread_cond_t hk_cond;
    int hk_stop, hk_kicked;      /* guarded by hk_lock */
    struct hk_counters hk;       /* guarded by hk_lock */
    atomic_int suspend_depth;

    /* the pressure thread (pressure.c); created with the instance, freed with it */
    struct pressure *pressure;

    /* the store thread (store.c) */
    pthread_t store_thread;
    int store_started;
    pthread_mutex_t store_lock;
    pthread_cond_t store_cond;
    int store_stop, store_done, store_kicked;          /* guarded by store_lock, with: */
    struct mt_snapshot store_samples[STORE_SAMPLE_QUEUE];
    unsigned store_nsamples;
    uint64_t samples_stored, samples_dropped, store_errors;

    /* the store's health, written by the store thread */
    pthread_mutex_t health_lock;
    char db_state[32];
    char health_reason[256];
    atomic_int db_available;
    atomic_uint_fast64_t db_generation; /* bumped when the store (re)opens */
    char db_path[MT_CONFIG_STR_MAX + 64]; /* fixed at start (Database is not runtime) */

    struct server *server;
    int http_port;
    int64_t started_ms;
    pid_t pid; /* the process that started it (a forked child must not stop it) */

    struct arenas_cache arenas; /* /memory/arenas (advice.c); its own lock */
};

/* housekeeper.c */
int housekeeper_start(struct memtrim *mt, char **err);
void housekeeper_stop(struct memtrim *mt);
void housekeeper_wake(struct memtrim *mt);
void housekeeper_count_skip(struct memtrim *mt, int reason);

/* store.c */
int store_start(struct memtrim *mt, char **err);
int store_stop(struct memtrim *mt); /* -ETIMEDOUT: the thread was left behind */
void store_push_sample(struct memtrim *mt, const struct mt_snapshot *s);
void store_wake(struct memtrim *mt);

/* advice.c: the exit summary, logged by mt_destroy once the housekeeper stopped. */
void advice_exit_summary(struct memtrim *mt);

/* memtrim.c */
void mt_set_health(struct memtrim *mt, const char *db_state, const char *reason);

#endif /* MEMTRIM_INSTANCE_H */
