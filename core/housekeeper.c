/*
 * housekeeper.c - DESIGN. One thread per instance wakes every 250 ms (or at
 * once when stopped or woken) and, in this order: probes the heap when the
 * host has been busy and the budget allows (more often inside the pressure
 * zone), decides on a trim (burst, then periodic), and hands samples to the
 * store thread (store.c): it never waits on the disk. Pressure trims are not
 * decided here: the pressure thread (pressure.c) reacts in milliseconds; the
 * housekeeper wakes it when the limit changes or a heap reading inside the
 * zone brings a new releasable estimate. Locks: mt->hk.lock guards the stop
 * flag and the counters (held only to read or bump them); cfg_lock only to
 * copy the configuration; never two at once, never across a probe, trim or
 * write.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "cost_hk.h"
#include "instance.h"
#include "pressure.h"

#define MS MT_MS
#define SEC MT_SEC
#define TICK_NS (250 * MS)
#define HEAP_PROBE_MIN_NS (1 * SEC)     /* at most one heap probe a second when calm */
#define HEAP_PROBE_PRESSURE_NS (250 * MS)
#define PRESSURE_BUDGET_FACTOR 10.0     /* near the limit the budget is ten times larger */
#define ACTIVITY_NS (10 * MS)           /* ...heap probes only after the host used 10 ms CPU */

struct hk_state {
    struct mt_config cfg;
    uint64_t cfg_generation;
    int configured; /* the first tick has read the configuration */
    int64_t next_periodic, next_sample, last_burst;
    int64_t last_proc_cpu, last_own_cpu; /* at the last heap probe */
    int64_t last_heap_ms;                /* timestamp of the last heap reading seen */
    int64_t limit;                       /* effective memory limit at the last tick */
    struct cost_hk cost;                 /* re-faults, adaptive gap, busy host, budget */
};

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void reload_config(struct memtrim *mt, struct hk_state *st, int64_t now)
{
    int first = !st->configured;
    double interval = st->cfg.trim_interval_seconds, sample = st->cfg.sample_interval_seconds;

    pthread_mutex_lock(&mt->cfg_lock);
    int changed = st->cfg_generation != mt->cfg_generation;
    st->cfg = mt->cfg;
    st->cfg_generation = mt->cfg_generation;
    pthread_mutex_unlock(&mt->cfg_lock);
    st->configured = 1;
    if (!first && !changed)
        return;
    /* A schedule restarts only when its own interval changed (or at start). */
    if (first || st->cfg.trim_interval_seconds != interval)
        st->next_periodic = now + (int64_t)(st->cfg.trim_interval_seconds * SEC);
    if (first || st->cfg.sample_interval_seconds != sample)
        st->next_sample = now; /* a sample now, then every interval */
}

/* ---- the policy --------------------------------------------------------- */

static void do_trim(struct memtrim *mt, struct hk_state *st, int trigger, int64_t now)
{
    struct mt_trim_result r;
    int rc = trim_run(&mt->trims, &mt->cache, trigger, (uint64_t)st->cfg.trim_pad_bytes, -1, 0,
                      &r, NULL);
    if (rc == -EBUSY) {
        trim_count_skip(&mt->trims, MT_SKIP_BUSY);
        return;
    }
    if (trigger == MT_TRIGGER_PERIODIC || trigger == MT_TRIGGER_BURST)
        cost_hk_charge(&st->cost, &st->cfg, r.duration_ns);
    if (trigger == MT_TRIGGER_BURST)
        st->last_burst = now;
    if (trigger != MT_TRIGGER_PERIODIC)
        mt_log(MT_LOG_INFO, "housekeeper",
               "%s trim released %lld bytes in %.3f ms (RSS %llu -> %llu)",
               mt_trigger_name(trigger), (long long)r.released_bytes, r.duration_ns / 1e6,
               (unsigned long long)r.rss_before_bytes, (unsigned long long)r.rss_after_bytes);
}

/*
 * Probe the heap when it is worth it: the host used CPU since the last
 * probe (an idle host frees nothing) or a periodic decision needs an
 * estimate. The budget in snapshot.c still has the last word.
 */
static void refresh(struct memtrim *mt, struct hk_state *st, int zone, int need_estimate,
                    struct mt_snapshot *snap)
{
    int64_t proc = probe_process_cpu_ns(), own = thread_cpu_ns();
    /* CPU the host used since the last heap reading (ours aside): an idle host frees nothing. */
    int active = proc < 0 || st->last_proc_cpu < 0 ||
                 (proc - st->last_proc_cpu) - (own - st->last_own_cpu) >= ACTIVITY_NS;
    struct snapshot_want want = {
        /* The pressure thread reads RSS itself: the cheap part needs no more than 1 Hz. */
        .cheap_max_age_ns = SEC,
        .heap_max_age_ns = INT64_MAX,
        .budget_percent = st->cfg.probe_budget_percent * (zone ? PRESSURE_BUDGET_FACTOR : 1.0),
        .memory_limit_cfg = st->cfg.memory_limit_bytes,
    };
    /* A periodic decision wants a fresh estimate, unless nothing ran since the last one. */
    if (need_estimate && (active || st->last_heap_ms == 0))
        want.heap_max_age_ns = 0;
    else if (active)
        want.heap_max_age_ns = zone ? HEAP_PROBE_PRESSURE_NS : HEAP_PROBE_MIN_NS;
    snapshot_get(&mt->cache, &want, snap);
    /* The pressure thread reads the same cache: tell it of a new limit, and of a
     * new releasable estimate inside the zone (it may make a trim due). */
    if (snap->memory_limit_bytes != st->limit ||
        (zone && snap->heap.timestamp_ms != st->last_heap_ms))
        pressure_wake(mt);
    if (snap->heap.timestamp_ms != st->last_heap_ms) { /* a new reading, by anyone */
        st->last_heap_ms = snap->heap.timestamp_ms;
        /* The host's CPU when the reading was taken, not when we noticed it:
         * frees between the two must still count as activity. */
        st->last_proc_cpu = snap->heap.process_cpu_ns;
        st->last_own_cpu = own;
    }
    st->limit = snap->memory_limit_bytes;
}

static void policy_tick(struct memtrim *mt, struct hk_state *st, int64_t now,
                        struct mt_snapshot *snap)
{
    const struct mt_config *c = &st->cfg;
    uint64_t rss = probe_rss();
    int suspended = atomic_load(&mt->suspend_depth) > 0;
    int64_t limit = c->memory_limit_bytes > 0 ? c->memory_limit_bytes : st->limit;
    int zone = limit > 0 && c->pressure_ratio > 0 &&
               rss >= pressure_zone_floor(limit, c->pressure_ratio);
    int periodic_due = c->trim_interval_seconds > 0 && now >= st->next_periodic;
    /* Gaps lengthen while what trims release comes straight back (cost_hk.c). */
    double gap = cost_hk_gap_factor(&st->cost, c);
    int64_t interval_ns = (int64_t)(c->trim_interval_seconds * gap * SEC);

    /* A trim held back for a busy host needs no fresh estimate each tick. */
    refresh(mt, st, zone, periodic_due && !suspended && !st->cost.defer.since, snap);
    uint64_t est = snap->releasable_estimate_bytes;
    int known = snap->heap.timestamp_ms != 0;

    /* 1. Burst: much releasable memory; trim now rather than at the next interval. */
    if (c->trim_releasable_trigger_bytes > 0 && known && !suspended &&
        now - st->last_burst >= (int64_t)(c->trim_min_gap_seconds * gap * SEC)) {
        uint64_t trigger = (uint64_t)c->trim_releasable_trigger_bytes;
        if (trigger < snap->cheap.rss_bytes / 10)
            trigger = snap->cheap.rss_bytes / 10;
        if (est >= trigger) {
            /* The budget and a busy host hold it back; the periodic trim waits with it. */
            if (cost_hk_gate(mt, &st->cost, c, MT_TRIGGER_BURST, now) == COST_GATE_RUN) {
                do_trim(mt, st, MT_TRIGGER_BURST, now);
                st->next_periodic = now + interval_ns;
            }
            return;
        }
    }
    /* 2. Periodic, skipped when not worth it. */
    if (periodic_due) {
        int gate = COST_GATE_RUN;
        if (suspended)
            trim_count_skip(&mt->trims, MT_SKIP_SUSPENDED);
        else if (!known)
            trim_count_skip(&mt->trims, MT_SKIP_NO_HEAP_STATS);
        else if (est < (uint64_t)c->trim_min_releasable_bytes)
            trim_count_skip(&mt->trims, MT_SKIP_BELOW_MIN_RELEASABLE);
        else if ((gate = cost_hk_gate(mt, &st->cost, c, MT_TRIGGER_PERIODIC, now)) ==
                 COST_GATE_RUN)
            do_trim(mt, st, MT_TRIGGER_PERIODIC, now);
        if (gate != COST_GATE_WAIT) /* a busy host keeps it due: asked again next tick */
            st->next_periodic = now + interval_ns;
    }
}

static void tick(struct memtrim *mt, struct hk_state *st)
{
    struct mt_snapshot snap, sample;
    int64_t now = mt_mono_ns();

    reload_config(mt, st, now);
    cost_hk_tick(mt, &st->cost, &st->cfg, now);
    policy_tick(mt, st, now, &snap);
    if (st->cfg.sample_interval_seconds > 0 && now >= st->next_sample && store_enabled(&mt->store)) {
        struct snapshot_want want = {
            .cheap_max_age_ns = (int64_t)st->cfg.stats_max_age_ms * MS,
            .heap_max_age_ns = (int64_t)st->cfg.stats_max_age_ms * MS,
            .budget_percent = st->cfg.probe_budget_percent,
            .memory_limit_cfg = st->cfg.memory_limit_bytes,
        };
        snapshot_get(&mt->cache, &want, &sample);
        store_push_sample(&mt->store, &sample); /* the store thread writes it; we never wait on disk */
        st->next_sample = now + (int64_t)(st->cfg.sample_interval_seconds * SEC);
    }

    pthread_mutex_lock(&mt->hk.lock);
    mt->hk.ticks++;
    mt->hk.cpu_seconds = (double)thread_cpu_ns() / 1e9;
    pthread_mutex_unlock(&mt->hk.lock);
}

static void *housekeeper_main(void *arg)
{
    struct memtrim *mt = arg;
    struct housekeeper *hk = &mt->hk;
    struct hk_state *st = calloc(1, sizeof(*st));

    if (!st) {
        mt_log(MT_LOG_ERROR, "housekeeper", "out of memory; no trims will run");
        return NULL;
    }
    st->last_burst = -(int64_t)3600 * SEC;
    st->last_proc_cpu = -1;
    cost_hk_init(&st->cost);

    pthread_mutex_lock(&hk->lock);
    while (!hk->stop) {
        pthread_mutex_unlock(&hk->lock);
        tick(mt, st);
        pthread_mutex_lock(&hk->lock);
        if (hk->stop)
            break;
        struct timespec deadline;
        mt_deadline(&deadline, TICK_NS);
        if (!hk->kicked) /* a wake during the tick is not lost */
            pthread_cond_timedwait(&hk->cond, &hk->lock, &deadline);
        hk->kicked = 0;
    }
    pthread_mutex_unlock(&hk->lock);
    free(st);
    return NULL;
}

void housekeeper_init(struct housekeeper *hk)
{
    pthread_condattr_t attr;
    memset(hk, 0, sizeof(*hk));
    pthread_mutex_init(&hk->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&hk->cond, &attr);
    pthread_condattr_destroy(&attr);
}

void housekeeper_destroy(struct housekeeper *hk)
{
    pthread_cond_destroy(&hk->cond);
    pthread_mutex_destroy(&hk->lock);
}

int housekeeper_start(struct memtrim *mt, char **err)
{
    int rc = mt_thread_start(&mt->hk.thread, "memtrim-hk", housekeeper_main, mt);
    if (rc) {
        *err = strdup("cannot start the housekeeper thread");
        return -rc;
    }
    mt->hk.started = 1;
    return 0;
}

void housekeeper_wake(struct housekeeper *hk)
{
    pthread_mutex_lock(&hk->lock);
    hk->kicked = 1;
    pthread_cond_broadcast(&hk->cond);
    pthread_mutex_unlock(&hk->lock);
}

void housekeeper_stop(struct housekeeper *hk)
{
    if (!hk->started)
        return;
    pthread_mutex_lock(&hk->lock);
    hk->stop = 1;
    pthread_cond_broadcast(&hk->cond);
    pthread_mutex_unlock(&hk->lock);
    pthread_join(hk->thread, NULL);
    hk->started = 0;
}

void housekeeper_counters(struct housekeeper *hk, struct mt_counters *out)
{
    pthread_mutex_lock(&hk->lock);
    out->housekeeper_cpu_seconds = hk->cpu_seconds;
    out->housekeeper_ticks = hk->ticks;
    out->gap_factor = hk->gap_factor;
    out->host_cpu_share = hk->host_cpu_share;
    out->deferred_seconds = hk->deferred_seconds;
    out->deferring = hk->deferring;
    pthread_mutex_unlock(&hk->lock);
}
