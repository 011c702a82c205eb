/*
 * trim.c - runs the allocator's release (glibc's malloc_trim, jemalloc's
 * purge, ... through the back end in sc->alloc), one at a time, and measures
 * it: RSS and free heap before and after, its own duration, its return value. Called by the
 * housekeeper (periodic, burst), the pressure thread (pressure) and by HTTP
 * workers (manual).
 * Locking: ts->lock guards the state below and is released while the
 * release runs; waiters sleep on ts->done until the generation moves; each
 * result goes to the sink (the store's queue) under the lock, in id order.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "control.h"
#include "trim.h"

int trim_service_init(struct trim_service *ts)
{
    memset(ts, 0, sizeof(*ts));
    /* Trim ids are unique for the life of the store, across restarts: they
     * count up from the wall clock in ms at start (one trim at a time, manual
     * ones rate-limited: they cannot outrun the clock between two runs), and
     * from above the store's largest id once it is open (a clock set back). */
    int64_t now = mt_now_ms();
    ts->next_id = now > 0 && now < MT_TRIM_ID_MAX ? now : 1;
    if (pthread_mutex_init(&ts->lock, NULL))
        return -ENOMEM;
    if (pthread_cond_init(&ts->done, NULL)) {
        pthread_mutex_destroy(&ts->lock);
        return -ENOMEM;
    }
    return 0;
}

void trim_ids_above(struct trim_service *ts, int64_t max_id)
{
    pthread_mutex_lock(&ts->lock);
    /* An id past the range (a member's, or one stored before ids were checked) is not
     * followed: max_id + 1 near INT64_MAX overflowed the next id into negative ones. */
    if (max_id >= ts->next_id && max_id < MT_TRIM_ID_MAX)
        ts->next_id = max_id + 1;
    pthread_mutex_unlock(&ts->lock);
}

void trim_service_destroy(struct trim_service *ts)
{
    pthread_cond_destroy(&ts->done);
    pthread_mutex_destroy(&ts->lock);
}

/* The measured trim itself; no lock held. */
static void measure_trim(struct stall_canary *canary, struct snapshot_cache *sc, int trigger, uint64_t pad, int64_t crossing_ns,
                         struct mt_trim_result *r)
{
    struct mt_heap before, after;
    struct mt_cheap cheap_after;

    memset(r, 0, sizeof(*r));
    r->trigger = trigger;
    r->pad_bytes = pad;
    /* mallinfo2 takes every arena lock too: the trim's two readings are charged to the
     * ProbeBudgetPercent budget, and skipped (heap_skipped) while it is spent. */
    int64_t wait_ns;
    r->heap_skipped = snapshot_budget_check(sc, &wait_ns) != 0;
    if (!r->heap_skipped) {
        probe_heap(sc->alloc, &before, 0);
        snapshot_count_heap(sc, &before);
        r->heap_free_before_bytes = before.heap_free_bytes;
    }
    r->rss_before_bytes = probe_rss();

    stall_begin(canary); /* up to STALL_BEGIN_WAIT_NS: not the release's time */
    r->start_ms = mt_now_ms();
    int64_t t0 = mt_mono_ns();
    r->reaction_ns = crossing_ns > 0 && t0 >= crossing_ns ? t0 - crossing_ns : -1;
    r->malloc_trim_ret = sc->alloc->release(pad); /* the back end's release (alloc.h) */
    r->duration_ns = mt_mono_ns() - t0;
    int64_t stall_ns = stall_end(canary);
    r->host_stall_measured = stall_ns >= 0;
    r->host_stall_ns = stall_ns >= 0 ? stall_ns : 0;

    probe_cheap(&sc->cg, &cheap_after);
    if (!r->heap_skipped)
        probe_heap(sc->alloc, &after, 0);
    r->rss_after_bytes = cheap_after.rss_bytes;
    r->minflt_after = cheap_after.minor_faults;
    r->arena_count = snapshot_arena_count(sc);
    r->refaulted_bytes = -1; /* known when its window closes (the housekeeper) */
    r->heap_free_after_bytes = r->heap_skipped ? 0 : after.heap_free_bytes;
    r->released_bytes = (int64_t)r->rss_before_bytes - (int64_t)r->rss_after_bytes;
    snapshot_after_trim(sc, r->rss_before_bytes, &cheap_after, r->heap_skipped ? NULL : &after);
    /* An allocator that reports no free heap (mimalloc): those fields are unknown too. */
    if (!r->heap_skipped && !(after.known & MT_HEAP_HAS_FREE))
        r->heap_skipped = 1;
}

int trim_nothing_reason(const struct mt_trim_result *r, const struct mt_arenas_pinned *p,
                        uint64_t page)
{
    if (r->released_bytes >= (int64_t)page)
        return MT_NOTHING_NONE;
    if (r->heap_skipped)
        return MT_NOTHING_NOT_MEASURED;
    if (r->heap_free_before_bytes < page)
        return MT_NOTHING_FREE;
    if (p == NULL)
        return MT_NOTHING_UNEXPLAINED;
    /* Whole free pages the allocator could give back, yet RSS did not fall: they were
     * not resident, given back before (an earlier trim, or glibc's own top trim). */
    if (p->releasable_bytes >= page)
        return MT_NOTHING_NOT_RESIDENT;
    if (p->small_bytes == 0 && p->edge_bytes == 0 && p->top_bytes == 0)
        return MT_NOTHING_UNEXPLAINED;
    if (p->small_bytes >= p->edge_bytes && p->small_bytes >= p->top_bytes)
        return MT_NOTHING_PINNED_SMALL;
    return p->top_bytes >= p->edge_bytes ? MT_NOTHING_PINNED_TOP : MT_NOTHING_PINNED_EDGE;
}

/* The reason of a trim that released under a page, from the pinned cache (no lock held). */
static void explain_nothing(struct trim_service *ts, struct mt_trim_result *r)
{
    struct mt_arenas_pinned p;
    long ps = sysconf(_SC_PAGESIZE);
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096;

    if (r->released_bytes >= (int64_t)page)
        return;
    int have = ts->pinned && ts->pinned(ts->sink_arg, &p) == 0;
    r->nothing_reason = trim_nothing_reason(r, have ? &p : NULL, page);
}

static void record_locked(struct trim_service *ts, struct mt_trim_result *r)
{
    double s = (double)r->duration_ns / 1e9;
    int b = 0;

    r->id = ts->next_id;
    if (ts->next_id < MT_TRIM_ID_MAX) /* never reached from the clock; never past it */
        ts->next_id++;
    ts->trims[r->trigger]++;
    if (r->released_bytes > 0)
        ts->released[r->trigger] += (uint64_t)r->released_bytes;
    while (b < MT_HIST_BUCKETS && s > mt_hist_bounds[b])
        b++;
    ts->hist[b]++;
    ts->seconds_sum += s;
    ts->seconds[r->trigger] += s;
    if (r->host_stall_measured) {
        double st = (double)r->host_stall_ns / 1e9;
        ts->stall_trims[r->trigger]++;
        ts->stall_sum[r->trigger] += st;
        if (st > ts->stall_max[r->trigger])
            ts->stall_max[r->trigger] = st;
    }
    ts->recent[(ts->recent_head + ts->recent_count) % TRIM_RECENT] = *r;
    if (ts->recent_count < TRIM_RECENT)
        ts->recent_count++;
    else
        ts->recent_head = (ts->recent_head + 1) % TRIM_RECENT;
    if (ts->sink)
        ts->sink(ts->sink_arg, r);
}

/* Inside the manual interval (min_interval_ms >= 0) of the last manual request's end:
 * 1, counted, with *retry_after_ms. Under ts->lock. */
static int rate_limited_locked(struct trim_service *ts, int64_t min_interval_ms,
                               int64_t *retry_after_ms)
{
    int64_t now = mt_mono_ns();
    if (min_interval_ms < 0 || !ts->last_manual_mono_ns ||
        now - ts->last_manual_mono_ns >= min_interval_ms * 1000000)
        return 0;
    int64_t wait_ns = ts->last_manual_mono_ns + min_interval_ms * 1000000 - now;
    if (retry_after_ms)
        *retry_after_ms = (wait_ns + 999999) / 1000000;
    ts->rate_limited++;
    return 1;
}

int trim_run(struct trim_service *ts, struct snapshot_cache *sc, int trigger, uint64_t pad,
             int64_t min_interval_ms, int flags, struct mt_trim_result *out,
             int64_t *retry_after_ms)
{
    return trim_run_at(ts, sc, trigger, pad, min_interval_ms, flags, 0, out, retry_after_ms);
}

int trim_run_at(struct trim_service *ts, struct snapshot_cache *sc, int trigger, uint64_t pad,
                int64_t min_interval_ms, int flags, int64_t crossing_ns,
                struct mt_trim_result *out, int64_t *retry_after_ms)
{
    struct mt_trim_result r;

    if (trigger < 0 || trigger >= MT_TRIGGER_COUNT)
        return -EINVAL;
    pthread_mutex_lock(&ts->lock);
    /* The interval holds between requests, whether they ran a trim or shared
     * one: checked before coalescing, and a shared trim starts it too. */
    if (rate_limited_locked(ts, min_interval_ms, retry_after_ms)) {
        pthread_mutex_unlock(&ts->lock);
        return -EAGAIN;
    }
    if (ts->running && !mt_control("suite-trim-no-coalesce")) { /* control: a trim of its own */
        if (!(flags & TRIM_WAIT_IF_BUSY)) {
            pthread_mutex_unlock(&ts->lock);
            return -EBUSY;
        }
        uint64_t gen = ts->generation;
        ts->waiting++;
        while (ts->generation == gen)
            pthread_cond_wait(&ts->done, &ts->lock);
        ts->waiting--;
        *out = ts->last;
        out->coalesced = 1;
        ts->coalesced++;
        if (min_interval_ms >= 0)
            ts->last_manual_mono_ns = mt_mono_ns();
        pthread_mutex_unlock(&ts->lock);
        return 0;
    }
    if ((flags & TRIM_OBEYS_SUSPEND) && ts->suspend_depth && atomic_load(ts->suspend_depth) > 0) {
        pthread_mutex_unlock(&ts->lock);
        return -EPERM;
    }
    ts->running = 1;
    ts->running_obeys = !!(flags & TRIM_OBEYS_SUSPEND);
    struct stall_canary *canary = ts->stall;
    pthread_mutex_unlock(&ts->lock);

    measure_trim(canary, sc, trigger, pad, crossing_ns, &r);
    explain_nothing(ts, &r);

    pthread_mutex_lock(&ts->lock);
    if (min_interval_ms >= 0) /* the gap counts from the end: a long trim leaves a whole one */
        ts->last_manual_mono_ns = mt_mono_ns();
    record_locked(ts, &r);
    ts->last = r;
    ts->running = 0;
    ts->running_obeys = 0;
    ts->generation++;
    pthread_cond_broadcast(&ts->done);
    pthread_mutex_unlock(&ts->lock);
    *out = r;
    return 0;
}

/*
 * The manual rate limit for a request that is not one trim of this process (a
 * worker group's: the leader's trim and its members', trim_request's row beside):
 * admitted (0) when ManualTrimMinIntervalMs passed since the last manual request's
 * end, and the interval starts again now; else -EAGAIN with *retry_after_ms, counted
 * as rate limited. trim_manual_done marks the request's end: the next interval counts
 * from there.
 */
int trim_manual_admit(struct trim_service *ts, int64_t min_interval_ms, int64_t *retry_after_ms)
{
    pthread_mutex_lock(&ts->lock);
    if (rate_limited_locked(ts, min_interval_ms, retry_after_ms)) {
        pthread_mutex_unlock(&ts->lock);
        return -EAGAIN;
    }
    ts->last_manual_mono_ns = mt_mono_ns();
    pthread_mutex_unlock(&ts->lock);
    return 0;
}

void trim_manual_done(struct trim_service *ts)
{
    pthread_mutex_lock(&ts->lock);
    ts->last_manual_mono_ns = mt_mono_ns();
    pthread_mutex_unlock(&ts->lock);
}

void trim_count_rate_limited(struct trim_service *ts)
{
    pthread_mutex_lock(&ts->lock);
    ts->rate_limited++;
    pthread_mutex_unlock(&ts->lock);
}

/* What each trigger's trims obey (trim_request). */
struct trim_rule {
    int flags;                   /* TRIM_WAIT_IF_BUSY: share a running trim's result */
    int obeys_suspend;           /* refused while the host holds trims off */
    int wakes_sink;              /* its result goes to the store at once */
    int64_t count_skip_every_ns; /* a refusal counted at most this often (0: each) */
    int slotted;                 /* starts only inside the caller's window (trim_ask.open_ns) */
};

/*
 * The one rule table, keyed by trigger: a row per trigger of a process's own trims, and
 * the pressure trigger's two rows for a worker group (who asks is part of the key:
 * trim_row).
 */
enum trim_row {
    ROW_MANUAL = MT_TRIGGER_MANUAL,     /* whoever asks */
    ROW_PERIODIC = MT_TRIGGER_PERIODIC,
    ROW_PRESSURE = MT_TRIGGER_PRESSURE, /* a process's own pressure path */
    ROW_BURST = MT_TRIGGER_BURST,
    ROW_GROUP_PRESSURE, /* MT_TRIGGER_PRESSURE asked by a group (trim_ask.group) */
    ROW_MEMBER_SLOT,    /* MT_TRIGGER_PRESSURE: a member's own, in its slot (TRIM_ASK_MEMBER) */
    ROW_COUNT
};

static const struct trim_rule trim_rules[ROW_COUNT] = {
    /* a person asked: answered, with a trim of its own or a running one's result; a
     * group's manual trims too (its leader applied the rate limit to the group) */
    [ROW_MANUAL] = {TRIM_WAIT_IF_BUSY, 0, 1, 0, 0},
    [ROW_PERIODIC] = {0, 1, 0, 0, 0},
    [ROW_BURST] = {0, 1, 0, 0, 0},
    /* polled every few ms near the limit: one count a second of being refused */
    [ROW_PRESSURE] = {0, 1, 1, MT_SEC, 0},
    /* a worker group's (a member's trim on its leader's request, and the leader's own):
     * it shares a running trim (what another member needs is not this one's to keep: no
     * cost gate, no refusal because its own periodic trim runs), obeys the host's suspend
     * and counts a refusal once a second as the pressure path does */
    [ROW_GROUP_PRESSURE] = {TRIM_WAIT_IF_BUSY, 1, 1, MT_SEC, 0},
    /* a group's member trimming its own freed memory inside the group's zone, without
     * its leader's request (core/group/group_member.c): as the group's pressure row, and
     * slotted: it starts only inside the window its leader's stagger gives it (its slot,
     * while its leader's grant lasts; member_window widens it at the group's line and
     * after a missed slot), so that members acting alone never start their trims
     * together; outside it is refused and counted as "stagger" */
    [ROW_MEMBER_SLOT] = {TRIM_WAIT_IF_BUSY, 1, 1, MT_SEC, 1},
};
_Static_assert((int)ROW_GROUP_PRESSURE == (int)MT_TRIGGER_COUNT,
               "a trigger's own row is its number, the group's rows after them");

/* The row of an ask, or -1 (a member's own trim is a pressure trim only). */
static int trim_row(const struct trim_ask *ask)
{
    if (ask->trigger < 0 || ask->trigger >= MT_TRIGGER_COUNT)
        return -1;
    if (ask->group == TRIM_ASK_MEMBER)
        return ask->trigger == MT_TRIGGER_PRESSURE ? ROW_MEMBER_SLOT : -1;
    if (ask->group && ask->trigger == MT_TRIGGER_PRESSURE)
        return ROW_GROUP_PRESSURE;
    return ask->trigger;
}

/* Count a refusal of a trigger's trim as its rule says. */
static void count_refusal(struct trim_service *ts, const struct trim_rule *rule, int trigger,
                          int reason)
{
    int64_t now = mt_mono_ns();
    pthread_mutex_lock(&ts->lock);
    int64_t *last = &ts->last_skip_ns[trigger][reason];
    if (!rule->count_skip_every_ns || !*last || now - *last >= rule->count_skip_every_ns) {
        *last = now;
        ts->skips[reason]++;
    }
    pthread_mutex_unlock(&ts->lock);
}

int trim_request(struct trim_service *ts, struct snapshot_cache *sc, const struct trim_ask *ask,
                 struct mt_trim_result *out, int64_t *retry_after_ms)
{
    int row = trim_row(ask);
    if (row < 0)
        return -EINVAL;
    const struct trim_rule *rule = &trim_rules[row];
    int flags = rule->flags | (rule->obeys_suspend ? TRIM_OBEYS_SUSPEND : 0);
    if (rule->slotted) {
        int64_t now = mt_mono_ns();
        if (now < ask->open_ns || now >= ask->close_ns) {
            if (retry_after_ms)
                *retry_after_ms = now < ask->open_ns ? (ask->open_ns - now + MT_MS - 1) / MT_MS : -1;
            count_refusal(ts, rule, ask->trigger, MT_SKIP_STAGGER);
            return -EAGAIN;
        }
    }
    int rc = trim_run_at(ts, sc, ask->trigger, ask->pad, ask->min_interval_ms, flags,
                         ask->crossing_ns, out, retry_after_ms);
    if (rc == -EPERM)
        count_refusal(ts, rule, ask->trigger, MT_SKIP_SUSPENDED);
    if (rc == -EBUSY)
        count_refusal(ts, rule, ask->trigger, MT_SKIP_BUSY);
    if (rc == 0 && rule->wakes_sink && !out->coalesced && ts->sink_wake)
        ts->sink_wake(ts->sink_arg);
    return rc;
}

void trim_hold(struct trim_service *ts)
{
    pthread_mutex_lock(&ts->lock);
    ts->waiting++;
    while (ts->running && ts->running_obeys)
        pthread_cond_wait(&ts->done, &ts->lock);
    ts->waiting--;
    pthread_mutex_unlock(&ts->lock);
}

void trim_set_stall(struct trim_service *ts, struct stall_canary *c)
{
    pthread_mutex_lock(&ts->lock);
    ts->stall = c;
    pthread_mutex_unlock(&ts->lock);
}

void trim_count_skip(struct trim_service *ts, int reason)
{
    if (reason < 0 || reason >= MT_SKIP_COUNT)
        return;
    pthread_mutex_lock(&ts->lock);
    ts->skips[reason]++;
    pthread_mutex_unlock(&ts->lock);
}

void trim_counters(struct trim_service *ts, struct mt_counters *out)
{
    pthread_mutex_lock(&ts->lock);
    memcpy(out->skips, ts->skips, sizeof(out->skips));
    memcpy(out->trims, ts->trims, sizeof(out->trims));
    memcpy(out->released_bytes, ts->released, sizeof(out->released_bytes));
    memcpy(out->trim_hist, ts->hist, sizeof(out->trim_hist));
    out->trim_seconds_sum = ts->seconds_sum;
    out->manual_coalesced = ts->coalesced;
    out->manual_rate_limited = ts->rate_limited;
    memcpy(out->trim_seconds, ts->seconds, sizeof(out->trim_seconds));
    memcpy(out->host_stall_trims, ts->stall_trims, sizeof(out->host_stall_trims));
    memcpy(out->host_stall_seconds, ts->stall_sum, sizeof(out->host_stall_seconds));
    memcpy(out->host_stall_max_seconds, ts->stall_max, sizeof(out->host_stall_max_seconds));
    memcpy(out->refaulted_bytes, ts->refaulted, sizeof(out->refaulted_bytes));
    memcpy(out->refault_windows, ts->refault_windows, sizeof(out->refault_windows));
    pthread_mutex_unlock(&ts->lock);
}

void trim_refault_done(struct trim_service *ts, const struct mt_refault *rf)
{
    if (rf->trigger < 0 || rf->trigger >= MT_TRIGGER_COUNT)
        return;
    pthread_mutex_lock(&ts->lock);
    ts->refaulted[rf->trigger] += rf->refaulted_bytes > 0 ? (uint64_t)rf->refaulted_bytes : 0;
    ts->refault_windows[rf->trigger]++;
    if (ts->last.id == rf->id)
        ts->last.refaulted_bytes = rf->refaulted_bytes;
    if (ts->refault_sink)
        ts->refault_sink(ts->sink_arg, rf);
    pthread_mutex_unlock(&ts->lock);
}

int trim_last(struct trim_service *ts, uint64_t *generation, struct mt_trim_result *out)
{
    pthread_mutex_lock(&ts->lock);
    int changed = ts->generation != *generation && ts->generation > 0;
    *generation = ts->generation;
    if (changed)
        *out = ts->last;
    pthread_mutex_unlock(&ts->lock);
    return changed;
}

unsigned trim_recent(struct trim_service *ts, struct mt_trim_result *buf, unsigned max)
{
    pthread_mutex_lock(&ts->lock);
    unsigned n = ts->recent_count < max ? ts->recent_count : max;
    unsigned skip = ts->recent_count - n;
    for (unsigned i = 0; i < n; i++)
        buf[i] = ts->recent[(ts->recent_head + skip + i) % TRIM_RECENT];
    pthread_mutex_unlock(&ts->lock);
    return n;
}
