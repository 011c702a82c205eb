/*
 * latency.c - allocation latency for the demo host (see latency.h): the
 * histogram and the canary thread. The canary owns its histogram until
 * canary_stop joins it; the only shared state is the stop flag (atomic).
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "latency.h"

uint64_t lat_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Values below 32 are exact; above, 32 buckets per power of two. */
static unsigned lat_bucket(uint64_t v)
{
    if (v < 32)
        return (unsigned)v;
    int msb = 63 - __builtin_clzll(v);
    return (unsigned)(msb - 4) * 32 + (unsigned)((v >> (msb - 5)) & 31);
}

static uint64_t lat_bucket_upper(unsigned b)
{
    if (b < 32)
        return b;
    unsigned msb = b / 32 + 4, sub = b % 32;
    uint64_t lower = (uint64_t)(32 + sub) << (msb - 5);
    return lower + ((uint64_t)1 << (msb - 5)) - 1;
}

void lat_record(struct lat_hist *h, uint64_t ns)
{
    h->n[lat_bucket(ns)]++;
    h->count++;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

void lat_merge(struct lat_hist *into, const struct lat_hist *from)
{
    for (unsigned i = 0; i < LAT_BUCKETS; i++)
        into->n[i] += from->n[i];
    into->count += from->count;
    if (from->max_ns > into->max_ns)
        into->max_ns = from->max_ns;
}

uint64_t lat_percentile(const struct lat_hist *h, double p)
{
    if (h->count == 0)
        return 0;
    /* Nearest rank: the smallest value with at least p % at or below it. */
    uint64_t rank = (uint64_t)((p / 100.0) * (double)h->count + 0.999999);
    uint64_t seen = 0;
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < LAT_BUCKETS; i++) {
        seen += h->n[i];
        if (seen >= rank) {
            uint64_t up = lat_bucket_upper(i);
            return up < h->max_ns ? up : h->max_ns;
        }
    }
    return h->max_ns;
}

void lat_print(FILE *f, const char *name, const struct lat_hist *h)
{
    fprintf(f, "memtrim-demo: %s: %llu allocations, p50_ns=%llu p99_ns=%llu p999_ns=%llu max_ns=%llu\n",
            name, (unsigned long long)h->count, (unsigned long long)lat_percentile(h, 50),
            (unsigned long long)lat_percentile(h, 99), (unsigned long long)lat_percentile(h, 99.9),
            (unsigned long long)h->max_ns);
}

static void *canary_main(void *arg)
{
    struct canary *c = arg;
    struct timespec next;
    unsigned i = 0;

    pthread_setname_np(pthread_self(), "demo-canary");
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!atomic_load(&c->stop)) {
        size_t size = 16 + (i++ % 16) * 16; /* small blocks: the thread's own arena, not mmap */
        uint64_t t0 = lat_now_ns();
        volatile char *p = malloc(size);
        if (p)
            p[0] = 1;
        free((void *)p);
        lat_record(&c->hist, lat_now_ns() - t0);
        next.tv_nsec += 1000000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000;
        }
        /* Fallen behind (descheduled): start again from now rather than catch up in a burst. */
        uint64_t now = lat_now_ns(), due = (uint64_t)next.tv_sec * 1000000000u + (uint64_t)next.tv_nsec;
        if (due < now) {
            next.tv_sec = (time_t)(now / 1000000000u);
            next.tv_nsec = (long)(now % 1000000000u);
            continue;
        }
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
            ;
    }
    return NULL;
}

int canary_start(struct canary *c)
{
    memset(c, 0, sizeof(*c));
    atomic_store(&c->stop, 0);
    if (pthread_create(&c->thread, NULL, canary_main, c) != 0)
        return -1;
    c->started = 1;
    return 0;
}

void canary_stop(struct canary *c)
{
    if (!c->started)
        return;
    atomic_store(&c->stop, 1);
    pthread_join(c->thread, NULL);
    c->started = 0;
}
