/*
 * test_cost.c - what trimming costs the host (core/decide/cost.c, core/threads/cost_hk.c):
 * the pure rules on given readings (re-fault bound, adaptive gap, CPU
 * share, deferral and its bound, budget), then the real thing: re-faults
 * of a heap that is re-touched after a trim, and a running instance whose
 * gap grows and resets, whose trims wait for a busy host (its CPU time as the
 * test chooses) up to the bound, and whose periodic trims stay within TrimBudgetPercent.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api.h"
#include "core.h"
#include "cost.h"
#include "cost_hk.h"
#include "housekeeper.h"
#include "harness.h"
#include "instance.h"
#include "cpuquota.h"
#include "probe.h"
#include "snapshot.h"
#include "trim.h"
#include "start.h"

#define MIB (1 << 20)
#define SEC 1000000000LL

/* ---- the pure rules ------------------------------------------------------------ */

static void test_refault_bound(void)
{
    struct mt_trim_result r;
    struct cost_refault w;
    memset(&r, 0, sizeof(r));
    r.id = 5;
    r.trigger = MT_TRIGGER_BURST;
    r.released_bytes = 100 * 4096;
    r.minflt_after = 1000;
    r.rss_after_bytes = 50 * MIB;
    cost_refault_open(&w, &r, 10, 7 * SEC);
    CHECK(w.open);
    CHECK(!cost_refault_due(&w, 7 * SEC + SEC - 1, SEC));
    CHECK(cost_refault_due(&w, 8 * SEC, SEC));
    CHECK_EQ_INT(cost_refault_bytes(&w, 1000, 10, 4096), 0);
    CHECK_EQ_INT(cost_refault_bytes(&w, 1030, 10, 4096), 30 * 4096);
    /* The caller's own faults are not the host's. */
    CHECK_EQ_INT(cost_refault_bytes(&w, 1030, 15, 4096), 25 * 4096);
    CHECK_EQ_INT(cost_refault_bytes(&w, 1030, 100, 4096), 0);
    /* Never more than the trim released, however many faults (and no overflow). */
    CHECK_EQ_INT(cost_refault_bytes(&w, 1000 + 500, 10, 4096), 100 * 4096);
    CHECK_EQ_INT(cost_refault_bytes(&w, UINT64_MAX, 10, 4096), 100 * 4096);
    /* RSS growth counts when larger (a huge page is one fault). */
    cost_refault_observe(&w, 50 * MIB + 60 * 4096);
    cost_refault_observe(&w, 50 * MIB + 10 * 4096); /* the peak stays */
    CHECK_EQ_INT(cost_refault_bytes(&w, 1001, 10, 4096), 60 * 4096);
    /* A trim that released nothing has nothing to come back. */
    r.released_bytes = -4096;
    cost_refault_open(&w, &r, 0, 0);
    CHECK_EQ_INT(cost_refault_bytes(&w, 5000, 0, 4096), 0);
}

static void test_gap_rule(void)
{
    struct cost_gap g = {0};
    CHECK(cost_gap_factor(&g, 8) == 1);
    /* Most of the release came back: double, up to the bound. */
    CHECK(cost_gap_update(&g, 64 * MIB, 40 * MIB, MIB, 8) == 2);
    CHECK(cost_gap_update(&g, 64 * MIB, 64 * MIB, MIB, 8) == 4);
    CHECK(cost_gap_update(&g, 64 * MIB, 64 * MIB, MIB, 8) == 8);
    CHECK(cost_gap_update(&g, 64 * MIB, 64 * MIB, MIB, 8) == 8);
    /* A release too small to tell says nothing either way. */
    CHECK(cost_gap_update(&g, MIB / 2, 0, MIB, 8) == 8);
    CHECK(cost_gap_update(&g, 0, 0, MIB, 8) == 8);
    /* A lowered bound applies at once. */
    CHECK(cost_gap_factor(&g, 2) == 2);
    CHECK(cost_gap_update(&g, 64 * MIB, 64 * MIB, MIB, 2) == 2);
    /* It stops: half or less came back. */
    CHECK(cost_gap_update(&g, 64 * MIB, 32 * MIB, MIB, 8) == 1);
    /* Factor 1 = fixed gaps. */
    CHECK(cost_gap_update(&g, 64 * MIB, 64 * MIB, MIB, 1) == 1);
    CHECK(cost_gap_update(&g, 64 * MIB, 64 * MIB, MIB, 1.5) == 1);
    /* Back at once: straight to the bound, and down again like any other. */
    CHECK(cost_gap_saturate(&g, 32) == 32);
    CHECK(cost_gap_factor(&g, 32) == 32);
    CHECK(cost_gap_saturate(&g, 1) == 1);
    CHECK(cost_gap_saturate(&g, 16) == 16);
    CHECK(cost_gap_update(&g, 64 * MIB, 0, MIB, 16) == 1);
}

static void test_at_once_rule(void)
{
    struct cost_refault w;
    struct mt_trim_result r = {.id = 1, .trigger = MT_TRIGGER_BURST, .released_bytes = 64 * MIB,
                               .rss_after_bytes = 100 * MIB, .minflt_after = 1000};
    cost_refault_open(&w, &r, 0, 2 * SEC);
    w.ended_ns = SEC + SEC / 2; /* the trim ended 0.5 s before the window opened */
    int64_t at_once = SEC * 6 / 10;
    /* More than half back by faults and by RSS, 0.55 s after the trim: at once. */
    cost_refault_observe(&w, 140 * MIB);
    CHECK(cost_back_at_once(&w, 40 * MIB, SEC + SEC / 2 + SEC * 55 / 100, at_once));
    CHECK_EQ_INT(cost_back_after(&w, 40 * MIB, SEC + SEC / 2 + SEC * 55 / 100), SEC * 55 / 100);
    /* ...but not 0.7 s after it, */
    CHECK(!cost_back_at_once(&w, 40 * MIB, SEC + SEC / 2 + SEC * 7 / 10, at_once));
    CHECK_EQ_INT(cost_back_after(&w, 40 * MIB, SEC + SEC / 2 + SEC * 7 / 10), SEC * 7 / 10);
    /* nor when only half came back by faults, */
    CHECK(!cost_back_at_once(&w, 32 * MIB, SEC + SEC / 2 + SEC / 10, at_once));
    CHECK_EQ_INT(cost_back_after(&w, 32 * MIB, SEC + SEC / 2 + SEC / 10), -1);
    /* nor when RSS did not grow by more than half (faults elsewhere: file pages, stacks). */
    struct cost_refault v;
    cost_refault_open(&v, &r, 0, 2 * SEC);
    v.ended_ns = SEC + SEC / 2;
    cost_refault_observe(&v, 120 * MIB);
    CHECK(!cost_back_at_once(&v, 60 * MIB, SEC + SEC / 2 + SEC / 10, at_once));
    CHECK_EQ_INT(cost_back_after(&v, 60 * MIB, SEC + SEC / 2 + SEC / 10), -1);
    /* A trim that released nothing never came back. */
    r.released_bytes = 0;
    cost_refault_open(&v, &r, 0, 2 * SEC);
    cost_refault_observe(&v, 500 * MIB);
    CHECK(!cost_back_at_once(&v, 60 * MIB, 2 * SEC, at_once));
    CHECK_EQ_INT(cost_back_after(&v, 60 * MIB, 2 * SEC), -1);
}

static void test_host_quiet(void)
{
    CHECK(cost_host_quiet(0.1, 2, 0.25));   /* 0.2 CPU of 2 */
    CHECK(!cost_host_quiet(0.5, 2, 0.25));  /* one CPU of 2 */
    CHECK(cost_host_quiet(0.2, 1, 0.25));   /* 0.2 CPU of 1 */
    CHECK(!cost_host_quiet(0.5, 0.2, 0.25)); /* 0.1 CPU, but half of a 0.2 CPU quota */
    CHECK(!cost_host_quiet(0.02, 16, 0.25)); /* 0.32 CPU of 16 */
    CHECK(!cost_host_quiet(-1, 2, 0.25));   /* unknown */
    CHECK(!cost_host_quiet(0.1, 0, 0.25));
}

static void test_cpu_share(void)
{
    struct cost_cpu c;
    memset(&c, 0, sizeof(c));
    CHECK(cost_cpu_share(&c, 2) < 0);
    cost_cpu_push(&c, 0, 0);
    CHECK(cost_cpu_share(&c, 2) < 0);
    /* A host using one CPU of two: 50 %. */
    for (int i = 1; i <= 10; i++)
        cost_cpu_push(&c, i * SEC / 4, i * SEC / 4);
    CHECK(cost_cpu_share(&c, 2) > 0.49 && cost_cpu_share(&c, 2) < 0.51);
    CHECK(cost_cpu_share(&c, 1) > 0.99);
    /* Only the last ticks count: idle for a whole window is 0. */
    for (int i = 11; i <= 11 + COST_CPU_TICKS; i++)
        cost_cpu_push(&c, i * SEC / 4, 10 * SEC / 4);
    CHECK(cost_cpu_share(&c, 2) == 0);
    CHECK(cost_cpu_share(&c, 0) < 0);
}

static void test_defer_rule(void)
{
    struct cost_defer d = {0};
    CHECK_EQ_INT(cost_defer_check(&d, 0, 100, 10), COST_DEFER_RUN);
    CHECK_EQ_INT(cost_defer_check(&d, 1, 100, 10), COST_DEFER_START);
    CHECK_EQ_INT(cost_defer_check(&d, 1, 105, 10), COST_DEFER_WAIT);
    CHECK_EQ_INT(cost_defer_check(&d, 1, 109, 10), COST_DEFER_WAIT);
    /* The bound: run anyway. */
    CHECK_EQ_INT(cost_defer_check(&d, 1, 110, 10), COST_DEFER_RUN);
    CHECK_EQ_INT(d.since, 0);
    /* A new deferral starts afresh; the host calming down ends it. */
    CHECK_EQ_INT(cost_defer_check(&d, 1, 200, 10), COST_DEFER_START);
    CHECK_EQ_INT(cost_defer_check(&d, 0, 201, 10), COST_DEFER_RUN);
    CHECK_EQ_INT(d.since, 0);
    /* TrimMaxDeferSeconds 0: never wait. */
    CHECK_EQ_INT(cost_defer_check(&d, 1, 300, 0), COST_DEFER_RUN);
}

static void test_budget_rule(void)
{
    struct cost_budget b = {0};
    CHECK(cost_budget_allows(&b, 0));
    /* 10 ms at 1 %: the next charged trim no sooner than 1 s after its end. */
    cost_budget_charge(&b, 5 * SEC, 10000000, 1);
    CHECK(!cost_budget_allows(&b, 5 * SEC + SEC - 1));
    CHECK(cost_budget_allows(&b, 6 * SEC));
    /* 100 %: no limit. */
    cost_budget_charge(&b, 10 * SEC, 10000000, 100);
    CHECK(cost_budget_allows(&b, 10 * SEC));
    /* A huge trim at a tiny budget does not overflow. */
    cost_budget_charge(&b, INT64_MAX / 2, INT64_MAX / 2, 0.001);
    CHECK(b.next_ns > INT64_MAX / 2);
    cost_budget_charge(&b, INT64_MAX - 5, INT64_MAX / 2, 0.001);
    CHECK(b.next_ns == INT64_MAX);
}

/* ---- re-faults, for real -------------------------------------------------------- */

#define BLOCKS 4096

/* Allocate ~64 MB of 4-28 KB blocks, touch them, free all but every 50th. */
static void fragment(void **blocks, size_t *sizes, int first)
{
    for (int i = 0; i < BLOCKS; i++) {
        if (first)
            sizes[i] = 4096 + (size_t)(i * 7919 % 24) * 1024;
        if (i % 50 == 0 && !first)
            continue; /* kept from the first round */
        blocks[i] = malloc(sizes[i]);
        if (blocks[i])
            memset(blocks[i], i & 0xff, sizes[i]);
    }
    for (int i = 0; i < BLOCKS; i++)
        if (i % 50 != 0) {
            free(blocks[i]);
            blocks[i] = NULL;
        }
}

static uint64_t my_minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (uint64_t)ru.ru_minflt;
}

static void test_refault_real(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    static void *blocks[BLOCKS];
    static size_t sizes[BLOCKS];
    struct snapshot_cache sc;
    struct trim_service ts;
    struct mt_trim_result r;
    struct probe_stat ps;
    struct cost_refault w;

    CHECK_EQ_INT(snapshot_init(&sc), 0);
    CHECK_EQ_INT(trim_service_init(&ts), 0);
    fragment(blocks, sizes, 1);
    CHECK_EQ_INT(trim_run(&ts, &sc, MT_TRIGGER_PERIODIC, 0, -1, 0, &r, NULL), 0);
    CHECK_MSG(r.released_bytes > 32 * MIB, "released %lld", (long long)r.released_bytes);
    CHECK(r.minflt_after > 0);
    CHECK_EQ_INT(r.refaulted_bytes, -1); /* not known yet */
    /* The window's baseline leaves this thread's own faults out: this thread
     * is the host here, so give a baseline nobody will move. */
    cost_refault_open(&w, &r, 0, 0);

    /* Nothing re-touched: (almost) nothing came back. */
    CHECK_EQ_INT(probe_stat(&ps), 0);
    int64_t idle = cost_refault_bytes(&w, ps.minflt, 0, sysconf(_SC_PAGESIZE));
    CHECK_MSG(idle < r.released_bytes / 10, "%lld of %lld back without touching",
              (long long)idle, (long long)r.released_bytes);

    /* The host allocates the same again: the trimmed pages fault back in. */
    uint64_t f0 = my_minflt(), p0 = ps.minflt;
    CHECK(ps.rss_bytes > 0);
    fragment(blocks, sizes, 0);
    CHECK_EQ_INT(probe_stat(&ps), 0);
    cost_refault_observe(&w, ps.rss_bytes);
    int64_t back = cost_refault_bytes(&w, ps.minflt, 0, sysconf(_SC_PAGESIZE));
    printf("released %lld bytes; %lld came back (%llu faults in the re-touch, %llu in all)\n",
           (long long)r.released_bytes, (long long)back, (unsigned long long)(my_minflt() - f0),
           (unsigned long long)(ps.minflt - p0));
    CHECK_MSG(back > r.released_bytes / 2, "%lld of %lld back", (long long)back,
              (long long)r.released_bytes);
    CHECK(back <= r.released_bytes);
    for (int i = 0; i < BLOCKS; i += 50)
        free(blocks[i]);
    malloc_trim(0);
    trim_service_destroy(&ts);
    snapshot_destroy(&sc);
}

/* ---- a running instance ------------------------------------------------------------ */

/* Every trim's result, in order (a sink of the trim service, called under its lock). */
static struct mt_trim_result recorded[256];
static unsigned nrecorded;
static void record(void *arg, const struct mt_trim_result *r)
{
    (void)arg;
    if (nrecorded < 256)
        recorded[nrecorded++] = *r;
}

static void patch(struct memtrim *mt, const char *json)
{
    char *err = NULL;
    CHECK_MSG(mt_config_patch(mt, json, &err) == 0, "%s: %s", json, err ? err : "");
    free(err);
}

static struct mt_counters counters(struct memtrim *mt)
{
    struct mt_counters c;
    mt_counters_get(mt, &c);
    return c;
}

/* Wait for the next trim of `trigger` (up to 20 s); its count, 0 on timeout. */
static uint64_t next_trim(struct memtrim *mt, int trigger, uint64_t after)
{
    WAIT_FOR(counters(mt).trims[trigger] > after, 20);
    uint64_t n = counters(mt).trims[trigger];
    return n > after ? n : 0;
}

/* The heap read after the host's frees, as a client's GET /memory/stats reads it (the
 * housekeeper then decides on that reading). The housekeeper probes again only once the
 * host has used 10 ms of CPU since its last reading: one taken while fragment() still ran
 * left it an estimate from before the frees (below TrimMinReleasableBytes) until this
 * thread's own polling added up to 10 ms, 0.5 s and more of periodic skips. */
static void read_heap(struct memtrim *mt)
{
    struct snapshot_want w = {.cheap_max_age_ns = 0, .heap_max_age_ns = 0,
                              .budget_percent = 10 /* the instances' ProbeBudgetPercent */};
    struct mt_snapshot s;
    int64_t from = mt_mono_ns(), at = 0;
    WAIT_FOR((snapshot_get(&mt->cache, &w, &s), pthread_mutex_lock(&mt->cache.lock),
              at = mt->cache.heap_mono_ns, pthread_mutex_unlock(&mt->cache.lock), at >= from),
             20);
    CHECK_MSG(at >= from, "no heap reading after the host's frees");
}

/* The last "back at once" verdict and the time after its trim's end it read (one lock hold). */
static int verdict(struct memtrim *mt, int64_t *after_ns)
{
    pthread_mutex_lock(&mt->hk.lock);
    int at_once = mt->hk.back_at_once;
    *after_ns = mt->hk.back_after_ns;
    pthread_mutex_unlock(&mt->hk.lock);
    return at_once;
}

static void test_gap_grows_and_resets(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    static void *blocks[BLOCKS];
    static size_t sizes[BLOCKS];
    struct memtrim *mt = start(
        "{\"HttpPort\": 0, \"Database\": \"\", \"TrimIntervalSeconds\": 0.05,"
        " \"TrimReleasableTriggerBytes\": 0, \"TrimMinReleasableBytes\": 4194304,"
        " \"TrimGapMaxFactor\": 2, \"RefaultWindowSeconds\": 30, \"TrimBusyCpuPercent\": 0,"
        " \"TrimBudgetPercent\": 100, \"ProbeBudgetPercent\": 10}");
    if (!mt)
        return;
    housekeeper_test_tick(&mt->hk, 10 * 1000000LL); /* gaps of 0.05 s, then 0.1 s */
    /* A host that allocates the same again right after every trim. */
    fragment(blocks, sizes, 1);
    read_heap(mt);
    uint64_t n = next_trim(mt, MT_TRIGGER_PERIODIC, 0);
    double top = 1;
    int back_seen = 0, at_once_seen = 0;
    /* (Until the gap is at its bound and two windows have closed.) */
    for (int round = 0;
         round < 12 && n && (top < 2 || counters(mt).refault_windows[MT_TRIGGER_PERIODIC] < 2);
         round++) {
        /* Held while it re-allocates: a trim that cut it in two (a loaded machine,
         * gaps of 0.1 s) would see only part of it back, and the verdict flip. */
        mt_suspend(mt);
        fragment(blocks, sizes, 0);
        read_heap(mt);
        mt_resume(mt);
        n = next_trim(mt, MT_TRIGGER_PERIODIC, n);
        WAIT_FOR(counters(mt).refault_windows[MT_TRIGGER_PERIODIC] >= n - 1, 5);
        struct mt_counters c = counters(mt);
        CHECK_MSG(c.gap_factor <= 2, "gap factor %g past the bound", c.gap_factor);
        if (c.gap_factor > top)
            top = c.gap_factor;
        /* Each release is judged when more than half of it is back (by faults and by RSS)
         * or its window closes: "at once" exactly when it was read back within
         * COST_AT_ONCE_NS of the trim's end. How long that took is the scheduler's (this
         * thread re-allocates 64 MB; beside CPU hogs that alone can take seconds), so the
         * test follows the time the product measured instead of assuming it. */
        int64_t after;
        int at_once = verdict(mt, &after);
        back_seen += after >= 0;
        at_once_seen += at_once;
        CHECK_MSG(at_once == (after >= 0 && after <= COST_AT_ONCE_NS),
                  "read back %.3f s after the trim (-1: not back), yet %s", (double)after / 1e9,
                  at_once ? "at once" : "not at once");
    }
    struct mt_counters c = counters(mt);
    printf("gap factor %g after %llu trims; %llu of %llu released bytes came back\n",
           c.gap_factor, (unsigned long long)c.trims[MT_TRIGGER_PERIODIC],
           (unsigned long long)c.refaulted_bytes[MT_TRIGGER_PERIODIC],
           (unsigned long long)c.released_bytes[MT_TRIGGER_PERIODIC]);
    CHECK_MSG(top == 2, "the gap grew to x%g only", top);
    /* Each release was judged; the counter shows the last verdict ("at once" holds the gap
     * even for a mostly free heap, policy.c). */
    int64_t after;
    int at_once = verdict(mt, &after);
    printf("%d rounds saw the release back, %d at once; the last read back %.3f s after its trim\n",
           back_seen, at_once_seen, (double)after / 1e9);
    CHECK(back_seen >= 1);
    CHECK_EQ_INT(c.release_back_at_once, at_once);
    CHECK_EQ_INT(at_once, after >= 0 && after <= COST_AT_ONCE_NS);
    /* (The totals include the last trim, whose window is still open.) */
    CHECK(c.refault_windows[MT_TRIGGER_PERIODIC] >= 2);
    CHECK(c.refaulted_bytes[MT_TRIGGER_PERIODIC] > 0);

    /* It stops: a release that stays out resets the gap (once its window closes at the
     * next trim, which the host's next free brings). */
    fragment(blocks, sizes, 0);
    read_heap(mt);
    n = next_trim(mt, MT_TRIGGER_PERIODIC, counters(mt).trims[MT_TRIGGER_PERIODIC]);
    /* ...and now nothing is re-touched: when its window closes, the gap resets. */
    patch(mt, "{\"RefaultWindowSeconds\": 0.1}");
    WAIT_FOR(counters(mt).gap_factor == 1, 20);
    CHECK_MSG(counters(mt).gap_factor == 1, "gap factor %g after the re-faults stopped",
              counters(mt).gap_factor);
    CHECK_EQ_INT(counters(mt).release_back_at_once, 0);
    for (int i = 0; i < BLOCKS; i += 50)
        free(blocks[i]);
    mt_destroy(mt);
}

/* The host's CPU time as this test chooses it (housekeeper_test_host_cpu): while host_busy,
 * it grows by all processors' worth of each tick's wall time (a share of 1), else not at all
 * (0). Called on the housekeeper thread only; host_busy is the test thread's switch. */
static atomic_int host_busy;
static double host_cpus;
static int64_t host_cpu_ns, host_last_ns;
static int64_t chosen_host_cpu(void *arg, int64_t now_ns)
{
    (void)arg;
    if (host_last_ns && now_ns > host_last_ns && atomic_load(&host_busy))
        host_cpu_ns += (int64_t)((double)(now_ns - host_last_ns) * host_cpus);
    host_last_ns = now_ns;
    return host_cpu_ns;
}

static atomic_int spin_stop;
static atomic_llong spun_ns;
static void *spin(void *arg)
{
    volatile uint64_t x = 0;
    struct timespec ts;
    (void)arg;
    while (!atomic_load(&spin_stop)) {
        for (int i = 0; i < 100000; i++)
            x++;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        atomic_store(&spun_ns, (long long)ts.tv_sec * SEC + ts.tv_nsec);
    }
    return NULL;
}

/* The reading the gate's CPU share is made of (/proc/self/stat's CPU time) holds a spinning
 * thread's: whatever share of a CPU the scheduler gives it, the process's CPU time grows by
 * at least what the thread got (to the reading's clock-tick steps). */
static void test_host_cpu_reading(void)
{
    pthread_t t;
    struct probe_stat a, b;
    long hz = sysconf(_SC_CLK_TCK);
    int64_t step = hz > 0 ? SEC / hz : SEC / 100;
    atomic_store(&spin_stop, 0);
    atomic_store(&spun_ns, 0);
    CHECK_EQ_INT(probe_stat(&a), 0);
    pthread_create(&t, NULL, spin, NULL);
    WAIT_FOR(atomic_load(&spun_ns) >= SEC / 5, 60); /* 200 ms of its own CPU time */
    atomic_store(&spin_stop, 1);
    pthread_join(t, NULL);
    CHECK_EQ_INT(probe_stat(&b), 0);
    int64_t spun = atomic_load(&spun_ns);
    printf("a thread spun %.3f s of CPU; the process's CPU time grew %.3f s\n", (double)spun / 1e9,
           (double)(b.cpu_ns - a.cpu_ns) / 1e9);
    CHECK(spun >= SEC / 5);
    /* utime and stime each in clock ticks, in both readings */
    CHECK_MSG(b.cpu_ns - a.cpu_ns >= spun - 4 * step, "the process's CPU grew %lld ns, the thread's %lld",
              (long long)(b.cpu_ns - a.cpu_ns), (long long)spun);
}

static void test_deferral_and_bound(void)
{
    struct memtrim *mt = start(
        "{\"HttpPort\": 0, \"Database\": \"\", \"TrimIntervalSeconds\": 0.02,"
        " \"TrimMinReleasableBytes\": 0, \"TrimReleasableTriggerBytes\": 0,"
        " \"TrimBusyCpuPercent\": 0, \"TrimMaxDeferSeconds\": 0.05, \"TrimBudgetPercent\": 100}");
    if (!mt)
        return;
    /* Ticks of 20 ms: the CPU share is over the last 2 (40 ms). The host's CPU time is the
     * test's choice: a spinning thread gets what the scheduler gives it (9 % of a CPU beside
     * a load of 16), and the gate would be judged on the machine's load, not on its rule. */
    double cpus = cpu_quota_cpus();
    host_cpus = cpus > 0 ? cpus : 1;
    atomic_store(&host_busy, 0);
    housekeeper_test_host_cpu(&mt->hk, chosen_host_cpu, NULL);
    housekeeper_test_tick(&mt->hk, 20 * 1000000LL);
    /* TrimBusyCpuPercent 0: trims never wait, even for a host using every processor. */
    atomic_store(&host_busy, 1);
    next_trim(mt, MT_TRIGGER_PERIODIC, 0);
    uint64_t n0 = next_trim(mt, MT_TRIGGER_PERIODIC, counters(mt).trims[MT_TRIGGER_PERIODIC]);
    CHECK(n0 > 0);
    CHECK_EQ_INT(counters(mt).skips[MT_SKIP_HOST_BUSY], 0);
    double level = 50;
    patch(mt, "{\"TrimBusyCpuPercent\": 50}");

    struct mt_counters c;
    /* Both in one reading: the counters' snapshot can show deferring before its skip is
     * counted (ci10 under ASan: deferring, 0 skips). (The bound ends it soon: keep what
     * was seen.) */
    WAIT_FOR((c = counters(mt)).deferring && c.skips[MT_SKIP_HOST_BUSY] >= 1, 20);
    CHECK_MSG(c.deferring && c.skips[MT_SKIP_HOST_BUSY] >= 1, "no deferral (CPU share %g)",
              c.host_cpu_share);
    CHECK_MSG(c.host_cpu_share * 100 >= level, "CPU share %g", c.host_cpu_share);
    uint64_t periodic = c.trims[MT_TRIGGER_PERIODIC];
    /* The bound: it runs anyway while the host stays busy. */
    uint64_t n = next_trim(mt, MT_TRIGGER_PERIODIC, periodic);
    c = counters(mt);
    CHECK_MSG(n > periodic, "no trim after the bound");
    CHECK(c.deferred_seconds > 0);
    /* Trims go on while it is busy, each deferred (counted) and run once it has waited
     * out the bound (TrimMaxDeferSeconds 0.05): never sooner. */
    n = next_trim(mt, MT_TRIGGER_PERIODIC, n);
    c = counters(mt);
    CHECK(n > periodic + 1);
    printf("busy: CPU share %.2f, %llu deferrals, %.2f s deferred, %llu trims\n",
           c.host_cpu_share, (unsigned long long)c.skips[MT_SKIP_HOST_BUSY], c.deferred_seconds,
           (unsigned long long)(n - periodic));
    CHECK_MSG(c.skips[MT_SKIP_HOST_BUSY] >= n - periodic, "%llu deferrals for %llu trims",
              (unsigned long long)c.skips[MT_SKIP_HOST_BUSY], (unsigned long long)(n - periodic));
    CHECK_MSG(c.deferred_seconds >= 0.05 * (double)(n - periodic) * 0.999,
              "%llu trims after %.3f s deferred", (unsigned long long)(n - periodic),
              c.deferred_seconds);

    /* Calm again: the waiting ends and trims run without more deferrals. */
    atomic_store(&host_busy, 0);
    WAIT_FOR((c = counters(mt)).host_cpu_share == 0 && !c.deferring, 20);
    CHECK_MSG(c.host_cpu_share == 0 && !c.deferring, "CPU share %g, deferring %d",
              c.host_cpu_share, c.deferring);
    uint64_t busy = counters(mt).skips[MT_SKIP_HOST_BUSY];
    n = next_trim(mt, MT_TRIGGER_PERIODIC, counters(mt).trims[MT_TRIGGER_PERIODIC]);
    n = next_trim(mt, MT_TRIGGER_PERIODIC, n);
    CHECK(n > 0);
    CHECK_EQ_INT(counters(mt).skips[MT_SKIP_HOST_BUSY], busy);

    /* Pressure never waits, even for a busy host: not covered here (test_housekeeper). */
    mt_destroy(mt);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_budget(void)
{
    /* Ticks of 5 ms, and a budget by which this build's periodic trims pause the next for
     * ~20 ms, four ticks that skip. A fixed 0.05 % gave glibc's ~10 us trims that, but a
     * sanitizer's allocator's ~0.4 us ones 0.8 ms, less than a tick: their budget skips
     * came by chance (under ASan beside two busy loops: 3 of 6 in 30 s, 1 run in 20). So
     * the first periodic trims run under a budget that holds none back, and their median
     * sets it. */
    const int64_t tick_ns = 5 * 1000000LL, pause_ns = 4 * tick_ns;
    const double open_percent = 2;
    struct memtrim *mt = start(
        "{\"HttpPort\": 0, \"Database\": \"\", \"TrimIntervalSeconds\": 0.005,"
        " \"TrimMinReleasableBytes\": 0, \"TrimReleasableTriggerBytes\": 0,"
        " \"TrimBusyCpuPercent\": 0, \"TrimBudgetPercent\": 2,"
        " \"ManualTrimMinIntervalMs\": 0}");
    if (!mt)
        return;
    housekeeper_test_tick(&mt->hk, tick_ns);
    /* The store is off: record the results here instead (the sink runs under the lock). */
    pthread_mutex_lock(&mt->trims.lock);
    mt->trims.sink = record;
    uint64_t unrecorded = mt->trims.trims[MT_TRIGGER_PERIODIC]; /* ran before the sink */
    pthread_mutex_unlock(&mt->trims.lock);
    CHECK(next_trim(mt, MT_TRIGGER_PERIODIC, unrecorded + 4) > unrecorded + 4);
    int64_t d[8];
    unsigned nd = 0;
    pthread_mutex_lock(&mt->trims.lock);
    for (unsigned i = 0; i < nrecorded && nd < 8; i++)
        if (recorded[i].trigger == MT_TRIGGER_PERIODIC)
            d[nd++] = recorded[i].duration_ns;
    pthread_mutex_unlock(&mt->trims.lock);
    CHECK(nd >= 5);
    if (nd < 5) {
        mt_destroy(mt);
        return;
    }
    qsort(d, nd, sizeof(d[0]), cmp_i64);
    double percent = (double)d[nd / 2] * 100.0 / (double)pause_ns;
    percent = percent < 0.001 ? 0.001 : percent > 0.5 ? 0.5 : percent; /* the key's range */
    char patch_json[100];
    snprintf(patch_json, sizeof(patch_json), "{\"TrimBudgetPercent\": %.6f}", percent);
    percent = strtod(strchr(patch_json, ':') + 1, NULL); /* the instance's figure, to the digit */
    patch(mt, patch_json);
    /* From the trim after the next one on, each is charged at the new budget (the
     * housekeeper reads the configuration as a tick begins: one begun may charge the old). */
    pthread_mutex_lock(&mt->trims.lock);
    unsigned from = nrecorded + 1;
    pthread_mutex_unlock(&mt->trims.lock);
    struct mt_counters c = counters(mt);
    uint64_t skips0 = c.skips[MT_SKIP_BUDGET], periodic0 = c.trims[MT_TRIGGER_PERIODIC];
    uint64_t manual0 = c.trims[MT_TRIGGER_MANUAL], coalesced0 = c.manual_coalesced;
    printf("budget: median periodic trim %lld ns: TrimBudgetPercent %.6f\n",
           (long long)d[nd / 2], percent);
    WAIT_FOR(counters(mt).skips[MT_SKIP_BUDGET] >= skips0 + 3, 20);
    /* Manual trims are not charged: they run while the budget is spent. One that arrives
     * while a periodic trim runs shares that trim's result (coalesced: counted so, not as a
     * manual trim of its own: ci under ASan failed here, a periodic trim ran each tick, and
     * about 1 ask in 150 met one): ask until three ran of their own. */
    struct mt_trim_result r;
    int64_t retry = 0;
    unsigned ran = 0, shared = 0;
    for (int i = 0; i < 100 && ran < 3; i++) {
        int rc = mt_trim_manual(mt, -1, &r, &retry);
        CHECK_EQ_INT(rc, 0);
        if (rc)
            break;
        if (r.coalesced)
            shared++;
        else
            ran++;
    }
    WAIT_FOR((c = counters(mt)).skips[MT_SKIP_BUDGET] >= skips0 + 6 &&
                 c.trims[MT_TRIGGER_PERIODIC] >= periodic0 + 4, /* two pauses at the new budget */
             30);
    c = counters(mt);
    printf("budget: %llu periodic trims (%.3f ms), %llu budget skips, %llu manual (%.3f ms), "
           "%u more shared a periodic one\n",
           (unsigned long long)c.trims[MT_TRIGGER_PERIODIC],
           c.trim_seconds[MT_TRIGGER_PERIODIC] * 1e3, (unsigned long long)c.skips[MT_SKIP_BUDGET],
           (unsigned long long)c.trims[MT_TRIGGER_MANUAL], c.trim_seconds[MT_TRIGGER_MANUAL] * 1e3,
           shared);
    CHECK(c.skips[MT_SKIP_BUDGET] >= skips0 + 6);
    CHECK(c.trims[MT_TRIGGER_PERIODIC] >= periodic0 + 4);
    CHECK_EQ_INT(ran, 3);
    CHECK(c.trims[MT_TRIGGER_MANUAL] == manual0 + 3);
    CHECK_EQ_INT(c.manual_coalesced, coalesced0 + shared);
    CHECK(c.trim_seconds[MT_TRIGGER_MANUAL] > 0);
    /* The rule, trim by trim: after a charged trim of d, the next starts no
     * sooner than d * 100 / percent later (the old budget's for the trims before). */
    pthread_mutex_lock(&mt->trims.lock);
    unsigned nq = nrecorded, checked = 0;
    pthread_mutex_unlock(&mt->trims.lock);
    const struct mt_trim_result *prev = NULL;
    unsigned prev_i = 0;
    for (unsigned i = 0; i < nq; i++) {
        const struct mt_trim_result *q = recorded;
        if (q[i].trigger != MT_TRIGGER_PERIODIC && q[i].trigger != MT_TRIGGER_BURST)
            continue;
        if (prev) {
            double p = prev_i >= from ? percent : open_percent;
            int64_t pause_ms = (int64_t)((double)prev->duration_ns * 100.0 / p / 1e6);
            CHECK_MSG(q[i].start_ms - prev->start_ms >= pause_ms - 1,
                      "a %lld ns trim, the next %lld ms later", (long long)prev->duration_ns,
                      (long long)(q[i].start_ms - prev->start_ms));
            checked += prev_i >= from;
        }
        prev = &q[i];
        prev_i = i;
    }
    printf("budget: %u pauses checked\n", checked);
    CHECK(checked >= 2);
    /* Lifting the budget lets them run again. */
    uint64_t before = c.trims[MT_TRIGGER_PERIODIC];
    patch(mt, "{\"TrimBudgetPercent\": 2}");
    CHECK(next_trim(mt, MT_TRIGGER_PERIODIC, before) > before);
    mt_destroy(mt);
}

int main(void)
{
    mt_set_log_sink(NULL, NULL);
    RUN(test_refault_bound);
    RUN(test_gap_rule);
    RUN(test_at_once_rule);
    RUN(test_host_quiet);
    RUN(test_cpu_share);
    RUN(test_defer_rule);
    RUN(test_budget_rule);
    RUN(test_refault_real);
    RUN(test_gap_grows_and_resets);
    RUN(test_host_cpu_reading);
    RUN(test_deferral_and_bound);
    RUN(test_budget);
    return harness_end();
}
