/*
 * group.c - what a worker group adds to the replies (core/group/,
 * docs/groups.md): the "group" object of /memory/stats (totals and each
 * member), the per-member results of /memory/trim, and the `pid` parameter
 * of /memory/trim, /memory/trims and /memory/series. A process in no group
 * gets none of it: its replies stay as they were. Runs on HTTP worker
 * threads; the core takes its own locks.
 */
#include "mt_alloc.h"
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

int api_pid_param(const struct server_request *req, int *pid, struct server_reply *rep)
{
    char why[QUERY_WHY_SIZE];
    int64_t v = 0;
    *pid = 0;
    if (query_int(req->query, "pid", 1, 0x7fffffff, &v, why, sizeof(why)) < 0)
        return server_reply_bad_param(rep, why);
    *pid = (int)v;
    return 0;
}

static void api_group_member(cJSON *list, const struct mt_member *m, int *failed)
{
    const struct mt_snapshot *s = &m->snap;
    int heap = s->heap.timestamp_ms != 0;
    cJSON *o = cJSON_CreateObject();
    api_json_int(o, "pid", m->pid, failed);
    api_json_str(o, "program", m->program, failed);
    api_json_bool(o, "serves", m->self, failed);
    api_json_int(o, "joined_ms", m->joined_ms, failed);
    api_json_int_or_null(o, "report_age_ms", m->report_age_ms, m->report_age_ms >= 0, failed);
    api_json_u64(o, "rss_bytes", s->cheap.rss_bytes, failed);
    api_json_u64(o, "rss_anon_bytes", s->cheap.rss_anon_bytes, failed);
    api_json_int_or_null(o, "heap_in_use_bytes", (int64_t)s->heap.heap_in_use_bytes,
                         heap && (s->heap.known & MT_HEAP_HAS_IN_USE), failed);
    api_json_int_or_null(o, "heap_free_bytes", (int64_t)s->heap.heap_free_bytes,
                         heap && (s->heap.known & MT_HEAP_HAS_FREE), failed);
    api_json_int_or_null(o, "releasable_estimate_bytes", (int64_t)s->releasable_estimate_bytes,
                         heap, failed);
    api_json_int_or_null(o, "heap_age_ms", s->heap_age_ms, heap, failed);
    api_json_u64(o, "rss_without_memtrim_bytes", s->saved.rss_without_memtrim_bytes, failed);
    api_json_u64(o, "saved_bytes", s->saved.saved_bytes, failed);
    api_json_num(o, "saved_byte_seconds_total", s->saved.saved_byte_seconds_total, failed);
    api_json_u64(o, "trims", m->trims, failed);
    api_json_u64(o, "released_bytes", m->released_bytes, failed);
    api_json_u64(o, "pressure_trims", m->pressure_trims, failed);
    api_json_u64(o, "own_trims", m->own_trims, failed);
    api_json_item(list, NULL, o, failed);
}

/* The "group" object: totals over the members and each member; NULL in no group. */
cJSON *api_group_stats(struct memtrim *mt, int *failed)
{
    struct mt_group_info gi;
    struct mt_member *m = mt_malloc(MT_GROUP_MAX * sizeof(*m));
    int n = 0;
    if (!m) {
        *failed = 1;
        return NULL;
    }
    if (mt_group_info(mt, &gi, m, MT_GROUP_MAX, &n) != 0) {
        free(m);
        return NULL;
    }
    uint64_t rss = 0, anon = 0, heap_free = 0, releasable = 0, saved = 0;
    double saved_s = 0;
    cJSON *g = cJSON_CreateObject(), *list = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        rss += m[i].snap.cheap.rss_bytes; /* each bounded (group_msg_check): no overflow */
        anon += m[i].snap.cheap.rss_anon_bytes;
        saved += m[i].snap.saved.saved_bytes;
        saved_s += m[i].snap.saved.saved_byte_seconds_total;
        if (m[i].snap.heap.timestamp_ms) {
            heap_free += m[i].snap.heap.heap_free_bytes;
            releasable += m[i].snap.releasable_estimate_bytes;
        }
        api_group_member(list, &m[i], failed);
    }
    if (gi.name[0])
        api_json_str(g, "name", gi.name, failed);
    else
        api_json_item(g, "name", cJSON_CreateNull(), failed);
    api_json_int(g, "member_count", gi.members, failed);
    api_json_u64(g, "rss_bytes", rss, failed);
    api_json_u64(g, "rss_anon_bytes", anon, failed);
    api_json_u64(g, "heap_free_bytes", heap_free, failed);
    api_json_u64(g, "releasable_estimate_bytes", releasable, failed);
    /* what memtrim saved the group: the members' sums (docs/policy.md) */
    api_json_u64(g, "rss_without_memtrim_bytes", rss + saved, failed);
    api_json_u64(g, "saved_bytes", saved, failed);
    api_json_num(g, "saved_byte_seconds_total", saved_s, failed);
    api_json_int_or_null(g, "usage_bytes", gi.usage_bytes, gi.usage_bytes >= 0, failed);
    api_json_str(g, "usage_source", gi.usage_source, failed);
    api_json_int_or_null(g, "limit_bytes", gi.limit_bytes, gi.limit_bytes > 0, failed);
    api_json_bool(g, "pressure_zone", gi.zone, failed);
    api_json_bool(g, "trim_running", gi.trim_running, failed);
    api_json_u64(g, "pressure_trims", gi.pressure_trims, failed);
    api_json_u64(g, "pressure_released_bytes", gi.pressure_released_bytes, failed);
    api_json_u64(g, "own_trims", gi.own_trims, failed);
    api_json_u64(g, "own_released_bytes", gi.own_released_bytes, failed);
    api_json_u64(g, "joined", gi.joined, failed);
    api_json_u64(g, "left", gi.left, failed);
    api_json_u64(g, "refused", gi.refused, failed);
    api_json_u64(g, "member_rows_dropped", gi.rows_dropped, failed);
    api_json_u64(g, "members_flooding", gi.flooded, failed);
    api_json_item(g, "members", list, failed);
    free(m);
    return g;
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

/*
 * POST /memory/trim in a group: the serving process's trim at once, every other
 * member (or ?pid='s, 202) asked by the group thread one after the other: the
 * reply never waits for another process (each one's result reaches the store, as
 * /memory/trims?pid= shows).
 * 1 when it replied, 0 when the instance is in no group (the caller trims as
 * a single process does).
 */
int api_group_trim(const struct server_request *req, struct server_reply *rep, int pid,
                   int64_t pad, int *rc_out,
                   int (*rate_limited)(const struct server_request *, struct server_reply *,
                                       int64_t))
{
    struct mt_member_trim *res = mt_malloc(MT_GROUP_MAX * sizeof(*res));
    int n = 0, failed = 0;
    int64_t retry = 0;
    if (!res) {
        *rc_out = server_reply_error(rep, 500, "out_of_memory", "could not trim the group");
        return 1;
    }
    int rc = mt_group_trim(req->app, pid, pad, res, MT_GROUP_MAX, &n, &retry);
    if (rc == -ENOTCONN) {
        free(res);
        return 0;
    }
    if (rc == -EAGAIN)
        *rc_out = rate_limited(req, rep, retry);
    else if (rc == -ENOENT)
        *rc_out = server_reply_error(rep, 404, "no_such_member",
                                     "no member of the group has pid %d", pid);
    else if (rc != 0 || n == 0)
        *rc_out = server_reply_error(rep, 500, "trim_failed", "the group trim failed: %s",
                                     strerror(rc ? -rc : EIO));
    if (rc != 0 || n == 0) {
        free(res);
        return 1;
    }
    if (pid > 0) { /* one member: its result as a single process's, with its pid */
        if (res[0].rc == -EINPROGRESS) /* another process: asked, its result to come */
            *rc_out = server_reply_json(rep, 202, api_member_trim_json(&res[0], &failed));
        else if (res[0].rc != 0)
            *rc_out = server_reply_error(rep, 503, "member_trim_failed",
                                         "member %d did not trim: %s", pid, res[0].error);
        else
            *rc_out = server_reply_json(rep, 200, api_member_trim_json(&res[0], &failed));
        free(res);
        return 1;
    }
    /* Every member: the serving process's result at the top (as a single process
     * replies), and each member's under "group". */
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
    *rc_out = server_reply_json(rep, 200, api_json_done(root, failed));
    free(res);
    return 1;
}
