/*
 * group_trim.c - what the API asks of a leader (group.h): its view of the
 * group, and manual trims of the group. A group trim is admitted by the trim
 * service's manual rate limit (trim_manual_admit: the one limiter, counted
 * from the end of the last group trim), one at a time; the HTTP thread trims
 * the leader (trim_request) and hands the members to the group thread, which
 * asks them one after the other (struct group_job): the reply never waits for
 * a member, so a stopped or hung one holds no HTTP thread. Each member's
 * result reaches the store (MSG_TRIM_DONE) as its trims always do.
 * Threads: group_trim and group_info on HTTP workers; job_step on the
 * leader's group thread. Locks: g->lock (group_int.h), never held across a
 * trim; sends under it never block.
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

static _Atomic int64_t test_answer_ns; /* group_test_answer_ns; 0 in every host */

void group_test_answer_ns(int64_t ns)
{
    atomic_store(&test_answer_ns, ns);
}

static int64_t answer_ns(void)
{
    return group_test_wait_ns(&test_answer_ns, MANUAL_ANSWER_NS);
}

static _Atomic int64_t test_stagger_ns; /* group_test_stagger_ns; 0 in every host */

void group_test_stagger_ns(int64_t ns)
{
    atomic_store(&test_stagger_ns, ns);
}

static int64_t stagger_ns(void)
{
    return group_test_wait_ns(&test_stagger_ns, MANUAL_STAGGER_NS);
}

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
    info->own_trims = g->own_trims;
    info->own_released_bytes = g->own_released;
    info->kernel_looks = g->kernel_looks;
    info->kernel_picks = g->kernel_picks;
    struct pressure_zone_view zv;
    pressure_zone_view(g->d.pressure, &zv); /* the engine's zone: the set's */
    info->usage_bytes = zv.usage;
    info->limit_bytes = zv.limit;
    info->zone = zv.set;
    info->usage_source = zv.usage_source;
    info->trim_running = g->job.active;
    info->rows_dropped = g->rows_dropped;
    info->flooded = g->flooded;
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
        o->own_trims = m->own_trims;
    }
    pthread_mutex_unlock(&g->lock);
    return 0;
}

uint64_t group_peak_bytes(struct group *g)
{
    uint64_t sum = 0;
    if (!g || g->role != GROUP_LEADER)
        return 0;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        const struct group_member *m = &g->m[i];
        if (!m->used || m->pid <= 0 || m->report_ns == 0)
            continue;
        uint64_t peak = m->snap.cheap.rss_peak_bytes;
        if (m->snap.cheap.rss_bytes > peak)
            peak = m->snap.cheap.rss_bytes;
        if (m->peak_rss > peak)
            peak = m->peak_rss;
        sat_add(&sum, peak);
    }
    pthread_mutex_unlock(&g->lock);
    return sum;
}

/* pid's answer to the group trim (id 0: the member left, whatever it was asked). */
void job_answer(struct group *g, int pid, uint64_t id)
{
    struct group_job *j = &g->job;
    for (int k = 0; j->active && k < j->next; k++)
        if (j->pids[k] == pid && (id == 0 || j->ids[k] == id))
            j->answered[k] = 1;
}

/* The group thread's turn: ask the next member when the last one answered or its
 * stagger passed; end the group trim once every member answered, the last one's
 * answer time passed, or its deadline. */
void job_step(struct group *g, int64_t now)
{
    struct group_job *j = &g->job;
    pthread_mutex_lock(&g->lock);
    if (!j->active || !j->ready) {
        pthread_mutex_unlock(&g->lock);
        return;
    }
    int last = j->next - 1;
    if (j->next < j->n && (last < 0 || j->answered[last] || now - j->asked_ns >= stagger_ns())) {
        int k = j->next++;
        struct group_member *m = member_by_pid(g, j->pids[k]);
        struct group_msg msg;
        j->ids[k] = ++g->next_req;
        j->asked_ns = now;
        msg_init(&msg, MSG_TRIM_REQ);
        msg.req_id = j->ids[k];
        msg.arg = MT_TRIGGER_MANUAL;
        msg.pad = j->pad;
        if (!m || m->self || chan_send(g, m->fd, m->chan, &msg) != 0)
            j->answered[k] = 1; /* gone, or its channel full: nothing to wait for */
    }
    int done = j->next == j->n;
    for (int k = 0; done && k < j->n; k++)
        done = j->answered[k];
    int end = done || (j->next == j->n && now - j->asked_ns >= answer_ns()) ||
              now >= j->deadline_ns || g->stop;
    if (end)
        memset(j, 0, sizeof(*j));
    pthread_mutex_unlock(&g->lock);
    if (end)
        trim_manual_done(g->d.trims); /* the rate limit counts from the group trim's end */
}

/* A member's entry in the reply: asked by the group thread, its result to come. */
static void member_requested(struct mt_member_trim *o, int pid)
{
    memset(o, 0, sizeof(*o));
    o->pid = pid;
    o->rc = -EINPROGRESS;
    snprintf(o->error, sizeof(o->error), "requested: its result goes to /memory/trims?pid=%d",
             pid);
}

/* Admit a group trim: one at a time (-EAGAIN while one runs, until its deadline
 * at most), then the manual rate limit. On 0 the job is reserved (not ready). */
static int job_admit(struct group *g, int pid, const struct mt_config *cfg, int *pids, int *np,
                     int64_t *retry_after_ms)
{
    int64_t interval = (int64_t)cfg->manual_trim_min_interval_ms, now = mt_mono_ns();
    pthread_mutex_lock(&g->lock);
    if (pid > 0 && !member_by_pid(g, pid)) {
        pthread_mutex_unlock(&g->lock);
        return -ENOENT;
    }
    if (g->job.active) {
        if (retry_after_ms)
            *retry_after_ms = (g->job.deadline_ns - now) / MT_MS + (interval > 0 ? interval : 0) + 1;
        pthread_mutex_unlock(&g->lock);
        trim_count_rate_limited(g->d.trims);
        return -EAGAIN;
    }
    /* The trim service's lock is never taken under the group's (its sink, run under the
     * trim service's lock, takes the group's: group_count_self): reserve the job, drop
     * the group's lock for the rate limit, take it again to fill the job in. */
    memset(&g->job, 0, sizeof(g->job));
    g->job.active = 1;
    g->job.deadline_ns = now + answer_ns() + MT_SEC; /* for a Retry-After meanwhile */
    pthread_mutex_unlock(&g->lock);
    if (trim_manual_admit(g->d.trims, interval, retry_after_ms) != 0) {
        pthread_mutex_lock(&g->lock);
        g->job.active = 0;
        pthread_mutex_unlock(&g->lock);
        return -EAGAIN;
    }
    pthread_mutex_lock(&g->lock);
    *np = 0;
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid > 0 && (pid <= 0 || g->m[i].pid == pid))
            pids[(*np)++] = g->m[i].pid; /* m[0], the leader, first */
    for (int i = 0; i < *np; i++)
        if (pids[i] != g->d.pid)
            g->job.pids[g->job.n++] = pids[i];
    g->job.deadline_ns = now + g->job.n * stagger_ns() + answer_ns() + MT_SEC;
    pthread_mutex_unlock(&g->lock);
    return 0;
}

int group_trim(struct group *g, int pid, int64_t pad, struct mt_member_trim *out, int cap,
               int *n, int64_t *retry_after_ms)
{
    int pids[GROUP_MAX_MEMBERS], np = 0;
    struct mt_config cfg;
    uint64_t generation = 0;
    *n = 0;
    if (!g || g->role != GROUP_LEADER)
        return -ENOTCONN;
    config_feed_read(&g->d.config, &cfg, &generation, 1);
    int rc = job_admit(g, pid, &cfg, pids, &np, retry_after_ms);
    if (rc)
        return rc;
    /* The leader first (the top of the reply, as a single process's), on this thread. */
    for (int i = 0; i < np && *n < cap; i++) {
        struct mt_member_trim *o = &out[(*n)++];
        if (pids[i] != g->d.pid) {
            member_requested(o, pids[i]);
            continue;
        }
        memset(o, 0, sizeof(*o));
        o->pid = pids[i];
        struct trim_ask ask = {.trigger = MT_TRIGGER_MANUAL, .min_interval_ms = -1, .group = 1,
                               .pad = pad >= 0 ? (uint64_t)pad : (uint64_t)cfg.trim_pad_bytes};
        o->rc = trim_request(g->d.trims, g->d.cache, &ask, &o->r, NULL);
        o->r.pid = pids[i];
        if (o->rc)
            snprintf(o->error, sizeof(o->error), "%s", strerror(-o->rc));
    }
    pthread_mutex_lock(&g->lock);
    g->job.pad = pad;
    /* The members' time runs from here, not from the admission: the leader's own trim
     * above may have waited on a running one or taken seconds on a large heap, and a
     * deadline already past would end the job before any member was asked. */
    g->job.deadline_ns = mt_mono_ns() + g->job.n * stagger_ns() + answer_ns() + MT_SEC;
    g->job.ready = 1; /* the group thread asks the members from here */
    pthread_mutex_unlock(&g->lock);
    group_wake(g);
    return 0;
}
