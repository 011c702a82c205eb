/*
 * engine.c - DESIGN. The pressure engine's thread: one per instance
 * ("memtrim-press") that trims within milliseconds when RSS nears the memory
 * limit, and otherwise sleeps on the kernel (its sources: kernel.c). Only this
 * thread runs pressure trims; the housekeeper keeps the heap probe, samples,
 * periodic and burst trims at their slower pace, so a pressure trim never waits
 * behind them (a trim already running is shared: the next reading decides again).
 * The decision itself is decision.c's (pure functions).
 * A read-only or missing cgroup filesystem is no error: it polls, and says
 * so at info level. The housekeeper wakes it when the limit changes or a new
 * heap reading arrives (the releasable estimate), and PATCH /config does.
 *
 * Locking: p->lock guards p->stop, p->stats, the zone and the kernel listener (held
 * only to copy or bump them, across a look at the set, and across the listener's
 * call: a byte into the set's wake pipe); everything else belongs to the thread.
 * Never held across a trim or a read.
 *
 * The zone (pressure.h): the instance's one, this engine's: its thread's reading of
 * this process (own) and the set's (a leader's look at its members, or what a
 * member's leader told it), read by the housekeeper and the group thread.
 *
 * A worker group's leader listens (pressure_kernel_listen): each kernel wake-up
 * also wakes its group thread, which looks at the set at once (the group's
 * decision, core/pressure/zone.c), so the kernel's signal drives the group's
 * decision. While its last look saw other members, this thread trims nothing itself: a
 * verdict to trim is handed to that look (pressure_zone_hand: this process's growth, the
 * kernel's last chance) and wakes it, and the set trims its member 0 or another: one
 * decision a wake-up. A process alone (no other member) trims itself as it decides.
 *
 * Descriptors: see kernel.c; the wake eventfd is the one written by other
 * threads: its number and identity are set before the thread starts and never
 * change; a lost wake caps the sleep at WAKE_LOST_NS, so a stop is still seen
 * at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "engine_int.h"

#define POLL_FAST_NS (2 * MT_MS)       /* RSS moving inside the zone */
#define POLL_ZONE_MAX_NS (100 * MT_MS) /* steady inside the zone (poll) */
#define POLL_MOVING_NS (20 * MT_MS)    /* moving outside the zone (poll) */
#define POLL_OUT_MAX_NS (250 * MT_MS)  /* steady outside the zone (poll) */
#define KERNEL_ZONE_NS (1 * MT_SEC)    /* inside the zone, kernel-woken: a safety re-check */
#define IDLE_NS (3600 * MT_SEC)        /* nothing to watch, or kernel-woken outside the zone */
#define WAKE_CHECK_NS (1 * MT_SEC)     /* the longest sleep: the wake fd is checked this often */
#define MOVED_BYTES (1u << 20)      /* RSS "moves" when a reading differs by this much */

const double mt_reaction_bounds[MT_REACTION_BUCKETS] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025,
                                                        0.05,   0.1,   0.25,  0.5,   1.0,  5.0};

/* A PATCH or a hostile workload can make pressure trims many a second: their lines are
 * rate-limited (the counters and the store keep every trim). */
#define TRIM_LOG_BURST 5
#define TRIM_LOG_WINDOW_NS (10 * MT_SEC)

/* ---- the thread --------------------------------------------------------- */

struct loop {
    struct mt_config cfg;
    uint64_t cfg_generation;
    int configured; /* cfg holds a copy */
    struct pressure_state st;
    int64_t calm_ns; /* the last moment no rule held: reactions count from here */
    int64_t interval_ns;
    uint64_t last_rss;
    int64_t limit, cgroup_limit;
    int limit_level, events_level; /* where the cgroup's limit and events were (re-arm on change) */
    int64_t events_seen[MT_CG_EVENTS]; /* memory.events as the last step saw them */
    int events_seen_ok;
};

static void reload(struct pressure *p, struct loop *l)
{
    config_feed_read(&p->deps.config, &l->cfg, &l->cfg_generation, !l->configured);
    l->configured = 1;
}

static void record_trim(struct pressure *p, const struct mt_trim_result *r)
{
    double s = r->reaction_ns >= 0 ? (double)r->reaction_ns / 1e9 : 0;
    int b = 0;
    while (b < MT_REACTION_BUCKETS && s > mt_reaction_bounds[b])
        b++;
    pthread_mutex_lock(&p->lock);
    p->stats.trims++;
    p->stats.reaction_hist[b]++;
    p->stats.reaction_seconds_sum += s;
    p->stats.reaction_last_seconds = s;
    pthread_mutex_unlock(&p->lock);
}

/* A last-chance trim: what the heap held and what the trim gave back, at
 * most one line each 10 s (the kernel may report the limit many times a second). */
static void log_last_chance(struct pressure *p, struct loop *l, const struct mt_snapshot *snap,
                            const struct mt_trim_result *r)
{
    int64_t now = mt_mono_ns();
    if (p->last_chance_log_ns && now - p->last_chance_log_ns < 10 * MT_SEC) {
        p->last_chance_quiet++;
        return;
    }
    const int64_t *e = l->events_seen;
    char heap[160] = "no heap reading yet";
    if (snap->heap.timestamp_ms)
        snprintf(heap, sizeof(heap),
                 "the heap held %llu bytes in use and %llu free (%llu releasable by the last "
                 "reading, %lld ms old)",
                 (unsigned long long)snap->heap.heap_in_use_bytes,
                 (unsigned long long)snap->heap.heap_free_bytes,
                 (unsigned long long)snap->releasable_estimate_bytes,
                 (long long)snap->heap_age_ms);
    mt_log(MT_LOG_WARNING, "pressure",
           "the cgroup reached its limit (memory.events high %lld, max %lld, oom %lld, oom_kill "
           "%lld): last-chance trim; %s; RSS %llu -> %llu, released %lld bytes in %.3f ms, "
           "cgroup charge %lld of %lld bytes (%u more such trims not logged)",
           (long long)e[MT_CG_EV_HIGH], (long long)e[MT_CG_EV_MAX], (long long)e[MT_CG_EV_OOM],
           (long long)e[MT_CG_EV_OOM_KILL], heap, (unsigned long long)r->rss_before_bytes,
           (unsigned long long)r->rss_after_bytes, (long long)r->released_bytes,
           r->duration_ns / 1e6, (long long)kernel_read_current(p), (long long)l->limit,
           p->last_chance_quiet);
    p->last_chance_log_ns = now;
    p->last_chance_quiet = 0;
}

/* Run a pressure trim; 1 when another trim was running (look again soon). */
static int do_trim(struct pressure *p, struct loop *l, const struct mt_snapshot *snap, int64_t now)
{
    const struct pressure_deps *d = &p->deps;
    struct mt_trim_result r;

    /* The trim service refuses it while the host is suspended or another trim runs,
     * and counts those skips at most once a second (its rule for pressure trims). */
    struct trim_ask ask = {MT_TRIGGER_PRESSURE, (uint64_t)l->cfg.trim_pad_bytes, -1, l->calm_ns, 0,
                           0, 0};
    int rc = trim_request(d->trims, d->cache, &ask, &r, NULL);
    if (rc == -EPERM) {
        l->calm_ns = now; /* the host holds trims off: no reaction is owed */
        return 0;
    }
    if (rc == -EBUSY) { /* another trim runs: it releases too; decide again right after */
        pthread_mutex_lock(&p->lock);
        p->stats.busy++;
        pthread_mutex_unlock(&p->lock);
        return 1;
    }
    if (rc)
        return 0;
    if (l->st.rule == PRESSURE_RULE_LAST_CHANCE)
        log_last_chance(p, l, snap, &r);
    uint64_t judged = l->st.last_released;
    int64_t back = pressure_judge_last(&l->st, r.rss_before_bytes);
    if (back >= 0) {
        pthread_mutex_lock(&p->lock);
        p->stats.judged_released_bytes += judged;
        p->stats.returned_bytes += (uint64_t)back;
        p->stats.returned_trims += (uint64_t)back * 2 > judged;
        pthread_mutex_unlock(&p->lock);
    }
    pressure_after_trim(&l->st, now, r.rss_after_bytes, r.released_bytes,
                        (uint64_t)l->cfg.trim_min_releasable_bytes);
    record_trim(p, &r); /* (the trim service has woken the store) */
    l->calm_ns = mt_mono_ns();
    l->last_rss = r.rss_after_bytes;
    mt_log_limited(&p->trim_log, MT_LOG_INFO, "pressure",
           "pressure trim released %lld bytes in %.3f ms, %.3f ms after the crossing "
           "(RSS %llu -> %llu)",
           (long long)r.released_bytes, r.duration_ns / 1e6, r.reaction_ns / 1e6,
           (unsigned long long)r.rss_before_bytes, (unsigned long long)r.rss_after_bytes);
    return 0;
}

/* How long to sleep after a reading. */
static int64_t next_interval(struct pressure *p, struct loop *l, const struct pressure_input *in,
                             int moved)
{
    int source = p->stats.source; /* written only by this thread */
    int64_t t;

    if (source == PRESSURE_SOURCE_NONE)
        return IDLE_NS;
    if (kernel_drawing(p))
        return POLL_FAST_NS; /* each line drawn blocks a grace period: about every 20 ms */
    if (source == PRESSURE_SOURCE_V1_THRESHOLD) {
        /* The ladder signals growth; but a cgroup filled by page cache or other
         * processes may sit above our lines while RSS climbs under them: poll then. */
        int64_t usage = l->st.zone ? -1 : kernel_read_usage(p);
        if (l->st.zone)
            t = KERNEL_ZONE_NS;
        else if (usage >= 0 && (uint64_t)usage >= pressure_zone_floor(in->limit, in->ratio))
            t = moved ? POLL_MOVING_NS : POLL_OUT_MAX_NS;
        else
            t = IDLE_NS;
    } else if (l->st.zone) {
        t = moved ? POLL_FAST_NS : l->interval_ns * 2;
        if (t > POLL_ZONE_MAX_NS)
            t = POLL_ZONE_MAX_NS;
    } else {
        t = moved ? POLL_MOVING_NS : l->interval_ns * 2;
        if (t > POLL_OUT_MAX_NS)
            t = POLL_OUT_MAX_NS;
    }
    if (t < POLL_FAST_NS)
        t = POLL_FAST_NS;
    int64_t due = pressure_next_due(in, &l->st);
    if (due != INT64_MAX) {
        int64_t wait = due - in->now_ns;
        if (wait < t)
            t = wait > POLL_FAST_NS ? wait : POLL_FAST_NS;
    }
    return t;
}

/* One reading and decision; returns the sleep before the next. */
static int64_t step(struct pressure *p, struct loop *l, int kernel, int64_t woke_ns)
{
    struct mt_snapshot snap;
    struct snapshot_want want = {
        .cheap_max_age_ns = INT64_MAX, .heap_max_age_ns = INT64_MAX, .stale_ok = 1};

    reload(p, l);
    want.memory_limit_cfg = l->cfg.memory_limit_bytes;
    snapshot_get(p->deps.cache, &want, &snap); /* what the housekeeper read: no probe here */
    int64_t cgroup_limit = snap.cheap.cgroup_limit_bytes;
    if (snap.memory_limit_bytes != l->limit || cgroup_limit != l->cgroup_limit ||
        snap.cheap.cgroup_limit_level != l->limit_level ||
        snap.cheap.cgroup_events_level != l->events_level ||
        (p->armed_limit && p->armed_ratio != l->cfg.pressure_ratio) || !p->kernel_tried) {
        l->limit = snap.memory_limit_bytes;
        l->cgroup_limit = cgroup_limit;
        l->limit_level = snap.cheap.cgroup_limit_level;
        l->events_level = snap.cheap.cgroup_events_level;
        kernel_arm(p, l->limit, &snap.cheap, l->cfg.pressure_ratio);
    }
    /* The kernel's count of limit hits: from the notified file, else the housekeeper's reading. */
    const int64_t *ev = p->events_read ? p->events : snap.cheap.cgroup_events;
    int last_chance = 0;
    if ((p->events_read || snap.cheap.timestamp_ms) &&
        (ev[MT_CG_EV_MAX] >= 0 || ev[MT_CG_EV_OOM] >= 0 || ev[MT_CG_EV_OOM_KILL] >= 0)) {
        if (l->events_seen_ok)
            last_chance = ev[MT_CG_EV_MAX] > l->events_seen[MT_CG_EV_MAX] ||
                          ev[MT_CG_EV_OOM] > l->events_seen[MT_CG_EV_OOM] ||
                          ev[MT_CG_EV_OOM_KILL] > l->events_seen[MT_CG_EV_OOM_KILL];
        memcpy(l->events_seen, ev, sizeof(l->events_seen));
        l->events_seen_ok = 1;
    }
    /* The cgroup's charge counts only when its limit is the one in force. */
    int cg_in_force = cgroup_limit > 0 && l->cfg.memory_limit_bytes <= 0;

    struct pressure_input in = {
        .now_ns = mt_mono_ns(),
        .rss = kernel_read_rss(p),
        .limit = l->limit,
        .ratio = l->cfg.pressure_ratio,
        .min_releasable = (uint64_t)l->cfg.trim_min_releasable_bytes,
        .estimate = snap.releasable_estimate_bytes,
        .estimate_known = snap.heap.timestamp_ms != 0,
        .cg_current = cg_in_force ? kernel_read_current(p) : -1,
        .cg_file = snap.cheap.cgroup_file_bytes,
        .cg_shmem = snap.cheap.cgroup_shmem_bytes,
        .last_chance = last_chance,
    };
    in.estimate_ns = in.now_ns - (snap.heap_age_ms > 0 ? snap.heap_age_ms * MT_MS : 0);
    int moved = in.rss > l->last_rss + MOVED_BYTES || in.rss + MOVED_BYTES < l->last_rss;
    l->last_rss = in.rss;
    if (kernel && woke_ns > l->calm_ns)
        l->calm_ns = woke_ns; /* the kernel said when: reactions count from its signal */
    int verdict = pressure_decide(&in, &l->st);

    pthread_mutex_lock(&p->lock);
    p->zone.own = l->st.zone;
    p->stats.backoff_seconds = l->st.zone ? (double)pressure_growth_gap(&in, &l->st) / 1e9 : 0;
    if (l->st.zone)
        p->stats.checks_inside++;
    else
        p->stats.checks_outside++;
    if (kernel)
        p->stats.kernel_wakeups++;
    pthread_mutex_unlock(&p->lock);

    int busy = 0, handed = 0;
    /* A leader with other members is one of its set: the set decides (its look, woken now),
     * and this verdict is that member's reading (its growth, the kernel's last chance). */
    if (verdict == PRESSURE_TRIM) {
        pthread_mutex_lock(&p->lock);
        handed = p->woke && pressure_zone_hand(&p->zone, l->st.rule, in.rss);
        if (handed)
            p->woke(p->woke_arg, 0);
        pthread_mutex_unlock(&p->lock);
    }
    /* A rule that came due by time (a back-off ended, a heap reading arrived) crossed then. */
    if (verdict == PRESSURE_TRIM && l->st.due_ns > l->calm_ns)
        l->calm_ns = l->st.due_ns;
    if (handed) {
        pressure_handed(&l->st, in.now_ns, in.rss); /* its growth counts from here */
        l->calm_ns = in.now_ns;
    } else if (verdict == PRESSURE_TRIM) {
        busy = do_trim(p, l, &snap, in.now_ns);
        if (l->st.rule == PRESSURE_RULE_LAST_CHANCE && !busy) {
            pthread_mutex_lock(&p->lock);
            p->stats.last_chance_trims++;
            pthread_mutex_unlock(&p->lock);
        }
        moved = 1;
        in.now_ns = mt_mono_ns();
    } else {
        l->calm_ns = in.now_ns;
    }
    /* The ladder's next line, after the reading it would have delayed. */
    if (kernel_drawing(p)) {
        int rc = kernel_draw_line(p);
        if (rc) {
            char why[128];
            mt_log(MT_LOG_WARNING, "pressure",
                   "cgroup v1 threshold ladder: line %d of %d refused (%s): polling /proc/self/statm",
                   p->ladder_drawn + 1, p->ladder_lines, mt_strerror(-rc, why, sizeof(why)));
            kernel_disarm(p);
            pthread_mutex_lock(&p->lock);
            p->stats.source = PRESSURE_SOURCE_POLL;
            pthread_mutex_unlock(&p->lock);
        }
    }
    /* A trim that found another running looks again soon. */
    int64_t t = busy ? POLL_FAST_NS : next_interval(p, l, &in, moved);
    l->interval_ns = t;
    return t;
}

static void *pressure_main(void *arg)
{
    struct pressure *p = arg;
    struct loop l;

    memset(&l, 0, sizeof(l));
    l.st.last_trim_ns = mt_mono_ns() - (int64_t)3600 * MT_SEC;
    l.interval_ns = POLL_FAST_NS;
    l.limit = l.cgroup_limit = -2; /* unknown: arm at the first reading */
    l.limit_level = l.events_level = -2;
    l.calm_ns = mt_mono_ns();      /* what held before the start counts from the start */

    int64_t sleep_ns = 0;
    for (;;) {
        /* A number the host took is polled no more (its file's events are not ours). */
        struct pollfd fds[3] = {{p->wake_lost ? -1 : p->wake_fd, POLLIN, 0},
                                {p->kfd[0].fd, p->cg_version == 2 ? POLLPRI : POLLIN, 0},
                                {p->kfd[1].fd, POLLPRI, 0}};
        /* A host that closes the wake fd while the thread sleeps wakes nothing (closing a
         * polled descriptor ends no poll), and pressure_stop then writes no byte to a
         * number that is no longer the eventfd: so the sleep is bounded, and the wake
         * checked after it. */
        if (sleep_ns > (p->wake_lost ? WAKE_LOST_NS : WAKE_CHECK_NS))
            sleep_ns = p->wake_lost ? WAKE_LOST_NS : WAKE_CHECK_NS;
        struct timespec ts = {(time_t)(sleep_ns / MT_SEC), (long)(sleep_ns % MT_SEC)};
        int n = ppoll(fds, 3, &ts, NULL);
        int64_t woke = mt_mono_ns();
        /* Drain before reading stop: pressure_stop sets stop, then wakes. Read
         * the other way round, a stop whose wake was drained with an earlier one
         * (the housekeeper's) was lost, and the thread slept its hour while
         * mt_destroy waited in pthread_join (seen under valgrind in CI). */
        int kernel = n > 0 ? kernel_drain(p, fds) : 0;
        if (n == 0)
            wake_fd_ours(p);
        pthread_mutex_lock(&p->lock);
        int stop = p->stop;
        /* The set's decision first: this process's own step may run a trim. */
        if (kernel && p->woke && !stop && !mt_control("eng-group-tick-only"))
            p->woke(p->woke_arg, 1);
        pthread_mutex_unlock(&p->lock);
        if (stop)
            break;
        sleep_ns = step(p, &l, kernel, woke);
    }
    kernel_disarm(p);
    return NULL;
}

struct pressure *pressure_create(const struct pressure_deps *deps)
{
    struct pressure *p = mt_calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->deps = *deps;
    struct mt_kept none = MT_KEPT_NONE(NULL);
    p->kfd[0] = p->kfd[1] = p->usage = p->control = p->current = p->statm = none;
    p->stats.reaction_last_seconds = -1;
    pressure_zone_init(&p->zone);
    mt_log_limit_init(&p->trim_log, TRIM_LOG_WINDOW_NS, TRIM_LOG_BURST);
    p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->wake_fd >= 0 && mt_fdid_take(p->wake_fd, &p->wake_id) != 0) {
        close(p->wake_fd);
        p->wake_fd = -1;
    }
    mt_fdid_list(p->wake_fd, &p->wake_id); /* a forked child closes it (fdid.h) */
    mt_kept_set(&p->statm, open("/proc/self/statm", O_RDONLY | O_CLOEXEC), "/proc/self/statm");
    /* The cgroup the probe found (fixed when the cache was made). */
    p->cg = &deps->cache->cg.info;
    p->cg_version = deps->cache->cg.version;
    if (p->wake_fd < 0 || pthread_mutex_init(&p->lock, NULL)) {
        mt_fdid_unlist(p->wake_fd, &p->wake_id);
        if (p->wake_fd >= 0)
            close(p->wake_fd); /* just opened: certainly ours */
        mt_kept_close(&p->statm);
        free(p);
        return NULL;
    }
    return p;
}

void pressure_free(struct pressure *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->trim_log.lock);
    mt_fdid_unlist(p->wake_fd, &p->wake_id); /* before the close (fdid.h) */
    mt_fdid_close(p->wake_fd, &p->wake_id); /* left alone when the host took it */
    mt_kept_close(&p->statm);
    free(p);
}

int pressure_start(struct pressure *p, char **err)
{
    if (!p || mt_thread_start(&p->thread, "memtrim-press", pressure_main, p)) {
        *err = mt_strdup("cannot start the pressure thread");
        return -ENOMEM;
    }
    pthread_mutex_lock(&p->lock);
    p->started = 1;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void pressure_wake(struct pressure *p)
{
    uint64_t one = 1;
    /* Written only while the number is still the eventfd: a host that closed it and
     * opened a file of its own there gets no 8 bytes of ours (the thread, having lost
     * its wake, looks every WAKE_LOST_NS by itself). */
    if (p && mt_fdid_is(p->wake_fd, &p->wake_id) && write(p->wake_fd, &one, sizeof(one)) < 0) {
        /* a full counter already wakes it */
    }
}

void pressure_kernel_listen(struct pressure *p, void (*woke)(void *arg, int kernel), void *arg)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->woke = woke;
    p->woke_arg = woke ? arg : NULL;
    pthread_mutex_unlock(&p->lock);
}

void pressure_stop(struct pressure *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int started = p->started;
    p->stop = 1;
    pthread_mutex_unlock(&p->lock);
    if (!started)
        return;
    pressure_wake(p);
    pthread_join(p->thread, NULL);
    pthread_mutex_lock(&p->lock);
    p->started = 0;
    pthread_mutex_unlock(&p->lock);
}

void pressure_stats_get(struct pressure *p, struct pressure_stats *out)
{
    clockid_t cid;
    struct timespec ts;

    memset(out, 0, sizeof(*out));
    out->reaction_last_seconds = -1;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    out->zone = p->zone.own;
    /* The thread's CPU clock, read from outside: the thread pays nothing for it. */
    if (p->started && !p->stop && pthread_getcpuclockid(p->thread, &cid) == 0 &&
        clock_gettime(cid, &ts) == 0)
        out->cpu_seconds = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    pthread_mutex_unlock(&p->lock);
}

/* ---- the zone --------------------------------------------------------------------- */

void pressure_zone_view(struct pressure *p, struct pressure_zone_view *v)
{
    *v = (struct pressure_zone_view){.usage = -1, .limit = -1, .usage_source = "none"};
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    v->own = p->zone.own;
    v->set = p->zone.zone;
    v->usage = p->zone.usage;
    v->limit = p->zone.limit;
    v->usage_source = p->zone.usage_source;
    v->moving_until_ns = p->zone.moving_until_ns;
    pthread_mutex_unlock(&p->lock);
}

int pressure_set_zone(struct pressure *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    int set = p->zone.zone;
    pthread_mutex_unlock(&p->lock);
    return set;
}

void pressure_look(struct pressure *p, const struct pressure_look_in *li,
                   struct group_candidate *c, int n, const struct pressure_sums *sum,
                   struct pressure_look *out)
{
    if (!p) {
        *out = (struct pressure_look){.pick = -1};
        return;
    }
    pthread_mutex_lock(&p->lock);
    pressure_zone_look(&p->zone, li, c, n, sum, out);
    pthread_mutex_unlock(&p->lock);
}

void pressure_told(struct pressure *p, int zone, int act, int at_line, uint64_t threshold,
                   int64_t width_ns, int64_t now, uint64_t members_gen)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    pressure_zone_told(&p->zone, zone, act, at_line, threshold, width_ns, now, members_gen);
    pthread_mutex_unlock(&p->lock);
}

void pressure_set_trimmed(struct pressure *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    pressure_zone_trimmed(&p->zone);
    pthread_mutex_unlock(&p->lock);
}

int pressure_zone_heard(struct pressure *p, int zone)
{
    if (!p)
        return zone;
    pthread_mutex_lock(&p->lock);
    int was = p->zone.zone;
    p->zone.zone = zone;
    pthread_mutex_unlock(&p->lock);
    return was;
}

void pressure_zone_forget(struct pressure *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    pressure_zone_init(&p->zone);
    pthread_mutex_unlock(&p->lock);
}
