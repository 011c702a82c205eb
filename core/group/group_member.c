/*
 * group_member.c - a group's member (group.h): its thread answers trim
 * requests (its own trim service), reports every 250 ms (50 ms in the zone,
 * and at once when a heap reading there shows a freed study), watches its
 * forked children waiting on a channel to it, and calls leader_gone when the
 * leader's end closes. Its trim sinks send every result to the leader.
 * Threads: "memtrim-group" (member_main); the sinks run on the trim's thread.
 * Locks: g->lock (group_int.h) for the waiting children; sends never block.
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
#include "proctree.h"
#include "snapshot.h"
#include "trim.h"

/* ==== the member =========================================================== */

/* To the leader, unless its channel was lost (closed by someone else: the number may be
 * the host's now). */
static void member_send(struct group *g, const struct group_msg *msg)
{
    if (atomic_load(&g->fd_lost))
        atomic_fetch_add(&g->send_dropped, 1);
    else if (chan_send(g, g->fd, g->fd_chan, msg) == -EBADF)
        atomic_store(&g->fd_lost, 1); /* its thread leaves at its next turn */
}

void group_member_trim_sink(struct group *g, const struct mt_trim_result *r)
{
    struct group_msg msg;
    if (!g)
        return;
    msg_init(&msg, MSG_TRIM_DONE);
    msg.u.trim = *r;
    member_send(g, &msg);
}

void group_member_refault_sink(struct group *g, const struct mt_refault *rf)
{
    struct group_msg msg;
    if (!g)
        return;
    msg_init(&msg, MSG_REFAULT);
    msg.u.refault = *rf;
    member_send(g, &msg);
}

static void member_trim(struct group *g, const struct group_msg *req)
{
    const struct group_deps *d = &g->d;
    struct group_msg ans;
    int trigger = req->arg == MT_TRIGGER_PRESSURE ? MT_TRIGGER_PRESSURE : MT_TRIGGER_MANUAL;
    uint64_t pad = req->pad >= 0 ? (uint64_t)req->pad : 0;
    msg_init(&ans, MSG_TRIM_ANSWER);
    ans.req_id = req->req_id;
    if (req->pad < 0) {
        struct mt_config cfg;
        uint64_t generation = 0;
        config_feed_read(&d->config, &cfg, &generation, 1);
        pad = (uint64_t)cfg.trim_pad_bytes;
    }
    /* The group's row of the trim service's rules (trim.c): under pressure the host's
     * suspend is obeyed (as by its own pressure path), a running trim shared; no cost
     * gate: the memory another member needs is not this one's to keep. */
    struct trim_ask ask = {.trigger = trigger, .pad = pad, .min_interval_ms = -1, .group = 1};
    ans.arg = trim_request(d->trims, d->cache, &ask, &ans.u.trim, NULL);
    member_send(g, &ans);
}

static void member_report(struct group *g, const struct mt_snapshot *s)
{
    struct group_msg msg;
    msg_init(&msg, MSG_REPORT);
    msg.u.snap = *s;
    snap_strip(&msg.u.snap);
    member_send(g, &msg);
}

/*
 * A member's forked children (FollowFork, no GroupName) wait on a channel to
 * it, which it adopts into its registry if it takes the group over (a daemon:
 * the master forked itself away from the process memtrim started in, then its
 * workers). Until then only their closing is watched (poll, no read: the
 * child's hello stays queued), so that a child that exits or execs leaves no
 * descriptor here. Under g->lock.
 */
static int pending_poll(struct group *g, struct pollfd *p)
{
    pthread_mutex_lock(&g->lock);
    int n = g->npending;
    for (int i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = g->pending[i], .events = 0}; /* POLLHUP comes anyway */
    pthread_mutex_unlock(&g->lock);
    return n;
}

static void pending_reap(struct group *g, const struct pollfd *p, int n)
{
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < n; i++) {
        if (!(p[i].revents & (POLLHUP | POLLERR | POLLNVAL)))
            continue;
        for (int k = 0; k < g->npending; k++)
            if (g->pending[k] == p[i].fd) {
                /* POLLNVAL, or a number that is no longer our channel: not closed */
                if (!(p[i].revents & POLLNVAL) && chan_ours(g->pending[k], g->pending_chan[k]))
                    close(g->pending[k]);
                g->pending[k] = g->pending[--g->npending];
                g->pending_chan[k] = g->pending_chan[g->npending];
                break;
            }
    }
    pthread_mutex_unlock(&g->lock);
}

/* The member's report pace: every period, and inside the zone a heap reading every
 * ZONE_WATCH_NS. */
struct member_pace {
    int64_t next_report, next_watch;
    uint64_t reported_free; /* the releasable estimate of the last report */
};

/* Report when due; inside the zone, watch the heap between reports. */
static void member_tick(struct group *g, int zone, int64_t period, int64_t now,
                        struct member_pace *pc)
{
    struct mt_snapshot s;
    if (now >= pc->next_report) {
        own_snapshot(&g->d, period, zone ? ZONE_BUDGET_FACTOR : 0, &s);
        member_report(g, &s);
        pc->reported_free = s.releasable_estimate_bytes;
        pc->next_report = now + period;
        pc->next_watch = now + ZONE_WATCH_NS;
    } else if (zone && now >= pc->next_watch) {
        /*
         * Inside the zone a worker that just freed a study holds it resident, and
         * the others under the limit need it within tens of milliseconds (a study
         * of 80 MB takes ~50 ms): read the heap every ZONE_WATCH_NS (on the zone's
         * budget, which may space the readings further) and report at once when
         * what it holds free grew by TrimMinReleasableBytes, so the leader can ask
         * it first. (Measured: at the zone's 50 ms reports, a worker's freed study
         * was seen 50-90 ms late, and the limit was reached meanwhile.)
         */
        uint64_t min = own_snapshot(&g->d, ZONE_WATCH_NS, WATCH_BUDGET_FACTOR, &s);
        if (s.releasable_estimate_bytes >= pc->reported_free + (min ? min : 1)) {
            member_report(g, &s);
            pc->next_report = now + period;
            pc->reported_free = s.releasable_estimate_bytes;
        } else if (s.releasable_estimate_bytes < pc->reported_free) {
            pc->reported_free = s.releasable_estimate_bytes; /* a rise from here counts */
        }
        pc->next_watch = now + ZONE_WATCH_NS;
    }
}

/* The leader's messages waiting on the channel; 1 when the channel closed or spoke
 * nonsense (the member leaves). */
static int member_read(struct group *g, struct member_pace *pc)
{
    struct group_msg msg;
    for (;;) {
        int rc = msg_recv(g->fd, &msg);
        if (rc == 0)
            return 0;
        if (rc < 0)
            return 1;
        if (msg.kind == MSG_TRIM_REQ) {
            member_trim(g, &msg);
            /* what was left, or freed meanwhile (a study trimmed mid-way through its
             * free), is told at the next watch: the leader's word is now "after the
             * trim", and a rise from the old report would come too late */
            pc->reported_free = 0;
        } else if (msg.kind == MSG_WELCOME)
            atomic_store(&g->index, msg.arg);
        else if (msg.kind == MSG_ZONE && atomic_exchange(g->d.zone, msg.arg != 0) !=
                                             (msg.arg != 0))
            pc->next_report = 0; /* report at the zone's pace from now */
    }
}

static void member_left(struct group *g)
{
    if (atomic_load(&g->fd_lost)) /* said at warning level when it was seen */
        mt_log(MT_LOG_INFO, "group", "pid %ld leaves the group: its channel to the leader "
                                     "was closed in this process, not by the leader",
               (long)getpid());
    else
        mt_log(MT_LOG_INFO, "group", "the group's leader closed its channel (it exited): "
                                     "pid %ld leaves the group", (long)getpid());
    if (g->leader_gone)
        g->leader_gone(g->gone_arg);
}

static void *member_main(void *arg)
{
    struct group *g = arg;
    struct group_msg msg;
    struct member_pace pc = {0, 0, 0};
    char exe[256];
    int gone = 0;

    msg_init(&msg, MSG_HELLO);
    proctree_self(exe, sizeof(exe), msg.u.program, sizeof(msg.u.program));
    member_send(g, &msg);
    while (!gone) {
        int zone = atomic_load(g->d.zone);
        int64_t period = zone ? REPORT_ZONE_NS : group_tick_ns(REPORT_NS), now = mt_mono_ns();
        member_tick(g, zone, period, now, &pc);
        int64_t until = zone && pc.next_watch < pc.next_report ? pc.next_watch : pc.next_report;
        int64_t wait_ms = (until - now) / MT_MS + 1;
        struct pollfd p[2 + GROUP_MAX_MEMBERS] = {{.fd = g->fd, .events = POLLIN},
                                                  {.fd = g->wake[0], .events = POLLIN}};
        nfds_t np = 2 + (nfds_t)pending_poll(g, p + 2);
        if (poll(p, np, (int)wait_ms) < 0 && errno != EINTR)
            break;
        if ((p[1].revents & POLLNVAL) || (p[1].revents && !pipe_ours(g, g->wake[0])))
            wake_lost(g);
        else if (p[1].revents)
            wake_drain(g->wake[0]);
        pending_reap(g, p + 2, (int)np - 2);
        if (group_stopping(g))
            break;
        if ((p[0].revents && ((p[0].revents & POLLNVAL) || !chan_ours(g->fd, g->fd_chan))) ||
            atomic_load(&g->fd_lost)) {
            atomic_store(&g->fd_lost, 1); /* its number is not ours to read or close */
            chan_lost_log(g->fd, (int)getpid(), "this member's channel to its leader");
            gone = 1;
        }
        if (p[0].revents && !gone)
            gone = member_read(g, &pc);
    }
    if (gone)
        member_left(g);
    return NULL;
}

int group_join(struct group **slot, const struct group_deps *d, int fd,
               void (*leader_gone)(void *), void *arg, char **err)
{
    struct group *g = group_alloc(d, GROUP_MEMBER);
    if (!g) {
        close(fd);
        *err = mt_strdup("group: out of memory or descriptors");
        return -ENOMEM;
    }
    g->fd = fd;
    g->fd_chan = chan_id(fd);
    g->leader_gone = leader_gone;
    g->gone_arg = arg;
    pthread_mutex_lock(d->config.lock);
    g->forks_wait = d->config.cfg->group_name[0] == '\0'; /* a named member's children join by name */
    pthread_mutex_unlock(d->config.lock);
    *slot = g;
    int rc = mt_thread_start(&g->thread, "memtrim-group", member_main, g);
    if (rc) {
        *slot = NULL;
        group_free(g);
        *err = mt_strdup("group: cannot start the member's thread");
        return -rc;
    }
    g->started = 1;
    return 0;
}
