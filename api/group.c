/*
 * group.c - what a worker group adds to the replies (core/group/,
 * docs/groups.md): the "group" object of /memory/stats (totals and each
 * member) and the `pid` parameter of /memory/trim, /memory/trims and
 * /memory/series (trim.c renders the per-member results of /memory/trim). A process in no group
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

int64_t api_pid_self_since(const struct server_request *req, int pid, int *alone)
{
    struct mt_health h;
    struct mt_group_info gi;
    int n = 0;
    *alone = 0;
    if (pid <= 0 || pid != mt_pid())
        return 0;
    mt_health_get(req->app, &h);
    *alone = mt_group_info(req->app, &gi, NULL, 0, &n) == -ENOTCONN;
    return h.started_ms > 0 ? h.started_ms : 1;
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
