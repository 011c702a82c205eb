/*
 * stall.c - the stall canary (stall.h). The thread "memtrim-stall" waits on c->wake
 * until a trim begins, then takes one sample at a time: malloc and free of a block too
 * large for glibc's tcache and fastbins (so both take its arena's lock), timed, then
 * ~0.5 ms of sleep, until the trim ends. What it measures: docs/policy.md, "The cost
 * beside it". Locking: c->lock (stall.h), never held across a sample or the sleep; a
 * sample started while a trim runs counts for that trim (c->gen), and stall_end waits
 * for it: the longest wait ends when the release lets go of the arena, just before
 * stall_end is called.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "control.h"
#include "stall.h"

#define STALL_BLOCK 1536          /* above glibc's tcache (1032) and fastbins (160) */
#define STALL_PERIOD_NS 500000L   /* between two samples */

int stall_init(struct stall_canary *c)
{
    memset(c, 0, sizeof(*c));
    c->begin_wait_ns = STALL_BEGIN_WAIT_NS;
    if (pthread_mutex_init(&c->lock, NULL))
        return -ENOMEM;
    if (pthread_cond_init(&c->wake, NULL)) {
        pthread_mutex_destroy(&c->lock);
        return -ENOMEM;
    }
    pthread_condattr_t attr;
    int bad = pthread_condattr_init(&attr);
    if (!bad) {
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        bad = pthread_cond_init(&c->idle, &attr);
        pthread_condattr_destroy(&attr);
    }
    if (bad) {
        pthread_cond_destroy(&c->wake);
        pthread_mutex_destroy(&c->lock);
        return -ENOMEM;
    }
    return 0;
}

void stall_destroy(struct stall_canary *c)
{
    pthread_cond_destroy(&c->idle);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
}

/* One timed malloc/free, no lock held. */
static int64_t sample(void)
{
    int64_t t0 = mt_mono_ns();
    volatile char *p = malloc(STALL_BLOCK);
    if (p) {
        p[0] = 1;
        free((void *)p);
    }
    return mt_mono_ns() - t0;
}

static void *stall_main(void *arg)
{
    struct stall_canary *c = arg;
    const struct timespec period = {0, STALL_PERIOD_NS};

    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        if (!c->active && !mt_control("suite-stall-samples-at-rest")) { /* b56246d's control */
            pthread_cond_wait(&c->wake, &c->lock);
            continue;
        }
        uint64_t gen = c->gen;
        c->in_flight = 1;
        if (c->seen_gen != gen) {
            c->seen_gen = gen;
            pthread_cond_broadcast(&c->idle);
        }
        pthread_mutex_unlock(&c->lock);
        int64_t ns = sample();
        pthread_mutex_lock(&c->lock);
        c->in_flight = 0;
        if (c->gen == gen) {
            c->samples++;
            if (ns > c->max_ns)
                c->max_ns = ns;
        }
        pthread_cond_broadcast(&c->idle);
        if (c->stop || !c->active)
            continue;
        pthread_mutex_unlock(&c->lock);
        nanosleep(&period, NULL);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int stall_start(struct stall_canary *c)
{
    int rc = mt_thread_start(&c->thread, "memtrim-stall", stall_main, c);
    pthread_mutex_lock(&c->lock);
    c->running = rc == 0;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void stall_stop(struct stall_canary *c)
{
    pthread_mutex_lock(&c->lock);
    int running = c->running;
    c->stop = 1;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    if (!running)
        return;
    pthread_join(c->thread, NULL);
    pthread_mutex_lock(&c->lock);
    c->running = 0;
    pthread_mutex_unlock(&c->lock);
}

void stall_begin(struct stall_canary *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->gen++;
    c->active = 1;
    c->max_ns = 0;
    c->samples = 0;
    pthread_cond_signal(&c->wake);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += c->begin_wait_ns / 1000000000LL;
    until.tv_nsec += c->begin_wait_ns % 1000000000LL;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (c->running && !c->stop && c->seen_gen != c->gen)
        if (pthread_cond_timedwait(&c->idle, &c->lock, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&c->lock);
}

int64_t stall_end(struct stall_canary *c)
{
    if (!c)
        return -1;
    pthread_mutex_lock(&c->lock);
    c->active = 0;
    while (c->in_flight && !c->stop)
        pthread_cond_wait(&c->idle, &c->lock);
    int64_t ns = c->samples ? c->max_ns : -1;
    pthread_mutex_unlock(&c->lock);
    return ns;
}
