/*
 * housekeeper.h - the housekeeper thread of an instance (housekeeper.c):
 * its wakeups, its stop flag and its counters. Private to core/.
 * Locks: hk->lock guards everything here but the thread handle, and is held
 * only to read or bump them.
 */
#ifndef MEMTRIM_HOUSEKEEPER_H
#define MEMTRIM_HOUSEKEEPER_H

#include <pthread.h>
#include <stdint.h>
#include "common.h"

struct memtrim;

struct housekeeper {
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop, kicked;             /* guarded by lock, with: */
    uint64_t ticks;
    double cpu_seconds;
    /* published by cost_hk.c */
    double gap_factor, host_cpu_share, deferred_seconds;
    int deferring, back_at_once;
    struct mt_log_limit trim_log; /* burst trims' lines: 5 per 10 s (its own lock) */
    /* Tests only (housekeeper_test_tick): the wake interval, 0 = the product's 250 ms. */
    int64_t test_tick_ns;
};

void housekeeper_init(struct housekeeper *hk);
void housekeeper_destroy(struct housekeeper *hk);
/* Start the thread that runs the policy of mt (its housekeeper is mt->hk). */
int housekeeper_start(struct memtrim *mt, char **err);
void housekeeper_stop(struct housekeeper *hk);
void housekeeper_wake(struct housekeeper *hk);
/* Tests only, never set by the product: wake every `ns` instead of every
 * 250 ms (0 restores it), the heap probes' age limits (1 s calm, 250 ms near
 * the limit) shortened in proportion, so unit tests run in fewer seconds. */
void housekeeper_test_tick(struct housekeeper *hk, int64_t ns);
/* Fill the housekeeper's counters of *out. */
void housekeeper_counters(struct housekeeper *hk, struct mt_counters *out);

#endif /* MEMTRIM_HOUSEKEEPER_H */
