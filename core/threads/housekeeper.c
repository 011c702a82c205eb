/*
 * housekeeper.c - DESIGN. One thread per instance wakes every 250 ms (or at
 * once when stopped or woken; unit tests alone shorten the interval with
 * housekeeper_test_tick, the product never does) and, in this order: probes the heap when the
 * host has been busy and the budget allows (more often inside the pressure
 * zone), decides on a trim (burst, then periodic), and hands samples to the
 * store thread (store.c): it never waits on the disk. Pressure trims are not
 * decided here: the pressure thread (core/pressure/engine.c) reacts in milliseconds; the
 * housekeeper wakes it when the limit changes or a heap reading inside the
 * zone brings a new releasable estimate. It uses only what it is handed at
 * start (struct housekeeper_deps). Locks: hk->lock guards the stop flag and
 * the counters (held only to read or bump them); the configuration's lock only
 * to copy it; never two at once, never across a probe, trim or write.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mt_alloc.h"
#include "arenas.h"
#include "cost_hk.h"
#include "housekeeper.h"
#include "policy.h"
#include "pressure.h"
#include "snapshot.h"
#include "store.h"
#include "trim.h"

#define TICK_NS (250 * MT_MS)
#define HEAP_PROBE_MIN_NS (1 * MT_SEC)  /* at most one heap probe a second when calm */
#define HEAP_PROBE_PRESSURE_NS (250 * MT_MS)
#define PRESSURE_BUDGET_FACTOR 10.0     /* near the limit the budget is ten times larger */
#define ACTIVITY_NS (10 * MT_MS)        /* ...heap probes only after the host used 10 ms CPU */

struct hk_state {
    struct mt_config cfg;
    uint64_t cfg_generation;
    int configured; /* the first tick has read the configuration */
    struct policy_state policy;         /* the periodic/burst schedule (policy.c) */
    int64_t next_sample;
    int64_t last_proc_cpu, last_own_cpu; /* at the last heap probe */
    int64_t last_heap_ms;                /* timestamp of the last heap reading seen */
    int64_t limit;                       /* effective memory limit at the last tick */
    struct cost_hk cost;                 /* re-faults, adaptive gap, busy host, budget */
    int64_t tick_ns;                     /* TICK_NS, or a test's (housekeeper_test_tick) */
};

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (int64_t)ts.tv_sec * MT_SEC + ts.tv_nsec;
}

static void reload_config(struct housekeeper *hk, struct hk_state *st, int64_t now)
{
    int first = !st->configured;
    double interval = st->cfg.trim_interval_seconds, sample = st->cfg.sample_interval_seconds;

    int changed = config_feed_read(&hk->deps.config, &st->cfg, &st->cfg_generation, first);
    st->configured = 1;
    if (!changed)
        return;
    /* A schedule restarts only when its own interval changed (or at start). */
    if (first || st->cfg.trim_interval_seconds != interval)
        policy_reset(&st->cfg, &st->policy, now);
    if (first || st->cfg.sample_interval_seconds != sample)
        st->next_sample = now; /* a sample now, then every interval */
}

/* ---- the policy --------------------------------------------------------- */

/* Run a trim the policy decided on; 1 when it ran, 0 when another trim was running. */
static int do_trim(struct housekeeper *hk, struct hk_state *st, int trigger)
{
    struct mt_trim_result r;
    /* A host that suspended trims while this tick probed and decided is obeyed (the
     * tick read suspend_depth at its start, and the probe takes a while): the trim
     * service refuses it then, and when another trim runs, and counts the skip. */
    struct trim_ask ask = {trigger, (uint64_t)st->cfg.trim_pad_bytes, -1, 0, 0, 0, 0};
    if (trim_request(hk->deps.trims, hk->deps.cache, &ask, &r, NULL) != 0)
        return 0;
    cost_hk_charge(&st->cost, &st->cfg, r.duration_ns);
    if (trigger != MT_TRIGGER_PERIODIC)
        mt_log_limited(&hk->trim_log, MT_LOG_INFO, "housekeeper",
               "%s trim released %lld bytes in %.3f ms (RSS %llu -> %llu)",
               mt_trigger_name(trigger), (long long)r.released_bytes, r.duration_ns / 1e6,
               (unsigned long long)r.rss_before_bytes, (unsigned long long)r.rss_after_bytes);
    return 1;
}

/*
 * Probe the heap when it is worth it: the host used CPU since the last
 * probe (an idle host frees nothing) or a periodic decision needs an
 * estimate. The budget in snapshot.c still has the last word.
 */
static void refresh(struct housekeeper *hk, struct hk_state *st, int zone, int need_estimate,
                    struct mt_snapshot *snap)
{
    /* This tick's /proc/self/stat, read once by cost_hk_tick. */
    int64_t proc = st->cost.process_cpu_ns, own = thread_cpu_ns();
    /* CPU the host used since the last heap reading (ours aside): an idle host frees nothing. */
    int active = proc < 0 || st->last_proc_cpu < 0 ||
                 (proc - st->last_proc_cpu) - (own - st->last_own_cpu) >= ACTIVITY_NS;
    struct snapshot_want want = {
        /* The pressure thread reads RSS itself: the cheap part needs no more than 1 Hz. */
        .cheap_max_age_ns = MT_SEC,
        .heap_max_age_ns = INT64_MAX,
        .budget_percent = st->cfg.probe_budget_percent * (zone ? PRESSURE_BUDGET_FACTOR : 1.0),
        .memory_limit_cfg = st->cfg.memory_limit_bytes,
    };
    /* A periodic decision wants a fresh estimate, unless nothing ran since the last one. */
    if (need_estimate && (active || st->last_heap_ms == 0))
        want.heap_max_age_ns = 0;
    else if (active)
        /* (A test's shorter tick shortens these in proportion.) */
        want.heap_max_age_ns = (zone ? HEAP_PROBE_PRESSURE_NS : HEAP_PROBE_MIN_NS) / TICK_NS *
                               st->tick_ns;
    snapshot_get(hk->deps.cache, &want, snap);
    /* The pressure thread reads the same cache: tell it of a new limit, and of a
     * new releasable estimate inside the zone (it may make a trim due). */
    if (snap->memory_limit_bytes != st->limit ||
        (zone && snap->heap.timestamp_ms != st->last_heap_ms))
        hk->deps.wake_pressure(hk->deps.pressure);
    if (snap->heap.timestamp_ms != st->last_heap_ms) { /* a new reading, by anyone */
        st->last_heap_ms = snap->heap.timestamp_ms;
        /* The host's CPU when the reading was taken, not when we noticed it:
         * frees between the two must still count as activity. */
        st->last_proc_cpu = snap->heap.process_cpu_ns;
        st->last_own_cpu = own;
    }
    st->limit = snap->memory_limit_bytes;
}

/* Readings for the policy, its decision, the cost gate and the trim, then its schedule. */
static void policy_tick(struct housekeeper *hk, struct hk_state *st, int64_t now,
                        struct mt_snapshot *snap)
{
    const struct mt_config *c = &st->cfg;
    uint64_t rss = probe_rss();
    int64_t limit = c->memory_limit_bytes > 0 ? c->memory_limit_bytes : st->limit;
    int zone = (limit > 0 && c->pressure_ratio > 0 &&
                rss >= pressure_zone_floor(limit, c->pressure_ratio)) ||
               pressure_set_zone(hk->deps.pressure); /* a group's usage (the engine's zone) */
    struct policy_readings r = {
        .suspended = atomic_load(hk->deps.suspend_depth) > 0,
        /* Gaps lengthen while what trims release comes straight back (cost_hk.c). */
        .gap_factor = cost_hk_gap_factor(&st->cost, c),
        .back_at_once = cost_hk_back_at_once(&st->cost),
        .host_quiet = cost_hk_host_quiet(&st->cost),
    };

    /* A trim held back for a busy host needs no fresh estimate each tick. */
    refresh(hk, st, zone,
            policy_periodic_due(c, &st->policy, now) && !r.suspended && !st->cost.defer.since,
            snap);
    r.heap_known = snap->heap.timestamp_ms != 0;
    r.releasable = snap->releasable_estimate_bytes;
    r.rss = snap->cheap.rss_bytes;

    /* A worker group near its shared limit (group.c): what this member holds free,
     * another member needs. The cost rules (came back at once, the adaptive gap, the
     * budget, a busy host) and TrimMinGapSeconds assume nobody else could use the
     * memory: they do not hold a burst trim back then. */
    struct mt_config group_cfg;
    int group_zone = pressure_set_zone(hk->deps.pressure);
    if (group_zone) {
        group_cfg = *c;
        group_cfg.trim_min_gap_seconds = 0;
        c = &group_cfg;
        r.gap_factor = 1;
        r.back_at_once = 0;
        r.host_quiet = 1;
    }
    struct policy_decision d = policy_decide(c, &st->policy, &r, now);
    struct policy_outcome out = {.gate = COST_GATE_RUN};
    if (d.want == POLICY_SKIP)
        trim_count_skip(hk->deps.trims, d.skip_reason);
    else if (d.want == POLICY_TRIM &&
             (group_zone && d.trigger == MT_TRIGGER_BURST
                  ? COST_GATE_RUN
                  : (out.gate = cost_hk_gate(hk, &st->cost, c, d.trigger, d.mostly_free, now))) ==
                 COST_GATE_RUN)
        out.ran = do_trim(hk, st, d.trigger);
    out.budget_ns = st->cost.budget.next_ns;
    policy_update(c, &st->policy, &d, &out, &r, now);
}

static void tick(struct housekeeper *hk, struct hk_state *st)
{
    const struct housekeeper_deps *d = &hk->deps;
    struct mt_snapshot snap, sample;
    int64_t now = mt_mono_ns();

    reload_config(hk, st, now);
    cost_hk_tick(hk, &st->cost, &st->cfg, now);
    policy_tick(hk, st, now, &snap);
    /* the per-arena view, now and then, on the budget */
    arenas_cache_tick(d->arenas, d->cache, st->cfg.probe_budget_percent, snap.heap.timestamp_ms);
    if (st->cfg.sample_interval_seconds > 0 && now >= st->next_sample && store_enabled(d->store)) {
        struct snapshot_want want = {
            .cheap_max_age_ns = (int64_t)st->cfg.stats_max_age_ms * MT_MS,
            .heap_max_age_ns = (int64_t)st->cfg.stats_max_age_ms * MT_MS,
            .budget_percent = st->cfg.probe_budget_percent,
            .memory_limit_cfg = st->cfg.memory_limit_bytes,
        };
        snapshot_get(d->cache, &want, &sample);
        sample.pid = d->record_pid ? atomic_load(d->record_pid) : 0; /* a group's leader: its row */
        store_push_sample(d->store, &sample); /* the store thread writes it; we never wait on disk */
        st->next_sample = now + (int64_t)(st->cfg.sample_interval_seconds * MT_SEC);
    }

    pthread_mutex_lock(&hk->lock);
    hk->ticks++;
    hk->cpu_seconds = (double)thread_cpu_ns() / 1e9;
    pthread_mutex_unlock(&hk->lock);
}

static void *housekeeper_main(void *arg)
{
    struct housekeeper *hk = arg;
    struct hk_state *st = hk->state; /* housekeeper_start made it: a start that worked runs */

    pthread_mutex_lock(&hk->lock);
    while (!hk->stop) {
        pthread_mutex_unlock(&hk->lock);
        tick(hk, st);
        pthread_mutex_lock(&hk->lock);
        if (hk->stop)
            break;
        struct timespec deadline;
        st->tick_ns = hk->test_tick_ns > 0 ? hk->test_tick_ns : TICK_NS;
        mt_deadline(&deadline, st->tick_ns);
        if (!hk->kicked) /* a wake during the tick is not lost */
            pthread_cond_timedwait(&hk->cond, &hk->lock, &deadline);
        hk->kicked = 0;
    }
    pthread_mutex_unlock(&hk->lock);
    free(st);
    hk->state = NULL;
    return NULL;
}

void housekeeper_test_tick(struct housekeeper *hk, int64_t ns)
{
    pthread_mutex_lock(&hk->lock);
    hk->test_tick_ns = ns;
    hk->kicked = 1; /* the current wait was for the old interval */
    pthread_cond_signal(&hk->cond);
    pthread_mutex_unlock(&hk->lock);
}

void housekeeper_test_host_cpu(struct housekeeper *hk, int64_t (*fn)(void *arg, int64_t now_ns),
                               void *arg)
{
    pthread_mutex_lock(&hk->lock);
    hk->test_host_cpu = fn;
    hk->test_host_cpu_arg = arg;
    pthread_mutex_unlock(&hk->lock);
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
    mt_log_limit_init(&hk->trim_log, 10 * MT_SEC, 5);
    hk->back_after_ns = -1;
}

void housekeeper_destroy(struct housekeeper *hk)
{
    pthread_cond_destroy(&hk->cond);
    pthread_mutex_destroy(&hk->lock);
    pthread_mutex_destroy(&hk->trim_log.lock);
}

int housekeeper_start(struct housekeeper *hk, const struct housekeeper_deps *deps, char **err)
{
    hk->deps = *deps;
    /* The thread's state here, not in the thread: out of memory fails the start, rather
     * than a start that worked with no housekeeper behind it. */
    struct hk_state *st = mt_calloc(1, sizeof(*st));
    if (!st) {
        *err = mt_strdup("housekeeper: out of memory");
        return -ENOMEM;
    }
    st->policy.last_burst = -(int64_t)3600 * MT_SEC;
    st->last_proc_cpu = -1;
    st->tick_ns = TICK_NS;
    cost_hk_init(&st->cost);
    hk->state = st;
    int rc = mt_thread_start(&hk->thread, "memtrim-hk", housekeeper_main, hk);
    if (rc) {
        hk->state = NULL;
        free(st);
        *err = mt_strdup("cannot start the housekeeper thread");
        return -rc;
    }
    hk->started = 1;
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
    out->release_back_at_once = hk->back_at_once;
    out->host_cpu_share = hk->host_cpu_share;
    out->deferred_seconds = hk->deferred_seconds;
    out->deferring = hk->deferring;
    pthread_mutex_unlock(&hk->lock);
}
