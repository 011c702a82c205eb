/*
 * arenas.c - GET /memory/arenas: glibc's malloc_info per arena (system
 * bytes, in use, free by kind: fastbins, bins, top chunk) and the process's
 * mmapped totals, from the instance's cached reading (advice.c), which
 * malloc_info refreshes only as the probe budget allows: 503 + Retry-After
 * otherwise. `max_age` (a duration) accepts an older cached reading than
 * StatsMaxAgeMs: the dashboard asks for 5 minutes. Under an allocator without a per-arena view: 200
 * with "supported": false and the reason. Runs on HTTP workers; no locks here.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>

#include "core.h"

static cJSON *arena_json(const struct mt_arena *a, int *failed)
{
    cJSON *o = cJSON_CreateObject();
    api_json_int(o, "nr", a->nr, failed);
    api_json_bool(o, "main", a->nr == 0, failed);
    api_json_int(o, "system_bytes", (int64_t)a->system_bytes, failed);
    api_json_int(o, "system_max_bytes", (int64_t)a->system_max_bytes, failed);
    api_json_int(o, "in_use_bytes", (int64_t)a->in_use_bytes, failed);
    api_json_int(o, "free_bytes", (int64_t)a->free_bytes, failed);
    api_json_int(o, "free_fastbin_bytes", (int64_t)a->fastbin_bytes, failed);
    api_json_int(o, "free_bins_bytes", (int64_t)a->bins_bytes, failed);
    api_json_int(o, "free_top_bytes", (int64_t)a->top_bytes, failed);
    api_json_int(o, "fastbin_chunks", (int64_t)a->fastbin_chunks, failed);
    api_json_int(o, "bin_chunks", (int64_t)a->bins_chunks, failed);
    api_json_int(o, "subheaps", (int64_t)a->subheaps, failed);
    /* what a trim can give back, and what it cannot, by reason (docs/advice.md) */
    api_json_int(o, "releasable_bytes", (int64_t)a->releasable_bytes, failed);
    uint64_t pinned = a->pinned_small_bytes + a->pinned_edge_bytes + a->pinned_top_bytes;
    api_json_int(o, "pinned_bytes", (int64_t)pinned, failed);
    cJSON *why = cJSON_CreateObject();
    api_json_int(why, "small_chunks_bytes", (int64_t)a->pinned_small_bytes, failed);
    api_json_int(why, "chunk_edges_bytes", (int64_t)a->pinned_edge_bytes, failed);
    api_json_int(why, "thread_arena_top_bytes", (int64_t)a->pinned_top_bytes, failed);
    api_json_item(o, "pinned", why, failed);
    return o;
}

static cJSON *arenas_json(struct memtrim *mt, const struct mt_arenas *a)
{
    int failed = 0;
    cJSON *root = cJSON_CreateObject(), *list = cJSON_CreateArray(), *t = cJSON_CreateObject();
    int64_t age = mt_now_ms() - a->timestamp_ms;

    api_json_str(root, "allocator", mt_allocator_name(mt), &failed);
    api_json_bool(root, "supported", 1, &failed);
    api_json_null(root, "reason", &failed);
    api_json_int(root, "timestamp_ms", a->timestamp_ms, &failed);
    api_json_int(root, "age_ms", age > 0 ? age : 0, &failed);
    api_json_num(root, "duration_seconds", (double)a->duration_ns / 1e9, &failed);
    api_json_int(root, "arena_count", a->count, &failed);
    for (int i = 0; i < a->count; i++)
        api_json_item(list, NULL, arena_json(&a->arena[i], &failed), &failed);
    api_json_item(root, "arenas", list, &failed);
    api_json_int(t, "system_bytes", (int64_t)a->system_bytes, &failed);
    api_json_int(t, "system_max_bytes", (int64_t)a->system_max_bytes, &failed);
    api_json_int(t, "in_use_bytes", (int64_t)a->in_use_bytes, &failed);
    api_json_int(t, "free_bytes", (int64_t)a->free_bytes, &failed);
    api_json_int(t, "free_fastbin_bytes", (int64_t)a->fastbin_bytes, &failed);
    api_json_int(t, "free_bins_bytes", (int64_t)a->bins_bytes, &failed);
    api_json_int(t, "free_top_bytes", (int64_t)a->top_bytes, &failed);
    api_json_int(t, "mmapped_bytes", (int64_t)a->mmapped_bytes, &failed);
    api_json_int(t, "mmapped_count", (int64_t)a->mmapped_count, &failed);
    api_json_item(root, "totals", t, &failed);
    return api_json_done(root, failed);
}

static cJSON *unsupported_json(struct memtrim *mt, const char *reason)
{
    int failed = 0;
    cJSON *root = cJSON_CreateObject();
    api_json_str(root, "allocator", mt_allocator_name(mt), &failed);
    api_json_bool(root, "supported", 0, &failed);
    api_json_str(root, "reason", reason, &failed);
    api_json_null(root, "timestamp_ms", &failed);
    api_json_null(root, "age_ms", &failed);
    api_json_null(root, "duration_seconds", &failed);
    api_json_null(root, "arena_count", &failed);
    api_json_item(root, "arenas", cJSON_CreateArray(), &failed);
    api_json_null(root, "totals", &failed);
    return api_json_done(root, failed);
}

int api_arenas_get(const struct server_request *req, struct server_reply *rep)
{
    struct mt_arenas a;
    int64_t retry_ms = 1000, max_age_ms = -1; /* StatsMaxAgeMs */
    char why[QUERY_WHY_SIZE], *err = NULL;
    if (query_duration_ms(req->query, "max_age", 0, (int64_t)7 * 86400 * 1000, &max_age_ms, why,
                          sizeof(why)) < 0)
        return server_reply_bad_param(rep, why);
    int rc = mt_arenas_get(req->app, max_age_ms, &a, &retry_ms, &err);

    if (rc == 0) {
        rc = server_reply_json(rep, 200, arenas_json(req->app, &a));
        mt_arenas_free(&a);
        return rc;
    }
    if (rc == -ENOTSUP) {
        rc = server_reply_json(rep, 200,
                               unsupported_json(req->app, err ? err : "no per-arena view"));
    } else if (rc == -EAGAIN) {
        int64_t s = (retry_ms + 999) / 1000;
        server_reply_header(rep, "Retry-After", "%lld", (long long)(s > 0 ? s : 1));
        rc = server_reply_error(rep, 503, "probe_budget",
                                "malloc_info locks every arena: the probe budget "
                                "(ProbeBudgetPercent) allows the next reading in %lld ms",
                                (long long)retry_ms);
    } else {
        rc = server_reply_error(rep, 500, "malloc_info_failed", "%s",
                                err ? err : "reading malloc_info failed");
    }
    free(err);
    return rc;
}
