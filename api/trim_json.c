/*
 * trim_json.c - the one JSON form of a trim's measured result, shared by
 * /memory/trim (trim.c), the history (/memory/trims, trims.c) and a worker
 * group's trims (group.c). Runs on HTTP workers; no state, no locks.
 */
#include "api.h"

#include <cjson/cJSON.h>

#include "core.h"

cJSON *api_trim_to_json(const struct mt_trim_result *t, int with_coalesced)
{
    int failed = 0;
    cJSON *o = cJSON_CreateObject();
    api_json_int(o, "id", t->id, &failed);
    api_json_str(o, "trigger", mt_trigger_name(t->trigger), &failed);
    api_json_int(o, "timestamp_ms", t->start_ms, &failed);
    api_json_num(o, "duration_seconds", (double)t->duration_ns / 1e9, &failed);
    api_json_int(o, "rss_before_bytes", (int64_t)t->rss_before_bytes, &failed);
    api_json_int(o, "rss_after_bytes", (int64_t)t->rss_after_bytes, &failed);
    api_json_int_or_null(o, "heap_free_before_bytes", (int64_t)t->heap_free_before_bytes,
                         !t->heap_skipped, &failed);
    api_json_int_or_null(o, "heap_free_after_bytes", (int64_t)t->heap_free_after_bytes,
                         !t->heap_skipped, &failed);
    api_json_int(o, "released_bytes", t->released_bytes, &failed);
    api_json_int(o, "malloc_trim_result", t->malloc_trim_ret, &failed);
    api_json_int(o, "pad_bytes", (int64_t)t->pad_bytes, &failed);
    /* How long the host may have waited: malloc_trim locks the arenas one at a time. */
    api_json_int_or_null(o, "arena_count", t->arena_count, t->arena_count > 0, &failed);
    if (t->arena_count > 0)
        api_json_num(o, "duration_per_arena_seconds",
                     (double)t->duration_ns / 1e9 / t->arena_count, &failed);
    else
        api_json_null(o, "duration_per_arena_seconds", &failed);
    api_json_int_or_null(o, "refaulted_bytes", t->refaulted_bytes, t->refaulted_bytes >= 0,
                         &failed);
    /* Pressure trims: how long after the crossing the trim began (null for the others). */
    if (t->trigger == MT_TRIGGER_PRESSURE && t->reaction_ns >= 0)
        api_json_num(o, "reaction_seconds", (double)t->reaction_ns / 1e9, &failed);
    else
        api_json_null(o, "reaction_seconds", &failed);
    /* The stall canary's longest wait while it ran (null: not measured, or from the store,
     * which does not keep it): docs/policy.md, "The cost beside it". */
    api_json_item(o, "host_stall_seconds",
                  t->host_stall_measured ? cJSON_CreateNumber((double)t->host_stall_ns / 1e9)
                                         : cJSON_CreateNull(), &failed);
    /* Why it released under a page (null when it released more): docs/policy.md. */
    const char *why = mt_nothing_name(t->nothing_reason);
    if (why)
        api_json_str(o, "released_nothing_reason", why, &failed);
    else
        api_json_null(o, "released_nothing_reason", &failed);
    if (with_coalesced)
        api_json_bool(o, "coalesced", t->coalesced, &failed);
    if (t->pid > 0) /* a worker group's member (a single process's trims have none) */
        api_json_int(o, "pid", t->pid, &failed);
    return api_json_done(o, failed);
}
