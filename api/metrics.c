/*
 * metrics.c - GET /metrics: Prometheus text format 0.0.4. Every name starts
 * with memtrim_, uses base units (_bytes, _seconds) and _total for counters,
 * with HELP and TYPE lines: trims by trigger, skips by reason, bytes
 * released, the trim-duration histogram, probe counts and durations, the
 * housekeeper's CPU time, and the gauges of the shared snapshot. Written
 * into one buffer (one allocation in the usual case). Runs on HTTP worker
 * threads; the core takes its own locks.
 */
#include "mt_alloc.h"
#include "api.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <locale.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "fields.h"
#include "memtrim.h"

#define API_METRICS_INITIAL (16 * 1024)

struct api_text {
    char *p;
    size_t len, cap;
    int failed;
};

/* Room for n more bytes (and a NUL); 0, or -1 with t->failed set. */
static int api_text_room(struct api_text *t, size_t n)
{
    if (t->failed)
        return -1;
    if (n < t->cap - t->len)
        return 0;
    size_t cap = (t->cap + n) * 2;
    char *grown = mt_realloc(t->p, cap);
    if (grown == NULL) {
        t->failed = 1;
        return -1;
    }
    t->p = grown;
    t->cap = cap;
    return 0;
}

static void api_text_put(struct api_text *t, const char *s, size_t n)
{
    if (api_text_room(t, n) == 0) {
        memcpy(t->p + t->len, s, n);
        t->len += n;
        t->p[t->len] = '\0';
    }
}

/*
 * printf for the page, without vfprintf for what it prints most: %s and the
 * integers (%llu, %lld, %u, %d) are copied and written by hand, and only a
 * real number (%.Ng and the like) goes through snprintf, one at a time.
 * glibc's vfprintf machinery was 45 % of the CPU of /metrics under wrk -c64
 * (perf); the page is the same byte for byte.
 */
static void api_text_printf(struct api_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void api_text_printf(struct api_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    while (*fmt && !t->failed) {
        const char *pct = strchr(fmt, '%');
        size_t lit = pct ? (size_t)(pct - fmt) : strlen(fmt);
        api_text_put(t, fmt, lit);
        if (pct == NULL)
            break;
        const char *spec = pct + 1;
        size_t sl = 0;
        while ((spec[sl] >= '0' && spec[sl] <= '9') || spec[sl] == '.' || spec[sl] == 'l')
            sl++;
        char conv = spec[sl];
        char num[32], *q = num + sizeof(num);
        int longs = 0;
        for (size_t k = 0; k < sl; k++)
            longs += spec[k] == 'l';
        if (conv == 's' && sl == 0) {
            const char *v = va_arg(ap, const char *);
            api_text_put(t, v ? v : "(null)", v ? strlen(v) : 6);
        } else if ((conv == 'u' || conv == 'd') && sl == (size_t)longs) {
            uint64_t u;
            int neg = 0;
            if (conv == 'u')
                u = longs ? (longs > 1 ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned long))
                          : va_arg(ap, unsigned);
            else {
                long long v = longs ? (longs > 1 ? va_arg(ap, long long) : va_arg(ap, long))
                                    : va_arg(ap, int);
                neg = v < 0;
                u = neg ? 0 - (uint64_t)v : (uint64_t)v;
            }
            do {
                *--q = (char)('0' + u % 10);
                u /= 10;
            } while (u != 0);
            if (neg)
                *--q = '-';
            api_text_put(t, q, (size_t)(num + sizeof(num) - q));
        } else if (conv == '%' && sl == 0) {
            api_text_put(t, "%", 1);
        } else if (strchr("eEfFgG", conv) != NULL && conv != '\0' && longs == 0 && sl < 16) {
            char one[20];
            memcpy(one, pct, sl + 2);
            one[sl + 2] = '\0';
            int n = snprintf(num, sizeof(num), one, va_arg(ap, double));
            if (n < 0 || (size_t)n >= sizeof(num))
                t->failed = 1;
            else
                api_text_put(t, num, (size_t)n);
        } else {
            t->failed = 1; /* a format this page does not use */
        }
        fmt = conv ? spec + sl + 1 : spec + sl;
    }
    va_end(ap);
}

static void api_head(struct api_text *t, const char *name, const char *type, const char *help)
{
    api_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void api_u64(struct api_text *t, const char *name, const char *type, const char *help,
                    uint64_t v)
{
    api_head(t, name, type, help);
    api_text_printf(t, "%s %llu\n", name, (unsigned long long)v);
}

/* A family with a line per trigger: the counts u, or the figures f when u is NULL. */
static void api_by_trigger(struct api_text *t, const char *name, const char *type,
                           const char *help, const uint64_t *u, const double *f)
{
    api_head(t, name, type, help);
    for (int i = 0; i < MT_TRIGGER_COUNT; i++) {
        if (u)
            api_text_printf(t, "%s{trigger=\"%s\"} %llu\n", name, mt_trigger_name(i),
                            (unsigned long long)u[i]);
        else
            api_text_printf(t, "%s{trigger=\"%s\"} %.15g\n", name, mt_trigger_name(i), f[i]);
    }
}

static void api_f64(struct api_text *t, const char *name, const char *type, const char *help,
                    double v)
{
    api_head(t, name, type, help);
    api_text_printf(t, "%s %.15g\n", name, v);
}

/*
 * A bucket's bound as the page writes it ("%.9g" in the C locale), printed
 * once per bounds table and kept: the bounds are constants, and formatting
 * 24 reals a request was the largest part of /metrics after vfprintf.
 */
#define API_BOUND_TABLES 4
#define API_BOUNDS_MAX 16
static struct {
    const double *bounds;
    char text[API_BOUNDS_MAX][24];
} api_bounds[API_BOUND_TABLES];
static pthread_mutex_t api_bounds_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *api_bound_text(const double *bounds, int n, int i)
{
    static __thread char one[24];
    const char *text = NULL;
    pthread_mutex_lock(&api_bounds_lock);
    for (int k = 0; k < API_BOUND_TABLES && n <= API_BOUNDS_MAX; k++) {
        if (api_bounds[k].bounds == NULL) {
            for (int j = 0; j < n; j++)
                snprintf(api_bounds[k].text[j], sizeof(api_bounds[k].text[j]), "%.9g", bounds[j]);
            api_bounds[k].bounds = bounds;
        }
        if (api_bounds[k].bounds == bounds) {
            text = api_bounds[k].text[i];
            break;
        }
    }
    pthread_mutex_unlock(&api_bounds_lock);
    if (text == NULL) { /* more tables than kept: printed each time */
        snprintf(one, sizeof(one), "%.9g", bounds[i]);
        text = one;
    }
    return text;
}

/* A histogram from non-cumulative counts: n bounds, then +Inf in hist[n]. */
static void api_histogram(struct api_text *t, const char *name, const char *help,
                          const uint64_t *hist, const double *bounds, int n, double sum)
{
    uint64_t cumulative = 0;
    api_head(t, name, "histogram", help);
    for (int i = 0; i < n; i++) {
        cumulative += hist[i];
        api_text_printf(t, "%s_bucket{le=\"%s\"} %llu\n", name, api_bound_text(bounds, n, i),
                        (unsigned long long)cumulative);
    }
    cumulative += hist[n];
    api_text_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cumulative);
    api_text_printf(t, "%s_sum %.15g\n", name, sum);
    api_text_printf(t, "%s_count %llu\n", name, (unsigned long long)cumulative);
}

static void api_metrics_trims(struct api_text *t, const struct mt_counters *c)
{
    api_by_trigger(t, "memtrim_trims_total", "counter",
                   "Trims run, by trigger.",
                   c->trims, NULL);
    api_by_trigger(t, "memtrim_released_bytes_total", "counter",
                   "Bytes of RSS given back by trims (positive releases), by trigger.",
                   c->released_bytes, NULL);
    api_head(t, "memtrim_trim_skips_total", "counter", "Trims skipped, by reason.");
    for (int i = 0; i < MT_SKIP_COUNT; i++)
        api_text_printf(t, "memtrim_trim_skips_total{reason=\"%s\"} %llu\n", mt_skip_reason_name(i),
                        (unsigned long long)c->skips[i]);
    api_u64(t, "memtrim_manual_trims_coalesced_total", "counter",
            "Manual trim requests that shared a trim already running.", c->manual_coalesced);
    api_u64(t, "memtrim_manual_trims_rate_limited_total", "counter",
            "Manual trim requests refused with 429 (ManualTrimMinIntervalMs).",
            c->manual_rate_limited);

    api_histogram(t, "memtrim_trim_duration_seconds", "Duration of malloc_trim calls.",
                  c->trim_hist, mt_hist_bounds, MT_HIST_BUCKETS, c->trim_seconds_sum);
}

static void api_metrics_probe(struct api_text *t, const struct mt_counters *c)
{
    api_u64(t, "memtrim_heap_probes_total", "counter", "mallinfo2 calls.", c->heap_probes);
    api_f64(t, "memtrim_heap_probe_seconds_total", "counter", "Time spent in mallinfo2.",
            c->heap_probe_seconds);
    api_f64(t, "memtrim_heap_probe_last_duration_seconds", "gauge",
            "Duration of the last mallinfo2 call.", c->heap_probe_last_seconds);
    api_u64(t, "memtrim_cheap_probes_total", "counter", "Reads of /proc/self and the cgroup files.",
            c->cheap_probes);
    api_f64(t, "memtrim_cheap_probe_seconds_total", "counter",
            "Time spent reading /proc/self and the cgroup files.", c->cheap_probe_seconds);
    api_f64(t, "memtrim_housekeeper_cpu_seconds_total", "counter",
            "CPU time of memtrim's housekeeper thread.", c->housekeeper_cpu_seconds);
    api_f64(t, "memtrim_cpu_seconds_total", "counter",
            "CPU time of all of memtrim's threads (housekeeper, pressure, store, HTTP, group, "
            "...), per-thread CPU clocks, those that ended included.",
            c->cpu_seconds);
    api_u64(t, "memtrim_housekeeper_ticks_total", "counter", "Housekeeper ticks.",
            c->housekeeper_ticks);
    api_u64(t, "memtrim_samples_stored_total", "counter", "Samples written to the store.",
            c->samples_stored);
    api_u64(t, "memtrim_samples_dropped_total", "counter",
            "Samples lost because the store could not keep up (a slow or hung disk).",
            c->samples_dropped);
    api_u64(t, "memtrim_store_errors_total", "counter", "Store operations that failed.",
            c->store_errors);
    api_u64(t, "memtrim_trims_dropped_total", "counter",
            "Trim results that could not be queued for the store.", c->trims_dropped);
}

/* What trimming cost the host (core/decide/cost.c): time, re-faults, the gap, a busy host. */
static void api_metrics_cost(struct api_text *t, const struct mt_counters *c)
{
    api_by_trigger(t, "memtrim_trim_seconds_total", "counter",
                   "Wall time in trims, by trigger (periodic and burst are charged to "
                   "TrimBudgetPercent; pressure and manual are not).",
                   NULL, c->trim_seconds);
    api_by_trigger(t, "memtrim_trim_host_stall_seconds_total", "counter",
                   "Sum over trims of the longest wait of the stall canary's malloc while the "
                   "trim ran, by trigger: the wait a thread allocating during the trim saw (its own "
                   "arena's lock and the CPU), not the worst host thread's (docs/policy.md).",
                   NULL, c->host_stall_seconds);
    api_by_trigger(t, "memtrim_trim_host_stall_seconds_max", "gauge",
                   "The longest wait of the stall canary's malloc in any one trim, by trigger.",
                   NULL, c->host_stall_max_seconds);
    api_by_trigger(t, "memtrim_trim_host_stall_measured_total", "counter",
                   "Trims the stall canary measured (took a sample while they ran), by trigger.",
                   c->host_stall_trims, NULL);
    api_by_trigger(t, "memtrim_refaulted_bytes_total", "counter",
                   "Upper bound of released bytes that came back within RefaultWindowSeconds "
                   "(minor faults x page size), by trigger.",
                   c->refaulted_bytes, NULL);
    api_by_trigger(t, "memtrim_refault_windows_total", "counter",
                   "Trims whose re-fault window has closed, by trigger.",
                   c->refault_windows, NULL);
    api_f64(t, "memtrim_trim_gap_factor", "gauge",
            "Multiplier on the periodic and burst gaps while released memory comes back "
            "(1 = none; at most TrimGapMaxFactor).",
            c->gap_factor > 0 ? c->gap_factor : 1);
    api_f64(t, "memtrim_trim_release_back_at_once", "gauge",
            "1 when more than half of the last periodic or burst trim's release came back "
            "within about 0.5 s: while the host works, the gap factor and the budget then "
            "apply even to a mostly free heap.",
            c->release_back_at_once ? 1 : 0);
    if (c->host_cpu_share >= 0)
        api_f64(t, "memtrim_host_cpu_share", "gauge",
                "The host's CPU time over the last 0.5 s as a share of the CPUs it may use (0-1).",
                c->host_cpu_share);
    api_f64(t, "memtrim_trim_deferred_seconds_total", "counter",
            "Time periodic and burst trims waited for a busy host (TrimBusyCpuPercent).",
            c->deferred_seconds);
    api_u64(t, "memtrim_trim_deferring", "gauge", "1 while a trim waits for a busy host.",
            (uint64_t)(c->deferring != 0));
}

static void api_metrics_pressure(struct api_text *t, const struct mt_counters *c)
{
    api_head(t, "memtrim_pressure_source_info", "gauge",
             "What wakes the pressure path (always 1): cgroup-v1-threshold, psi, "
             "memory-events, poll, none.");
    api_text_printf(t, "memtrim_pressure_source_info{source=\"%s\"} 1\n",
                    c->pressure_source ? c->pressure_source : "none");
    api_u64(t, "memtrim_pressure_zone", "gauge",
            "1 when RSS is inside the pressure zone (half the limit or more).",
            (uint64_t)(c->pressure_zone != 0));
    api_head(t, "memtrim_pressure_checks_total", "counter",
             "RSS readings of the pressure thread, by zone.");
    api_text_printf(t, "memtrim_pressure_checks_total{zone=\"outside\"} %llu\n",
                    (unsigned long long)c->pressure_checks[0]);
    api_text_printf(t, "memtrim_pressure_checks_total{zone=\"inside\"} %llu\n",
                    (unsigned long long)c->pressure_checks[1]);
    api_u64(t, "memtrim_pressure_kernel_wakeups_total", "counter",
            "Wakes of the pressure thread by a kernel notification.",
            c->pressure_kernel_wakeups);
    api_u64(t, "memtrim_pressure_last_chance_trims_total", "counter",
            "Pressure trims run at once because the kernel reported the cgroup at its limit "
            "(a new memory.events max, oom or oom_kill).",
            c->pressure_last_chance_trims);
    api_f64(t, "memtrim_pressure_cpu_seconds_total", "counter",
            "CPU time of memtrim's pressure thread.", c->pressure_cpu_seconds);
    /* What pressure trims bought, beside what they cost (memtrim_trim_seconds_total and
     * memtrim_released_bytes_total with trigger="pressure"). */
    api_u64(t, "memtrim_pressure_judged_released_bytes_total", "counter",
            "Bytes released by pressure trims that were judged at the next pressure trim's "
            "start (releases of at least TrimMinReleasableBytes).",
            c->pressure_judged_released_bytes);
    api_u64(t, "memtrim_pressure_returned_bytes_total", "counter",
            "Of memtrim_pressure_judged_released_bytes_total, the bytes that came back (RSS "
            "regrown) before the next pressure trim: headroom the trims did not keep.",
            c->pressure_returned_bytes);
    api_u64(t, "memtrim_pressure_returned_trims_total", "counter",
            "Pressure trims more than half of whose release came back before the next one.",
            c->pressure_returned_trims);
    api_f64(t, "memtrim_pressure_backoff_seconds", "gauge",
            "The growth rule's wait after a pressure trim now: doubles per trim in a row whose "
            "release came back (below the line) or that found too little; 0 none.",
            c->pressure_backoff_seconds);
    api_histogram(t, "memtrim_pressure_reaction_seconds",
                  "Time from the crossing to the start of each pressure trim.",
                  c->pressure_reaction_hist, mt_reaction_bounds, MT_REACTION_BUCKETS,
                  c->pressure_reaction_seconds_sum);
    if (c->pressure_reaction_last_seconds >= 0)
        api_f64(t, "memtrim_pressure_reaction_last_seconds", "gauge",
                "Reaction time of the last pressure trim.", c->pressure_reaction_last_seconds);
}

/* The snapshot's fields that common/fields.h gives a metric: gauges in base units (a
 * millisecond field in seconds), counters; a field not known now is left out. */
static void api_metrics_gauges(struct api_text *t, const struct mt_snapshot *s)
{
    const char *family = "";
    size_t family_len = 0;
    for (int i = 0; i < MT_FIELD_COUNT; i++) {
        const struct mt_field *f = &mt_fields[i];
        struct mt_field_value v;
        if (f->metric == MT_METRIC_NONE || !mt_field_get(f, s, &v))
            continue;
        size_t len = strcspn(f->sample, "{");
        if (len != family_len || strncmp(f->sample, family, len) != 0) {
            char name[128];
            snprintf(name, sizeof(name), "%.*s", (int)len, f->sample);
            /* The family's help is on its first line, which may be unknown now (v1 has no
             * memory.events high). */
            const char *help = f->help;
            for (int j = i - 1; !help[0] && j >= 0; j--)
                if (strncmp(mt_fields[j].sample, f->sample, len) == 0 &&
                    mt_fields[j].sample[len] == '{')
                    help = mt_fields[j].help;
            api_head(t, name, f->metric == MT_METRIC_COUNTER ? "counter" : "gauge", help);
            family = f->sample;
            family_len = len;
        }
        if (f->type == MT_FIELD_MS)
            api_text_printf(t, "%s %.15g\n", f->sample, (double)v.i / 1e3);
        else if (v.real)
            api_text_printf(t, "%s %.15g\n", f->sample, v.d);
        else
            api_text_printf(t, "%s %llu\n", f->sample, (unsigned long long)v.i);
    }
}

/* The "C" numeric locale: the host may have set one that writes 0,25 for 0.25. */
static locale_t api_c_locale;
static pthread_once_t api_c_locale_once = PTHREAD_ONCE_INIT;
static void api_c_locale_init(void)
{
    api_c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static void api_metrics_build(const struct server_request *req, struct api_text *t);

int api_metrics_get(const struct server_request *req, struct server_reply *rep)
{
    struct api_text t = {.p = mt_malloc(API_METRICS_INITIAL), .cap = API_METRICS_INITIAL};
    t.failed = t.p == NULL;
    pthread_once(&api_c_locale_once, api_c_locale_init);
    locale_t saved = api_c_locale ? uselocale(api_c_locale) : (locale_t)0;
    api_metrics_build(req, &t);
    if (saved)
        uselocale(saved);
    if (t.failed) {
        free(t.p);
        return server_reply_error(rep, 500, "out_of_memory", "could not build the metrics page");
    }
    return server_reply_text(rep, 200, "text/plain; version=0.0.4; charset=utf-8", t.p, t.len);
}

/* A label value with \\, " and newlines escaped (text format 0.0.4), and valid UTF-8, which
 * Prometheus requires: a member's program name of other bytes made the whole page
 * unparseable (promtool: invalid label value). */
static void api_label_value(char *out, size_t size, const char *v)
{
    api_utf8_clean(out, size, v, 1);
}

static void api_metrics_allocator(struct api_text *t, const struct mt_snapshot *s)
{
    char name[64], version[128];
    api_label_value(name, sizeof(name), s->allocator ? s->allocator : "glibc");
    api_label_value(version, sizeof(version), s->allocator_version);
    api_head(t, "memtrim_allocator_info", "gauge",
             "The allocator that serves malloc in this process and its version (always 1).");
    api_text_printf(t, "memtrim_allocator_info{allocator=\"%s\",version=\"%s\"} 1\n", name,
                    version);
}

/*
 * A worker group's leader: the group's figures, and per member a `pid` label
 * on a few gauges. Only live members are listed (at most MT_GROUP_MAX), so the
 * label's values do not pile up as workers come and go: a member that left
 * is gone from the next scrape. Nothing in no group.
 */
static void api_metrics_group(struct api_text *t, struct memtrim *mt)
{
    struct mt_group_info gi;
    struct mt_member *m = mt_malloc(MT_GROUP_MAX * sizeof(*m));
    int n = 0;
    if (!m || mt_group_info(mt, &gi, m, MT_GROUP_MAX, &n) != 0) {
        free(m);
        return;
    }
    api_u64(t, "memtrim_group_members", "gauge",
            "Live members of this worker group, the serving process included.",
            (uint64_t)gi.members);
    api_u64(t, "memtrim_group_joined_total", "counter", "Members that joined the group.",
            gi.joined);
    api_u64(t, "memtrim_group_left_total", "counter",
            "Members that left the group (exited, killed or exec'd).", gi.left);
    if (gi.usage_bytes >= 0)
        api_u64(t, "memtrim_group_usage_bytes", "gauge",
                "What the group's pressure decision reads: the cgroup's usage, or the sum of "
                "the members' RSS.", (uint64_t)gi.usage_bytes);
    api_u64(t, "memtrim_group_pressure_zone", "gauge",
            "1 when the group's usage is inside the pressure zone.", (uint64_t)(gi.zone != 0));
    api_u64(t, "memtrim_group_pressure_trims_total", "counter",
            "Trims the group's pressure decision asked its members for.", gi.pressure_trims);
    api_u64(t, "memtrim_group_pressure_released_bytes_total", "counter",
            "Bytes those trims released.", gi.pressure_released_bytes);
    api_u64(t, "memtrim_group_own_trims_total", "counter",
            "Of those, trims members ran on their own inside the zone, in their slots "
            "(GroupTrimSlotMs).", gi.own_trims);
    api_u64(t, "memtrim_group_own_released_bytes_total", "counter",
            "Bytes the members' own trims released.", gi.own_released_bytes);
    api_u64(t, "memtrim_group_kernel_looks_total", "counter",
            "Looks of the group's pressure decision run at once at a kernel wake-up of the "
            "leader's pressure engine (a cgroup v1 threshold, PSI, memory.events).",
            gi.kernel_looks);
    api_u64(t, "memtrim_group_kernel_picks_total", "counter",
            "Of those, looks that picked a member to trim.", gi.kernel_picks);
    static const struct {
        const char *name, *help;
    } gauges[] = {
        {"memtrim_member_rss_bytes", "A live member's RSS at its last report."},
        {"memtrim_member_releasable_bytes",
         "A live member's releasable estimate at its last heap reading."},
        {"memtrim_member_trims_total", "Trims a live member ran since it joined."},
    };
    for (size_t k = 0; k < sizeof(gauges) / sizeof(gauges[0]); k++) {
        api_head(t, gauges[k].name, k == 2 ? "counter" : "gauge", gauges[k].help);
        for (int i = 0; i < n; i++) {
            char program[128];
            api_label_value(program, sizeof(program), m[i].program);
            uint64_t v = k == 0 ? m[i].snap.cheap.rss_bytes
                         : k == 1 ? (m[i].snap.heap.timestamp_ms ? m[i].snap.releasable_estimate_bytes : 0)
                                  : m[i].trims;
            api_text_printf(t, "%s{pid=\"%d\",program=\"%s\"} %llu\n", gauges[k].name, m[i].pid,
                            program, (unsigned long long)v);
        }
    }
    free(m);
}

/* Pinned memory from the last per-arena reading (glibc; none before the first): no
 * malloc_info of its own, a scrape never locks an arena for it. */
static void api_metrics_pinned(struct api_text *t, struct memtrim *mt)
{
    struct mt_arenas_pinned p;
    if (mt_arenas_pinned_get(mt, &p) != 0)
        return;
    api_u64(t, "memtrim_arenas_free_bytes", "gauge",
            "Free memory in glibc's arenas at the last malloc_info reading.", p.free_bytes);
    api_u64(t, "memtrim_arenas_releasable_bytes", "gauge",
            "Of it, what malloc_trim can give back (docs/advice.md, Pinned memory).",
            p.releasable_bytes);
    api_head(t, "memtrim_arenas_pinned_bytes", "gauge",
             "Of it, what no trim can give back, by reason.");
    api_text_printf(t, "memtrim_arenas_pinned_bytes{reason=\"small_chunks\"} %llu\n",
                    (unsigned long long)p.small_bytes);
    api_text_printf(t, "memtrim_arenas_pinned_bytes{reason=\"chunk_edges\"} %llu\n",
                    (unsigned long long)p.edge_bytes);
    api_text_printf(t, "memtrim_arenas_pinned_bytes{reason=\"thread_arena_top\"} %llu\n",
                    (unsigned long long)p.top_bytes);
    api_f64(t, "memtrim_arenas_reading_timestamp_seconds", "gauge",
            "When that malloc_info reading was taken, seconds since the epoch.",
            (double)p.timestamp_ms / 1e3);
}

static void api_metrics_build(const struct server_request *req, struct api_text *t_)
{
    struct api_text t = *t_;
    struct mt_counters c;
    struct mt_snapshot s;
    struct mt_health h;
    mt_counters_get(req->app, &c);
    mt_snapshot_get(req->app, &s);
    mt_health_get(req->app, &h);

    api_head(&t, "memtrim_build_info", "gauge", "memtrim's version (always 1).");
    api_text_printf(&t, "memtrim_build_info{version=\"%s\"} 1\n", MEMTRIM_VERSION);
    api_f64(&t, "memtrim_start_time_seconds", "gauge",
            "When memtrim started, seconds since the epoch.", (double)h.started_ms / 1e3);
    api_u64(&t, "memtrim_degraded", "gauge", "1 when something is not working (see /healthz).",
            (uint64_t)(h.degraded != 0));
    api_u64(&t, "memtrim_suspended", "gauge", "Suspend nesting depth (0 = trims allowed).",
            (uint64_t)(h.suspended > 0 ? h.suspended : 0));
    api_metrics_trims(&t, &c);
    api_metrics_probe(&t, &c);
    api_metrics_cost(&t, &c);
    api_metrics_pressure(&t, &c);
    api_metrics_gauges(&t, &s);
    api_metrics_allocator(&t, &s);
    api_metrics_pinned(&t, req->app);
    api_metrics_group(&t, req->app);
    *t_ = t;
}
