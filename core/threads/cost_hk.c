/*
 * cost_hk.c - the housekeeper's side of cost.c (see cost_hk.h): it reads
 * /proc/self/stat once a tick (minor faults, CPU time, RSS), closes each
 * trim's re-fault window (after RefaultWindowSeconds, or at the next trim)
 * and hands the figure to the trim service for the store and the counters,
 * lengthens or resets the adaptive gap, and gates periodic and burst trims
 * on the budget and on a busy host. Housekeeper thread only; hk->lock is
 * taken to publish gauges and to read a test's CPU hook, never across
 * anything else (the trim service counts the skips under its own).
 */
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cost_hk.h"
#include "housekeeper.h"
#include "cpuquota.h"
#include "probe.h"
#include "trim.h"

/* The gap's changes follow the host's (and a client's manual trims'): 5 lines per 10 s at
 * most, the rest counted (one instance per process: process-wide is enough). */
static struct mt_log_limit gap_log = MT_LOG_LIMIT_INIT(10 * MT_SEC, 5);

#define CPUS_EVERY_TICKS 40       /* re-read the affinity and cpu.max every ~10 s */
#define GAP_MIN_EVIDENCE (1 << 20) /* a release smaller than 1 MiB says nothing */

static int64_t own_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (int64_t)ts.tv_sec * MT_SEC + ts.tv_nsec;
}

static uint64_t own_minflt(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_minflt : 0;
}

void cost_hk_init(struct cost_hk *h)
{
    memset(h, 0, sizeof(*h));
    h->process_cpu_ns = -1;
    h->back_after_ns = -1;
    h->cpus = cpu_quota_cpus();
}

static void publish(struct housekeeper *hk, const struct cost_hk *h, const struct mt_config *c)
{
    double share = cost_cpu_share(&h->cpu, h->cpus);
    pthread_mutex_lock(&hk->lock);
    hk->gap_factor = cost_gap_factor(&h->gap, c->trim_gap_max_factor);
    hk->host_cpu_share = share;
    hk->deferred_seconds = h->deferred_seconds;
    hk->deferring = h->defer.since != 0;
    hk->back_at_once = h->back_at_once;
    hk->back_after_ns = h->back_after_ns;
    pthread_mutex_unlock(&hk->lock);
}

/* How long ago trim r ended (its wall-clock start and duration; 0..1 s): the window opens
 * at the tick after it. */
static int64_t trim_ended_ago_ns(const struct mt_trim_result *r)
{
    int64_t ago = (mt_now_ms() - r->start_ms) * MT_MS - r->duration_ns;
    return ago < 0 ? 0 : ago > MT_SEC ? MT_SEC : ago;
}

/* A periodic or burst trim tells the adaptive gap what came back of its release. */
static void gap_learn(struct housekeeper *hk, struct cost_hk *h, const struct mt_config *c,
                      int64_t refaulted, int64_t now, int cut_short)
{
    struct cost_refault *w = &h->window;
    if (w->gap_decided || (w->trigger != MT_TRIGGER_PERIODIC && w->trigger != MT_TRIGGER_BURST))
        return;
    /* A window a pressure or manual trim cut short may say "it came back", not "it stayed out". */
    if (cut_short && refaulted <= w->released / 2) {
        w->gap_decided = 1;
        return;
    }
    int64_t min = c->trim_min_releasable_bytes > GAP_MIN_EVIDENCE ? c->trim_min_releasable_bytes
                                                                  : GAP_MIN_EVIDENCE;
    double before = cost_gap_factor(&h->gap, c->trim_gap_max_factor);
    double after = cost_gap_update(&h->gap, w->released, refaulted, min, c->trim_gap_max_factor);
    int at_once = h->back_at_once;
    w->gap_decided = 1;
    if (w->released >= min) {
        /* Only with an adaptive gap: TrimGapMaxFactor 1 turns all of this off. */
        h->back_after_ns = cost_back_after(w, refaulted, now);
        h->back_at_once = c->trim_gap_max_factor >= 2 && h->back_after_ns >= 0 &&
                          h->back_after_ns <= COST_AT_ONCE_NS;
        if (h->back_at_once) /* no point in finding the gap step by step */
            after = cost_gap_saturate(&h->gap, c->trim_gap_max_factor);
    }
    if (after != before || at_once != h->back_at_once)
        mt_log_limited(&gap_log, MT_LOG_INFO, "cost", "%lld of %lld released bytes came back %s a %s trim: trim gaps x%g%s",
               (long long)refaulted, (long long)w->released,
               h->back_at_once ? "at once after" : "after", mt_trigger_name(w->trigger), after,
               h->back_at_once ? ", even while the heap is mostly free, until the host is quiet" : "");
}

/* The open window ends (its time is up, or another trim began): report its figure. */
static void close_window(struct housekeeper *hk, struct cost_hk *h, const struct mt_config *c,
                         uint64_t minflt, int64_t now, int cut_short)
{
    struct cost_refault *w = &h->window;
    struct mt_refault rf = {
        .id = w->id,
        .start_ms = w->start_ms,
        .trigger = w->trigger,
        .refaulted_bytes = cost_refault_bytes(w, minflt, own_minflt(), sysconf(_SC_PAGESIZE)),
    };
    trim_refault_done(hk->deps.trims, &rf);
    gap_learn(hk, h, c, rf.refaulted_bytes, now, cut_short);
    w->open = 0;
}

void cost_hk_tick(struct housekeeper *hk, struct cost_hk *h, const struct mt_config *c, int64_t now)
{
    struct probe_stat ps;
    struct mt_trim_result r;
    int have = probe_stat(&ps) == 0;

    if (++h->ticks % CPUS_EVERY_TICKS == 0)
        h->cpus = cpu_quota_cpus();
    h->process_cpu_ns = have ? ps.cpu_ns : -1; /* the policy's activity test reads it too */
    pthread_mutex_lock(&hk->lock);
    int64_t (*test_cpu)(void *, int64_t) = hk->test_host_cpu;
    void *test_arg = hk->test_host_cpu_arg;
    pthread_mutex_unlock(&hk->lock);
    if (test_cpu) /* a test chooses the host's CPU time (housekeeper_test_host_cpu) */
        cost_cpu_push(&h->cpu, now, test_cpu(test_arg, now));
    else if (have)
        cost_cpu_push(&h->cpu, now, ps.cpu_ns - own_cpu_ns());
    /* A deferral nobody asked about since the last tick is over (the trim went away). */
    if (!h->gated && h->defer.since) {
        h->deferred_seconds += (double)(now - h->defer.since) / 1e9;
        cost_defer_clear(&h->defer);
    }
    h->gated = 0;

    if (h->back_at_once && c->trim_gap_max_factor < 2) /* the adaptive gap was turned off */
        h->back_at_once = 0;
    if (trim_last(hk->deps.trims, &h->trim_generation, &r)) {
        if (h->window.open) /* the next trim ends the last one's window */
            close_window(hk, h, c, r.minflt_after, now,
                         r.trigger == MT_TRIGGER_PRESSURE || r.trigger == MT_TRIGGER_MANUAL);
        cost_refault_open(&h->window, &r, own_minflt(), now);
        h->window.ended_ns = now - trim_ended_ago_ns(&r);
    } else if (have && h->window.open) {
        cost_refault_observe(&h->window, ps.rss_bytes);
        if (cost_refault_due(&h->window, now, (int64_t)(c->refault_window_seconds * MT_SEC))) {
            close_window(hk, h, c, ps.minflt, now, 0);
        } else if (!h->window.gap_decided) {
            /* More than half back already: the gap need not wait for the window's end --
             * once the verdict "at once" is final: it is, or its time has passed. A reading
             * taken while the host is still re-allocating (faults past half, its RSS growth
             * not yet, which a loaded machine makes likely) would fix "not at once" for good. */
            int64_t back = cost_refault_bytes(&h->window, ps.minflt, own_minflt(),
                                              sysconf(_SC_PAGESIZE));
            if (back > h->window.released / 2 &&
                (cost_back_at_once(&h->window, back, now, COST_AT_ONCE_NS) ||
                 now - h->window.ended_ns > COST_AT_ONCE_NS))
                gap_learn(hk, h, c, back, now, 0);
        }
    }
    publish(hk, h, c);
}

double cost_hk_gap_factor(const struct cost_hk *h, const struct mt_config *c)
{
    return cost_gap_factor(&h->gap, c->trim_gap_max_factor);
}

int cost_hk_back_at_once(const struct cost_hk *h)
{
    return h->back_at_once;
}

int cost_hk_host_quiet(const struct cost_hk *h)
{
    return cost_host_quiet(cost_cpu_share(&h->cpu, h->cpus), h->cpus, COST_QUIET_CPUS);
}

int cost_hk_gate(struct housekeeper *hk, struct cost_hk *h, const struct mt_config *c, int trigger,
                 int mostly_free, int64_t now)
{
    h->gated = 1;
    if (!mostly_free && !cost_budget_allows(&h->budget, now)) {
        /* A periodic trim skipped is counted each time; a burst once per budget period. */
        if (trigger == MT_TRIGGER_PERIODIC || !h->budget.skip_counted)
            trim_count_skip(hk->deps.trims, MT_SKIP_BUDGET);
        h->budget.skip_counted = 1;
        return COST_GATE_SKIP;
    }
    double share = cost_cpu_share(&h->cpu, h->cpus);
    int busy = c->trim_busy_cpu_percent > 0 && share >= 0 &&
               share * 100.0 >= c->trim_busy_cpu_percent;
    int64_t since = h->defer.since;
    switch (cost_defer_check(&h->defer, busy, now, (int64_t)(c->trim_max_defer_seconds * MT_SEC))) {
    case COST_DEFER_START:
        trim_count_skip(hk->deps.trims, MT_SKIP_HOST_BUSY);
        publish(hk, h, c);
        return COST_GATE_WAIT;
    case COST_DEFER_WAIT:
        return COST_GATE_WAIT;
    default:
        if (since) {
            h->deferred_seconds += (double)(now - since) / 1e9;
            publish(hk, h, c);
        }
        return COST_GATE_RUN;
    }
}

void cost_hk_charge(struct cost_hk *h, const struct mt_config *c, int64_t duration_ns)
{
    cost_budget_charge(&h->budget, mt_mono_ns(), duration_ns, c->trim_budget_percent);
}
