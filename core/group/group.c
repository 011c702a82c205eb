/*
 * group.c - a worker group's life (group.h): made for a leader or a member,
 * the instance's own snapshot as the group reads it, stopped. The leader is
 * group_leader.c, the member group_member.c.
 * Threads: group_stop runs on the instance's stopping thread; own_snapshot on
 * the group thread. Locks: g->lock (group_int.h).
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
#include "pressure.h"
#include "snapshot.h"

/* The registry's entry of pid, or NULL (under g->lock). */
struct group_member *member_by_pid(struct group *g, int pid)
{
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid == pid && pid > 0)
            return &g->m[i];
    return NULL;
}

/* A member's entry took a new heap reading: the RSS it saw then (locked). Read by the
 * leader's reports (group_leader.c) and its own look (group_leader.c's self_holds_nothing). */
void note_heap(struct group_member *m)
{
    if (m->snap.heap.timestamp_ms != m->heap_ms_seen) {
        m->heap_ms_seen = m->snap.heap.timestamp_ms;
        m->rss_at_heap = m->snap.cheap.rss_bytes;
    }
}

struct group *group_alloc(const struct group_deps *d, int role)
{
    struct group *g = mt_calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    if (wake_pipe_open(g->wake) != 0) {
        free(g);
        return NULL;
    }
    g->wake_id = pipe_id(g->wake[0]);
    g->d = *d;
    g->role = role;
    g->fd = -1;
    atomic_init(&g->fd_lost, 0);
    g->fork_fds[0] = g->fork_fds[1] = -1;
    g->listen_fd = -1;
    mt_log_limit_init(&g->accept_log, 10 * MT_SEC, 5);
    pressure_zone_forget(d->pressure); /* the set's zone anew (the engine's) */
    pthread_mutex_init(&g->lock, NULL);
    atomic_init(&g->send_dropped, 0);
    return g;
}

void group_free(struct group *g)
{
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].fd >= 0)
            chan_close(g->m[i].fd, g->m[i].chan);
    if (g->fd >= 0 && !atomic_load(&g->fd_lost))
        chan_close(g->fd, g->fd_chan);
    for (int i = 0; i < g->npending; i++)
        chan_close(g->pending[i], g->pending_chan[i]);
    wake_close(g);
    pthread_mutex_destroy(&g->lock);
    pthread_mutex_destroy(&g->accept_log.lock);
    free(g);
}

int group_stopping(struct group *g)
{
    pthread_mutex_lock(&g->lock);
    int stop = g->stop;
    pthread_mutex_unlock(&g->lock);
    return stop;
}

/*
 * The instance's own snapshot. Outside the zone (factor 0) it never forces a
 * heap probe (the housekeeper decides those); inside the group's zone a
 * member's report asks for a heap reading as old as its period at most, on
 * `factor` times the budget (the cache keeps it), since the group decides on
 * that estimate.
 */
uint64_t own_snapshot(const struct group_deps *d, int64_t cheap_age_ns, double factor,
                      struct mt_snapshot *out)
{
    struct snapshot_want want = {.stale_ok = 1,
                                 .heap_max_age_ns = factor > 0 ? cheap_age_ns : INT64_MAX};
    pthread_mutex_lock(d->config.lock);
    uint64_t min_releasable = (uint64_t)d->config.cfg->trim_min_releasable_bytes;
    want.cheap_max_age_ns = cheap_age_ns;
    want.budget_percent = d->config.cfg->probe_budget_percent * (factor > 0 ? factor : 1.0);
    want.memory_limit_cfg = d->config.cfg->memory_limit_bytes;
    pthread_mutex_unlock(d->config.lock);
    snapshot_get(d->cache, &want, out);
    return min_releasable; /* TrimMinReleasableBytes, read with the rest */
}

void group_stop(struct group **slot)
{
    struct group *g = *slot;
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    g->stop = 1;
    pthread_mutex_unlock(&g->lock);
    if (g->role == GROUP_LEADER && g->started)
        pressure_kernel_listen(g->d.pressure, NULL, NULL); /* not called again from here on */
    group_wake(g);
    if (g->started)
        pthread_join(g->thread, NULL);
    atomic_store(g->d.record_pid, 0);
    pressure_zone_forget(g->d.pressure);
    *slot = NULL;
    group_free(g); /* closes the channels: every member sees EOF */
}

void group_count_self(struct group *g, const struct mt_trim_result *r)
{
    if (!g || g->role != GROUP_LEADER)
        return;
    pthread_mutex_lock(&g->lock);
    sat_add(&g->m[0].trims, 1);
    g->m[0].rss_after = r->rss_after_bytes;
    if (r->released_bytes > 0)
        sat_add(&g->m[0].released, (uint64_t)r->released_bytes);
    pthread_mutex_unlock(&g->lock);
}

int group_join_index(struct group *g)
{
    return g && g->role == GROUP_MEMBER ? atomic_load(&g->index) : 0;
}

int group_role(const struct group *g)
{
    return g ? g->role : GROUP_NONE;
}
