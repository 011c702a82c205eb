/*
 * instance.c - what a running instance offers through core.h to the HTTP
 * handlers (api/), the host adapters and advice.c: configuration (read and
 * PATCH), the shared snapshot, manual trims, counters, health, suspend and
 * resume. Any thread; each function takes only the lock of what it reads
 * (see instance.h). Its life (start, stop) is memtrim.c's.
 *
 * The configuration's two locks: cfg_lock guards mt->cfg and its generation and
 * is held only to copy them in or out (every reader: /memory/stats, /metrics,
 * the threads' re-reads); patch_lock serialises PATCH /config as a whole. The
 * rule: mt->cfg is written only under patch_lock (and, for the copy itself,
 * cfg_lock), so PATCH reads it, parses and applies the tunables with patch_lock
 * alone; mallopt takes glibc's main arena lock (it waits for any host thread in
 * malloc), and nothing else waits for that but a second PATCH. Between a
 * tunable's mallopt and the new configuration's copy a reader still sees the
 * old one (tunables_get says what is in force).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_alloc.h"
#include "core.h"
#include "instance.h"
#include "pressure.h"
#include "probe.h"
#include "tunables.h"


const char *mt_allocator_name(struct memtrim *mt)
{
    return snapshot_alloc_name(&mt->cache);
}

void mt_tunables_get(struct mt_tunables *out)
{
    tunables_get(out);
}

const char *mt_tunable_field(int t)
{
    return tunables_field(t);
}

int mt_suspend(struct memtrim *mt)
{
    if (!mt)
        return -EINVAL;
    int depth = atomic_fetch_add(&mt->suspend_depth, 1) + 1;
    /* A periodic, burst or pressure trim that started before the call ends
     * before it returns: the host's latency-critical work never overlaps one. */
    trim_hold(&mt->trims);
    return depth;
}

int mt_resume(struct memtrim *mt)
{
    if (!mt)
        return -EINVAL;
    int depth = atomic_load(&mt->suspend_depth);
    while (depth > 0 && !atomic_compare_exchange_weak(&mt->suspend_depth, &depth, depth - 1))
        ;
    if (depth <= 0)
        return -ERANGE;
    housekeeper_wake(&mt->hk);
    pressure_wake(mt->pressure);
    return depth - 1;
}

int mt_http_port(const struct memtrim *mt)
{
    return mt ? mt->http_port : -1;
}

int mt_http_address(const struct memtrim *mt, char *buf, size_t size)
{
    return mt ? server_address(mt->server, buf, size) : -ENOENT;
}

void mt_config_get(struct memtrim *mt, struct mt_config *out)
{
    pthread_mutex_lock(&mt->cfg_lock);
    *out = mt->cfg;
    pthread_mutex_unlock(&mt->cfg_lock);
}

int mt_config_patch(struct memtrim *mt, const char *json, char **err)
{
    /* Read /proc/self/status before the locks: a probe (a file opened, the kernel's mm
     * walked) is held under neither. */
    uint64_t peak_rss = probe_peak_rss();
    /* A worker group's leader: the group's peak, its members' summed (#31 F2: a 6 MB
     * master's twice let a no-token PATCH put a whole group of workers in the zone). */
    uint64_t group_peak = group_peak_bytes(mt->group);
    int group = group_peak > peak_rss;
    if (group)
        peak_rss = group_peak;
    int glibc = strcmp(mt_allocator_name(mt), "glibc") == 0;
    struct mt_config old, next;
    /* patch_lock, not cfg_lock, across the parse and the mallopt calls (see the top). */
    pthread_mutex_lock(&mt->patch_lock);
    mt_config_get(mt, &old); /* nobody else writes mt->cfg while patch_lock is held */
    next = old;
    int rc = config_patch(&next, json, err);
    if (rc == 0)
        rc = config_patch_limit_check(&old, &next, peak_rss, group, err);
    if (rc == 0) /* the runtime tunables: what glibc refuses leaves the configuration as it was */
        rc = tunables_apply(&old, &next, glibc, err);
    if (rc == 0) {
        pthread_mutex_lock(&mt->cfg_lock);
        mt->cfg = next;
        mt->cfg_generation++;
        pthread_mutex_unlock(&mt->cfg_lock);
    }
    pthread_mutex_unlock(&mt->patch_lock);
    if (rc == 0) {
        /* A client looping on PATCH must not flood the host's log (PATCH_LOG_*). */
        mt_log_limited(&mt->patch_log, MT_LOG_INFO, "config", "runtime configuration changed");
        struct mt_config now;
        mt_config_get(mt, &now);
        store_set_retention(&mt->store, now.retention_hours);
        housekeeper_wake(&mt->hk);
        pressure_wake(mt->pressure);
    }
    return rc;
}

void mt_snapshot_get(struct memtrim *mt, struct mt_snapshot *out)
{
    /* The hot path of /memory/stats and /metrics: read the four values, not the whole config. */
    struct snapshot_want want = {.stale_ok = 1, .rss_now = 1};
    pthread_mutex_lock(&mt->cfg_lock);
    want.cheap_max_age_ns = (int64_t)mt->cfg.stats_max_age_ms * MT_MS;
    want.heap_max_age_ns = want.cheap_max_age_ns;
    want.budget_percent = mt->cfg.probe_budget_percent;
    want.memory_limit_cfg = mt->cfg.memory_limit_bytes;
    pthread_mutex_unlock(&mt->cfg_lock);
    snapshot_get(&mt->cache, &want, out);
}

void mt_snapshot_get_cheap(struct memtrim *mt, struct mt_snapshot *out)
{
    struct snapshot_want want = {.stale_ok = 1, .heap_max_age_ns = INT64_MAX};
    pthread_mutex_lock(&mt->cfg_lock);
    want.cheap_max_age_ns = (int64_t)mt->cfg.stats_max_age_ms * MT_MS;
    want.budget_percent = mt->cfg.probe_budget_percent;
    want.memory_limit_cfg = mt->cfg.memory_limit_bytes;
    pthread_mutex_unlock(&mt->cfg_lock);
    snapshot_get(&mt->cache, &want, out);
}

void mt_cgroup_describe(struct memtrim *mt, const struct mt_snapshot *s, struct mt_cgroup_desc *out)
{
    const struct cgroup_info *ci = &mt->cache.cg.info; /* written only at init */
    const struct mt_cheap *c = &s->cheap;
    char dir[PATH_MAX];

    memset(out, 0, sizeof(*out));
    out->version = ci->version;
    out->hybrid = ci->hybrid;
    out->read_only = ci->read_only;
    out->fallback = ci->fallback;
    snprintf(out->path, sizeof(out->path), "%s", ci->path);
    snprintf(out->dir, sizeof(out->dir), "%s", ci->dir);
    pthread_mutex_lock(&mt->cfg_lock);
    int64_t cfg_limit = mt->cfg.memory_limit_bytes;
    pthread_mutex_unlock(&mt->cfg_lock);
    if (cfg_limit > 0)
        snprintf(out->limit_source, sizeof(out->limit_source), "MemoryLimitBytes");
    else
        cgroup_limit_source(ci, c, out->limit_source, sizeof(out->limit_source));
    if (c->cgroup_events_level >= 0) {
        cgroup_level_dir(ci, c->cgroup_events_level, dir, sizeof(dir));
        snprintf(out->events_file, sizeof(out->events_file), "%.4000s/%s", dir,
                 cgroup_file_name(ci->version, CG_FILE_EVENTS));
    }
}

void mt_cgroup_summary(struct memtrim *mt, const struct mt_snapshot *s, char *buf, size_t size)
{
    struct mt_cgroup_desc *d = mt_malloc(sizeof(*d));
    char where[1200] = "", limit[4400];
    if (!d) {
        snprintf(buf, size, "cgroup: not described (out of memory)");
        return;
    }
    mt_cgroup_describe(mt, s, d);
    if (d->version)
        snprintf(where, sizeof(where), "cgroup v%d%s %.1000s%s%s", d->version,
                 d->hybrid ? " (hybrid host)" : "", d->path, d->read_only ? " (read-only)" : "",
                 d->fallback ? " (seen as its mount's root)" : "");
    else
        snprintf(where, sizeof(where), "no memory cgroup found");
    if (s->memory_limit_bytes > 0)
        snprintf(limit, sizeof(limit), "limit %lld bytes from %.4100s",
                 (long long)s->memory_limit_bytes, d->limit_source);
    else
        snprintf(limit, sizeof(limit), "no memory limit%s", d->version ? " on its path" : "");
    snprintf(buf, size, "%s: %s", where, limit);
    free(d);
}

int mt_trim_manual(struct memtrim *mt, int64_t pad, struct mt_trim_result *out,
                   int64_t *retry_after_ms)
{
    struct mt_config cfg;
    mt_config_get(mt, &cfg);
    if (pad < 0)
        pad = cfg.trim_pad_bytes;
    struct trim_ask ask = {MT_TRIGGER_MANUAL, (uint64_t)pad, cfg.manual_trim_min_interval_ms, 0, 0,
                           0, 0};
    return trim_request(&mt->trims, &mt->cache, &ask, out, retry_after_ms);
}

void mt_counters_get(struct memtrim *mt, struct mt_counters *out)
{
    memset(out, 0, sizeof(*out));
    trim_counters(&mt->trims, out);
    snapshot_counters(&mt->cache, out);
    housekeeper_counters(&mt->hk, out);
    out->cpu_seconds = mt_threads_cpu_seconds();
    struct pressure_stats ps;
    pressure_stats_get(mt->pressure, &ps);
    out->pressure_source = pressure_source_name(ps.source);
    out->pressure_zone = ps.zone;
    out->pressure_checks[0] = ps.checks_outside;
    out->pressure_checks[1] = ps.checks_inside;
    out->pressure_kernel_wakeups = ps.kernel_wakeups;
    out->pressure_last_chance_trims = ps.last_chance_trims;
    out->pressure_judged_released_bytes = ps.judged_released_bytes;
    out->pressure_returned_bytes = ps.returned_bytes;
    out->pressure_returned_trims = ps.returned_trims;
    out->pressure_backoff_seconds = ps.backoff_seconds;
    memcpy(out->pressure_reaction_hist, ps.reaction_hist, sizeof(out->pressure_reaction_hist));
    out->pressure_reaction_seconds_sum = ps.reaction_seconds_sum;
    out->pressure_reaction_last_seconds = ps.reaction_last_seconds;
    out->pressure_cpu_seconds = ps.cpu_seconds;
    store_counters(&mt->store, out);
}

void mt_health_get(struct memtrim *mt, struct mt_health *out)
{
    memset(out, 0, sizeof(*out));
    store_health(&mt->store, out->db_state, sizeof(out->db_state), out->reason,
                 sizeof(out->reason));
    out->degraded = out->reason[0] != '\0';
    out->started_ms = mt->started_ms;
    out->suspended = atomic_load(&mt->suspend_depth);
}

const char *mt_pressure_source(struct memtrim *mt, int *zone)
{
    struct pressure_stats ps;
    pressure_stats_get(mt->pressure, &ps);
    *zone = ps.zone;
    return pressure_source_name(ps.source);
}

const struct server_store *mt_store_readers(struct memtrim *mt)
{
    return &mt->store.readers;
}
