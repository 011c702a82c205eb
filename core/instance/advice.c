/*
 * advice.c - the instance's side of advice: the cached per-arena view on the
 * probe budget, the doctor's input gathered from what memtrim measured, and
 * the one-line exit summary. Runs on HTTP workers (arenas, doctor) and on
 * the thread that stops the instance (summary). Locks: mt->arenas.lock is
 * held across the malloc_info call (one call serves concurrent readers) and
 * is taken before the snapshot cache's lock; the other locks (cfg, trim
 * service, hk, store) are taken one at a time by the getters called here.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "alloc.h"
#include "arenas.h"
#include "core.h"
#include "cpuquota.h"
#include "doctor.h"
#include "instance.h"
#include "tunables.h"

static int serves_glibc(struct memtrim *mt)
{
    return strcmp(mt_allocator_name(mt), "glibc") == 0;
}

int mt_arenas_get(struct memtrim *mt, int64_t max_age_ms, struct mt_arenas *out,
                  int64_t *retry_after_ms, char **err)
{
    struct mt_config cfg;
    mt_config_get(mt, &cfg);
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&mt->arenas.lock);
    int rc = arenas_cache_get_locked(&mt->arenas, &mt->cache, cfg.probe_budget_percent,
                                     max_age_ms < 0 ? cfg.stats_max_age_ms : max_age_ms, out,
                                     retry_after_ms, err);
    pthread_mutex_unlock(&mt->arenas.lock);
    if (rc == -ENOMEM && !*err)
        *err = mt_strdup("out of memory");
    return rc;
}

/* Blocking: a reader waits out a malloc_info in progress; try: -EBUSY instead (a trim). */
static int pinned_sums(struct memtrim *mt, struct mt_arenas_pinned *out, int try)
{
    memset(out, 0, sizeof(*out));
    if (!try)
        pthread_mutex_lock(&mt->arenas.lock);
    else if (pthread_mutex_trylock(&mt->arenas.lock))
        return -EBUSY;
    const struct mt_arenas *a = &mt->arenas.last;
    int rc = mt->arenas.mono_ns ? 0 : -ENOENT;
    for (int i = 0; rc == 0 && i < a->count; i++) {
        out->free_bytes += a->arena[i].free_bytes;
        out->releasable_bytes += a->arena[i].releasable_bytes;
        out->small_bytes += a->arena[i].pinned_small_bytes;
        out->edge_bytes += a->arena[i].pinned_edge_bytes;
        out->top_bytes += a->arena[i].pinned_top_bytes;
    }
    out->timestamp_ms = a->timestamp_ms;
    pthread_mutex_unlock(&mt->arenas.lock);
    return rc;
}

int mt_arenas_pinned_get(struct memtrim *mt, struct mt_arenas_pinned *out)
{
    return pinned_sums(mt, out, 0);
}

int mt_arenas_pinned_peek(void *mt, struct mt_arenas_pinned *out)
{
    return pinned_sums(mt, out, 1);
}

static int ncpu(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/*
 * The doctor's input from what the instance measured. at_exit: take no new
 * heap reading and no malloc_info (the host is stopping): cached ones only.
 * *arenas and *trims are the caller's buffers (trims: TRIM_RECENT entries).
 */
static void gather(struct memtrim *mt, int at_exit, struct doctor_input *in,
                   struct mt_arenas *arenas, struct doctor_trim *trims)
{
    struct mt_trim_result recent[TRIM_RECENT];
    char *err = NULL;

    memset(in, 0, sizeof(*in));
    in->now_ms = mt_now_ms();
    in->uptime_ms = in->now_ms - mt->started_ms;
    in->ncpu = ncpu();
    in->glibc = serves_glibc(mt);
    struct cpu_quota *q = mt_malloc(sizeof(*q));
    if (q) { /* what "MallocArenaMax": "auto" would choose (the doctor's arena_max_auto) */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cpu_quota_here(q);
        in->host_cores = cores > 0 ? (int)cores : 1;
        in->quota_cpus = q->cpus;
        in->auto_arena_max = cpu_quota_arena_max(q);
        snprintf(in->quota_source, sizeof(in->quota_source), "%.255s", q->source);
        free(q);
    }
    mt_config_get(mt, &in->cfg);
    if (at_exit) {
        struct snapshot_want want = {.cheap_max_age_ns = 0,
                                     .heap_max_age_ns = INT64_MAX,
                                     .budget_percent = in->cfg.probe_budget_percent,
                                     .memory_limit_cfg = in->cfg.memory_limit_bytes};
        snapshot_get(&mt->cache, &want, &in->snap);
    } else {
        mt_snapshot_get(mt, &in->snap);
    }
    mt_counters_get(mt, &in->counters);
    in->peak_rss_bytes = probe_peak_rss();
    snapshot_reader_counts(&mt->cache, &in->reader_heap_wanted, &in->reader_heap_refused);

    memset(arenas, 0, sizeof(*arenas));
    pthread_mutex_lock(&mt->arenas.lock);
    int rc = at_exit ? (mt->arenas.mono_ns ? arenas_copy(arenas, &mt->arenas.last) : -ENOENT)
                     : arenas_cache_get_locked(&mt->arenas, &mt->cache, in->cfg.probe_budget_percent,
                                               in->cfg.stats_max_age_ms, arenas, NULL, &err);
    if (rc == -EAGAIN && mt->arenas.mono_ns) /* the budget says no: the last one, if any */
        rc = arenas_copy(arenas, &mt->arenas.last);
    pthread_mutex_unlock(&mt->arenas.lock);
    free(err);
    in->arenas = rc == 0 && arenas->count > 0 ? arenas : NULL;

    unsigned n = trim_recent(&mt->trims, recent, TRIM_RECENT);
    for (unsigned i = 0; i < n; i++) {
        trims[i].trigger = recent[i].trigger;
        trims[i].start_ms = recent[i].start_ms;
        trims[i].duration_ns = recent[i].duration_ns;
        trims[i].released_bytes = recent[i].released_bytes;
        trims[i].rss_before_bytes = recent[i].rss_before_bytes;
        trims[i].rss_after_bytes = recent[i].rss_after_bytes;
    }
    in->trims = trims;
    in->ntrims = (int)n;
}

int mt_doctor_run(struct memtrim *mt, struct doctor_finding *out, int max)
{
    struct doctor_input in;
    struct mt_arenas arenas;
    struct doctor_trim *trims = mt_calloc(TRIM_RECENT, sizeof(*trims));
    if (!trims)
        return 0;
    gather(mt, 0, &in, &arenas, trims);
    int n = doctor_run(&in, out, max);
    arenas_free(&arenas);
    free(trims);
    return n;
}

void mt_arenas_free(struct mt_arenas *a)
{
    arenas_free(a);
}

const char *mt_doctor_severity_name(int severity)
{
    return doctor_severity_name(severity);
}

char *mt_doctor_text(const struct doctor_finding *f, int n)
{
    return doctor_text(f, n);
}

void advice_exit_summary(struct memtrim *mt)
{
    struct doctor_input in;
    struct mt_arenas arenas;
    struct doctor_finding top[DOCTOR_MAX_FINDINGS];
    struct doctor_trim *trims = mt_calloc(TRIM_RECENT, sizeof(*trims));
    uint64_t released = 0, ntrims = 0;
    char finding[400] = "none";

    if (!trims) {
        mt_log(MT_LOG_INFO, "core", "exit summary: out of memory");
        return;
    }
    gather(mt, 1, &in, &arenas, trims);
    pthread_mutex_lock(&mt->arenas.lock);
    uint64_t arena_reads = mt->arenas.reads;
    double arena_seconds = mt->arenas.seconds;
    pthread_mutex_unlock(&mt->arenas.lock);
    int n = doctor_run(&in, top, DOCTOR_MAX_FINDINGS);
    for (int t = 0; t < MT_TRIGGER_COUNT; t++) {
        released += in.counters.released_bytes[t];
        ntrims += in.counters.trims[t];
    }
    /* what memtrim saved (docs/policy.md), at the last reading */
    const struct mt_saved *sv = &in.snap.saved;
    uint64_t saved_at_peak = sv->rss_without_memtrim_peak_bytes > sv->rss_peak_bytes
                                 ? sv->rss_without_memtrim_peak_bytes - sv->rss_peak_bytes
                                 : 0;
    if (n > 0)
        snprintf(finding, sizeof(finding), "[%s] %s: %s", doctor_severity_name(top[0].severity),
                 top[0].id, top[0].action);
    mt_log(MT_LOG_INFO, "core",
           "exit summary: uptime %.1f s; trims %llu (manual %llu, periodic %llu, pressure %llu, "
           "burst %llu); released %llu bytes (%.1f MiB); trimming %.3f s, probing %.3f s "
           "(%llu heap probes, %llu arena readings); peak RSS %llu bytes (%.1f MiB); saved: "
           "RSS %llu bytes, without memtrim %llu bytes, saved %llu bytes (%.1f MiB), at peak "
           "%llu bytes (peak without memtrim %llu bytes), %.6f GB-hours, memtrim CPU %.3f s; top "
           "finding: %s",
           (double)in.uptime_ms / 1000.0, (unsigned long long)ntrims,
           (unsigned long long)in.counters.trims[MT_TRIGGER_MANUAL],
           (unsigned long long)in.counters.trims[MT_TRIGGER_PERIODIC],
           (unsigned long long)in.counters.trims[MT_TRIGGER_PRESSURE],
           (unsigned long long)in.counters.trims[MT_TRIGGER_BURST], (unsigned long long)released,
           (double)released / 1048576.0, in.counters.trim_seconds_sum,
           in.counters.heap_probe_seconds + in.counters.cheap_probe_seconds + arena_seconds,
           (unsigned long long)in.counters.heap_probes, (unsigned long long)arena_reads,
           (unsigned long long)in.peak_rss_bytes, (double)in.peak_rss_bytes / 1048576.0,
           (unsigned long long)in.snap.cheap.rss_bytes,
           (unsigned long long)sv->rss_without_memtrim_bytes, (unsigned long long)sv->saved_bytes,
           (double)sv->saved_bytes / 1048576.0, (unsigned long long)saved_at_peak,
           (unsigned long long)sv->rss_without_memtrim_peak_bytes,
           sv->saved_byte_seconds_total / 3.6e12,
           in.counters.cpu_seconds, finding);
    arenas_free(&arenas);
    free(trims);
}
