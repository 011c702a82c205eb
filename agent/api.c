/*
 * api.c - the agent's one Prometheus target and API per node (docs/agent.md, "What it
 * shows"), served by server/ (the plugin's server, its auth, TLS and unix socket) with the
 * agent's own route table: GET /metrics (per cgroup, labelled cgroup and pod_uid,
 * container_id or unit where known), GET /agent/cgroups (each watched cgroup with its
 * processes), GET /agent/history (history.c), GET /healthz (open, for liveness probes), GET /
 * (the node's page) and GET /openapi.yaml (agent/openapi.yaml, their contract). HTTP
 * worker threads; each handler holds a->lock while it renders.
 */
#include "agent_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "http.h"

extern const unsigned char mt_asset_agent_page[];
extern const unsigned long mt_asset_agent_page_len;
extern const unsigned char mt_asset_agent_openapi[];
extern const unsigned long mt_asset_agent_openapi_len;

/* ,name="value" (name NULL: "value" alone), the value as the text format wants it: \\, \"
 * and \n escaped. */
static void label(FILE *f, const char *name, const char *v)
{
    if (name)
        fprintf(f, ",%s=", name);
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', f);
        if (*v == '\n') {
            fputs("\\n", f);
            continue;
        }
        fputc(*v, f);
    }
    fputc('"', f);
}

/* The cgroup's labels: {cgroup="...",kind="...",pod_uid=...}. */
static void put_labels(FILE *f, const struct agent_cgroup *cg, const char *extra_name,
                       const char *extra)
{
    fputs("{cgroup=", f);
    label(f, NULL, cg->path);
    label(f, "kind", agent_kind_name(cg->kind.kind));
    if (cg->kind.pod_uid[0])
        label(f, "pod_uid", cg->kind.pod_uid);
    if (cg->kind.container_id[0])
        label(f, "container_id", cg->kind.container_id);
    if (cg->kind.unit[0])
        label(f, "unit", cg->kind.unit);
    if (extra_name)
        label(f, extra_name, extra);
    fputs("}", f);
}

static const struct series {
    const char *name, *type, *help;
    size_t offset; /* an int64_t or uint64_t field of struct agent_cgroup */
    int is_signed;
    double unit;   /* the field's units in one of the series' (0: the same) */
} series[] = {
#define S(n, t, h, f, s) {"memtrim_agent_cgroup_" n, t, h, offsetof(struct agent_cgroup, f), s, 0}
    S("usage_bytes", "gauge", "The cgroup's memory usage (memory.current / usage_in_bytes).", usage, 1),
    S("limit_bytes", "gauge", "The cgroup's memory limit (memory.max / limit_in_bytes).", limit, 1),
    S("high_bytes", "gauge", "The cgroup's memory.high (v2), where set.", high, 1),
    S("working_set_bytes", "gauge", "Usage less inactive file pages (kubelet's working set).", working_set, 1),
    S("anon_bytes", "gauge", "Anonymous memory (memory.stat anon / total_rss).", anon, 1),
    S("trims_total", "counter", "Trims of the cgroup's processes by the agent.", trims, 0),
    S("wakes_total", "counter", "Kernel wake-ups for the cgroup (thresholds, PSI, memory.events).", wakes, 0),
    S("near_limit_total", "counter", "Times the cgroup came within 5 % of its limit.", near_episodes, 0),
    S("kills_avoided_total", "counter", "Times it came within 5 % of its limit and left it with no OOM kill.", kills_avoided, 0),
    S("oom_kills_total", "counter", "The kernel's OOM kills in the cgroup (oom_kill).", oom_kills, 0),
#undef S
#define S(n, t, h, f, s) {"memtrim_agent_cgroup_" n, t, h, offsetof(struct agent_cgroup, f), s, 1e9}
    S("inside_seconds_total", "counter", "The agent's trims' time inside the cgroup's processes (the taken thread's stop and memtrim's threads there).", inside_ns, 0),
    S("inside_charged_seconds_total", "counter", "The part of it charged to each process's own budget of time inside it (a trim that gave back a MiB or more is not).", inside_charged_ns, 0),
#undef S
};

/* Each member's own budget of trims' time inside it (decide.c's token bucket), now. */
static void inside_json(cJSON *o, const struct agent_proc *p, int64_t now)
{
    cJSON *b = cJSON_AddObjectToObject(o, "inside_budget");
    double left = agent_inside_left(p, now);
    cJSON_AddNumberToObject(b, "left_seconds", (double)(int64_t)(left / 1e6) / 1e3);
    cJSON_AddBoolToObject(b, "held", left <= 0);
    cJSON_AddNumberToObject(b, "cap_seconds", AGENT_INSIDE_CAP_NS / 1e9);
    cJSON_AddNumberToObject(b, "share", AGENT_INSIDE_SHARE);
    cJSON_AddNumberToObject(b, "last_seconds", (double)p->last_inside_ns / 1e9);
    cJSON_AddNumberToObject(b, "last_charged_seconds", (double)p->last_in_target_ns / 1e9);
    cJSON_AddNumberToObject(b, "charged_seconds", (double)p->inside_charged_ns / 1e9);
}

/* One series with a sample per cgroup (value NAN: none for that one), printed with fmt. */
static void per_cgroup(struct agent *a, FILE *f, const char *name, const char *type,
                       const char *help, double (*value)(const struct agent_cgroup *, int64_t),
                       const char *fmt)
{
    int64_t now = mt_mono_ns();
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (size_t i = 0; i < a->ncgroups; i++) {
        double v = value(a->cgroups[i], now);
        if (isnan(v))
            continue;
        fputs(name, f);
        put_labels(f, a->cgroups[i], NULL, NULL);
        fputc(' ', f);
        fprintf(f, fmt, v);
        fputc('\n', f);
    }
}

static double heap_free_estimate(const struct agent_cgroup *cg, int64_t now)
{
    (void)now;
    int64_t sum = 0;
    for (size_t i = 0; i < cg->nprocs; i++)
        if (!cg->procs[i].reason)
            sum += agent_expected(&cg->procs[i]);
    return (double)sum;
}

/* Saved: what the trims gave back and has not come back since (never more than the cgroup's
 * anonymous memory could hold). */
static double saved_bytes(const struct agent_cgroup *cg, int64_t now)
{
    (void)now;
    int64_t saved = 0;
    for (size_t j = 0; j < cg->nprocs; j++) {
        const struct agent_proc *p = &cg->procs[j];
        int64_t back = agent_expected(p);
        if (p->last_released > back && p->anon_after_trim >= 0)
            saved += p->last_released - back;
    }
    return (double)saved;
}

/* The least left of its members' own budgets of trims' time inside them (none: no sample). */
static double inside_least_s(const struct agent_cgroup *cg, int64_t now)
{
    double least = NAN;
    for (size_t j = 0; j < cg->nprocs; j++) {
        double left = agent_inside_left(&cg->procs[j], now) / 1e9;
        least = j == 0 || left < least ? left : least;
    }
    return least;
}

/* Its members with none left (not asked until it refills). */
static double inside_held(const struct agent_cgroup *cg, int64_t now)
{
    size_t held = 0;
    for (size_t j = 0; j < cg->nprocs; j++)
        held += agent_inside_left(&cg->procs[j], now) <= 0;
    return (double)held;
}

void agent_metrics(struct agent *a, FILE *f)
{
    for (size_t s = 0; s < sizeof series / sizeof series[0]; s++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", series[s].name, series[s].help, series[s].name,
                series[s].type);
        for (size_t i = 0; i < a->ncgroups; i++) {
            const struct agent_cgroup *cg = a->cgroups[i];
            const char *at = (const char *)cg + series[s].offset;
            long long v;
            if (series[s].is_signed) {
                int64_t x;
                memcpy(&x, at, sizeof x);
                if (x < 0)
                    continue; /* unknown: no sample */
                v = (long long)x;
            } else {
                uint64_t x;
                memcpy(&x, at, sizeof x);
                v = (long long)x;
            }
            fputs(series[s].name, f);
            put_labels(f, cg, NULL, NULL);
            if (series[s].unit)
                fprintf(f, " %.6f\n", (double)v / series[s].unit);
            else
                fprintf(f, " %lld\n", v);
        }
    }
    per_cgroup(a, f, "memtrim_agent_cgroup_inside_budget_left_seconds", "gauge", "The least "
               "left of its members' own budgets of trims' time inside them (a quarter of their "
               "time, holding 2 s).", inside_least_s, "%.3f");
    per_cgroup(a, f, "memtrim_agent_cgroup_inside_budget_held", "gauge", "Its members with no "
               "budget of time inside them left: not trimmed until it refills.", inside_held,
               "%.0f");
    fputs("# HELP memtrim_agent_released_bytes_total Bytes the agent's trims gave back, by cgroup.\n"
          "# TYPE memtrim_agent_released_bytes_total counter\n", f);
    for (size_t i = 0; i < a->ncgroups; i++) {
        fputs("memtrim_agent_released_bytes_total", f);
        put_labels(f, a->cgroups[i], NULL, NULL);
        fprintf(f, " %llu\n", (unsigned long long)a->cgroups[i]->released);
    }
    per_cgroup(a, f, "memtrim_agent_cgroup_heap_free_estimate_bytes", "gauge",
               "What a trim of the cgroup's processes may give back now (their heap's growth "
               "since their last trim).", heap_free_estimate, "%.0f");
    per_cgroup(a, f, "memtrim_agent_cgroup_saved_bytes", "gauge", "Released bytes not yet "
               "grown back, at most the sum of each process's last release.", saved_bytes,
               "%.0f");
    fputs("# HELP memtrim_agent_refusals_total Trims not made, by reason.\n"
          "# TYPE memtrim_agent_refusals_total counter\n", f);
    for (size_t i = 0; i < a->ncgroups; i++)
        for (int r = 1; r < AR_COUNT; r++) {
            uint64_t n = a->cgroups[i]->refusals[r];
            for (size_t j = 0; j < a->cgroups[i]->nprocs; j++)
                n += a->cgroups[i]->procs[j].reason == (enum agent_reason)r &&
                     a->cgroups[i]->procs[j].trims == 0 && r != AR_NO_THREAD && r != AR_TIMEOUT &&
                     r != AR_FAILED && r != AR_GIVES_NOTHING && r != AR_API_UNREACHABLE &&
                     r != AR_API_REFUSED && r != AR_NO_ROOM; /* learnt from an answer: counted
                                                              * then */
            if (!n)
                continue;
            fputs("memtrim_agent_refusals_total", f);
            put_labels(f, a->cgroups[i], "reason", agent_reason_name((enum agent_reason)r));
            fprintf(f, " %llu\n", (unsigned long long)n);
        }
    fprintf(f, "# HELP memtrim_agent_cgroups Cgroups with a memory limit the agent watches.\n"
               "# TYPE memtrim_agent_cgroups gauge\nmemtrim_agent_cgroups %zu\n", a->ncgroups);
    fprintf(f, "# HELP memtrim_agent_cgroups_unwatched Cgroups with a memory limit not watched "
               "at the last scan: past MaxCgroups.\n"
               "# TYPE memtrim_agent_cgroups_unwatched gauge\nmemtrim_agent_cgroups_unwatched %llu\n",
            (unsigned long long)a->stats.cgroups_unwatched);
    size_t procs = 0;
    for (size_t i = 0; i < a->ncgroups; i++)
        procs += a->cgroups[i]->nprocs;
    fprintf(f, "# HELP memtrim_agent_processes Processes in the watched cgroups.\n"
               "# TYPE memtrim_agent_processes gauge\nmemtrim_agent_processes %zu\n", procs);
    fprintf(f, "# HELP memtrim_agent_trims_total Trims made by the agent.\n"
               "# TYPE memtrim_agent_trims_total counter\nmemtrim_agent_trims_total %llu\n",
            (unsigned long long)a->stats.trims);
    fprintf(f, "# HELP memtrim_agent_trims_cpu_seconds_total CPU the trims' commands used.\n"
               "# TYPE memtrim_agent_trims_cpu_seconds_total counter\n"
               "memtrim_agent_trims_cpu_seconds_total %.6f\n", (double)a->stats.trims_cpu_ns / 1e9);
    fprintf(f, "# HELP memtrim_agent_scans_total Scans of the cgroup hierarchies.\n"
               "# TYPE memtrim_agent_scans_total counter\nmemtrim_agent_scans_total %llu\n",
            (unsigned long long)a->stats.scans);
    fprintf(f, "# HELP memtrim_agent_reaction_seconds From the kernel's wake-up to the start of "
               "the trim it led to.\n# TYPE memtrim_agent_reaction_seconds summary\n"
               "memtrim_agent_reaction_seconds_sum %.6f\nmemtrim_agent_reaction_seconds_count %llu\n",
            a->stats.reaction_ms_sum / 1e3, (unsigned long long)a->stats.reactions);
    fprintf(f, "# HELP memtrim_agent_reaction_seconds_max The longest of those.\n"
               "# TYPE memtrim_agent_reaction_seconds_max gauge\n"
               "memtrim_agent_reaction_seconds_max %.6f\n", a->stats.reaction_ms_max / 1e3);
    fprintf(f, "# HELP memtrim_agent_dry_run_picks_total Trims a dry run would have made.\n"
               "# TYPE memtrim_agent_dry_run_picks_total counter\n"
               "memtrim_agent_dry_run_picks_total %llu\n", (unsigned long long)a->stats.dry_run_picks);
}

static int get_metrics(const struct server_request *req, struct server_reply *rep)
{
    struct agent *a = req->app;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return server_reply_error(rep, 500, "internal", "out of memory");
    pthread_mutex_lock(&a->lock);
    agent_metrics(a, f);
    pthread_mutex_unlock(&a->lock);
    if (fclose(f) != 0) {
        free(buf);
        return server_reply_error(rep, 500, "internal", "out of memory");
    }
    return server_reply_text(rep, 200, "text/plain; version=0.0.4; charset=utf-8", buf, len);
}

/* Called with a->lock held. */
static cJSON *cgroups_json(struct agent *a)
{
    int64_t now = mt_mono_ns();
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "cgroups");
    cJSON_AddBoolToObject(root, "dry_run", a->cfg.dry_run);
    for (size_t i = 0; i < a->ncgroups; i++) {
        const struct agent_cgroup *cg = a->cgroups[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(list, c);
        cJSON_AddStringToObject(c, "cgroup", cg->path);
        cJSON_AddNumberToObject(c, "version", cg->version);
        cJSON_AddStringToObject(c, "kind", agent_kind_name(cg->kind.kind));
        if (cg->kind.runtime[0])
            cJSON_AddStringToObject(c, "runtime", cg->kind.runtime);
        if (cg->kind.qos[0])
            cJSON_AddStringToObject(c, "qos", cg->kind.qos);
        if (cg->kind.pod_uid[0])
            cJSON_AddStringToObject(c, "pod_uid", cg->kind.pod_uid);
        if (cg->kind.container_id[0])
            cJSON_AddStringToObject(c, "container_id", cg->kind.container_id);
        if (cg->kind.unit[0])
            cJSON_AddStringToObject(c, "unit", cg->kind.unit);
        cJSON_AddBoolToObject(c, "allowed", cg->allowed);
        cJSON_AddStringToObject(c, "woken_by", cg->version == 1 ? (cg->event_fd >= 0 ?
                                "cgroup-v1-threshold" : "poll") : cg->event_fd >= 0 ? "psi"
                                : cg->events_fd >= 0 ? "memory-events" : "poll");
        agent_json_bytes(c, "limit_bytes", cg->limit);
        agent_json_bytes(c, "high_bytes", cg->high);
        agent_json_bytes(c, "usage_bytes", cg->usage);
        agent_json_bytes(c, "working_set_bytes", cg->working_set);
        agent_json_bytes(c, "anon_bytes", cg->anon);
        cJSON_AddBoolToObject(c, "in_zone", cg->in_zone);
        cJSON_AddNumberToObject(c, "trims", (double)cg->trims);
        cJSON_AddNumberToObject(c, "released_bytes", (double)cg->released);
        cJSON_AddNumberToObject(c, "kills_avoided", (double)cg->kills_avoided);
        cJSON_AddNumberToObject(c, "oom_kills", (double)cg->oom_kills);
        cJSON *ps = cJSON_AddArrayToObject(c, "processes");
        for (size_t j = 0; j < cg->nprocs; j++) {
            const struct agent_proc *p = &cg->procs[j];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(ps, o);
            cJSON_AddNumberToObject(o, "pid", p->pid);
            cJSON_AddStringToObject(o, "program", p->comm);
            cJSON_AddStringToObject(o, "allocator", p->alloc);
            cJSON_AddBoolToObject(o, "memtrim_loaded", p->memtrim_loaded);
            agent_json_bytes(o, "anon_bytes", p->anon);
            cJSON_AddNumberToObject(o, "trims", (double)p->trims);
            cJSON_AddNumberToObject(o, "released_bytes", (double)p->released);
            cJSON_AddNumberToObject(o, "reads", (double)p->reads);
            cJSON_AddBoolToObject(o, "unreleasable", agent_reason_unreleasable(p->reason));
            inside_json(o, p, now);
            if (p->reason) {
                cJSON_AddStringToObject(o, "reason", agent_reason_name(p->reason));
                cJSON_AddStringToObject(o, "why", p->why);
            }
        }
    }
    return root;
}

char *agent_cgroups_json(struct agent *a)
{
    cJSON *j = cgroups_json(a);
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return s;
}

static int get_cgroups(const struct server_request *req, struct server_reply *rep)
{
    struct agent *a = req->app;
    pthread_mutex_lock(&a->lock);
    cJSON *j = cgroups_json(a);
    pthread_mutex_unlock(&a->lock);
    return server_reply_json(rep, 200, j);
}

static int get_healthz(const struct server_request *req, struct server_reply *rep)
{
    struct agent *a = req->app;
    cJSON *j = cJSON_CreateObject();
    pthread_mutex_lock(&a->lock);
    cJSON_AddStringToObject(j, "status", "ok");
    cJSON_AddStringToObject(j, "role", "agent");
    cJSON_AddNumberToObject(j, "pid", getpid());
    cJSON_AddNumberToObject(j, "uptime_seconds", (double)(mt_now_ms() - a->started_ms) / 1e3);
    cJSON_AddNumberToObject(j, "cgroups", (double)a->ncgroups);
    cJSON_AddNumberToObject(j, "scans", (double)a->stats.scans);
    cJSON_AddNumberToObject(j, "last_scan_ms", a->stats.scan_ms_last);
    pthread_mutex_unlock(&a->lock);
    return server_reply_json(rep, 200, j);
}

static int get_page(const struct server_request *req, struct server_reply *rep)
{
    (void)req;
    server_reply_static(rep, 200, "text/html; charset=utf-8", mt_asset_agent_page,
                        mt_asset_agent_page_len);
    return 0;
}

static int get_contract(const struct server_request *req, struct server_reply *rep)
{
    (void)req;
    server_reply_static(rep, 200, "application/yaml", mt_asset_agent_openapi,
                        mt_asset_agent_openapi_len);
    return 0;
}

static const char *const history_params[] = {"cgroup", "since", NULL};

static const struct server_route routes[] = {
    {"GET", "/metrics", SERVER_AUTH_READ, NULL, get_metrics},
    {"GET", "/agent/cgroups", SERVER_AUTH_READ, NULL, get_cgroups},
    {"GET", "/agent/history", SERVER_AUTH_READ, history_params, agent_history_get},
    {"GET", "/healthz", SERVER_AUTH_NONE, NULL, get_healthz},
    {"GET", "/", SERVER_AUTH_NONE, NULL, get_page},
    {"GET", "/openapi.yaml", SERVER_AUTH_NONE, NULL, get_contract},
};
static const struct server_routes table = {routes, sizeof routes / sizeof routes[0]};

int agent_http_start(struct agent *a, struct server **out, char **err)
{
    return server_start(&a->cfg.http, &table, NULL, a, out, err);
}
