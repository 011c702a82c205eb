/*
 * stall.h - the stall canary: one memtrim thread that, while a trim's release runs,
 * times a small malloc/free every ~0.5 ms and keeps the longest single wait. At rest it
 * sleeps on a condition variable (no wake-ups). Owner: the instance starts and stops it;
 * the trimming thread (whichever runs trim_run) brackets a release with stall_begin and
 * stall_end. Locking: c->lock guards every field below but thread (the starter's);
 * never held across the canary's malloc or the release.
 */
#ifndef MEMTRIM_STALL_H
#define MEMTRIM_STALL_H

#include <pthread.h>
#include <stdint.h>

#define STALL_BEGIN_WAIT_NS 1000000LL /* 1 ms: a trim, a pressure trim too, is never held longer for it */

struct stall_canary {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the canary: a trim began, or stop */
    pthread_cond_t idle; /* a sample started or finished (CLOCK_MONOTONIC) */
    int stop, active, in_flight;
    uint64_t gen;        /* bumped by each stall_begin: a sample counts for its own trim */
    uint64_t seen_gen;   /* the canary's first sample of trim gen started */
    int64_t max_ns;      /* the longest sample of the current trim */
    unsigned samples;    /* samples taken in it */
    int64_t begin_wait_ns; /* stall_begin's bound: STALL_BEGIN_WAIT_NS (stall_init); a test
                            * that needs every trim measured sets a hang guard instead */
    pthread_t thread;
    int running;
};

int stall_init(struct stall_canary *c);     /* 0, or -ENOMEM */
void stall_destroy(struct stall_canary *c); /* after stall_stop */
int stall_start(struct stall_canary *c);    /* the thread; 0 or an errno */
void stall_stop(struct stall_canary *c);    /* joins it; at most one sample's wait */

/* Around a release (c may be NULL: nothing measured). stall_begin waits until the
 * canary's first sample started, at most c->begin_wait_ns (a canary not scheduled
 * in time, or not running, delays no trim further). stall_end returns the longest
 * wait of one sample taken while the release ran, in ns, or -1 when none was taken (the
 * canary is not running, or the release ended before its first sample). */
void stall_begin(struct stall_canary *c);
int64_t stall_end(struct stall_canary *c);

#endif /* MEMTRIM_STALL_H */
