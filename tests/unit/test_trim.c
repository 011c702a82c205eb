/* test_trim.c - a measured malloc_trim returns churned memory; rate limit, coalescing, queue;
 * trim_request's rule for each trigger (suspend, busy, how often a refusal counts, the store woken). */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "churn.h"
#include "core.h"
#include "harness.h"
#include "arenas.h"
#include "probe.h"
#include "snapshot.h"
#include "trim.h"

static struct snapshot_cache cache;
static struct trim_service ts;

static void test_trim_returns_churn(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    struct churn c[4];
    struct mt_trim_result r;
    struct mt_heap live;
    /* Steady state first, as in a host that has run a while: its threads and arenas exist. */
    churn_run(c, 4, 4, 20);
    churn_release(c, 4);
    malloc_trim(0);
    uint64_t rss_start = probe_rss();

    churn_run(c, 4, 64, 20); /* 256 MB churned in 4 arenas, 2 % kept */
    uint64_t rss_churned = probe_rss();
    CHECK_MSG(rss_churned > rss_start + (150u << 20), "RSS %llu -> %llu after churn",
              (unsigned long long)rss_start, (unsigned long long)rss_churned);

    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, -1, 0, &r, NULL), 0);
    probe_heap(NULL, &live, 0);
    CHECK(r.id >= r.start_ms - 60000); /* ids count up from the clock at init (ms) */
    CHECK_EQ_INT(r.trigger, MT_TRIGGER_MANUAL);
    CHECK_EQ_INT(r.malloc_trim_ret, 1);
    CHECK(r.duration_ns > 0);
    CHECK(r.start_ms > 1700000000000LL);
    CHECK(r.rss_before_bytes >= rss_churned - (8u << 20));
    CHECK(r.released_bytes == (int64_t)r.rss_before_bytes - (int64_t)r.rss_after_bytes);
    CHECK_MSG(r.released_bytes > (100 << 20), "released %lld", (long long)r.released_bytes);
    CHECK(r.heap_free_before_bytes > (150u << 20));
    CHECK(!r.coalesced);
    CHECK_EQ_INT(r.nothing_reason, MT_NOTHING_NONE); /* it released: no reason */
    /* The bar: RSS after <= 1.5 x (live heap + RSS at start). */
    double bound = 1.5 * (double)(live.heap_in_use_bytes + rss_start);
    CHECK_MSG((double)r.rss_after_bytes <= bound, "RSS after %llu > bound %.0f (live %llu, start %llu)",
              (unsigned long long)r.rss_after_bytes, bound,
              (unsigned long long)live.heap_in_use_bytes, (unsigned long long)rss_start);

    /* The cache now shows the post-trim state: little left to release. */
    struct snapshot_want want = {.cheap_max_age_ns = 1000000000LL,
                                 .heap_max_age_ns = 1000000000LL, .budget_percent = 0.1};
    struct mt_snapshot s;
    snapshot_get(&cache, &want, &s);
    CHECK_MSG(s.releasable_estimate_bytes < (16u << 20), "estimate %llu after trim",
              (unsigned long long)s.releasable_estimate_bytes);
    CHECK(s.heap.heap_free_bytes > 0);

    struct mt_counters k;
    memset(&k, 0, sizeof(k));
    trim_counters(&ts, &k);
    CHECK_EQ_INT(k.trims[MT_TRIGGER_MANUAL], 1);
    CHECK_EQ_INT(k.released_bytes[MT_TRIGGER_MANUAL], r.released_bytes);
    uint64_t hist = 0;
    for (int i = 0; i <= MT_HIST_BUCKETS; i++)
        hist += k.trim_hist[i];
    CHECK_EQ_INT(hist, 1);
    churn_release(c, 4);
}

/* The last per-arena reading's sums, from a malloc_info of the test's own (the
 * instance's callback reads its cache; this one has none). */
static int pinned_now(void *arg, struct mt_arenas_pinned *out)
{
    struct mt_arenas a;
    char *err = NULL;
    (void)arg;
    memset(out, 0, sizeof(*out));
    if (arenas_read(&a, &err) != 0) {
        free(err);
        return -1;
    }
    for (int i = 0; i < a.count; i++) {
        out->free_bytes += a.arena[i].free_bytes;
        out->releasable_bytes += a.arena[i].releasable_bytes;
        out->small_bytes += a.arena[i].pinned_small_bytes;
        out->edge_bytes += a.arena[i].pinned_edge_bytes;
        out->top_bytes += a.arena[i].pinned_top_bytes;
    }
    arenas_free(&a);
    return 0;
}

/* A second trim of a heap just trimmed releases nothing, and its record says why:
 * a reason its readings can tell (never none, unmeasured or unexplained). */
static void test_trim_that_releases_nothing_says_why(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    struct churn c[2];
    struct mt_trim_result r;
    struct mt_arenas_pinned p;
    struct snapshot_cache fresh; /* its probe budget not spent by the tests before */

    snapshot_init(&fresh);
    churn_run(c, 2, 16, 20);
    churn_release(c, 2);
    malloc_trim(0); /* all the heap gives back, given back */
    malloc_trim(0);
    ts.pinned = pinned_now;
    CHECK_EQ_INT(trim_run(&ts, &fresh, MT_TRIGGER_MANUAL, 0, -1, 0, &r, NULL), 0);
    ts.pinned = NULL;
    CHECK_MSG(r.released_bytes < 4096, "the second trim released %lld", (long long)r.released_bytes);
    CHECK(!r.heap_skipped);
    CHECK_MSG(r.nothing_reason != MT_NOTHING_NONE && r.nothing_reason != MT_NOTHING_NOT_MEASURED &&
                  r.nothing_reason != MT_NOTHING_UNEXPLAINED,
              "reason %d (%s)", r.nothing_reason, mt_nothing_name(r.nothing_reason) ?
                                                      mt_nothing_name(r.nothing_reason) : "none");
    CHECK(mt_nothing_name(r.nothing_reason) != NULL);
    CHECK_EQ_INT(mt_nothing_parse(mt_nothing_name(r.nothing_reason)), r.nothing_reason);
    /* Without a per-arena reading, free memory above a page cannot be told apart. */
    if (r.heap_free_before_bytes >= 4096)
        CHECK_EQ_INT(trim_nothing_reason(&r, NULL, 4096), MT_NOTHING_UNEXPLAINED);
    CHECK_EQ_INT(pinned_now(NULL, &p), 0);
    printf("   released %lld, free before %llu: %s\n", (long long)r.released_bytes,
           (unsigned long long)r.heap_free_before_bytes,
           mt_nothing_name(r.nothing_reason) ? mt_nothing_name(r.nothing_reason) : "none");
    snapshot_destroy(&fresh);
}

/* Each reason from the readings that tell it apart. */
static void test_nothing_reasons(void)
{
    struct mt_trim_result r;
    struct mt_arenas_pinned p = {.free_bytes = 1 << 20};
    memset(&r, 0, sizeof(r));
    r.released_bytes = 4096;
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_NONE);
    r.released_bytes = 4095;
    r.heap_skipped = 1;
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_NOT_MEASURED);
    r.heap_skipped = 0;
    r.heap_free_before_bytes = 4095;
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_FREE);
    r.heap_free_before_bytes = 1 << 20;
    r.released_bytes = -8192; /* RSS grew meanwhile */
    CHECK_EQ_INT(trim_nothing_reason(&r, NULL, 4096), MT_NOTHING_UNEXPLAINED);
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_UNEXPLAINED); /* no figures */
    p.releasable_bytes = 4096;
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_NOT_RESIDENT);
    p.releasable_bytes = 4095;
    p.small_bytes = 300, p.edge_bytes = 200, p.top_bytes = 100;
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_PINNED_SMALL);
    p.edge_bytes = 400;
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_PINNED_EDGE);
    p.top_bytes = 500;
    CHECK_EQ_INT(trim_nothing_reason(&r, &p, 4096), MT_NOTHING_PINNED_TOP);
    CHECK(mt_nothing_name(MT_NOTHING_NONE) == NULL);
    CHECK(mt_nothing_name(MT_NOTHING_COUNT) == NULL);
    CHECK_EQ_INT(mt_nothing_parse("no such reason"), MT_NOTHING_UNEXPLAINED);
    for (int i = 1; i < MT_NOTHING_COUNT; i++)
        CHECK_EQ_INT(mt_nothing_parse(mt_nothing_name(i)), i);
}

static void test_rate_limit(void)
{
    struct mt_trim_result r;
    int64_t retry = 0;
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 60000, 0, &r, &retry), 0);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 60000, 0, &r, &retry), -EAGAIN);
    CHECK_MSG(retry > 59000 && retry <= 60000, "retry after %lld", (long long)retry);
    /* Other triggers are not rate-limited. */
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    CHECK_EQ_INT(r.trigger, MT_TRIGGER_PERIODIC);
    /* After the interval it succeeds again. */
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 0, 0, &r, &retry), 0);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_PRESSURE + 5, 0, -1, 0, &r, NULL), -EINVAL);
}

static struct mt_trim_result waiter_result;
static int waiter_rc = -1;
static void *waiter(void *arg)
{
    (void)arg;
    waiter_rc = trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, -1, TRIM_WAIT_IF_BUSY,
                         &waiter_result, NULL);
    return NULL;
}

static unsigned waiting(void)
{
    pthread_mutex_lock(&ts.lock);
    unsigned n = ts.waiting;
    pthread_mutex_unlock(&ts.lock);
    return n;
}

/* Play a trim that runs, deterministically: hold the service as running, then
 * end it with a result of the given id, waking whoever waits on it. */
static void hold_running(int on)
{
    pthread_mutex_lock(&ts.lock);
    ts.running = on;
    pthread_mutex_unlock(&ts.lock);
}

static void end_running(int64_t id, int64_t released)
{
    pthread_mutex_lock(&ts.lock);
    memset(&ts.last, 0, sizeof(ts.last));
    ts.last.id = id;
    ts.last.released_bytes = released;
    ts.running = 0;
    ts.generation++;
    pthread_cond_broadcast(&ts.done);
    pthread_mutex_unlock(&ts.lock);
}

/* trim_request on its own thread (one that waits for a running trim). */
struct shared_call {
    struct trim_service *ts;
    struct snapshot_cache *cache;
    const struct trim_ask *ask;
    struct mt_trim_result r;
    int rc;
};

static void *shared_request(void *arg)
{
    struct shared_call *c = arg;
    c->rc = trim_request(c->ts, c->cache, c->ask, &c->r, NULL);
    return NULL;
}

/* A request that arrives while a trim runs gets that trim's result. */
static void test_coalesce(void)
{
    pthread_t t;
    struct mt_trim_result r;
    hold_running(1);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), -EBUSY);
    pthread_create(&t, NULL, waiter, NULL);
    WAIT_FOR(waiting(), 10);
    CHECK_EQ_INT(waiting(), 1);  /* it waits for the running trim... */
    CHECK_EQ_INT(waiter_rc, -1); /* ...and has not returned */
    end_running(4242, 77);
    pthread_join(t, NULL);
    CHECK_EQ_INT(waiter_rc, 0);
    CHECK_EQ_INT(waiter_result.id, 4242);
    CHECK_EQ_INT(waiter_result.released_bytes, 77);
    CHECK_EQ_INT(waiter_result.coalesced, 1);
    struct mt_counters k;
    memset(&k, 0, sizeof(k));
    trim_counters(&ts, &k);
    CHECK_EQ_INT(k.manual_coalesced, 1);
}

/* A manual request that shared a running trim counts for the manual interval
 * (the dashboard's second "Trim now" within it gets 429 even when the first one
 * met a periodic trim), and a request inside the interval is refused at once,
 * not queued behind a running trim. */
static void *manual_waiter(void *arg)
{
    (void)arg;
    waiter_rc = trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 60000, TRIM_WAIT_IF_BUSY,
                         &waiter_result, NULL);
    return NULL;
}

static void test_coalesced_counts_for_the_interval(void)
{
    pthread_t t;
    struct mt_trim_result r;
    int64_t retry = 0;
    pthread_mutex_lock(&ts.lock);
    ts.last_manual_mono_ns = 0; /* no manual trim yet */
    pthread_mutex_unlock(&ts.lock);
    hold_running(1);
    waiter_rc = -1;
    pthread_create(&t, NULL, manual_waiter, NULL);
    WAIT_FOR(waiting(), 10);
    CHECK_EQ_INT(waiting(), 1);
    end_running(4243, 0);
    pthread_join(t, NULL);
    CHECK_EQ_INT(waiter_rc, 0);
    CHECK_EQ_INT(waiter_result.coalesced, 1);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 60000, TRIM_WAIT_IF_BUSY, &r, &retry),
                 -EAGAIN);
    CHECK_MSG(retry > 59000 && retry <= 60000, "retry after %lld", (long long)retry);
    /* Inside the interval while a trim runs: the limit is checked before the
     * running trim (without TRIM_WAIT_IF_BUSY, so that a regression reads
     * -EBUSY here rather than waiting on a trim that never ends). */
    hold_running(1);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 60000, 0, &r, &retry), -EAGAIN);
    hold_running(0);
    /* Without the limit (-1: the housekeeper's and the pressure thread's trims)
     * nothing changes. */
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, -1, 0, &r, NULL), 0);
}

/* Ids never repeat over the life of a store: a second service (a restart)
 * starts above the first one's ids, and above the store's largest id once it
 * has read it, even if that is ahead of the clock (a clock set back). */
static void test_ids_unique_across_restarts(void)
{
    struct trim_service a, b;
    struct mt_trim_result r;
    int64_t last;

    CHECK_EQ_INT(trim_service_init(&a), 0);
    CHECK_EQ_INT(trim_run(&a, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    CHECK_EQ_INT(trim_run(&a, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    last = r.id;
    trim_service_destroy(&a);

    CHECK_EQ_INT(trim_service_init(&b), 0);
    trim_ids_above(&b, last);
    CHECK_EQ_INT(trim_run(&b, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    CHECK_MSG(r.id > last, "id %lld after %lld", (long long)r.id, (long long)last);
    int64_t ahead = r.id + 1000000; /* the store holds ids ahead of the clock */
    trim_ids_above(&b, ahead);
    CHECK_EQ_INT(trim_run(&b, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    CHECK_EQ_INT(r.id, ahead + 1);
    trim_ids_above(&b, 5); /* a lower maximum never moves the ids back */
    int64_t before = r.id;
    CHECK_EQ_INT(trim_run(&b, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    CHECK_EQ_INT(r.id, before + 1);
    trim_service_destroy(&b);
}

/* #31 F7: a member-supplied or stored id near INT64_MAX once made the next id overflow
 * (UBSan aborted the host; the plain build handed out negative ids). Ids past
 * MT_TRIM_ID_MAX are not followed, and the next id stops at it rather than pass it. */
static void test_ids_never_overflow(void)
{
    struct trim_service svc;
    struct mt_trim_result r;

    CHECK_EQ_INT(trim_service_init(&svc), 0);
    CHECK_EQ_INT(trim_run(&svc, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    int64_t sane = r.id;
    trim_ids_above(&svc, INT64_MAX - 1);
    trim_ids_above(&svc, INT64_MAX);
    trim_ids_above(&svc, MT_TRIM_ID_MAX);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(trim_run(&svc, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
        CHECK_EQ_INT(r.id, sane + 1 + i);
    }
    trim_ids_above(&svc, MT_TRIM_ID_MAX - 1); /* the last id in range */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(trim_run(&svc, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
        CHECK_EQ_INT(r.id, MT_TRIM_ID_MAX);
    }
    trim_service_destroy(&svc);
}

/* Every trim reaches the sink (the store's queue in an instance), in id order;
 * a coalesced request is not a trim of its own. */
static struct mt_trim_result sunk[64];
static unsigned nsunk;
static void sink(void *arg, const struct mt_trim_result *r)
{
    (void)arg;
    if (nsunk < 64)
        sunk[nsunk++] = *r;
}

static void test_sink(void)
{
    struct mt_trim_result r;
    struct mt_counters before, after;
    memset(&before, 0, sizeof(before));
    memset(&after, 0, sizeof(after));
    trim_counters(&ts, &before);
    ts.sink = sink;
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    ts.sink = NULL;
    trim_counters(&ts, &after);
    CHECK_EQ_INT(nsunk, 5);
    CHECK_EQ_INT(after.trims[MT_TRIGGER_PERIODIC] - before.trims[MT_TRIGGER_PERIODIC], 5);
    for (unsigned i = 1; i < nsunk; i++)
        CHECK_EQ_INT(sunk[i].id, sunk[i - 1].id + 1);
    CHECK_EQ_INT(sunk[nsunk - 1].id, r.id);
    CHECK_EQ_INT(sunk[0].trigger, MT_TRIGGER_PERIODIC);
}

static int nwoken;
static void woken(void *arg)
{
    nwoken++;
}

static uint64_t skips(int reason)
{
    struct mt_counters c;
    memset(&c, 0, sizeof(c));
    trim_counters(&ts, &c);
    return c.skips[reason];
}

/* trim_request: every trigger's rule as data (trim.c's table). */
static void test_request_rules(void)
{
    atomic_int depth;
    struct mt_trim_result r;
    atomic_init(&depth, 1);
    ts.suspend_depth = &depth;
    ts.sink_wake = woken;
    nwoken = 0;

    /* Suspended: periodic, burst and pressure are refused and counted; manual runs. */
    uint64_t susp = skips(MT_SKIP_SUSPENDED);
    struct trim_ask periodic = {MT_TRIGGER_PERIODIC, 0, -1, 0, 0, 0, 0};
    struct trim_ask burst = {MT_TRIGGER_BURST, 0, -1, 0, 0, 0, 0};
    struct trim_ask pressure = {MT_TRIGGER_PRESSURE, 0, -1, 0, 0, 0, 0};
    struct trim_ask manual = {MT_TRIGGER_MANUAL, 0, -1, 0, 0, 0, 0};
    CHECK_EQ_INT(trim_request(&ts, &cache, &periodic, &r, NULL), -EPERM);
    CHECK_EQ_INT(trim_request(&ts, &cache, &periodic, &r, NULL), -EPERM);
    CHECK_EQ_INT(trim_request(&ts, &cache, &burst, &r, NULL), -EPERM);
    CHECK_EQ_INT(skips(MT_SKIP_SUSPENDED) - susp, 3); /* each counted */
    /* Polled near the limit: counted at most once a second (however slow this machine). */
    double t0 = harness_now_s();
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(trim_request(&ts, &cache, &pressure, &r, NULL), -EPERM);
    uint64_t n = skips(MT_SKIP_SUSPENDED) - susp - 3;
    CHECK_MSG(n >= 1 && (double)n <= 1 + (harness_now_s() - t0), "%llu counted",
              (unsigned long long)n);
    CHECK_EQ_INT(trim_request(&ts, &cache, &manual, &r, NULL), 0);
    CHECK_EQ_INT(nwoken, 1); /* a manual result goes to the store at once */

    /* Resumed: a periodic trim runs without waking the store; a pressure trim wakes it. */
    atomic_store(&depth, 0);
    CHECK_EQ_INT(trim_request(&ts, &cache, &periodic, &r, NULL), 0);
    CHECK_EQ_INT(nwoken, 1);
    CHECK_EQ_INT(trim_request(&ts, &cache, &pressure, &r, NULL), 0);
    CHECK_EQ_INT(nwoken, 2);

    /* Another trim runs: periodic and pressure are refused (busy), the pressure path's
     * refusals counted once a second as well. */
    uint64_t busy = skips(MT_SKIP_BUSY);
    hold_running(1);
    CHECK_EQ_INT(trim_request(&ts, &cache, &periodic, &r, NULL), -EBUSY);
    CHECK_EQ_INT(trim_request(&ts, &cache, &burst, &r, NULL), -EBUSY);
    CHECK_EQ_INT(skips(MT_SKIP_BUSY) - busy, 2);
    t0 = harness_now_s();
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(trim_request(&ts, &cache, &pressure, &r, NULL), -EBUSY);
    n = skips(MT_SKIP_BUSY) - busy - 2;
    CHECK_MSG(n >= 1 && (double)n <= 1 + (harness_now_s() - t0), "%llu counted",
              (unsigned long long)n);
    /* The group's pressure row (a member asked by its leader, the leader's own): it shares
     * the running trim instead of being refused. */
    struct trim_ask group_pressure = {MT_TRIGGER_PRESSURE, 0, -1, 0, 1, 0, 0};
    struct trim_ask group_manual = {MT_TRIGGER_MANUAL, 0, 60000, 0, 1, 0, 0};
    uint64_t shared = ts.coalesced;
    struct shared_call sc = {.ts = &ts, .cache = &cache, .ask = &group_pressure};
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, shared_request, &sc), 0);
    WAIT_FOR(waiting() == 1, 60);
    end_running(99, 0);
    pthread_join(th, NULL);
    CHECK_EQ_INT(sc.rc, 0);
    CHECK(sc.r.coalesced && ts.coalesced == shared + 1);
    CHECK_EQ_INT(nwoken, 2); /* a shared result was stored by the trim that ran it */
    /* ... and obeys the host's suspend, its refusals counted once a second. */
    atomic_store(&depth, 1);
    pthread_mutex_lock(&ts.lock);
    ts.last_skip_ns[MT_TRIGGER_PRESSURE][MT_SKIP_SUSPENDED] = 0; /* none counted yet */
    pthread_mutex_unlock(&ts.lock);
    susp = skips(MT_SKIP_SUSPENDED);
    CHECK_EQ_INT(trim_request(&ts, &cache, &group_pressure, &r, NULL), -EPERM);
    CHECK_EQ_INT(trim_request(&ts, &cache, &group_pressure, &r, NULL), -EPERM);
    CHECK_EQ_INT(skips(MT_SKIP_SUSPENDED) - susp, 1);
    /* The group's manual row runs while suspended, and keeps the manual rate limit. */
    pthread_mutex_lock(&ts.lock);
    ts.last_manual_mono_ns = 0; /* no manual request before this one */
    uint64_t limited = ts.rate_limited;
    pthread_mutex_unlock(&ts.lock);
    int64_t retry = 0;
    CHECK_EQ_INT(trim_request(&ts, &cache, &group_manual, &r, NULL), 0);
    CHECK_EQ_INT(trim_request(&ts, &cache, &group_manual, &r, &retry), -EAGAIN);
    CHECK(retry > 0 && ts.rate_limited == limited + 1);
    /* A group trim made of several processes' trims is admitted by the same limit. */
    CHECK_EQ_INT(trim_manual_admit(&ts, 60000, &retry), -EAGAIN);
    CHECK(ts.rate_limited == limited + 2);
    atomic_store(&depth, 0);
    struct trim_ask bad = {MT_TRIGGER_COUNT, 0, -1, 0, 0, 0, 0};
    CHECK_EQ_INT(trim_request(&ts, &cache, &bad, &r, NULL), -EINVAL);
    ts.suspend_depth = NULL;
    ts.sink_wake = NULL;
}

/* trim_request's member row (TRIM_ASK_MEMBER: a group's member trimming on its own in the
 * zone, core/group/group_member.c): pressure only; it starts only inside its window (its
 * slot of the leader's stagger), refused outside it and counted as "stagger" once a
 * second; it obeys the host's suspend; inside its window it runs and wakes the store. */
static void test_request_member_row(void)
{
    atomic_int depth;
    struct mt_trim_result r;
    int64_t retry = 0, now = mt_mono_ns();
    atomic_init(&depth, 0);
    ts.suspend_depth = &depth;
    ts.sink_wake = woken;
    nwoken = 0;
    struct trim_ask own = {.trigger = MT_TRIGGER_PRESSURE, .min_interval_ms = -1,
                           .group = TRIM_ASK_MEMBER, .open_ns = now + 60 * MT_SEC,
                           .close_ns = now + 61 * MT_SEC};
    uint64_t stagger = skips(MT_SKIP_STAGGER), ran = ts.trims[MT_TRIGGER_PRESSURE];
    /* before its slot: refused, told when it opens, counted once a second */
    double t0 = harness_now_s();
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(trim_request(&ts, &cache, &own, &r, &retry), -EAGAIN);
    CHECK_MSG(retry > 59000 && retry <= 60000, "retry after %lld ms", (long long)retry);
    uint64_t n = skips(MT_SKIP_STAGGER) - stagger;
    CHECK_MSG(n >= 1 && (double)n <= 1 + (harness_now_s() - t0), "%llu counted",
              (unsigned long long)n);
    /* after it closed: refused, no time to wait for */
    own.open_ns = now - 2 * MT_SEC;
    own.close_ns = now - MT_SEC;
    CHECK_EQ_INT(trim_request(&ts, &cache, &own, &r, &retry), -EAGAIN);
    CHECK_EQ_INT(retry, -1);
    CHECK_EQ_INT(ts.trims[MT_TRIGGER_PRESSURE], ran); /* none of those ran */
    /* inside it: suspended, refused; resumed, it runs and its result is stored at once */
    own.open_ns = now - MT_SEC;
    own.close_ns = mt_mono_ns() + 60 * MT_SEC;
    atomic_store(&depth, 1);
    CHECK_EQ_INT(trim_request(&ts, &cache, &own, &r, NULL), -EPERM);
    atomic_store(&depth, 0);
    CHECK_EQ_INT(trim_request(&ts, &cache, &own, &r, NULL), 0);
    CHECK(ts.trims[MT_TRIGGER_PRESSURE] == ran + 1 && r.trigger == MT_TRIGGER_PRESSURE);
    CHECK_EQ_INT(nwoken, 1);
    /* a member alone asks for nothing but pressure */
    own.trigger = MT_TRIGGER_MANUAL;
    CHECK_EQ_INT(trim_request(&ts, &cache, &own, &r, NULL), -EINVAL);
    own.trigger = MT_TRIGGER_PERIODIC;
    CHECK_EQ_INT(trim_request(&ts, &cache, &own, &r, NULL), -EINVAL);
    ts.suspend_depth = NULL;
    ts.sink_wake = NULL;
}

/* A host's suspend and a trim that obeys it cannot cross: the check is made
 * under the lock that starts the trim, and mt_suspend (trim_hold) waits out
 * an automatic trim that had already begun, but not a manual one. Before,
 * the check came before trim_run, so a periodic trim could start after the
 * host's suspend returned (valgrind's slow housekeeper showed it). */
static atomic_int hold_depth;
static atomic_int hold_returned;

static void *holder(void *arg)
{
    (void)arg;
    atomic_fetch_add(&hold_depth, 1);
    trim_hold(&ts);
    atomic_store(&hold_returned, 1);
    return NULL;
}

static void test_suspend_and_trim_cannot_cross(void)
{
    pthread_t t;
    struct mt_trim_result r;
    atomic_init(&hold_depth, 0);
    atomic_init(&hold_returned, 0);
    ts.suspend_depth = &hold_depth;
    /* A periodic trim is running when the host suspends: the suspend waits for it. */
    pthread_mutex_lock(&ts.lock);
    ts.running = 1;
    ts.running_obeys = 1;
    pthread_mutex_unlock(&ts.lock);
    pthread_create(&t, NULL, holder, NULL);
    WAIT_FOR(waiting(), 10);
    CHECK_EQ_INT(waiting(), 1);
    CHECK_EQ_INT(atomic_load(&hold_returned), 0);
    pthread_mutex_lock(&ts.lock);
    ts.running_obeys = 0;
    pthread_mutex_unlock(&ts.lock);
    end_running(500, 0);
    pthread_join(t, NULL);
    CHECK_EQ_INT(atomic_load(&hold_returned), 1);
    /* Suspended: a trim that obeys is refused under the lock, even when the
     * caller did not check first; a manual one runs. */
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_PERIODIC, 0, -1, TRIM_OBEYS_SUSPEND, &r, NULL),
                 -EPERM);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, -1, 0, &r, NULL), 0);
    /* A manual trim running does not hold the host's suspend. */
    hold_running(1);
    atomic_store(&hold_returned, 0);
    pthread_create(&t, NULL, holder, NULL);
    pthread_join(t, NULL);
    CHECK_EQ_INT(atomic_load(&hold_returned), 1);
    hold_running(0);
    ts.suspend_depth = NULL;
}

int main(void)
{
    snapshot_init(&cache);
    trim_service_init(&ts);
    RUN(test_trim_returns_churn);
    RUN(test_nothing_reasons);
    RUN(test_trim_that_releases_nothing_says_why);
    RUN(test_rate_limit);
    RUN(test_coalesce);
    RUN(test_coalesced_counts_for_the_interval);
    RUN(test_sink);
    RUN(test_request_rules);
    RUN(test_request_member_row);
    RUN(test_suspend_and_trim_cannot_cross);
    RUN(test_ids_unique_across_restarts);
    RUN(test_ids_never_overflow);
    trim_service_destroy(&ts);
    snapshot_destroy(&cache);
    return harness_end();
}
