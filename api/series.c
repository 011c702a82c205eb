/*
 * series.c - GET /memory/series: one stored metric (a /memory/stats field
 * name) between `since` and `until`, bucketed to `step` with min/avg/max per
 * bucket, computed by the store in SQL. Defaults: the last hour, about 300
 * buckets. Reads the store through a reader from the server's pool; runs on
 * HTTP worker threads; no locks of its own.
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

#define API_SERIES_SPAN_DEFAULT_MS 3600000LL
#define API_SERIES_BUCKETS_TARGET 300
#define API_SERIES_BUCKETS_MAX 10000
#define API_SERIES_STEP_MAX_MS (366LL * 86400000LL)

struct api_series_params {
    const char *metric;
    int64_t since_ms, until_ms, step_ms;
    int pid; /* a worker group's member; 0 = the host (the process, or the group's totals) */
    int self_pid; /* pid named this process in no group: the host's series, echoed as pid */
};

static int api_series_bad_metric(struct server_reply *rep, const char *given)
{
    char why[QUERY_WHY_SIZE * 4];
    size_t off = (size_t)snprintf(why, sizeof(why), "parameter 'metric': %s; one of ",
                                  given ? "unknown metric" : "required");
    for (int i = 0; db_series_metrics[i] != NULL && off < sizeof(why); i++)
        off += (size_t)snprintf(why + off, sizeof(why) - off, "%s%s", i ? ", " : "",
                                db_series_metrics[i]);
    return server_reply_bad_param(rep, why);
}

static int api_series_parse(const struct server_request *req, struct api_series_params *p,
                            struct server_reply *rep)
{
    char why[QUERY_WHY_SIZE];
    int64_t now = mt_now_ms();
    p->metric = query_get(req->query, "metric");
    if (p->metric == NULL || !db_series_metric_valid(p->metric))
        return api_series_bad_metric(rep, p->metric);
    p->until_ms = now;
    p->since_ms = -1;
    p->step_ms = 0;
    p->self_pid = 0;
    if (api_pid_param(req, &p->pid, rep) != 0)
        return -EINVAL;
    if (query_time_ms(req->query, "until", now, &p->until_ms, why, sizeof(why)) < 0 ||
        query_time_ms(req->query, "since", now, &p->since_ms, why, sizeof(why)) < 0 ||
        query_duration_ms(req->query, "step", 0, API_SERIES_STEP_MAX_MS, &p->step_ms, why,
                          sizeof(why)) < 0)
        return server_reply_bad_param(rep, why);
    if (p->since_ms < 0)
        p->since_ms =
            p->until_ms > API_SERIES_SPAN_DEFAULT_MS ? p->until_ms - API_SERIES_SPAN_DEFAULT_MS : 0;
    /* This process's own pid in no group: its samples are the store's own since it started */
    int alone = 0;
    int64_t self = mt_control("rt-pid-self") ? 0 : api_pid_self_since(req, p->pid, &alone);
    if (self > 0 && alone) {
        p->pid = 0;
        p->self_pid = mt_pid();
        if (p->since_ms < self)
            p->since_ms = self;
    }
    if (p->until_ms <= p->since_ms)
        return server_reply_bad_param(rep, "parameter 'until': must be later than 'since'");
    /* since >= 0 and until > since, so span is in (0, INT64_MAX]: no sum below may
     * add to it (span + 299 overflowed for since=0&until=INT64_MAX). */
    int64_t span = p->until_ms - p->since_ms;
    if (p->step_ms == 0) {
        int64_t step = span / API_SERIES_BUCKETS_TARGET + (span % API_SERIES_BUCKETS_TARGET != 0);
        if (step > API_SERIES_STEP_MAX_MS)
            step = API_SERIES_STEP_MAX_MS; /* a multiple of 1000: the rounding below keeps it */
        p->step_ms = step <= 1000 ? 1000 : (step / 1000 + (step % 1000 != 0)) * 1000;
    }
    int64_t buckets = span / p->step_ms + (span % p->step_ms != 0);
    if (buckets > API_SERIES_BUCKETS_MAX) {
        snprintf(why, sizeof(why),
                 "parameter 'step': %lld ms gives %lld buckets over this range; at most %d",
                 (long long)p->step_ms, (long long)buckets, API_SERIES_BUCKETS_MAX);
        return server_reply_bad_param(rep, why);
    }
    return 0;
}

static cJSON *api_series_json(const struct api_series_params *p, const struct db_bucket *b,
                              size_t n)
{
    int failed = 0;
    cJSON *root = cJSON_CreateObject();
    api_json_str(root, "metric", p->metric, &failed);
    api_json_int(root, "since_ms", p->since_ms, &failed);
    api_json_int(root, "until_ms", p->until_ms, &failed);
    api_json_int(root, "step_ms", p->step_ms, &failed);
    if (p->pid > 0 || p->self_pid > 0)
        api_json_int(root, "pid", p->pid > 0 ? p->pid : p->self_pid, &failed);
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; list != NULL && i < n && !failed; i++) {
        cJSON *o = cJSON_CreateObject();
        api_json_int(o, "timestamp_ms", b[i].start_ms, &failed);
        api_json_int(o, "count", b[i].count, &failed);
        api_json_num(o, "min", b[i].min, &failed);
        api_json_num(o, "avg", b[i].avg, &failed);
        api_json_num(o, "max", b[i].max, &failed);
        api_json_item(list, NULL, o, &failed);
    }
    api_json_item(root, "buckets", list, &failed);
    return api_json_done(root, failed);
}

int api_series_get(const struct server_request *req, struct server_reply *rep)
{
    struct api_series_params p;
    int rc = api_series_parse(req, &p, rep);
    if (rc != 0)
        return rc;

    struct db_reader *reader = NULL;
    void *handle = NULL;
    rc = server_reader_get(req, &handle, rep);
    reader = handle;
    if (rc != 0)
        return rc;
    struct db_bucket *buckets = NULL;
    size_t n = 0;
    char *err = NULL;
    rc = p.pid > 0 ? db_query_member_series(reader, p.pid, p.metric, p.since_ms, p.until_ms,
                                            p.step_ms, &buckets, &n, &err)
                   : db_query_series(reader, p.metric, p.since_ms, p.until_ms, p.step_ms,
                                     &buckets, &n, &err);
    server_reader_put(req, reader, rc != 0);
    if (rc != 0)
        return api_store_failed(rep, "the series", rc, err);
    rc = server_reply_json(rep, 200, api_series_json(&p, buckets, n));
    free(buckets);
    return rc;
}
