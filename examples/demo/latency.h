/*
 * latency.h - the demo host's allocation latency: a log-linear histogram
 * (about 3 % resolution from 1 ns to hours, exact maximum) that one thread
 * fills and the main thread merges at the end, and the canary: a thread that
 * allocates and frees a small block every millisecond from its own arena
 * and records how long each took, so a stall inside the allocator (an arena
 * lock held by malloc_trim or mallinfo2) shows as latency.
 * SPDX-License-Identifier: MIT
 */
#ifndef MEMTRIM_DEMO_LATENCY_H
#define MEMTRIM_DEMO_LATENCY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define LAT_BUCKETS (64 * 32)

struct lat_hist {
    uint64_t n[LAT_BUCKETS];
    uint64_t count, max_ns;
};

/* One thread records into its own histogram; no locks. */
void lat_record(struct lat_hist *h, uint64_t ns);
void lat_merge(struct lat_hist *into, const struct lat_hist *from);
/* The p-th percentile (0-100), as the upper bound of its bucket; 0 when empty. */
uint64_t lat_percentile(const struct lat_hist *h, double p);
/* "NAME: N allocations, p50_ns=.. p99_ns=.. max_ns=.." on f. */
void lat_print(FILE *f, const char *name, const struct lat_hist *h);

uint64_t lat_now_ns(void);

struct canary {
    pthread_t thread;
    atomic_int stop;
    int started;
    struct lat_hist hist; /* the canary thread's until it is joined */
};

int canary_start(struct canary *c);
void canary_stop(struct canary *c); /* joins; hist is the caller's afterwards */

#endif /* MEMTRIM_DEMO_LATENCY_H */
