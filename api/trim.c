/*
 * trim.c - POST /memory/trim and GET /memory/trim (both trim, so that a plain
 * `curl .../memory/trim` works): one manual malloc_trim through the core
 * (one trim at a time process-wide; closer than ManualTrimMinIntervalMs to
 * the last request that ran or shared a trim gives 429 with Retry-After;
 * otherwise a request that arrives during a trim shares its result,
 * "coalesced": true). The HTTP worker thread waits
 * for the trim; the core takes its own locks.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

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
    if (with_coalesced)
        api_json_bool(o, "coalesced", t->coalesced, &failed);
    if (t->pid > 0) /* a worker group's member (a single process's trims have none) */
        api_json_int(o, "pid", t->pid, &failed);
    return api_json_done(o, failed);
}

static int api_trim_rate_limited(const struct server_request *req, struct server_reply *rep,
                                 int64_t retry_after_ms)
{
    struct mt_config cfg;
    mt_config_get(req->app, &cfg);
    if (retry_after_ms < 1)
        retry_after_ms = 1;
    char message[200];
    snprintf(message, sizeof(message),
             "manual trims are limited to one per %d ms (ManualTrimMinIntervalMs); "
             "retry in %lld ms",
             cfg.manual_trim_min_interval_ms, (long long)retry_after_ms);
    int failed = 0;
    cJSON *root = cJSON_CreateObject();
    cJSON *error = cJSON_AddObjectToObject(root, "error");
    api_json_str(error, "code", "rate_limited", &failed);
    api_json_str(error, "message", message, &failed);
    api_json_int(error, "retry_after_ms", retry_after_ms, &failed);
    if (failed) {
        cJSON_Delete(root);
        root = NULL;
    }
    int rc = server_reply_json(rep, 429, root);
    server_reply_header(rep, "Retry-After", "%lld", (long long)((retry_after_ms + 999) / 1000));
    return rc;
}

int api_trim_run(const struct server_request *req, struct server_reply *rep)
{
    char why[QUERY_WHY_SIZE];
    int64_t pad = -1; /* TrimPadBytes */
    if (query_int(req->query, "pad", 0, (int64_t)1 << 40, &pad, why, sizeof(why)) < 0)
        return server_reply_bad_param(rep, why);
    int pid = 0, rc;
    if (api_pid_param(req, &pid, rep) != 0)
        return -EINVAL;
    /* A worker group: every member, one after the other (or ?pid=). */
    if (api_group_trim(req, rep, pid, pad, &rc, api_trim_rate_limited))
        return rc;
    if (pid > 0 && pid != mt_pid())
        return server_reply_error(rep, 404, "no_such_member",
                                  "pid %d: this process (%d) is in no worker group", pid,
                                  mt_pid());

    struct mt_trim_result r;
    int64_t retry_after_ms = 0;
    memset(&r, 0, sizeof(r));
    rc = mt_trim_manual(req->app, pad, &r, &retry_after_ms);
    if (rc == -EAGAIN)
        return api_trim_rate_limited(req, rep, retry_after_ms);
    if (rc != 0)
        return server_reply_error(rep, 500, "trim_failed", "the trim failed: %s", strerror(-rc));
    return server_reply_json(rep, 200, api_trim_to_json(&r, 1));
}
