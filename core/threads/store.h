/*
 * store.h - the store thread: it owns the SQLite writer and is fed by ONE
 * queue, in which the trim service puts every measured trim (and, seconds
 * later, its re-fault figure) and the housekeeper every sample; it also reports the store's health and hands the
 * HTTP server a way to open readers (struct server_store). Private to core/.
 *
 * Locks: st->lock guards the queue, the stop flags and the counters;
 * st->health_lock the state and reason. Neither is held across an SQLite
 * call; a caller may hold the trim service's lock while it pushes (never
 * the reverse). available and generation are atomics.
 */
#ifndef MEMTRIM_STORE_H
#define MEMTRIM_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "common.h"
#include "server.h"
#include "trim.h"

#define STORE_QUEUE_LEN 256 /* trims and samples waiting for the writer */
#define STORE_QUEUE_SAMPLES 16 /* of which samples at most: trims are the ones to keep */
#define STORE_PATH_MAX 512

enum store_item_kind { STORE_TRIM = 0, STORE_SAMPLE, STORE_REFAULT };

struct store_item {
    int kind; /* enum store_item_kind */
    union {
        struct mt_trim_result trim;
        struct mt_snapshot sample;
        struct mt_refault refault; /* a trim's re-fault figure, known seconds after it */
    } u;
};

struct store {
    char path[STORE_PATH_MAX]; /* what the writer and readers open; "" = no store */
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop, done, kicked;           /* guarded by lock, with: */
    struct store_item *queue;         /* ring of STORE_QUEUE_LEN */
    struct store_item *batch;         /* STORE_BATCH items: the store thread's own */
    unsigned qhead, qcount, qsamples;
    uint64_t samples_stored, samples_dropped, trims_dropped, errors;
    atomic_int_fast64_t retention_ms; /* RetentionHours, changed at run time */

    pthread_mutex_t tick_lock;        /* held by the store thread across each tick (every
                                       * SQLite transaction), and across fork() by the fork
                                       * hooks: a child never inherits an open transaction's
                                       * locks in SQLite's per-process state */
    int fork_held;                    /* the fork hooks hold tick_lock (the forking thread) */
    pthread_mutex_t health_lock;
    char state[32];                   /* "opening", "ok", "retrying", "replaced", "disabled" */
    char reason[256];                 /* "" when healthy */
    atomic_int available;
    atomic_uint_fast64_t generation;  /* bumped when the store (re)opens */
    struct server_store readers;      /* for the HTTP server */
    struct trim_service *trims;       /* told the store's largest trim id at each opening */
    /* Tests only (store_test_tick), guarded by lock: 0 = the product's 250 ms tick, 1 s first retry. */
    int64_t test_tick_ns, test_retry_min_ns;
};

/* database: the Database key ("" = none; ":memory:" becomes a URI private to st). */
int store_init(struct store *st, const char *database, double retention_hours);
void store_destroy(struct store *st);
int store_start(struct store *st, char **err);
int store_stop(struct store *st); /* -ETIMEDOUT: the thread was left behind */
/* Tests only, never called by the product: wake every tick_ns and retry a failed
 * database first after retry_min_ns (doubling as usual); 0 restores the defaults. */
void store_test_tick(struct store *st, int64_t tick_ns, int64_t retry_min_ns);

void store_push_trim(struct store *st, const struct mt_trim_result *r);
void store_push_refault(struct store *st, const struct mt_refault *rf);
void store_push_sample(struct store *st, const struct mt_snapshot *s);
void store_wake(struct store *st);
/* fork(): hold the store between transactions (prepare), let it go (parent, child). */
void store_fork_prepare(struct store *st);
void store_fork_after(struct store *st);
void store_set_retention(struct store *st, double hours);

/* Whether samples are kept at all (a Database is configured). */
int store_enabled(const struct store *st);
/* The state, reason ("" when healthy) for /healthz. */
void store_health(struct store *st, char *state, size_t state_size, char *reason,
                  size_t reason_size);
/* Fill the store's counters of *out. */
void store_counters(struct store *st, struct mt_counters *out);

#endif /* MEMTRIM_STORE_H */
