/*
 * history.c - the agent's history in SQLite (db/'s db_agent: its own file, docs/agent.md,
 * "History"): each watched cgroup's sample every SampleIntervalSeconds (one transaction for
 * the node), each trim's row as its answer arrives, retention by RetentionHours, and GET
 * /agent/history. The writes run on the loop thread under a->lock; a failed write is logged
 * (rate-limited) and counted, and the agent goes on. The route runs on an HTTP worker with a
 * read-only connection of its own (the loop's lock is not taken).
 */
#include "agent_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "db.h"
#include "http.h"

#define HISTORY_ROWS_MAX 10000
#define RETENTION_EVERY_NS (3600 * MT_SEC)

static struct mt_log_limit store_log = MT_LOG_LIMIT_INIT(60 * MT_SEC, 3);

static void failed(struct agent *a, char *err)
{
    a->store_errors++;
    mt_log_limited(&store_log, MT_LOG_WARNING, "agent", "history: %s", err ? err : "failed");
    free(err);
}

void agent_history_open(struct agent *a)
{
    char *err = NULL;
    if (!a->cfg.database[0])
        return;
    if (db_agent_open(a->cfg.database, &a->store, &err) != 0) {
        mt_log(MT_LOG_WARNING, "agent", "history: %s: the agent goes on without it",
               err ? err : "cannot open");
        free(err);
        a->store = NULL;
        return;
    }
    mt_log(MT_LOG_INFO, "agent", "history in %s, kept %d h", a->cfg.database, a->cfg.retention_hours);
}

void agent_history_close(struct agent *a)
{
    db_agent_close(a->store);
    a->store = NULL;
}

void agent_history_tick(struct agent *a, int64_t now_ns)
{
    char *err = NULL;
    if (!a->store || now_ns < a->next_sample_ns)
        return;
    a->next_sample_ns = now_ns + (int64_t)a->cfg.sample_interval_s * MT_SEC;
    int64_t ts = mt_now_ms();
    if (db_agent_begin(a->store, &err) != 0)
        return failed(a, err);
    for (size_t i = 0; i < a->ncgroups; i++) {
        const struct agent_cgroup *cg = a->cgroups[i];
        struct db_agent_sample s = {ts, cg->path, cg->usage, cg->limit, cg->working_set, cg->anon,
                                    cg->trims, cg->released, cg->oom_kills};
        if (db_agent_add_sample(a->store, &s, &err) != 0) {
            failed(a, err);
            err = NULL;
            break;
        }
    }
    if (db_agent_commit(a->store, &err) != 0)
        return failed(a, err);
    if (now_ns >= a->next_retention_ns) {
        a->next_retention_ns = now_ns + RETENTION_EVERY_NS;
        if (db_agent_retention(a->store, ts - (int64_t)a->cfg.retention_hours * 3600 * 1000, &err))
            failed(a, err);
    }
}

void agent_history_trim(struct agent *a, const struct agent_cgroup *cg, const struct agent_proc *p,
                        int64_t released, int64_t wall_ns, int64_t cpu_ns)
{
    char *err = NULL;
    if (!a->store)
        return;
    struct db_agent_trim t = {mt_now_ms(), cg->path, (int)p->pid, p->comm[0] ? p->comm : "gone",
                              released, (double)wall_ns / 1e9, (double)cpu_ns / 1e9,
                              p->reason ? agent_reason_name(p->reason) : NULL};
    if (db_agent_add_trim(a->store, &t, &err) != 0)
        failed(a, err);
}


static void on_sample(void *ctx, const struct db_agent_sample *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(ctx, "samples"), o);
    cJSON_AddNumberToObject(o, "ts_ms", (double)s->ts_ms);
    cJSON_AddStringToObject(o, "cgroup", s->cgroup ? s->cgroup : "");
    agent_json_bytes(o, "usage_bytes", s->usage);
    agent_json_bytes(o, "limit_bytes", s->limit);
    agent_json_bytes(o, "working_set_bytes", s->working_set);
    agent_json_bytes(o, "anon_bytes", s->anon);
    cJSON_AddNumberToObject(o, "trims", (double)s->trims);
    cJSON_AddNumberToObject(o, "released_bytes", (double)s->released);
    cJSON_AddNumberToObject(o, "oom_kills", (double)s->oom_kills);
}

static void on_trim(void *ctx, const struct db_agent_trim *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(ctx, "trims"), o);
    cJSON_AddNumberToObject(o, "ts_ms", (double)t->ts_ms);
    cJSON_AddStringToObject(o, "cgroup", t->cgroup ? t->cgroup : "");
    cJSON_AddNumberToObject(o, "pid", t->pid);
    cJSON_AddStringToObject(o, "program", t->program ? t->program : "");
    cJSON_AddNumberToObject(o, "released_bytes", (double)t->released);
    cJSON_AddNumberToObject(o, "wall_seconds", t->wall_s);
    cJSON_AddNumberToObject(o, "cpu_seconds", t->cpu_s);
    if (t->reason)
        cJSON_AddStringToObject(o, "reason", t->reason);
    else
        cJSON_AddNullToObject(o, "reason");
}

int agent_history_get(const struct server_request *req, struct server_reply *rep)
{
    struct agent *a = req->app;
    char why[QUERY_WHY_SIZE], *err = NULL;
    int64_t since = 0;
    if (!a->cfg.database[0])
        return server_reply_error(rep, 404, "no_store", "the agent keeps no history (Database)");
    int rc = query_int(req->query, "since", 0, INT64_MAX, &since, why, sizeof why);
    if (rc < 0)
        return server_reply_bad_param(rep, why);
    const char *cgroup = query_get(req->query, "cgroup");
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "samples", cJSON_CreateArray());
    cJSON_AddItemToObject(root, "trims", cJSON_CreateArray());
    rc = db_agent_history(a->cfg.database, cgroup, since, HISTORY_ROWS_MAX, on_sample, on_trim,
                          root, &err);
    if (rc != 0) {
        cJSON_Delete(root);
        rc = server_reply_error(rep, 503, "store_unavailable", "%s", err ? err : "unavailable");
        free(err);
        return rc;
    }
    return server_reply_json(rep, 200, root);
}
