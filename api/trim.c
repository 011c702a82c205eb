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
