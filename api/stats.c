/*
 * stats.c - GET /memory/stats: the shared probe snapshot (mt_snapshot_get:
 * one refresh per StatsMaxAgeMs however many clients poll) as one flat JSON
 * object whose numeric field names are also the metrics /memory/series
 * takes (db_series_metrics), plus the raw mallinfo2 fields. Heap fields are
 * null until mallinfo2 has run once. Runs on HTTP worker threads; the core
 * takes its own locks.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

static void api_stats_mallinfo2(cJSON *root, const struct mt_heap *h, int *failed)
{
    if (h->timestamp_ms == 0 || !(h->known & MT_HEAP_HAS_MALLINFO)) {
        api_json_null(root, "mallinfo2", failed);
        return;
    }
    cJSON *m = cJSON_CreateObject();
    api_json_int(m, "arena", (int64_t)h->arena_bytes, failed);
    api_json_int(m, "ordblks", (int64_t)h->ordblks, failed);
    api_json_int(m, "smblks", (int64_t)h->smblks, failed);
    api_json_int(m, "hblks", (int64_t)h->hblks, failed);
    api_json_int(m, "hblkhd", (int64_t)h->hblkhd, failed);
    api_json_int(m, "fsmblks", (int64_t)h->fsmblks, failed);
    api_json_int(m, "uordblks", (int64_t)h->uordblks, failed);
    api_json_int(m, "fordblks", (int64_t)h->fordblks, failed);
    api_json_int(m, "keepcost", (int64_t)h->keepcost, failed);
    api_json_item(root, "mallinfo2", m, failed);
}

/* The allocator: its name and version, and its own figures once it has been read. */
static void api_stats_allocator(cJSON *root, const struct mt_snapshot *s, int *failed)
{
    const struct mt_heap *h = &s->heap;
    cJSON *a = cJSON_CreateObject();
    if (!a) {
        *failed = 1;
        return;
    }
    api_json_str(a, "name", s->allocator ? s->allocator : "glibc", failed);
    if (s->allocator_version[0])
        api_json_str(a, "version", s->allocator_version, failed);
    else
        api_json_null(a, "version", failed);
    api_json_str(a, "release", s->allocator_release ? s->allocator_release : "malloc_trim",
                 failed);
    if (h->timestamp_ms == 0) {
        api_json_null(a, "stats", failed);
    } else {
        cJSON *f = cJSON_CreateObject();
        for (int i = 0; f && i < h->nfigures && i < MT_ALLOC_FIGURES; i++)
            api_json_int(f, h->figures[i].name, (int64_t)h->figures[i].value, failed);
        api_json_item(a, "stats", f, failed);
    }
    api_json_item(root, "allocator", a, failed);
}

/* The glibc tunables memtrim applied and that are in force (null = not set by memtrim). */
static void api_stats_tunables(cJSON *root, int *failed)
{
    struct mt_tunables t;
    cJSON *o = cJSON_CreateObject();
    mt_tunables_get(&t);
    api_json_bool(o, "glibc", t.glibc, failed);
    for (int i = 0; i < MT_TUNABLE_COUNT; i++)
        api_json_int_or_null(o, mt_tunable_field(i), t.value[i], t.value[i] >= 0, failed);
    api_json_item(root, "malloc_tunables", o, failed);
}

cJSON *api_stats_to_json(const struct mt_snapshot *s)
{
    const struct mt_cheap *c = &s->cheap;
    const struct mt_heap *h = &s->heap;
    int heap = h->timestamp_ms != 0;
    int failed = 0;
    cJSON *root = cJSON_CreateObject();

    api_json_int(root, "timestamp_ms", c->timestamp_ms, &failed);
    api_json_int(root, "cheap_age_ms", s->cheap_age_ms, &failed);
    api_json_int(root, "rss_bytes", (int64_t)c->rss_bytes, &failed);
    api_json_int(root, "rss_anon_bytes", (int64_t)c->rss_anon_bytes, &failed);
    api_json_int(root, "rss_file_bytes", (int64_t)c->rss_file_bytes, &failed);
    api_json_int(root, "rss_shmem_bytes", (int64_t)c->rss_shmem_bytes, &failed);
    api_json_int(root, "swap_bytes", (int64_t)c->swap_bytes, &failed);
    api_json_int(root, "vm_size_bytes", (int64_t)c->vm_size_bytes, &failed);
    api_json_int(root, "minor_faults", (int64_t)c->minor_faults, &failed);
    api_json_int(root, "major_faults", (int64_t)c->major_faults, &failed);
    api_json_int(root, "cgroup_version", c->cgroup_version, &failed);
    api_json_int_or_null(root, "cgroup_usage_bytes", c->cgroup_usage_bytes,
                         c->cgroup_usage_bytes >= 0, &failed);
    api_json_int_or_null(root, "cgroup_limit_bytes", c->cgroup_limit_bytes,
                         c->cgroup_limit_bytes >= 0, &failed);
    api_json_int_or_null(root, "memory_limit_bytes", s->memory_limit_bytes,
                         s->memory_limit_bytes >= 0, &failed);
    api_json_num(root, "cheap_probe_duration_seconds", (double)c->duration_ns / 1e9, &failed);
    if (c->read_errno != 0) {
        char why[160];
        snprintf(why, sizeof(why), "reading /proc/self failed: %s", strerror(-c->read_errno));
        api_json_str(root, "probe_error", why, &failed);
    } else {
        api_json_null(root, "probe_error", &failed);
    }

    api_json_int_or_null(root, "heap_timestamp_ms", h->timestamp_ms, heap, &failed);
    api_json_int_or_null(root, "heap_age_ms", s->heap_age_ms, heap, &failed);
    unsigned k = heap ? h->known : 0;
    int mallinfo = (k & MT_HEAP_HAS_MALLINFO) != 0;
    api_json_int_or_null(root, "heap_in_use_bytes", (int64_t)h->heap_in_use_bytes,
                         (k & MT_HEAP_HAS_IN_USE) != 0, &failed);
    api_json_int_or_null(root, "heap_free_bytes", (int64_t)h->heap_free_bytes,
                         (k & MT_HEAP_HAS_FREE) != 0, &failed);
    api_json_int_or_null(root, "heap_mapped_bytes", (int64_t)h->heap_mapped_bytes,
                         (k & MT_HEAP_HAS_MAPPED) != 0, &failed);
    api_json_int_or_null(root, "heap_resident_bytes", (int64_t)h->heap_resident_bytes,
                         (k & MT_HEAP_HAS_RESIDENT) != 0, &failed);
    api_json_int_or_null(root, "heap_retained_bytes", (int64_t)h->heap_retained_bytes,
                         (k & MT_HEAP_HAS_RETAINED) != 0, &failed);
    api_json_int_or_null(root, "heap_mmapped_bytes", (int64_t)h->heap_mmapped_bytes, mallinfo,
                         &failed);
    api_json_int_or_null(root, "arena_bytes", (int64_t)h->arena_bytes, mallinfo, &failed);
    api_json_int_or_null(root, "heap_free_chunks", (int64_t)h->ordblks, mallinfo, &failed);
    api_json_int_or_null(root, "arena_count", h->arena_count, heap && h->arena_count >= 0, &failed);
    api_json_int_or_null(root, "releasable_estimate_bytes", (int64_t)s->releasable_estimate_bytes,
                         heap, &failed);
    if (heap && s->fragmentation_ratio > 0)
        api_json_num(root, "fragmentation_ratio", s->fragmentation_ratio, &failed);
    else
        api_json_null(root, "fragmentation_ratio", &failed);
    if (heap)
        api_json_num(root, "heap_probe_duration_seconds", (double)h->duration_ns / 1e9, &failed);
    else
        api_json_null(root, "heap_probe_duration_seconds", &failed);
    api_stats_mallinfo2(root, h, &failed);
    api_stats_allocator(root, s, &failed);
    api_stats_tunables(root, &failed);
    return api_json_done(root, failed);
}

int api_stats_get(const struct server_request *req, struct server_reply *rep)
{
    struct mt_snapshot snap;
    int zone = 0, failed = 0;
    mt_snapshot_get(req->app, &snap);
    cJSON *root = api_stats_to_json(&snap);
    /* What wakes the pressure path (pressure.c), and whether RSS is in its zone. */
    const char *source = mt_pressure_source(req->app, &zone);
    if (root) {
        api_json_str(root, "pressure_source", source, &failed);
        api_json_bool(root, "pressure_zone", zone, &failed);
        root = api_json_done(root, failed);
    }
    return server_reply_json(rep, 200, root);
}
