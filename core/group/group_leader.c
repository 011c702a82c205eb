/*
 * group_leader.c - a group's leader (group.h): the registry, each member's
 * messages (checked by group_msg_check first), a named group's accept, and
 * the leader's thread: it polls a wake pipe, every member's channel and, in
 * a named group, the group's socket (it accepts this uid or root, SO_PEERCRED,
 * in its pid namespace; the socket is its caller's, named.c); every tick (100
 * ms, 10 ms inside the zone) it refreshes its own entry, runs the group's
 * pressure decision and hands samples and the members' trims to the store's queue.
 * The group's pressure: each member's record as a candidate of the engine's look at
 * the set (core/pressure/zone.h: the cgroup's usage, or the members' RSS summed, into
 * the group's zone; the decision, decision.c), the zone told to the members when it
 * starts and ends (they probe their heap at the zone's pace) and, inside it or ahead of
 * it, each granted a slot of the stagger in which it trims what it freed on its own
 * (GroupTrimSlotMs); the member the decision picks asked to trim, one request in flight
 * (staggered); the group's totals stored as one sample.
 * Threads: "memtrim-group" (leader_main); group_lead on the instance's.
 * Locks: g->lock (group_int.h) guards members, requests, counters; sends are
 * non-blocking and may happen under it; trims, store pushes, snapshot reads
 * and log lines happen outside it.
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
#include "named.h"
#include "pressure.h"
#include "probe.h"
#include "proctree.h"
#include "snapshot.h"
#include "store.h"
#include "trim.h"
#include "zone.h"

static _Atomic int64_t test_accept_pause_ns; /* group_test_accept_pause_ns; 0 in every host */

void group_test_accept_pause_ns(int64_t ns)
{
    atomic_store(&test_accept_pause_ns, ns);
}

static int64_t accept_pause_ns(void)
{
    return group_test_wait_ns(&test_accept_pause_ns, ACCEPT_PAUSE_NS);
}

static _Atomic int64_t test_tick_ns; /* group_test_tick_ns; 0 in every host */

void group_test_tick_ns(int64_t ns)
{
    atomic_store(&test_tick_ns, ns);
}

int64_t group_tick_ns(int64_t product_ns)
{
    return group_test_wait_ns(&test_tick_ns, product_ns);
}

/* ==== the leader ============================================================ */

/* The channel closed (the member exited, was killed, or exec'd): forget it at once. */
static void member_remove(struct group *g, struct group_member *m)
{
    int pid;
    pthread_mutex_lock(&g->lock);
    pid = m->pid;
    chan_close(m->fd, m->chan); /* not when the number is no longer this channel */
    if (pid > 0) {
        sat_add(&g->left, 1);
        g->members_gen++;
        job_answer(g, pid, 0); /* a group trim does not wait for it any more */
    }
    memset(m, 0, sizeof(*m));
    m->fd = -1;
    pthread_mutex_unlock(&g->lock);
    if (pid > 0)
        mt_log(MT_LOG_DEBUG, "group", "member pid %d left the group", pid);
}

static void leader_store_trim(struct group *g, struct group_member *m, struct mt_trim_result *t)
{
    t->pid = m->pid;
    pthread_mutex_lock(&g->lock);
    sat_add(&m->trims, 1);
    m->rss_after = t->rss_after_bytes;
    if (t->released_bytes > 0)
        sat_add(&m->released, (uint64_t)t->released_bytes);
    pthread_mutex_unlock(&g->lock);
    store_push_trim(g->d.store, t);
    store_wake(g->d.store);
}

/* m's RSS was rss at now: its peak over about PEAK_NS (what it would hold, had no trim
 * taken it since: group_ahead's in->kept). Locked. */
void note_peak(struct group_member *m, uint64_t rss, int64_t now)
{
    if (rss >= m->peak_rss || now - m->peak_ns > PEAK_NS) {
        m->peak_rss = rss;
        m->peak_ns = now;
    }
}

static void leader_answer(struct group *g, struct group_member *m, const struct group_msg *msg)
{
    pthread_mutex_lock(&g->lock);
    job_answer(g, m->pid, msg->req_id);
    if (m->press_req && msg->req_id == m->press_req) {
        m->press_req = 0;
        if (msg->arg == 0) {
            m->rss_after = msg->u.trim.rss_after_bytes;
            note_peak(m, msg->u.trim.rss_before_bytes, mt_mono_ns());
            sat_add(&m->pressure_trims, 1);
            sat_add(&g->pressure_trims, 1);
            if (msg->u.trim.released_bytes > 0)
                sat_add(&g->pressure_released, (uint64_t)msg->u.trim.released_bytes);
        }
    }
    pthread_mutex_unlock(&g->lock);
}

/* A trim m ran on its own inside the zone (its leader's grant): a pressure trim of the
 * group's, as one the leader asked for (the decision counts from it). */
static void leader_own(struct group *g, struct group_member *m, const struct mt_trim_result *t,
                       int64_t now)
{
    pthread_mutex_lock(&g->lock);
    m->last_trim_ns = now;
    m->last_trim_ms = mt_now_ms();
    m->rss_after = t->rss_after_bytes;
    note_peak(m, t->rss_before_bytes, now);
    pressure_set_trimmed(g->d.pressure); /* growth counts again from the low after this trim */
    sat_add(&m->pressure_trims, 1);
    sat_add(&m->own_trims, 1);
    sat_add(&g->pressure_trims, 1);
    sat_add(&g->own_trims, 1);
    if (t->released_bytes > 0) {
        sat_add(&g->pressure_released, (uint64_t)t->released_bytes);
        sat_add(&g->own_released, (uint64_t)t->released_bytes);
    }
    pthread_mutex_unlock(&g->lock);
}

static void leader_sample(struct group *g, struct group_member *m, const struct mt_snapshot *s,
                          int64_t now, double interval_s)
{
    if (interval_s <= 0 || !store_enabled(g->d.store) ||
        now - m->last_sample_ns < (int64_t)(interval_s * MT_SEC))
        return;
    m->last_sample_ns = now;
    struct mt_snapshot copy = *s;
    copy.pid = m->pid;
    store_push_sample(g->d.store, &copy);
}

/* Whether m's messages of the last second passed MEMBER_MSGS_PER_SEC (it must go). */
static int member_floods(struct group *g, struct group_member *m, int64_t now)
{
    if (now - m->msgs_sec_ns >= MT_SEC) {
        m->msgs_sec_ns = now;
        m->msgs = 0;
    }
    if (++m->msgs <= MEMBER_MSGS_PER_SEC)
        return 0;
    pthread_mutex_lock(&g->lock);
    sat_add(&g->flooded, 1);
    pthread_mutex_unlock(&g->lock);
    mt_log_limited(&g->accept_log, MT_LOG_WARNING, "group",
                   "pid %d sent more than %d messages in a second: dropped from the group",
                   m->pid, MEMBER_MSGS_PER_SEC);
    return 1;
}

/* One of m's trims or re-fault figures may reach the store (its bucket), or it is counted
 * as dropped. */
static int member_row_allowed(struct group *g, struct group_member *m, int64_t now)
{
    double add = (double)(now - m->rows_ns) / MT_SEC * MEMBER_ROWS_PER_SEC;
    m->rows_ns = now;
    m->rows_tokens = m->rows_tokens + add > MEMBER_ROWS_BURST ? MEMBER_ROWS_BURST
                                                              : m->rows_tokens + add;
    if (m->rows_tokens >= 1) {
        m->rows_tokens -= 1;
        return 1;
    }
    pthread_mutex_lock(&g->lock);
    sat_add(&g->rows_dropped, 1);
    pthread_mutex_unlock(&g->lock);
    return 0;
}

/* A member's hello: its pid and program, its welcome (and the zone, when inside). */
static int leader_hello(struct group *g, struct group_member *m, const struct group_msg *msg)
{
    if (m->pid != 0 || msg->pid <= 0)
        return -1;
    struct group_msg w;
    pthread_mutex_lock(&g->lock);
    /* A named member's pid is the kernel's word, in the leader's pid namespace (one
     * for which the kernel has none is refused at accept); a forked member's, whose
     * channel was made at fork, is its hello's. */
    m->pid = m->cred_pid > 0 ? m->cred_pid : msg->pid;
    snprintf(m->program, sizeof(m->program), "%.*s", (int)sizeof(msg->u.program) - 1,
             msg->u.program);
    for (size_t i = 0; i < sizeof(m->program) && m->program[i]; i++)
        if ((unsigned char)m->program[i] < 0x20 || m->program[i] == '"' ||
            m->program[i] == '\\')
            m->program[i] = '?'; /* it goes into JSON and metric labels */
    m->joined_ms = mt_now_ms();
    sat_add(&g->joined, 1);
    g->members_gen++; /* the slots of the stagger are dealt again */
    msg_init(&w, MSG_WELCOME);
    w.arg = (int32_t)g->joined;
    chan_send(g, m->fd, m->chan, &w);
    if (pressure_set_zone(g->d.pressure)) {
        msg_init(&w, MSG_ZONE);
        w.arg = 1;
        chan_send(g, m->fd, m->chan, &w);
    }
    pthread_mutex_unlock(&g->lock);
    mt_log(MT_LOG_DEBUG, "group", "pid %d (%s) joined the group", m->pid, m->program);
    return 0;
}

/* One message from member m. Returns -1 when the member must go. */
static int leader_handle(struct group *g, struct group_member *m, struct group_msg *msg,
                         double sample_s)
{
    int64_t now = mt_mono_ns();
    if (group_msg_check(msg) < 0 || member_floods(g, m, now))
        return -1;
    switch (msg->kind) {
    case MSG_HELLO:
        return leader_hello(g, m, msg);
    case MSG_REPORT:
        if (m->pid == 0)
            return -1;
        msg->u.snap.pid = m->pid;
        pthread_mutex_lock(&g->lock);
        m->snap = msg->u.snap;
        m->report_ns = now;
        note_heap(m);
        note_peak(m, m->snap.cheap.rss_bytes, now);
        pthread_mutex_unlock(&g->lock);
        leader_sample(g, m, &msg->u.snap, now, sample_s);
        return 0;
    case MSG_TRIM_DONE:
        if (m->pid == 0)
            return -1;
        if (member_row_allowed(g, m, now))
            leader_store_trim(g, m, &msg->u.trim);
        return 0;
    case MSG_TRIM_ANSWER:
        if (m->pid == 0)
            return -1;
        leader_answer(g, m, msg);
        return 0;
    case MSG_TRIM_OWN:
        if (m->pid == 0 || msg->u.trim.trigger != MT_TRIGGER_PRESSURE)
            return -1;
        leader_own(g, m, &msg->u.trim, now);
        return 0;
    case MSG_REFAULT:
        if (m->pid == 0)
            return -1;
        msg->u.refault.pid = m->pid;
        if (member_row_allowed(g, m, now))
            store_push_refault(g->d.store, &msg->u.refault);
        return 0;
    default:
        return -1; /* nothing else comes from a member */
    }
}

static void leader_read(struct group *g, struct group_member *m, double sample_s)
{
    struct group_msg msg;
    for (int k = 0; k < 64; k++) { /* a bounded batch: the others get their turn */
        int rc = msg_recv(m->fd, &msg);
        if (rc == 0)
            return;
        if (rc < 0 || leader_handle(g, m, &msg, sample_s) < 0) {
            member_remove(g, m);
            return;
        }
    }
}

/* The leader's own trims and samples carry its pid in a group (sinks in memtrim.c). */
static void leader_self_refresh(struct group *g, int64_t now, double sample_s)
{
    struct mt_snapshot s;
    own_snapshot(&g->d, LEADER_TICK_NS, 0, &s);
    s.pid = g->d.pid;
    pthread_mutex_lock(&g->lock);
    g->m[0].snap = s;
    g->m[0].report_ns = now;
    note_heap(&g->m[0]);
    note_peak(&g->m[0], s.cheap.rss_bytes, now);
    pthread_mutex_unlock(&g->lock);
}

/* A new member's channel into a free entry (under g->lock); 0, or -1 when the registry is full. */
int member_add(struct group *g, int fd, int cred_pid)
{
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        if (!g->m[i].used) {
            memset(&g->m[i], 0, sizeof(g->m[i]));
            g->m[i].used = 1;
            g->m[i].fd = fd;
            g->m[i].chan = chan_id(fd);
            g->m[i].cred_pid = cred_pid;
            g->m[i].accepted_ns = mt_mono_ns();
            return 0;
        }
    sat_add(&g->refused, 1);
    return -1;
}

/* A connection to a named group's socket that never said hello: a memtrim says it at
 * once, so after HELLO_DEADLINE_NS it is something else holding a place (63 silent
 * connections of this uid would keep every real member out). Forked members are not
 * timed: their channel is made at fork and nobody else holds it. */
static void leader_drop_silent(struct group *g, int64_t now)
{
    struct group_member *silent[GROUP_MAX_MEMBERS];
    int n = 0;
    pthread_mutex_lock(&g->lock);
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid == 0 && g->m[i].cred_pid > 0 &&
            now - g->m[i].accepted_ns > HELLO_DEADLINE_NS)
            silent[n++] = &g->m[i];
    pthread_mutex_unlock(&g->lock);
    for (int i = 0; i < n; i++) {
        mt_log(MT_LOG_DEBUG, "group", "pid %d connected to the group's socket and said nothing "
                                      "for %d s: dropped", silent[i]->cred_pid,
               (int)(HELLO_DEADLINE_NS / MT_SEC));
        member_remove(g, silent[i]);
    }
}

/* A member's channel whose number is no longer that channel (closed by someone else, the
 * number maybe reused): dropped without a close() within CHAN_CHECK_NS even when the file
 * now behind the number never wakes poll, so that the poll set holds no such number. */
static void leader_drop_lost(struct group *g, int64_t now)
{
    struct group_member *lost[GROUP_MAX_MEMBERS];
    int n = 0;
    if (now < g->chan_check_ns)
        return;
    g->chan_check_ns = now + CHAN_CHECK_NS;
    pthread_mutex_lock(&g->lock);
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].fd >= 0 && !chan_ours(g->m[i].fd, g->m[i].chan))
            lost[n++] = &g->m[i];
    pthread_mutex_unlock(&g->lock);
    for (int i = 0; i < n; i++) {
        chan_lost_log(lost[i]->fd, lost[i]->pid, "a member's channel");
        member_remove(g, lost[i]); /* which does not close it: not ours */
    }
}

/* A process connected to a named group's socket: this uid or root joins (it says hello next). */
static void leader_accept(struct group *g)
{
    for (int k = 0; k < 16; k++) { /* a bounded batch */
        int fd = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
            /* The connection stays queued and the socket readable: polled at once again,
             * it would spin this thread (and the tick's cgroup reads) on a host that ran
             * out of descriptors. Try again in a while. */
            int e = errno;
            if (!mt_control("suite-accept-no-pause")) /* dc8f874's control: polled at once */
                g->accept_failed_ns = mt_mono_ns();
            mt_log_limited(&g->accept_log, MT_LOG_WARNING, "group",
                           "GroupName %s: cannot accept a new member: %s; trying again in 1 s",
                           g->name, strerror(e));
            return;
        }
        if (fd < 0)
            return; /* EAGAIN, or a peer gone before we took it */
        struct ucred cred = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1}; /* getsockopt failed */
        socklen_t len = sizeof(cred);
        char why[160] = "";
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
            snprintf(why, sizeof(why), "a connection whose credentials the kernel did not give "
                     "(SO_PEERCRED: %s)", strerror(errno));
        else if (!mt_named_peer_allowed((unsigned)cred.uid, (unsigned)geteuid()))
            snprintf(why, sizeof(why), "pid %ld (uid %u): only uid %u and root may join this "
                     "group", (long)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
        else if (cred.pid <= 0)
            /* The kernel gives pid 0 for a peer in a pid namespace this one does not
             * contain: its pid (its own claim) would name another process, or none, here,
             * and ?pid= trims, the history and the metrics' labels go by pid. */
            snprintf(why, sizeof(why), "a process of uid %u in another pid namespace "
                     "(SO_PEERCRED gives it no pid in the leader's): a group's processes must "
                     "share one pid namespace", (unsigned)cred.uid);
        if (why[0]) {
            close(fd);
            pthread_mutex_lock(&g->lock);
            sat_add(&g->refused, 1);
            pthread_mutex_unlock(&g->lock);
            mt_log_limited(&g->accept_log, MT_LOG_WARNING, "group", "GroupName %s: refused %s",
                           g->name, why);
            continue;
        }
        pthread_mutex_lock(&g->lock);
        int full = member_add(g, fd, (int)cred.pid);
        pthread_mutex_unlock(&g->lock);
        if (full) {
            close(fd); /* it sees EOF before a welcome and runs without memtrim */
            mt_log_limited(&g->accept_log, MT_LOG_WARNING, "group",
                           "GroupName %s: refused pid %ld: the group has %d members already",
                           g->name, (long)cred.pid, GROUP_MAX_MEMBERS);
        }
    }
}

/* What poll said of the named group's socket (p[0]) and of each member's channel
 * (p[1..n-1], who[]). */
static void leader_polled(struct group *g, const struct pollfd *p, struct group_member **who,
                          int n, double sample_s)
{
    /* the caller's socket, closed by someone else (its number maybe the host's file) */
    if ((p[0].revents & POLLNVAL) || (p[0].revents && !chan_ours(g->listen_fd, g->listen_chan))) {
        chan_lost_log(g->listen_fd, (int)getpid(), "the named group's socket");
        g->listen_fd = -1;
    } else if (p[0].revents) {
        leader_accept(g);
    }
    for (int i = 1; i < n; i++) {
        if (!p[i].revents)
            continue;
        if ((p[i].revents & POLLNVAL) || !chan_ours(who[i]->fd, who[i]->chan)) {
            chan_lost_log(who[i]->fd, who[i]->pid, "a member's channel");
            member_remove(g, who[i]); /* which does not close it: not ours */
            continue;
        }
        leader_read(g, who[i], sample_s);
    }
}

/* ---- the leader's pressure: the members' records into the engine's look --------- */

/* The group's totals as one sample for `samples` (the host's view). */
static void leader_total_sample(struct group *g, int64_t now, double sample_s)
{
    if (sample_s <= 0 || !store_enabled(g->d.store) || now < g->next_total_ns)
        return;
    g->next_total_ns = now + (int64_t)(sample_s * MT_SEC);
    struct mt_snapshot t;
    int heap_all = 1;
    pthread_mutex_lock(&g->lock);
    t = g->m[0].snap;
    t.pid = 0;
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++) {
        const struct mt_snapshot *s = &g->m[i].snap;
        if (!g->m[i].used || g->m[i].pid <= 0 || g->m[i].report_ns == 0)
            continue;
        t.cheap.rss_bytes += s->cheap.rss_bytes;
        t.cheap.rss_anon_bytes += s->cheap.rss_anon_bytes;
        t.cheap.rss_file_bytes += s->cheap.rss_file_bytes;
        t.cheap.swap_bytes += s->cheap.swap_bytes;
        if (s->heap.timestamp_ms == 0) {
            heap_all = 0;
            continue;
        }
        t.heap.heap_in_use_bytes += s->heap.heap_in_use_bytes;
        t.heap.heap_free_bytes += s->heap.heap_free_bytes;
        t.heap.heap_mmapped_bytes += s->heap.heap_mmapped_bytes;
        t.heap.arena_bytes += s->heap.arena_bytes;
        t.releasable_estimate_bytes += s->releasable_estimate_bytes;
        if (t.heap.arena_count >= 0 && s->heap.arena_count >= 0)
            t.heap.arena_count += s->heap.arena_count;
    }
    pthread_mutex_unlock(&g->lock);
    if (!heap_all)
        t.heap.timestamp_ms = 0; /* a total of some members' heaps is no total */
    t.fragmentation_ratio = t.heap.timestamp_ms && t.heap.heap_in_use_bytes
                                ? (double)t.cheap.rss_bytes / (double)t.heap.heap_in_use_bytes
                                : 0;
    store_push_sample(g->d.store, &t);
}

/*
 * Tell every member the zone's state: its pace (ZONE_ON: they watch their heap), and
 * with a threshold, the grant to trim what each freed on its own (ZONE_ACT): the
 * stagger, one slot of width_ns each in turn, so that members acting alone never start
 * their trims together; the grant lasts ACT_LEASE_NS unless sent again. At the line
 * (ZONE_LINE), and wherever a member's own reading of the cgroup says the usage reached
 * line_bytes (0: this usage is no cgroup's), a member trims at once, out of its slot.
 */
static void leader_zone(struct group *g, int zone, uint64_t threshold, int64_t width_ns,
                        int at_line, int64_t line_bytes, int64_t now)
{
    struct group_msg msg;
    msg_init(&msg, MSG_ZONE);
    int act = zone && threshold > 0, slots = 0, slot = 0;
    at_line = act && at_line;
    msg.arg = zone ? ZONE_ON | (act ? ZONE_ACT : 0) | (at_line ? ZONE_LINE : 0) : 0;
    pthread_mutex_lock(&g->lock);
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        slots += g->m[i].used && g->m[i].pid > 0;
    msg.u.grant = (struct group_grant){.epoch_ns = g->slot_epoch_ns, .width_ns = width_ns,
                                       .until_ns = now + ACT_LEASE_NS, .threshold = threshold,
                                       .slots = slots, .line_bytes = act ? line_bytes : 0};
    pressure_told(g->d.pressure, zone, act, at_line, threshold, width_ns, now, g->members_gen);
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid > 0) {
            msg.u.grant.slot = slot++;
            chan_send(g, g->m[i].fd, g->m[i].chan, &msg);
        }
    pthread_mutex_unlock(&g->lock);
}

/* Pressure requests past their time forgotten; 1 when one is still within its stagger
 * (staggered: one request at a time, but a member slow to answer, a loaded node, holds
 * the next one back PRESSURE_STAGGER_NS at most, itself 2 s at most). Locked. */
static int pressure_waiting(struct group *g, int64_t now)
{
    int waiting = 0;
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        struct group_member *m = &g->m[i];
        if (m->press_req && now - m->press_sent_ns > PRESSURE_TIMEOUT_NS)
            m->press_req = 0;
        if (m->press_req && now - m->press_sent_ns < PRESSURE_STAGGER_NS)
            waiting = 1;
    }
    return waiting;
}

/* Each live member as the decision sees it (c[], its entry's index in idx[]: a cooperative
 * member, core/pressure/coop.h), and the sums; how many. Locked. */
static int pressure_candidates(struct group *g, int64_t now, int64_t now_ms,
                               struct group_candidate *c, int *idx, struct pressure_sums *sum)
{
    int n = 0, waiting = pressure_waiting(g, now);
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        const struct group_member *m = &g->m[i];
        if (!m->used || m->pid <= 0 || m->report_ns == 0)
            continue;
        struct coop_reading r = {
            .rss = m->snap.cheap.rss_bytes, .peak_rss = m->peak_rss, .peak_ns = m->peak_ns,
            .report_ns = m->report_ns, .heap_ms = m->snap.heap.timestamp_ms,
            .releasable = m->snap.releasable_estimate_bytes, .rss_at_heap = m->rss_at_heap,
            .rss_after = m->rss_after, .last_trim_ns = m->last_trim_ns,
            .last_trim_ms = m->last_trim_ms, .busy = m->press_req != 0 || waiting};
        coop_candidate(&c[n], sum, &r, now, now_ms);
        idx[n++] = i;
    }
    return n;
}

/*
 * The leader picked itself on a guess (its RSS grew since its heap reading, or since its
 * last trim: what it grew by may be free), not on a fresh estimate. A member's guess costs
 * a round trip; the leader can look: a heap reading now (on the watch's budget). 1 when
 * that reading was taken and shows less free than TrimMinReleasableBytes: no trim, and the
 * entry takes the reading (the same growth is no guess any more). A named group's leader
 * is a worker: climbing through a study it was picked every 50 ms and trimmed a heap with
 * nothing free, 11-14 times a run in the v2 cell (issue 32 item 4), each trim holding its
 * allocator's locks for up to 170 ms under TCG while the study waited.
 */
static int self_holds_nothing(struct group *g, int64_t now)
{
    struct mt_snapshot s;
    int64_t asked_ms = mt_now_ms();
    uint64_t min = own_snapshot(&g->d, 0, WATCH_BUDGET_FACTOR, &s);
    if (s.heap.timestamp_ms < asked_ms) /* not taken now (the budget): trim as guessed */
        return 0;
    if (s.releasable_estimate_bytes >= (min ? min : 1))
        return 0;
    s.pid = g->d.pid;
    pthread_mutex_lock(&g->lock);
    g->m[0].snap = s;
    g->m[0].report_ns = now;
    note_heap(&g->m[0]);
    pthread_mutex_unlock(&g->lock);
    return 1;
}

/* The picked member trims: another is sent the request (id), the leader trims here, by
 * the group's pressure row (trim.c: it obeys the host's suspend, shares a running trim;
 * its sink stores the result with its pid and the store is woken); guess: picked on no
 * fresh estimate (self_holds_nothing). */
static void pressure_ask(struct group *g, struct group_member *m, int fd, uint64_t id,
                         int64_t now, const struct mt_config *cfg, int guess)
{
    if (id) {
        struct group_msg req;
        msg_init(&req, MSG_TRIM_REQ);
        req.req_id = id;
        req.arg = MT_TRIGGER_PRESSURE;
        req.pad = cfg->trim_pad_bytes;
        pthread_mutex_lock(&g->lock);
        if (m->press_req == id && chan_send(g, fd, m->chan, &req) != 0)
            m->press_req = 0;
        pthread_mutex_unlock(&g->lock);
        return;
    }
    if (guess && !mt_control("suite-self-trims-on-a-guess") && self_holds_nothing(g, now)) {
        pthread_mutex_lock(&g->lock);
        sat_add(&g->self_verified, 1);
        pthread_mutex_unlock(&g->lock);
        return;
    }
    struct mt_trim_result r;
    struct trim_ask ask = {.trigger = MT_TRIGGER_PRESSURE, .pad = (uint64_t)cfg->trim_pad_bytes,
                           .min_interval_ms = -1, .crossing_ns = now, .group = 1};
    if (trim_request(g->d.trims, g->d.cache, &ask, &r, NULL) == 0) {
        pthread_mutex_lock(&g->lock);
        sat_add(&g->m[0].pressure_trims, 1);
        sat_add(&g->pressure_trims, 1);
        if (r.released_bytes > 0)
            sat_add(&g->pressure_released, (uint64_t)r.released_bytes);
        pthread_mutex_unlock(&g->lock);
    }
}

/* The group's pressure (the engine's look at the set, core/pressure/zone.h): one member at
 * a time, the largest estimate first; the zone and the grant told to the members. */
static void leader_pressure(struct group *g, int64_t now, const struct mt_config *cfg,
                            int kernel)
{
    struct group_candidate c[GROUP_MAX_MEMBERS];
    struct pressure_sums sum = {0, 0, 0};
    struct pressure_look lk;
    int idx[GROUP_MAX_MEMBERS];
    int64_t now_ms = mt_now_ms();

    pthread_mutex_lock(&g->lock);
    int level = g->m[0].snap.cheap.cgroup_limit_level;
    pthread_mutex_unlock(&g->lock);
    int64_t usage = probe_cgroup_usage(&g->d.cache->cg, level); /* the limit's, as the kernel */
    pthread_mutex_lock(&g->lock);
    int n = pressure_candidates(g, now, now_ms, c, idx, &sum);
    struct pressure_look_in li = {
        .now = now, .usage = usage, .ratio = cfg->pressure_ratio,
        .limit = cfg->memory_limit_bytes > 0 ? cfg->memory_limit_bytes
                                             : g->m[0].snap.memory_limit_bytes,
        .min_releasable = (uint64_t)cfg->trim_min_releasable_bytes,
        .burst_bytes = (uint64_t)cfg->trim_releasable_trigger_bytes,
        .width_ns = (int64_t)cfg->group_trim_slot_ms * MT_MS, .members_gen = g->members_gen,
        .self = n > 0 && idx[0] == 0}; /* the leader is member 0 */
    pressure_look(g->d.pressure, &li, c, n, &sum, &lk); /* on the engine's zone */
    struct group_member *m = lk.pick >= 0 ? &g->m[idx[lk.pick]] : NULL;
    if (kernel) {
        sat_add(&g->kernel_looks, 1);
        sat_add(&g->kernel_picks, m != NULL);
    }
    int fd = -1;
    uint64_t id = 0;
    if (m) {
        m->last_trim_ns = now;
        m->last_trim_ms = now_ms;
        if (!m->self) {
            id = ++g->next_req;
            fd = m->fd;
            m->press_req = id;
            m->press_sent_ns = now;
            g->press_sent_ns = now;
        }
    }
    pthread_mutex_unlock(&g->lock);
    if (lk.news)
        leader_zone(g, lk.zone, lk.threshold, li.width_ns, lk.at_line, lk.line_bytes, now);
    if (m)
        pressure_ask(g, m, fd, id, now, cfg, lk.guess);
}

/* The engine's kernel woke, or the engine handed its verdict on the leader to the set (the
 * pressure thread, under its p->lock): look at the set now. */
static void leader_kernel_woke(void *arg, int kernel)
{
    struct group *g = arg;
    if (kernel)
        atomic_store(&g->kernel_woke, 1);
    group_wake(g);
}

static void *leader_main(void *arg)
{
    struct group *g = arg;
    struct pollfd p[GROUP_MAX_MEMBERS + 2];
    struct group_member *who[GROUP_MAX_MEMBERS + 2];
    struct mt_config cfg;
    uint64_t generation;
    config_feed_read(&g->d.config, &cfg, &generation, 1);

    for (;;) {
        config_feed_read(&g->d.config, &cfg, &generation, 0);
        int64_t now = mt_mono_ns();
        leader_self_refresh(g, now, cfg.sample_interval_seconds);
        /* Woken by the engine's kernel (pressure_kernel_listen), or at the tick. */
        leader_pressure(g, now, &cfg, atomic_exchange(&g->kernel_woke, 0));
        job_step(g, now);
        leader_total_sample(g, now, cfg.sample_interval_seconds);

        int n = 0;
        p[n] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        who[n++] = NULL;
        int paused = g->accept_failed_ns != 0 && now - g->accept_failed_ns < accept_pause_ns();
        p[n] = (struct pollfd){.fd = paused ? -1 : g->listen_fd, .events = POLLIN}; /* -1: ignored */
        who[n++] = NULL;
        leader_drop_silent(g, now);
        leader_drop_lost(g, now);
        pthread_mutex_lock(&g->lock);
        struct pressure_zone_view zv;
        pressure_zone_view(g->d.pressure, &zv);
        int zone = zv.set || mt_mono_ns() < zv.moving_until_ns || g->job.active,
            stop = g->stop;
        for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
            if (g->m[i].used && g->m[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = g->m[i].fd, .events = POLLIN};
                who[n++] = &g->m[i];
            }
        pthread_mutex_unlock(&g->lock);
        if (stop)
            break;
        int timeout = (int)((zone ? LEADER_ZONE_TICK_NS : group_tick_ns(LEADER_TICK_NS)) / MT_MS);
        if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR)
            continue;
        if ((p[0].revents & POLLNVAL) || (p[0].revents && !pipe_ours(g, g->wake[0])))
            wake_lost(g);
        else if (p[0].revents)
            wake_drain(g->wake[0]);
        leader_polled(g, p + 1, who + 1, n - 1, cfg.sample_interval_seconds);
    }
    return NULL;
}

int group_lead(struct group **slot, const struct group_deps *d, int listen_fd, const char *name,
               int forks_join, char **err)
{
    struct group *g = group_alloc(d, GROUP_LEADER);
    if (!g) {
        *err = mt_strdup("group: out of memory or descriptors");
        return -ENOMEM;
    }
    g->listen_fd = listen_fd;
    g->listen_chan = chan_id(listen_fd);
    g->forks_join = forks_join;
    snprintf(g->name, sizeof(g->name), "%s", name ? name : "");
    g->m[0].used = 1;
    g->m[0].self = 1;
    g->m[0].fd = -1;
    g->m[0].pid = (int)getpid();
    g->m[0].joined_ms = mt_now_ms();
    proctree_comm(getpid(), g->m[0].program, sizeof(g->m[0].program));
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        g->m[i].fd = -1;
    own_snapshot(&g->d, 0, 0, &g->m[0].snap);
    g->m[0].snap.pid = g->m[0].pid;
    g->m[0].report_ns = mt_mono_ns();
    g->slot_epoch_ns = g->m[0].report_ns;
    /* From here on the instance's own trims and samples carry its pid. */
    atomic_store(g->d.record_pid, (int)getpid());
    *slot = g;
    int rc = mt_thread_start(&g->thread, "memtrim-group", leader_main, g);
    if (rc) {
        atomic_store(g->d.record_pid, 0);
        *slot = NULL;
        group_free(g);
        *err = mt_strdup("group: cannot start the group thread");
        return -rc;
    }
    g->started = 1;
    pressure_kernel_listen(g->d.pressure, leader_kernel_woke, g); /* group_stop takes it off */
    if (g->name[0])
        mt_log(MT_LOG_INFO, "group", "pid %ld leads the worker group %s: processes started with "
                                     "GroupName %s join it (one port, one store)",
               (long)getpid(), g->name, g->name);
    else
        mt_log(MT_LOG_INFO, "group", "pid %ld leads a worker group: its forked children join it "
                                     "(one port, one store)", (long)getpid());
    return 0;
}
