/*
 * trims.c - GET /memory/trims: the stored trim history (newest first, at
 * most `limit`) between `since` and `until`, optionally of one `trigger`,
 * with a summary over every matching trim (count, duration percentiles,
 * bytes released). Reads the store through a reader from the server's pool;
 * runs on HTTP worker threads; no locks of its own.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "core.h"
#include "db.h"

#define API_TRIMS_LIMIT_DEFAULT 100
#define API_TRIMS_LIMIT_MAX 10000

/* Parse since/until/limit/trigger into q; -EINVAL after a 400. */
static int api_trims_params(const struct server_request *req, struct db_trim_query *q,
                            struct server_reply *rep)
{
    char why[QUERY_WHY_SIZE];
    int64_t now = mt_now_ms(), limit = API_TRIMS_LIMIT_DEFAULT;
    q->since_ms = INT64_MIN;
    q->until_ms = INT64_MAX;
    q->trigger = -1;
    if (query_time_ms(req->query, "since", now, &q->since_ms, why, sizeof(why)) < 0 ||
        query_time_ms(req->query, "until", now, &q->until_ms, why, sizeof(why)) < 0 ||
        query_int(req->query, "limit", 1, API_TRIMS_LIMIT_MAX, &limit, why, sizeof(why)) < 0)
        return server_reply_bad_param(rep, why);
    /* Compared with the defaults too: since=INT64_MAX alone is an empty range, said so. */
    if (q->until_ms <= q->since_ms)
        return server_reply_bad_param(rep, "parameter 'until': must be later than 'since'");
    q->limit = (int)limit;
    if (api_pid_param(req, &q->pid, rep) != 0) /* a worker group's member, or this process */
        return -EINVAL;
    int alone = 0;
    q->self_since_ms = mt_control("rt-pid-self") ? 0 : api_pid_self_since(req, q->pid, &alone);

    const char *trigger = query_get(req->query, "trigger");
    if (trigger != NULL) {
        q->trigger = mt_trigger_parse(trigger);
        if (q->trigger < 0) {
            size_t off = (size_t)snprintf(why, sizeof(why), "parameter 'trigger': must be one of ");
            for (int t = 0; t < MT_TRIGGER_COUNT && off < sizeof(why); t++)
                off += (size_t)snprintf(why + off, sizeof(why) - off, "%s%s", t ? ", " : "",
                                        mt_trigger_name(t));
            return server_reply_bad_param(rep, why);
        }
    }
    return 0;
}

static cJSON *api_trims_json(const struct db_trim_query *q, const struct db_trim_row *rows,
                             size_t nrows, const struct db_trim_summary *sum)
{
    int failed = 0;
    cJSON *root = cJSON_CreateObject();
    api_json_int_or_null(root, "since_ms", q->since_ms, q->since_ms != INT64_MIN, &failed);
    api_json_int_or_null(root, "until_ms", q->until_ms, q->until_ms != INT64_MAX, &failed);
    api_json_str(root, "trigger", q->trigger >= 0 ? mt_trigger_name(q->trigger) : NULL, &failed);
    api_json_int(root, "limit", q->limit, &failed);
    if (q->pid > 0)
        api_json_int(root, "pid", q->pid, &failed);

    cJSON *s = cJSON_CreateObject();
    api_json_int(s, "count", sum->count, &failed);
    api_json_num(s, "duration_p50_seconds", sum->duration_p50_seconds, &failed);
    api_json_num(s, "duration_p95_seconds", sum->duration_p95_seconds, &failed);
    api_json_num(s, "duration_p99_seconds", sum->duration_p99_seconds, &failed);
    api_json_num(s, "duration_max_seconds", sum->duration_max_seconds, &failed);
    api_json_int(s, "released_bytes", sum->released_bytes, &failed);
    api_json_int(s, "refaulted_bytes", sum->refaulted_bytes, &failed);
    api_json_item(root, "summary", s, &failed);
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; list != NULL && i < nrows && !failed; i++) {
        api_json_item(list, NULL, api_trim_to_json(&rows[i].t, 0), &failed);
    }
    api_json_item(root, "trims", list, &failed);
    return api_json_done(root, failed);
}

int api_trims_get(const struct server_request *req, struct server_reply *rep)
{
    struct db_trim_query q;
    int rc = api_trims_params(req, &q, rep);
    if (rc != 0)
        return rc;

    struct db_reader *reader = NULL;
    void *handle = NULL;
    rc = server_reader_get(req, &handle, rep);
    reader = handle;
    if (rc != 0)
        return rc;
    struct db_trim_row *rows = NULL;
    size_t nrows = 0;
    struct db_trim_summary sum;
    char *err = NULL;
    memset(&sum, 0, sizeof(sum));
    rc = db_query_trims(reader, &q, &rows, &nrows, &sum, &err);
    server_reader_put(req, reader, rc != 0);
    if (rc != 0)
        return api_store_failed(rep, "the trim history", rc, err);
    rc = server_reply_json(rep, 200, api_trims_json(&q, rows, nrows, &sum));
    free(rows);
    return rc;
}
