/*
 * doctor.c - the rules of GET /memory/doctor and the exit summary's top
 * finding. Each rule reads only its doctor_input and either adds one finding
 * or stays silent; thresholds are named below. Pure: no clock, no I/O, no
 * state, no locks (the caller gathers the input; see advice.c); any thread
 * (HTTP workers for /memory/doctor, the host's at the exit summary).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_alloc.h"
#include "doctor.h"

#define MIB (1024.0 * 1024.0)
/* many_arenas: more arenas than recommended, and those beyond the main one
 * hold at least this share of the free memory, and at least this much. */
#define ARENAS_FREE_SHARE 0.5
#define ARENAS_FREE_MIN (8 * MIB)
/* pressure_repeats: this many pressure trims within the window. */
#define PRESSURE_REPEATS 3
#define PRESSURE_WINDOW_MS (10 * 60 * 1000)
/* trims_release_little: this many recent periodic/burst trims, median below
 * half of TrimMinReleasableBytes (and below 1 MiB when that is 0). */
#define LITTLE_MIN_TRIMS 5
/* memory_returns: after a trim that released at least RETURN_MIN_RELEASE,
 * RSS grew back by RETURN_SHARE of it before the next trim, within
 * RETURN_GAP_MS, for RETURN_PAIRS pairs and most of the eligible ones. */
#define RETURN_MIN_RELEASE (1 * MIB)
#define RETURN_SHARE 0.8
#define RETURN_GAP_MS (120 * 1000)
#define RETURN_PAIRS 3
/* heap_never_frees: after this long, free heap below this share of the heap. */
#define NEVER_FREES_UPTIME_MS (60 * 1000)
#define NEVER_FREES_SHARE 0.10
/* probe_budget: readers refused at least this often and this share of the time. */
#define BUDGET_REFUSED_MIN 10
#define BUDGET_REFUSED_SHARE 0.5

struct ctx {
    const struct doctor_input *in;
    struct doctor_finding *out;
    int n, max;
};

static struct doctor_finding *add(struct ctx *c, const char *id, int severity, const char *kind)
{
    if (c->n >= c->max)
        return NULL;
    struct doctor_finding *f = &c->out[c->n++];
    memset(f, 0, sizeof(*f));
    f->id = id;
    f->severity = severity;
    f->kind = kind;
    return f;
}

static void evidence(struct doctor_finding *f, const char *name, double value)
{
    if (f->nevidence < DOCTOR_EVIDENCE_MAX) {
        f->evidence[f->nevidence].name = name;
        f->evidence[f->nevidence].value = value;
        f->nevidence++;
    }
}

static void set(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

static void recommend(struct doctor_finding *f, const char *key, double value)
{
    snprintf(f->key, sizeof(f->key), "%s", key);
    f->value = value;
    f->has_value = 1;
}

static double mib(double bytes)
{
    return bytes / MIB;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    return n % 2 ? v[n / 2] : v[n / 2 - 1] / 2 + v[n / 2] / 2;
}

/* Mean bytes released per trim over the recent history (0 when none). */
static double mean_released(const struct doctor_input *in, int *count)
{
    double sum = 0;
    int n = 0;
    for (int i = 0; i < in->ntrims; i++)
        if (in->trims[i].released_bytes > 0) {
            sum += (double)in->trims[i].released_bytes;
            n++;
        }
    *count = n;
    return n ? sum / n : 0;
}

/* ---- the rules ----------------------------------------------------------- */

static void rule_many_arenas(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    const struct mt_arenas *a = in->arenas;
    int rec = in->ncpu > 2 ? 4 : 2;
    if (!in->glibc || !a || a->count <= rec)
        return;
    if ((in->cfg.malloc_arena_max > 0 && in->cfg.malloc_arena_max <= rec) ||
        in->cfg.malloc_arena_max == MT_CONFIG_AUTO)
        return; /* already limited (these arenas predate it, or it is as wanted) */
    double total = 0, other = 0;
    for (int i = 0; i < a->count; i++) {
        total += (double)a->arena[i].free_bytes;
        if (a->arena[i].nr != 0)
            other += (double)a->arena[i].free_bytes;
    }
    if (total <= 0 || other < ARENAS_FREE_SHARE * total || other < ARENAS_FREE_MIN)
        return;
    /* What `rec` arenas would not hold: the free memory of all but the `rec`
     * arenas that hold the most (the arenas that would be merged away). */
    double *fr = mt_malloc(sizeof(double) * (size_t)a->count), beyond = 0;
    if (fr) {
        for (int i = 0; i < a->count; i++)
            fr[i] = (double)a->arena[i].free_bytes;
        for (int k = 0; k < rec; k++) { /* drop the rec largest */
            int best = 0;
            for (int i = 1; i < a->count; i++)
                if (fr[i] > fr[best])
                    best = i;
            fr[best] = 0;
        }
        for (int i = 0; i < a->count; i++)
            beyond += fr[i];
        free(fr);
    }
    int ntr;
    double mean = mean_released(in, &ntr);
    double rss = (double)in->snap.cheap.rss_bytes;
    struct doctor_finding *f = add(
        c, "many_arenas", rss > 0 && other >= 0.25 * rss ? DOCTOR_WARNING : DOCTOR_INFO, "config");
    if (!f)
        return;
    set(f->title, sizeof(f->title),
        "%d malloc arenas; those beyond the main one hold %.0f%% of "
        "the free heap (%.1f MiB)",
        a->count, 100.0 * other / total, mib(other));
    set(f->detail, sizeof(f->detail),
        "Each thread that meets a locked arena gets its own, and glibc never merges them: freed "
        "memory in one arena is not reused by threads of another. Expected with %d arenas: up "
        "to %.1f MiB less held free (what the arenas beyond %d hold now)%s%.1f MiB per trim "
        "over %d trims. Costs some allocation throughput when many threads allocate at once.",
        rec, mib(beyond), rec, ntr ? "; this workload's trims released a mean " : "",
        ntr ? mib(mean) : 0.0, ntr);
    evidence(f, "arena_count", a->count);
    evidence(f, "free_bytes", total);
    evidence(f, "free_other_arenas_bytes", other);
    evidence(f, "free_beyond_recommended_bytes", beyond);
    evidence(f, "mean_released_bytes", mean);
    evidence(f, "rss_bytes", rss);
    recommend(f, "MallocArenaMax", rec);
    set(f->action, sizeof(f->action),
        "Set \"MallocArenaMax\": %d (applied before main() under LD_PRELOAD; a host that starts "
        "memtrim after its threads can set MALLOC_ARENA_MAX=%d in its environment instead), "
        "then compare peak RSS.",
        rec, rec);
}

static void rule_pressure(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    int recent = 0;
    int64_t released = 0;
    for (int i = 0; i < in->ntrims; i++)
        if (in->trims[i].trigger == MT_TRIGGER_PRESSURE &&
            in->now_ms - in->trims[i].start_ms <= PRESSURE_WINDOW_MS) {
            recent++;
            if (in->trims[i].released_bytes > 0)
                released += in->trims[i].released_bytes;
        }
    if (recent < PRESSURE_REPEATS)
        return;
    int64_t limit = in->snap.memory_limit_bytes;
    uint64_t peak = in->peak_rss_bytes ? in->peak_rss_bytes : in->snap.cheap.rss_bytes;
    struct doctor_finding *f = add(c, "pressure_repeats", DOCTOR_WARNING, "host");
    if (!f)
        return;
    set(f->title, sizeof(f->title),
        "%d pressure trims in the last %d minutes: the host is sized "
        "too close to its memory limit",
        recent, PRESSURE_WINDOW_MS / 60000);
    set(f->detail, sizeof(f->detail),
        "RSS keeps reaching %.0f%% of the limit (%.1f MiB); each pressure trim released a mean "
        "%.1f MiB. Trimming keeps the host alive but costs it CPU and page faults each time; the "
        "live memory itself needs more room.",
        100.0 * in->cfg.pressure_ratio, limit > 0 ? mib((double)limit) : 0.0,
        mib((double)released / recent));
    evidence(f, "pressure_trims_recent", recent);
    evidence(f, "pressure_trims_total", (double)in->counters.trims[MT_TRIGGER_PRESSURE]);
    evidence(f, "memory_limit_bytes", (double)limit);
    evidence(f, "peak_rss_bytes", (double)peak);
    evidence(f, "rss_bytes", (double)in->snap.cheap.rss_bytes);
    double want = (double)peak * 1.25;
    if (limit > 0 && want <= (double)limit)
        want = (double)limit * 1.25;
    want = (double)(((uint64_t)want + (uint64_t)(64 * MIB) - 1) / (uint64_t)(64 * MIB)) * 64 * MIB;
    recommend(f, in->cfg.memory_limit_bytes > 0 ? "MemoryLimitBytes" : "memory.max", want);
    if (in->cfg.memory_limit_bytes > 0)
        f->kind = "config";
    set(f->action, sizeof(f->action),
        "Give the host more memory: raise %s to %.0f MiB (1.25 x peak RSS), or lower its load; "
        "if it runs many threads, see MallocArenaMax.",
        in->cfg.memory_limit_bytes > 0 ? "MemoryLimitBytes" : "its cgroup limit (memory.max)",
        mib(want));
}

/* Periodic and burst trims (the ones the policy chose; not pressure or manual). */
static int policy_trims(const struct doctor_input *in, int64_t *released, int max)
{
    int n = 0;
    for (int i = 0; i < in->ntrims && n < max; i++)
        if (in->trims[i].trigger == MT_TRIGGER_PERIODIC || in->trims[i].trigger == MT_TRIGGER_BURST)
            released[n++] = in->trims[i].released_bytes;
    return n;
}

static void rule_release_little(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    int64_t rel[256];
    int n = policy_trims(in, rel, 256);
    if (n < LITTLE_MIN_TRIMS)
        return;
    int64_t med = median(rel, n);
    double floor_bytes = in->cfg.trim_min_releasable_bytes > 0
                             ? (double)in->cfg.trim_min_releasable_bytes / 2
                             : 1 * MIB;
    if ((double)med >= floor_bytes)
        return;
    double interval = in->cfg.trim_interval_seconds;
    double want = interval > 0 ? interval * 4 : 120;
    if (want < 120)
        want = 120;
    struct doctor_finding *f = add(c, "trims_release_little", DOCTOR_WARNING, "config");
    if (!f)
        return;
    set(f->title, sizeof(f->title),
        "Trims release little: median %.2f MiB over the last %d "
        "periodic and burst trims",
        mib((double)med), n);
    set(f->detail, sizeof(f->detail),
        "Each trim locks every arena and walks its free chunks; these find almost nothing "
        "resident to give back (below half of TrimMinReleasableBytes, %.1f MiB). Trimming less "
        "often costs nothing here.",
        mib((double)in->cfg.trim_min_releasable_bytes));
    evidence(f, "trims", n);
    evidence(f, "median_released_bytes", (double)med);
    evidence(f, "trim_seconds_total", in->counters.trim_seconds_sum);
    evidence(f, "trim_interval_seconds", interval);
    recommend(f, "TrimIntervalSeconds", want);
    set(f->action, sizeof(f->action),
        "Set \"TrimIntervalSeconds\": %.0f (now %.0f), or raise "
        "\"TrimMinReleasableBytes\" so that such trims are skipped.",
        want, interval);
}

static void rule_memory_returns(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    int eligible = 0, returned = 0, bursts = 0;
    int64_t gaps[256];
    for (int i = 0; i + 1 < in->ntrims; i++) {
        const struct doctor_trim *a = &in->trims[i], *b = &in->trims[i + 1];
        if (a->trigger != MT_TRIGGER_PERIODIC && a->trigger != MT_TRIGGER_BURST)
            continue;
        int64_t gap = b->start_ms - a->start_ms;
        if (a->released_bytes < RETURN_MIN_RELEASE || gap < 0 || gap > RETURN_GAP_MS)
            continue;
        eligible++;
        double back = (double)b->rss_before_bytes - (double)a->rss_after_bytes;
        if (back >= RETURN_SHARE * (double)a->released_bytes && returned < 256) {
            gaps[returned++] = gap;
            bursts += a->trigger == MT_TRIGGER_BURST;
        }
    }
    if (returned < RETURN_PAIRS || returned * 2 < eligible + 1)
        return;
    int64_t gap = median(gaps, returned);
    int burst = bursts * 2 > returned;
    double want = (double)gap / 1000.0 * 4;
    if (want < 30)
        want = 30;
    struct doctor_finding *f = add(c, "released_memory_returns", DOCTOR_WARNING, "config");
    if (!f)
        return;
    set(f->title, sizeof(f->title),
        "Released memory comes straight back: %d of %d trims were "
        "followed by RSS regrowing at least %.0f%% of what they released",
        returned, eligible, RETURN_SHARE * 100);
    set(f->detail, sizeof(f->detail),
        "The host reuses the memory within a median %.1f s of each trim, so each trim costs it "
        "page faults to take the same memory back. Trimming less often keeps that memory "
        "resident between bursts (RSS stays higher, CPU lower).",
        (double)gap / 1000.0);
    evidence(f, "trims_followed_by_regrowth", returned);
    evidence(f, "trims_eligible", eligible);
    evidence(f, "median_gap_seconds", (double)gap / 1000.0);
    evidence(f, "minor_faults", (double)in->snap.cheap.minor_faults);
    recommend(f, burst ? "TrimMinGapSeconds" : "TrimIntervalSeconds", want);
    set(f->action, sizeof(f->action),
        "Set \"%s\": %.0f (4 x the median time to regrow), so a "
        "trim waits for the host's working set to settle.",
        f->key, want);
}

static void rule_never_frees(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    const struct mt_heap *h = &in->snap.heap;
    if (in->uptime_ms < NEVER_FREES_UPTIME_MS || h->timestamp_ms == 0)
        return;
    double in_use = (double)h->heap_in_use_bytes, free_b = (double)h->heap_free_bytes;
    double released = 0;
    for (int t = 0; t < MT_TRIGGER_COUNT; t++)
        released += (double)in->counters.released_bytes[t];
    double min = (double)in->cfg.trim_min_releasable_bytes;
    if (in_use <= 0 || free_b >= NEVER_FREES_SHARE * (in_use + free_b) || free_b >= min ||
        released >= min)
        return;
    struct doctor_finding *f = add(c, "heap_never_frees", DOCTOR_INFO, "none");
    if (!f)
        return;
    set(f->title, sizeof(f->title),
        "The heap holds live data: %.1f MiB in use, %.2f MiB free; "
        "nothing to trim",
        mib(in_use), mib(free_b));
    set(f->detail, sizeof(f->detail),
        "This host keeps what it allocates; trims released %.2f MiB in total since start. "
        "Nothing to change: memtrim's periodic trims are skipped (%llu so far) and cost "
        "%.3f s of probing.",
        mib(released), (unsigned long long)in->counters.skips[MT_SKIP_BELOW_MIN_RELEASABLE],
        in->counters.heap_probe_seconds + in->counters.cheap_probe_seconds);
    evidence(f, "heap_in_use_bytes", in_use);
    evidence(f, "heap_free_bytes", free_b);
    evidence(f, "released_bytes_total", released);
    evidence(f, "uptime_seconds", (double)in->uptime_ms / 1000.0);
    set(f->action, sizeof(f->action), "Nothing to do: leave the configuration as it is.");
}

static void rule_probe_budget(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    uint64_t wanted = in->reader_heap_wanted, refused = in->reader_heap_refused;
    if (refused < BUDGET_REFUSED_MIN || (double)refused < BUDGET_REFUSED_SHARE * (double)wanted)
        return;
    double cost = in->counters.heap_probe_last_seconds;
    double budget = in->cfg.probe_budget_percent > 0 ? in->cfg.probe_budget_percent : 0.1;
    double every_ms = cost * 100.0 / budget * 1000.0; /* what the budget allows */
    double want = (double)in->cfg.stats_max_age_ms * 4;
    if (want < every_ms)
        want = every_ms;
    want = ((uint64_t)want + 999) / 1000 * 1000.0; /* whole seconds, at least one */
    if (want < 1000)
        want = 1000;
    if (want > 3600000)
        want = 3600000;
    struct doctor_finding *f = add(c, "probe_budget_limited", DOCTOR_INFO, "config");
    if (!f)
        return;
    set(f->title, sizeof(f->title),
        "The probe budget refused %llu of %llu fresh heap readings: "
        "clients poll faster than the budget allows",
        (unsigned long long)refused, (unsigned long long)wanted);
    set(f->detail, sizeof(f->detail),
        "A heap reading costs %.2f ms here (it locks every arena); at ProbeBudgetPercent %.3g "
        "one may run every %.0f ms. Readers got older readings (their age is in each "
        "response) or 503 from /memory/arenas.",
        cost * 1000, budget, every_ms);
    evidence(f, "refused", (double)refused);
    evidence(f, "wanted", (double)wanted);
    evidence(f, "heap_probe_seconds", cost);
    evidence(f, "stats_max_age_ms", in->cfg.stats_max_age_ms);
    evidence(f, "probe_budget_percent", budget);
    recommend(f, "StatsMaxAgeMs", want);
    set(f->action, sizeof(f->action),
        "Poll less often, or set \"StatsMaxAgeMs\": %.0f so "
        "readers share one reading as long as the budget wants.",
        want);
}

static void rule_no_limit(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    if (in->snap.memory_limit_bytes > 0 || in->cfg.pressure_ratio <= 0 ||
        in->snap.cheap.timestamp_ms == 0)
        return;
    uint64_t peak = in->peak_rss_bytes ? in->peak_rss_bytes : in->snap.cheap.rss_bytes;
    double want = (double)peak * 1.5;
    want = (double)(((uint64_t)want + (uint64_t)(64 * MIB) - 1) / (uint64_t)(64 * MIB)) * 64 * MIB;
    struct doctor_finding *f = add(c, "no_memory_limit", DOCTOR_INFO, "config");
    if (!f)
        return;
    set(f->title, sizeof(f->title), "No memory limit known: pressure trims cannot fire");
    set(f->detail, sizeof(f->detail),
        "No cgroup limit was found (cgroup v%d) and MemoryLimitBytes is not set, so memtrim "
        "cannot trim when the host nears its budget. Peak RSS so far: %.1f MiB.",
        in->snap.cheap.cgroup_version, mib((double)peak));
    evidence(f, "cgroup_version", in->snap.cheap.cgroup_version);
    evidence(f, "peak_rss_bytes", (double)peak);
    evidence(f, "rss_bytes", (double)in->snap.cheap.rss_bytes);
    recommend(f, "MemoryLimitBytes", want);
    set(f->action, sizeof(f->action),
        "Set \"MemoryLimitBytes\" to the memory this host may use "
        "(e.g. %.0f, 1.5 x peak RSS), or run it in a cgroup with memory.max.",
        want);
}

/* glibc caps its arenas at 8 per core of the host (64-bit), whatever CPU quota the container
 * has: a 2-CPU container on a 64-core node may get 512. "auto" takes the container's CPUs. */
static void rule_arena_auto(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    int64_t glibc_cap = 8 * (int64_t)(in->host_cores > 0 ? in->host_cores : 1);
    /* only where the container allows fewer CPUs than the host has: else glibc's rule is
     * sized from CPUs the process may use, and the doctor leaves it be */
    if (!in->glibc || in->cfg.malloc_arena_max != -1 || in->auto_arena_max <= 0 ||
        in->auto_arena_max >= glibc_cap || !(in->quota_cpus < in->host_cores))
        return;
    int count = in->arenas ? in->arenas->count : in->snap.heap.arena_count;
    struct doctor_finding *f =
        add(c, "arena_max_auto", count > in->auto_arena_max ? DOCTOR_WARNING : DOCTOR_INFO,
            "config");
    if (!f)
        return;
    set(f->title, sizeof(f->title),
        "glibc may create %lld malloc arenas (8 per core of the host's %d); this process may "
        "use %.2g CPUs",
        (long long)glibc_cap, in->host_cores, in->quota_cpus);
    set(f->detail, sizeof(f->detail),
        "glibc sizes its arena cap from the host's cores, not from the container's CPU quota "
        "or the affinity mask (%s). More arenas than CPUs that may run at once add no "
        "throughput but keep each one's free memory apart. %d arenas now.",
        in->quota_source, count);
    evidence(f, "arena_count", count);
    evidence(f, "glibc_arena_cap", (double)glibc_cap);
    evidence(f, "cpus", in->quota_cpus);
    evidence(f, "auto_arena_max", (double)in->auto_arena_max);
    snprintf(f->key, sizeof(f->key), "MallocArenaMax");
    set(f->action, sizeof(f->action),
        "Set \"MallocArenaMax\": \"auto\" (%lld arenas, two per CPU this process may use; "
        "applied before main() under LD_PRELOAD), then compare peak RSS.",
        (long long)in->auto_arena_max);
}

/* pinned_arena: the arena with the most free memory no trim can give back (arenas.c's
 * pinned figures: chunks under a page, chunk edges, a thread arena's top), named with
 * the change that would free it; at least 16 MiB and half of that arena's free memory. */
static void rule_pinned_arena(struct ctx *c)
{
    const struct doctor_input *in = c->in;
    const struct mt_arenas *a = in->arenas;
    int best = -1;
    double most = 0;

    if (!in->glibc || !a)
        return;
    for (int i = 0; i < a->count; i++) {
        const struct mt_arena *x = &a->arena[i];
        double p = (double)x->pinned_small_bytes + (double)x->pinned_edge_bytes +
                   (double)x->pinned_top_bytes;
        if (p > most) {
            most = p;
            best = i;
        }
    }
    if (best < 0 || most < 16.0 * MIB || most < 0.5 * (double)a->arena[best].free_bytes)
        return;
    const struct mt_arena *x = &a->arena[best];
    double rss = (double)in->snap.cheap.rss_bytes;
    struct doctor_finding *f = add(c, "pinned_arena",
                                   rss > 0 && most >= 0.25 * rss ? DOCTOR_WARNING : DOCTOR_INFO,
                                   "config");
    if (!f)
        return;
    int top = x->pinned_top_bytes >= x->pinned_small_bytes &&
              x->pinned_top_bytes >= x->pinned_edge_bytes;
    int small = !top && x->pinned_small_bytes >= x->pinned_edge_bytes;
    const char *why = top ? "its top chunk" : small ? "chunks under a page" : "chunk edges";
    set(f->title, sizeof(f->title), "Arena %d holds %.1f MiB free that no trim can give back (%s)",
        x->nr, mib(most), why);
    evidence(f, "arena", x->nr);
    evidence(f, "free_bytes", (double)x->free_bytes);
    evidence(f, "releasable_bytes", (double)x->releasable_bytes);
    evidence(f, "pinned_bytes", most);
    evidence(f, "pinned_small_bytes", (double)x->pinned_small_bytes);
    evidence(f, "pinned_edge_bytes", (double)x->pinned_edge_bytes);
    evidence(f, "pinned_top_bytes", (double)x->pinned_top_bytes);
    int64_t cap = in->auto_arena_max > 0 ? in->auto_arena_max : 2 * (int64_t)in->ncpu;
    if (top && (in->cfg.malloc_trim_threshold_bytes < 0 ||
                in->cfg.malloc_trim_threshold_bytes > 131072)) {
        set(f->detail, sizeof(f->detail),
            "A thread arena's top chunk: glibc's malloc_trim madvises free chunks but never a "
            "thread heap's top (glibc 2.36); glibc shrinks that heap itself, on a free() at "
            "its end, once the top passes M_TRIM_THRESHOLD (raised with the mmap threshold, "
            "up to 64 MiB, unless set). Expected: up to %.1f MiB less RSS.", mib(most));
        recommend(f, "MallocTrimThresholdBytes", 131072);
        set(f->action, sizeof(f->action),
            "Set \"MallocTrimThresholdBytes\": 131072 (glibc's initial 128 KiB, kept fixed): "
            "glibc then gives a thread heap's top back itself.");
    } else if (small && a->count > cap) {
        set(f->detail, sizeof(f->detail),
            "Free chunks under a page lie between live blocks: no page of them is whole. In "
            "%d arenas each thread reuses only its own arena's; fewer arenas let the others "
            "fill them before asking the kernel for more.", a->count);
        recommend(f, "MallocArenaMax", (double)cap);
        set(f->action, sizeof(f->action),
            "Set \"MallocArenaMax\": %lld (two per CPU this process may use), then compare "
            "peak RSS.", (long long)cap);
    } else {
        f->kind = "none";
        set(f->detail, sizeof(f->detail),
            top ? "A thread arena's top, with MallocTrimThresholdBytes already low: it stays "
                  "until the blocks at its end are freed."
            : small ? "Free chunks under a page lie between live blocks: only freeing their "
                      "neighbours gives them back (or an allocator that keeps sizes apart, "
                      "such as jemalloc)."
                    : "The ends of free chunks larger than a page: at most a page and a header "
                      "each, inherent to the chunks.");
        set(f->action, sizeof(f->action), "Nothing in memtrim's configuration would free it.");
    }
}

/* ---- running them ------------------------------------------------------- */

typedef void (*rule_fn)(struct ctx *c);
static const rule_fn rules[] = {rule_pressure,       rule_many_arenas,  rule_memory_returns,
                                rule_release_little, rule_probe_budget, rule_no_limit,
                                rule_never_frees,    rule_arena_auto,   rule_pinned_arena};

int doctor_run(const struct doctor_input *in, struct doctor_finding *out, int max)
{
    struct ctx c = {.in = in, .out = out, .max = max};
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
        rules[i](&c);
    /* Most severe first; a stable insertion sort keeps rule order among equals. */
    for (int i = 1; i < c.n; i++) {
        struct doctor_finding f = out[i];
        int j = i;
        while (j > 0 && out[j - 1].severity < f.severity) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = f;
    }
    return c.n;
}

const char *doctor_severity_name(int severity)
{
    static const char *const names[] = {"info", "warning", "critical"};
    return severity >= 0 && severity <= DOCTOR_CRITICAL ? names[severity] : "info";
}

char *doctor_text(const struct doctor_finding *f, int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = mt_open_memstream(&buf, &len);
    if (!m)
        return NULL;
    if (n == 0)
        fprintf(m, "memtrim doctor: no findings. Nothing to change.\n");
    else
        fprintf(m, "memtrim doctor: %d finding%s, most severe first.\n", n, n > 1 ? "s" : "");
    for (int i = 0; i < n; i++) {
        fprintf(m, "\n[%s] %s\n  %s\n  evidence:", doctor_severity_name(f[i].severity), f[i].title,
                f[i].detail);
        for (int e = 0; e < f[i].nevidence; e++)
            fprintf(m, "%s %s=%.15g", e ? "," : "", f[i].evidence[e].name, f[i].evidence[e].value);
        fprintf(m, "\n  recommendation: %s\n", f[i].action);
    }
    if (fclose(m) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
