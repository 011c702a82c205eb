/*
 * group_trim.c - what the API asks of a leader (group.h): its view of the
 * group, and manual trims fanned out to every member one after the other
 * (staggered), each waited for on g->cond.
 * Threads: HTTP workers. Locks: g->lock (group_int.h), released while they wait.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "group_int.h"
#include "store.h"
#include "trim.h"

/* ---- the API's view ------------------------------------------------------------ */

int group_info(struct group *g, struct mt_group_info *info, struct mt_member *out, int cap,
               int *n)
{
    memset(info, 0, sizeof(*info));
    *n = 0;
    if (!g || g->role != GROUP_LEADER) {
        info->role = g ? g->role : GROUP_NONE;
        info->usage_source = "none";
        return -ENOTCONN;
    }
    int64_t now = mt_mono_ns();
    pthread_mutex_lock(&g->lock);
    info->role = g->role;
    info->joined = g->joined;
    info->left = g->left;
    info->refused = g->refused;
    info->pressure_trims = g->pressure_trims;
    info->pressure_released_bytes = g->pressure_released;
    info->usage_bytes = g->usage;
    info->limit_bytes = g->limit;
    info->zone = g->zone;
    info->usage_source = g->usage_source;
    snprintf(info->name, sizeof(info->name), "%s", g->name);
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        const struct group_member *m = &g->m[i];
        if (!m->used || m->pid <= 0)
            continue;
        info->members++;
        if (*n >= cap)
            continue;
        struct mt_member *o = &out[(*n)++];
        memset(o, 0, sizeof(*o));
        o->pid = m->pid;
        o->self = m->self;
        snprintf(o->program, sizeof(o->program), "%s", m->program);
        o->joined_ms = m->joined_ms;
        o->report_age_ms = m->report_ns ? (now - m->report_ns) / MT_MS : -1;
        o->snap = m->snap;
        o->trims = m->trims;
        o->released_bytes = m->released;
        o->pressure_trims = m->pressure_trims;
    }
    pthread_mutex_unlock(&g->lock);
    return 0;
}

/* Send a manual request to pid and wait for its answer (or REQUEST_TIMEOUT_NS). */
static void request_member(struct group *g, int pid, int64_t pad, struct mt_member_trim *out)
{
    struct group_request *q = NULL;
    struct group_msg msg;
    memset(out, 0, sizeof(*out));
    out->pid = pid;
    pthread_mutex_lock(&g->lock);
    struct group_member *m = member_by_pid(g, pid);
    for (int i = 0; m && i < GROUP_MAX_REQUESTS && !q; i++)
        if (!g->req[i].used)
            q = &g->req[i];
    if (!m || !q || g->stop) {
        out->rc = !m ? -ENOENT : -EBUSY;
        snprintf(out->error, sizeof(out->error), "%s",
                 !m ? "the member left the group" : "too many trim requests waiting");
        pthread_mutex_unlock(&g->lock);
        return;
    }
    memset(q, 0, sizeof(*q));
    q->used = 1;
    q->pid = pid;
    q->id = ++g->next_req;
    msg_init(&msg, MSG_TRIM_REQ);
    msg.req_id = q->id;
    msg.arg = MT_TRIGGER_MANUAL;
    msg.pad = pad;
    int rc = chan_send(g, m->fd, m->chan, &msg);
    struct timespec deadline;
    mt_deadline(&deadline, REQUEST_TIMEOUT_NS);
    while (rc == 0 && !q->done)
        if (pthread_cond_timedwait(&g->cond, &g->lock, &deadline) == ETIMEDOUT)
            break;
    if (rc != 0) {
        out->rc = rc;
        snprintf(out->error, sizeof(out->error), "the request could not be sent: %s",
                 strerror(-rc));
    } else if (!q->done) {
        out->rc = -ETIMEDOUT;
        snprintf(out->error, sizeof(out->error), "no answer within %d s",
                 (int)(REQUEST_TIMEOUT_NS / MT_SEC));
    } else {
        out->rc = q->rc;
        out->r = q->r;
        if (q->rc)
            snprintf(out->error, sizeof(out->error), "%s",
                     q->rc == -ECONNRESET ? "the member left the group" : strerror(-q->rc));
    }
    q->used = 0;
    pthread_mutex_unlock(&g->lock);
}

int group_trim(struct group *g, int pid, int64_t pad, struct mt_member_trim *out, int cap,
               int *n, int64_t *retry_after_ms)
{
    int pids[GROUP_MAX_MEMBERS], np = 0;
    struct mt_config cfg;
    *n = 0;
    if (!g || g->role != GROUP_LEADER)
        return -ENOTCONN;
    uint64_t generation = 0;
    config_feed_read(&g->d.config, &cfg, &generation, 1);
    int64_t now = mt_mono_ns(), interval = (int64_t)cfg.manual_trim_min_interval_ms * MT_MS;
    pthread_mutex_lock(&g->lock);
    if (pid > 0 && !member_by_pid(g, pid)) {
        pthread_mutex_unlock(&g->lock);
        return -ENOENT;
    }
    if (g->last_manual_ns && interval > 0 && now - g->last_manual_ns < interval) {
        if (retry_after_ms)
            *retry_after_ms = (interval - (now - g->last_manual_ns)) / MT_MS + 1;
        pthread_mutex_unlock(&g->lock);
        return -EAGAIN;
    }
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid > 0 && (pid <= 0 || g->m[i].pid == pid))
            pids[np++] = g->m[i].pid; /* m[0], the leader, first */
    g->last_manual_ns = now; /* a second request meanwhile is refused, not run beside it */
    pthread_mutex_unlock(&g->lock);
    /* One member after the other: staggered, so the node never has them all in malloc_trim. */
    for (int i = 0; i < np && *n < cap; i++) {
        struct mt_member_trim *o = &out[(*n)++];
        if (pids[i] == g->d.pid) {
            memset(o, 0, sizeof(*o));
            o->pid = pids[i];
            uint64_t p = pad >= 0 ? (uint64_t)pad : (uint64_t)cfg.trim_pad_bytes;
            o->rc = trim_run(g->d.trims, g->d.cache, MT_TRIGGER_MANUAL, p, -1, TRIM_WAIT_IF_BUSY,
                             &o->r, NULL);
            o->r.pid = pids[i];
            if (o->rc)
                snprintf(o->error, sizeof(o->error), "%s", strerror(-o->rc));
            else
                store_wake(g->d.store);
        } else {
            request_member(g, pids[i], pad, o);
        }
    }
    pthread_mutex_lock(&g->lock);
    g->last_manual_ns = mt_mono_ns();
    pthread_mutex_unlock(&g->lock);
    return 0;
}
