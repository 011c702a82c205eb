/*
 * stats.c - GET /memory/stats: the shared probe snapshot (mt_snapshot_get:
 * one refresh per StatsMaxAgeMs however many clients poll) as one flat JSON
 * object: the fields of common/fields.h in its order (the stored ones are
 * also the metrics /memory/series takes), then the raw mallinfo2 fields, the
 * allocator and the tunables. Heap fields are null until the heap was read.
 * Runs on HTTP worker threads; the core takes its own locks.
 */
#include "mt_alloc.h"
#include "api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "alloc_table.h"
#include "fields.h"

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
    /* its row of the allocator table (a name from the table, or none before a reading) */
    const struct mt_alloc_row *row = mt_alloc_row(s->allocator ? s->allocator : "glibc");
    api_json_str(a, "stats_call", row ? row->stats_call : "heap stats", failed);
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
    /* MallocArenaMax "auto": the CPUs the cap came from, and which file said */
    if (t.arena_auto) {
        cJSON *a = cJSON_CreateObject();
        api_json_num(a, "cpus", t.arena_auto_cpus, failed);
        api_json_str(a, "source", t.arena_auto_source, failed);
        api_json_item(o, "arena_max_auto", a, failed);
    } else {
        api_json_null(o, "arena_max_auto", failed);
    }
    api_json_item(root, "malloc_tunables", o, failed);
}

/* probe_error: why the cheap reading could not be believed, or null. */
static void api_stats_probe_error(cJSON *root, const struct mt_cheap *c, int *failed)
{
    if (c->read_errno != 0) {
        char why[160];
        snprintf(why, sizeof(why), "reading /proc/self failed: %s", strerror(-c->read_errno));
        api_json_str(root, "probe_error", why, failed);
    } else {
        api_json_null(root, "probe_error", failed);
    }
}

cJSON *api_stats_to_json(const struct mt_snapshot *s)
{
    int failed = 0, heap_part = 0;
    cJSON *root = cJSON_CreateObject();

    for (int i = 0; i < MT_FIELD_COUNT; i++) {
        const struct mt_field *f = &mt_fields[i];
        struct mt_field_value v;
        if (!heap_part && (f->known & MT_KNOWN_HEAP)) {
            api_stats_probe_error(root, &s->cheap, &failed); /* between the two readings */
            heap_part = 1;
        }
        if (!mt_field_get(f, s, &v))
            api_json_null(root, f->name, &failed);
        else if (v.real)
            api_json_num(root, f->name, v.d, &failed);
        else
            api_json_int(root, f->name, v.i, &failed);
    }
    api_stats_mallinfo2(root, &s->heap, &failed);
    api_stats_allocator(root, s, &failed);
    api_stats_tunables(root, &failed);
    return api_json_done(root, failed);
}

/* The host stall the canary measured, by trigger (core/measure/stall.h): trims measured,
 * the sum and the longest of each trim's longest wait. */
static void api_stats_host_stall(cJSON *root, struct memtrim *mt, int *failed)
{
    struct mt_counters *c = mt_malloc(sizeof(*c));
    cJSON *o = c ? cJSON_CreateObject() : NULL;
    if (o) {
        mt_counters_get(mt, c);
        for (int i = 0; i < MT_TRIGGER_COUNT; i++) {
            cJSON *t = cJSON_CreateObject();
            if (t) {
                api_json_u64(t, "trims", c->host_stall_trims[i], failed);
                api_json_num(t, "seconds_total", c->host_stall_seconds[i], failed);
                api_json_num(t, "max_seconds", c->host_stall_max_seconds[i], failed);
            }
            api_json_item(o, mt_trigger_name(i), t, failed);
        }
    }
    api_json_item(root, "host_stall", o, failed);
    free(c);
}

int api_stats_get(const struct server_request *req, struct server_reply *rep)
{
    struct mt_snapshot snap;
    int zone = 0, failed = 0;
    mt_snapshot_get(req->app, &snap);
    cJSON *root = api_stats_to_json(&snap);
    /* What wakes the pressure path (core/pressure/engine.c), and whether RSS is in its zone. */
    const char *source = mt_pressure_source(req->app, &zone);
    struct mt_cgroup_desc *d = mt_malloc(sizeof(*d));
    if (root && d) {
        api_json_str(root, "pressure_source", source, &failed);
        api_json_bool(root, "pressure_zone", zone, &failed);
        /* Which cgroup, and which of its files set the limit (or MemoryLimitBytes). */
        mt_cgroup_describe(req->app, &snap, d);
        if (d->version)
            api_json_str(root, "cgroup_path", d->path, &failed);
        else
            api_json_null(root, "cgroup_path", &failed);
        if (d->limit_source[0])
            api_json_str(root, "memory_limit_source", d->limit_source, &failed);
        else
            api_json_null(root, "memory_limit_source", &failed);
        api_json_bool(root, "cgroup_read_only", d->read_only, &failed);
        /* A worker group's leader: the group's totals and each member (none alone). */
        cJSON *group = api_group_stats(req->app, &failed);
        if (group)
            api_json_item(root, "group", group, &failed);
        api_stats_host_stall(root, req->app, &failed);
        root = api_json_done(root, failed);
    } else if (root) {
        cJSON_Delete(root);
        root = NULL;
    }
    free(d);
    return server_reply_json(rep, 200, root);
}
