/*
 * trim.c - POST /memory/trim and GET /memory/trim (both trim, so that a plain
 * `curl .../memory/trim` works): one manual trim through the core's one call
 * (mt_trim: this process, or a worker group's members, as core decides)
 * (one trim at a time process-wide; closer than ManualTrimMinIntervalMs to
 * the last request that ran or shared a trim gives 429 with Retry-After;
 * otherwise a request that arrives during a trim shares its result,
 * "coalesced": true). The HTTP worker thread waits
 * for the trim; the core takes its own locks.
 */
#include "mt_alloc.h"
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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

/* One member's result (its trim's fields and pid), or its pid and error. */
static cJSON *api_member_trim_json(const struct mt_member_trim *t, int *failed)
{
    cJSON *o;
    if (t->rc == 0) {
        o = api_trim_to_json(&t->r, 1);
        if (!o) {
            *failed = 1;
            return NULL;
        }
        if (!cJSON_GetObjectItem(o, "pid"))
            api_json_int(o, "pid", t->pid, failed);
        return o;
    }
    o = cJSON_CreateObject();
    api_json_int(o, "pid", t->pid, failed);
    if (t->rc == -EINPROGRESS) { /* asked by the group thread: its result goes to the store */
        api_json_str(o, "status", "requested", failed);
        return o;
    }
    api_json_str(o, "error", t->error[0] ? t->error : strerror(-t->rc), failed);
    return o;
}

/* Every member of a group: the serving process's result at the top (as a single
 * process replies), and each member's under "group". */
static cJSON *api_group_trim_json(const struct mt_member_trim *res, int n)
{
    int failed = 0;
    cJSON *root = res[0].rc == 0 ? api_trim_to_json(&res[0].r, 1) : cJSON_CreateObject();
    cJSON *g = cJSON_CreateObject(), *list = cJSON_CreateArray();
    int64_t released = 0;
    int trimmed = 0, requested = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].rc == 0 && res[i].r.released_bytes > 0)
            released += res[i].r.released_bytes;
        trimmed += res[i].rc == 0;
        requested += res[i].rc == -EINPROGRESS;
        api_json_item(list, NULL, api_member_trim_json(&res[i], &failed), &failed);
    }
    api_json_int(g, "released_bytes", released, &failed);
    api_json_int(g, "members_trimmed", trimmed, &failed);
    api_json_int(g, "members_requested", requested, &failed);
    api_json_item(g, "members", list, &failed);
    api_json_item(root, "group", g, &failed);
    return api_json_done(root, failed);
}

/*
 * The one trim call (core.h's mt_trim): core resolves the target, this process or,
 * in a worker group, every member (or ?pid='s, 202 for another process: the reply
 * never waits for another process; each one's result reaches the store, as
 * /memory/trims?pid= shows).
 */
static int api_trim_reply(const struct server_request *req, struct server_reply *rep, int pid,
                          int64_t pad, struct mt_member_trim *res)
{
    int n = 0, members = 0, failed = 0;
    int64_t retry = 0;
    int rc = mt_trim(req->app, pid, pad, res, MT_GROUP_MAX, &n, &members, &retry);
    if (rc == -EAGAIN)
        return api_trim_rate_limited(req, rep, retry);
    if (rc == -ENOENT && members)
        return server_reply_error(rep, 404, "no_such_member", "no member of the group has pid %d",
                                  pid);
    if (rc == -ENOENT)
        return server_reply_error(rep, 404, "no_such_member",
                                  "pid %d: this process (%d) is in no worker group", pid,
                                  mt_pid());
    if (rc != 0 || n == 0)
        return server_reply_error(rep, 500, "trim_failed", "the %strim failed: %s",
                                  members ? "group " : "", strerror(rc ? -rc : EIO));
    if (!members) /* this process alone, as it always replied */
        return server_reply_json(rep, 200, api_trim_to_json(&res[0].r, 1));
    if (pid <= 0)
        return server_reply_json(rep, 200, api_group_trim_json(res, n));
    /* one member: its result as a single process's, with its pid */
    if (res[0].rc == -EINPROGRESS) /* another process: asked, its result to come */
        return server_reply_json(rep, 202, api_member_trim_json(&res[0], &failed));
    if (res[0].rc != 0)
        return server_reply_error(rep, 503, "member_trim_failed", "member %d did not trim: %s",
                                  pid, res[0].error);
    return server_reply_json(rep, 200, api_member_trim_json(&res[0], &failed));
}

int api_trim_run(const struct server_request *req, struct server_reply *rep)
{
    char why[QUERY_WHY_SIZE];
    int64_t pad = -1; /* TrimPadBytes */
    if (query_int(req->query, "pad", 0, (int64_t)1 << 40, &pad, why, sizeof(why)) < 0)
        return server_reply_bad_param(rep, why);
    int pid = 0;
    if (api_pid_param(req, &pid, rep) != 0)
        return -EINVAL;
    struct mt_member_trim *res = mt_malloc(MT_GROUP_MAX * sizeof(*res));
    if (!res)
        return server_reply_error(rep, 500, "out_of_memory", "could not trim");
    int rc = api_trim_reply(req, rep, pid, pad, res);
    free(res);
    return rc;
}
