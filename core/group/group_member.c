/*
 * group_member.c - a group's member (group.h): its thread answers trim
 * requests (its own trim service), reports every 250 ms (50 ms in the zone,
 * and at once when a heap reading there shows a freed study), trims that
 * study itself at once when its leader granted it (the zone, in its own slot
 * of the leader's stagger, at once at the group's line or once a slot it waited
 * for passed: member_act, member_window), watches its forked children waiting
 * on a channel to it, and calls leader_gone when the leader's end closes. Its
 * trim sinks send every result to the leader.
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

#include "control.h"
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
 * ZONE_WATCH_NS; and its leader's grant to trim on its own (ZONE_ACT). */
struct member_pace {
    int64_t next_report, next_watch;
    uint64_t reported_free; /* the releasable estimate of the last report */
    int act;                /* the grant holds (until grant.until_ns) */
    int act_line;           /* ...and the group is at its line (ZONE_LINE) */
    struct group_grant grant;
    int64_t act_at;         /* a trim of its own waits for its slot, which opens then (0 none) */
    int64_t act_seen_ns;    /* ...for what it saw freed then (the trim's reaction time) */
    uint64_t act_base;      /* what it held free after its last trim: it acts on growth above */
    int act_useful;         /* ...which released TrimMinReleasableBytes (act_base 0 then) */
    uint64_t trim_gen;      /* the trim service's generation when it last looked (trim_last) */
    int64_t trimmed_ms;     /* ...a heap reading older than this predates the last trim */
};

/* A grant from the leader, checked as data: a slot in range, a sane width and lease, an
 * epoch a monotonic clock reads (>= 0: pressure_slot_window's now - epoch cannot overflow). */
static int grant_ok(const struct group_grant *gr, int64_t now)
{
    return gr->slots >= 1 && gr->slots <= GROUP_MAX_MEMBERS && gr->slot >= 0 &&
           gr->slot < gr->slots && gr->width_ns >= MT_MS && gr->width_ns <= MT_SEC &&
           gr->epoch_ns >= 0 && gr->epoch_ns <= now + MT_SEC &&
           gr->until_ns <= now + 2 * ACT_LEASE_NS;
}

/*
 * The window a trim of its own may start in (trim_ask.open_ns, close_ns): the stagger's
 * (core/pressure/stagger.c, pressure_slot_take): its slot, the one it is in or the
 * next. But at the group's line (the leader's word, ZONE_LINE, or its own reading of the
 * cgroup's usage, taken with the heap's, at the grant's line_bytes or more) now, until the
 * lease ends. And a member that waited for its slot (act_at) and ran again only after it
 * closed (a loaded node: its thread was not scheduled in time, or was preempted between
 * the window and the trim) takes its turn now: else it waited a whole rotation for the
 * next one, and under the same load could miss that one too.
 */
static void member_window(const struct member_pace *pc, const struct mt_snapshot *s,
                          int64_t now, int64_t *open, int64_t *close)
{
    const struct group_grant *gr = &pc->grant;
    struct pressure_slots sl = {.epoch_ns = gr->epoch_ns, .width_ns = gr->width_ns,
                                .until_ns = gr->until_ns, .slot = gr->slot, .slots = gr->slots};
    int at_line = pc->act_line || (gr->line_bytes > 0 && s->cheap.cgroup_usage_bytes >= 0 &&
                                   s->cheap.cgroup_usage_bytes >= gr->line_bytes);
    pressure_slot_take(&sl, now, at_line, pc->act_at, mt_control("suite-moved-slot-missed"),
                       open, close);
}

/*
 * Inside the zone, with its leader's grant (ZONE_ACT): what it freed (s, a heap reading
 * just taken) goes back now, without the leader's round trip, when it holds the grant's
 * threshold and TrimMinReleasableBytes (min) more than after its last trim; in its own
 * slot only (it waits for the slot's start: act_at), unless at the line or its slot was
 * missed (member_window). By the member's row of the trim service's rules (trim.c:
 * suspend, a running trim shared, the window). 1 when it trimmed.
 */
static int member_act(struct group *g, struct member_pace *pc, const struct mt_snapshot *s,
                      uint64_t min, int64_t now)
{
    uint64_t held = s->releasable_estimate_bytes;
    struct mt_trim_result last;
    if (trim_last(g->d.trims, &pc->trim_gen, &last)) /* its after-reading is in the cache */
        pc->trimmed_ms = last.start_ms + (last.heap_skipped ? 1 : 0);
    if (held < pc->act_base)
        pc->act_base = held; /* a rise from here counts */
    /* A heap reading from before the last trim (one whose own readings the probe budget
     * skipped: the reading may be of the same ms) says what that trim took: the next
     * one will say what is left. */
    if (!pc->act || now >= pc->grant.until_ns || s->heap.timestamp_ms < pc->trimmed_ms ||
        held < pc->grant.threshold ||
        held < pc->act_base + (min ? min : 1)) {
        pc->act_at = 0;
        return 0;
    }
    if (!pc->act_at)
        pc->act_seen_ns = now;
    struct trim_ask ask = {.trigger = MT_TRIGGER_PRESSURE, .min_interval_ms = -1,
                           .crossing_ns = pc->act_seen_ns, .group = TRIM_ASK_MEMBER};
    member_window(pc, s, now, &ask.open_ns, &ask.close_ns);
    if (ask.open_ns > now) {
        pc->act_at = ask.open_ns; /* its slot: the loop wakes then */
        return 0;
    }
    pc->act_at = 0;
    pthread_mutex_lock(g->d.config.lock);
    ask.pad = (uint64_t)g->d.config.cfg->trim_pad_bytes;
    pthread_mutex_unlock(g->d.config.lock);
    struct group_msg msg;
    msg_init(&msg, MSG_TRIM_OWN);
    int rc = trim_request(g->d.trims, g->d.cache, &ask, &msg.u.trim, NULL);
    if (rc == -EAGAIN && mt_mono_ns() >= ask.close_ns && ask.close_ns < pc->grant.until_ns)
        pc->act_at = ask.open_ns; /* its slot closed before the trim began: its turn, next */
    if (rc != 0)
        return 0;
    if (!msg.u.trim.coalesced)
        member_send(g, &msg);
    /* Released what it saw (or some of it: a study read mid-way through its free): what
     * the next reading holds may be the rest of it. Released nothing worth it: what is
     * left is pinned (no trim gives it back), and only a rise above it counts. */
    pc->act_useful = msg.u.trim.released_bytes >= (int64_t)(min ? min : 1);
    return 1;
}

/* Report when due; inside the zone, watch the heap between reports. A trim waiting for its
 * slot (act_at) comes first: a report due at the same wake (a thread scheduled late) would
 * have taken the turn, and the loop then waited for a slot already past (below). */
static void member_tick(struct group *g, int zone, int64_t period, int64_t now,
                        struct member_pace *pc)
{
    struct mt_snapshot s;
    int act_due = zone && pc->act_at && now >= pc->act_at;
    if (now >= pc->next_report && !act_due) {
        own_snapshot(&g->d, period, zone ? ZONE_BUDGET_FACTOR : 0, &s);
        member_report(g, &s);
        pc->reported_free = s.releasable_estimate_bytes;
        pc->next_report = now + period;
        pc->next_watch = now + ZONE_WATCH_NS;
    } else if (zone && (now >= pc->next_watch || act_due)) {
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
        if (member_act(g, pc, &s, min, now)) {
            own_snapshot(&g->d, ZONE_WATCH_NS, WATCH_BUDGET_FACTOR, &s); /* the trim's after */
            member_report(g, &s);
            pc->next_report = now + period;
            pc->reported_free = s.releasable_estimate_bytes;
            pc->act_base = pc->act_useful ? 0 : s.releasable_estimate_bytes;
        } else if (s.releasable_estimate_bytes >= pc->reported_free + (min ? min : 1)) {
            member_report(g, &s);
            pc->next_report = now + period;
            pc->reported_free = s.releasable_estimate_bytes;
        } else if (s.releasable_estimate_bytes < pc->reported_free) {
            pc->reported_free = s.releasable_estimate_bytes; /* a rise from here counts */
        }
        pc->next_watch = now + ZONE_WATCH_NS;
    }
}

/* The leader's word on the zone: its pace (ZONE_ON), and a grant to act alone (ZONE_ACT). */
static void member_zone(struct group *g, struct member_pace *pc, const struct group_msg *msg)
{
    int zone = (msg->arg & (ZONE_ON | ZONE_ACT)) != 0;
    if (pressure_zone_heard(g->d.pressure, zone) != zone)
        pc->next_report = 0; /* report at the zone's pace from now */
    pc->act = (msg->arg & ZONE_ACT) && grant_ok(&msg->u.grant, mt_mono_ns());
    pc->act_line = pc->act && (msg->arg & ZONE_LINE);
    if (pc->act)
        pc->grant = msg->u.grant;
    else
        pc->act_at = 0;
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
        else if (msg.kind == MSG_ZONE)
            member_zone(g, pc, &msg);
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
    struct member_pace pc;
    memset(&pc, 0, sizeof(pc));
    char exe[256];
    int gone = 0;

    msg_init(&msg, MSG_HELLO);
    proctree_self(exe, sizeof(exe), msg.u.program, sizeof(msg.u.program));
    member_send(g, &msg);
    while (!gone) {
        int zone = pressure_set_zone(g->d.pressure);
        int64_t period = zone ? REPORT_ZONE_NS : group_tick_ns(REPORT_NS), now = mt_mono_ns();
        member_tick(g, zone, period, now, &pc);
        int64_t until = zone && pc.next_watch < pc.next_report ? pc.next_watch : pc.next_report;
        if (zone && pc.act_at && pc.act_at < until)
            until = pc.act_at;
        /* a time already past (a slot missed while it reported): no wait. A negative
         * timeout is poll's "for ever": the member slept until its leader's next word. */
        int64_t wait_ms = until > now ? (until - now) / MT_MS + 1 : 0;
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
