/* test_stall.c - the stall canary (core/measure/stall.h): it samples only between
 * stall_begin and stall_end, stops cleanly; a real trim of a fragmented heap records the
 * host stall by trigger, and a trim without the canary records none (the control). */
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "churn.h"
#include "common.h"
#include "harness.h"
#include "snapshot.h"
#include "stall.h"
#include "trim.h"

static unsigned samples_now(struct stall_canary *c)
{
    pthread_mutex_lock(&c->lock);
    unsigned n = c->samples;
    pthread_mutex_unlock(&c->lock);
    return n;
}

static void test_canary_lifecycle(void)
{
    struct stall_canary c;

    stall_begin(NULL); /* no canary: nothing measured */
    CHECK(stall_end(NULL) == -1);

    CHECK_EQ_INT(stall_init(&c), 0);
    stall_begin(&c); /* not started: no sample, no wait past the bound */
    CHECK(stall_end(&c) == -1);
    CHECK_EQ_INT(stall_start(&c), 0);
    for (int round = 0; round < 20; round++) {
        stall_begin(&c); /* returns once the first sample started (or 1 ms) */
        while (samples_now(&c) < 3) /* a condition, not a sleep: it samples while active */
            sched_yield();
        int64_t ns = stall_end(&c);
        CHECK_MSG(ns > 0, "round %d: %lld", round, (long long)ns);
        unsigned after = samples_now(&c);
        CHECK(after >= 3);
        /* At rest it takes none: it parks on its condition (in futex, not between two
         * samples), and the count of this trim stays. */
        WAIT_FOR(harness_thread_waits("memtrim-stall"), 10);
        int parked = harness_thread_waits("memtrim-stall");
        CHECK_MSG(parked, "round %d: the canary never parked", round);
        CHECK_EQ_INT((int)samples_now(&c), (int)after);
        if (!parked)
            break; /* one round says it (each waits out the guard) */
    }
    stall_stop(&c);
    stall_begin(&c); /* stopped: nothing, no wait */
    CHECK(stall_end(&c) == -1);
    stall_stop(&c); /* twice is harmless */
    stall_destroy(&c);
}

static void test_stall_recorded_per_trigger(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    struct snapshot_cache cache;
    struct trim_service ts;
    struct stall_canary c;
    struct churn ch[4];
    struct mt_trim_result r;
    struct mt_counters k;

    snapshot_init(&cache);
    CHECK_EQ_INT(trim_service_init(&ts), 0);
    CHECK_EQ_INT(stall_init(&c), 0);
    /* Every trim below must be measured: stall_begin waits for the canary's first sample
     * (a hang guard, not the product's 1 ms: on a busy node the canary may not be
     * scheduled within 1 ms, and then, by design, that trim is not measured). */
    c.begin_wait_ns = 10LL * 1000000000LL;
    CHECK_EQ_INT(stall_start(&c), 0);

    /* The control: no canary attached, a real trim of a fragmented heap, nothing recorded. */
    churn_run(ch, 4, 24, 20);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    CHECK_MSG(r.released_bytes > (32 << 20), "released %lld", (long long)r.released_bytes);
    CHECK_EQ_INT(r.host_stall_measured, 0);
    churn_release(ch, 4);

    trim_set_stall(&ts, &c);
    for (int i = 0; i < 3; i++) {
        churn_run(ch, 4, 24, 20); /* 96 MB in 4 arenas, 2 % kept (~90 MB released) */
        CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, -1, 0, &r, NULL), 0);
        CHECK_MSG(r.released_bytes > (32 << 20), "released %lld", (long long)r.released_bytes);
        CHECK_MSG(r.host_stall_measured && r.host_stall_ns > 0, "trim %d: measured %d, %lld ns",
                  i, r.host_stall_measured, (long long)r.host_stall_ns);
        printf("# trim %d: %.1f MB released in %.3f ms, canary's longest wait %.3f ms\n", i,
               (double)r.released_bytes / 1048576.0, (double)r.duration_ns / 1e6,
               (double)r.host_stall_ns / 1e6);
        churn_release(ch, 4);
    }
    memset(&k, 0, sizeof(k));
    trim_counters(&ts, &k);
    CHECK_EQ_INT((int)k.host_stall_trims[MT_TRIGGER_MANUAL], 3);
    CHECK(k.host_stall_seconds[MT_TRIGGER_MANUAL] > 0);
    CHECK(k.host_stall_max_seconds[MT_TRIGGER_MANUAL] > 0);
    CHECK(k.host_stall_max_seconds[MT_TRIGGER_MANUAL] <= k.host_stall_seconds[MT_TRIGGER_MANUAL]);
    CHECK(k.host_stall_max_seconds[MT_TRIGGER_MANUAL] * 3 >= k.host_stall_seconds[MT_TRIGGER_MANUAL]);
    /* the control's trigger: a trim, no stall */
    CHECK_EQ_INT((int)k.trims[MT_TRIGGER_PERIODIC], 1);
    CHECK_EQ_INT((int)k.host_stall_trims[MT_TRIGGER_PERIODIC], 0);
    CHECK(k.host_stall_seconds[MT_TRIGGER_PERIODIC] == 0);
    CHECK(k.host_stall_max_seconds[MT_TRIGGER_PERIODIC] == 0);

    trim_set_stall(&ts, NULL);
    stall_stop(&c);
    stall_destroy(&c);
    trim_service_destroy(&ts);
    snapshot_destroy(&cache);
}

/* A trim's duration is its release's: the wait for the canary's first sample (at most
 * STALL_BEGIN_WAIT_NS, the whole of it for a canary that runs but is never scheduled) is
 * not charged to it. Deterministic: the call as a whole contains that whole wait, and the
 * duration nothing of it, so the duration is shorter than the call less the wait. */
static void test_canary_wait_not_in_duration(void)
{
    struct snapshot_cache cache;
    struct trim_service ts;
    struct stall_canary c;
    struct mt_trim_result r;

    snapshot_init(&cache);
    CHECK_EQ_INT(trim_service_init(&ts), 0);
    CHECK_EQ_INT(stall_init(&c), 0);
    c.running = 1; /* a canary that never takes its first sample: stall_begin waits it all */
    trim_set_stall(&ts, &c);
    for (int i = 0; i < 3; i++) {
        int64_t t0 = mt_mono_ns();
        CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, -1, 0, &r, NULL), 0);
        int64_t call_ns = mt_mono_ns() - t0;
        CHECK_MSG(r.duration_ns < call_ns - STALL_BEGIN_WAIT_NS,
                  "trim %d: duration %lld ns in a call of %lld ns", i, (long long)r.duration_ns,
                  (long long)call_ns);
        CHECK_EQ_INT(r.host_stall_measured, 0);
    }
    trim_set_stall(&ts, NULL);
    c.running = 0; /* no thread to join */
    stall_stop(&c);
    stall_destroy(&c);
    trim_service_destroy(&ts);
    snapshot_destroy(&cache);
}

int main(void)
{
    RUN(test_canary_lifecycle);
    RUN(test_canary_wait_not_in_duration);
    RUN(test_stall_recorded_per_trigger);
    return harness_end();
}
