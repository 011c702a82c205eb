/*
 * group.c - worker groups (group.h): the leader's registry and the members'
 * reports over their channels, manual trims fanned out to every member, and
 * the group's pressure decision (group_policy.c) run one member at a time.
 *
 * Why a socketpair made at fork: only the two processes hold it (nobody can
 * connect to it, no path, no permissions to get right), it closes by itself
 * when either process dies however it dies (SIGKILL included), so a member
 * that is gone leaves no entry: EOF on its channel removes it. SOCK_SEQPACKET
 * keeps each message whole. Close-on-exec: a child that execs a new program
 * drops its end, and the leader forgets it the same way.
 *
 * Threads: "memtrim-group" per instance in a group. Leader: polls a wake pipe,
 * every member's channel and, in a named group, the group's socket (it accepts
 * this uid or root, SO_PEERCRED, in its pid namespace; the socket is its caller's, named.c); every tick (100 ms, 10 ms inside the zone) it
 * refreshes its own entry, reads the cgroup's usage, tells members when the
 * zone starts and ends (they probe their heap at the zone's pace), asks the
 * member the decision picks to trim (one request in flight: staggered), and
 * hands samples and the members' trims to the store's queue. Member: answers
 * trim requests (its own trim service), reports every 250 ms (100 ms in the
 * zone), and calls leader_gone when the leader's end closes. HTTP threads
 * (mt_group_trim) send requests and wait for their answers on g->cond.
 * Descriptors closed by someone else (a host closing every descriptor): each
 * channel's identity (its socket's inode) is kept; a number that says POLLNVAL
 * or is no longer that socket is dropped without read, send or close (chan_id);
 * so are the wake pipe (pipe_id: never read, written or closed once its number
 * is another file) and a named group's socket (never accepted on).
 * Locks: g->lock (see group.h) guards members, requests, counters; sends are
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

#include "mt_alloc.h"
#include "core.h"
#include "group.h"
#include "instance.h"
#include "pressure.h"
#include "probe.h"
#include "proctree.h"

#define LEADER_TICK_NS (100 * MT_MS)
#define LEADER_ZONE_TICK_NS (10 * MT_MS)
#define REPORT_NS (250 * MT_MS)
#define REPORT_ZONE_NS (50 * MT_MS)
#define ZONE_WATCH_NS (10 * MT_MS)  /* a member's heap reading inside the zone (its budget) */
#define USAGE_MOVED_BYTES (1LL << 20)
#define ZONE_BUDGET_FACTOR 10.0 /* as the housekeeper's inside the zone */
/* The zone's watch (ZONE_WATCH_NS): a reading every 10 ms at most, and the budget may
 * space them no further than that costs. Measured under qemu TCG, where a heap reading
 * costs some 15 times the host's: at 10 times the budget a worker's freed study went
 * unseen for 0.5-2 s and the kernel killed a worker meanwhile. */
#define WATCH_BUDGET_FACTOR 100.0
#define ZONE_HOLD_NS (5 * MT_SEC)
#define REQUEST_TIMEOUT_NS (10 * MT_SEC)     /* a manual request's answer */
#define PRESSURE_TIMEOUT_NS (2 * MT_SEC)     /* a pressure request's answer, at most */
#define HELLO_DEADLINE_NS (30 * MT_SEC)      /* a named connection's hello, at most */
#define PRESSURE_STAGGER_NS (100 * MT_MS)    /* the next member waits for an answer this long */
#define ACCEPT_PAUSE_NS (1 * MT_SEC)         /* a named group's accept out of descriptors */
#define CHAN_CHECK_NS (1 * MT_SEC)           /* every channel's identity checked this often */
#define PEAK_NS (10 * MT_SEC)                /* a member's peak RSS: over about this long */

struct group_member {
    int used, fd, pid, self; /* fd -1 for the leader itself; pid 0 until its hello */
    uint64_t chan;           /* fd's identity (chan_id) when it became the group's */
    int cred_pid;            /* a named group's member: its pid as the kernel says (SO_PEERCRED) */
    int64_t accepted_ns;     /* a named group's member: when its connection was accepted */
    char program[GROUP_PROGRAM_MAX];
    int64_t joined_ms, report_ns;
    struct mt_snapshot snap;
    uint64_t trims, released, pressure_trims;
    int64_t last_trim_ns, last_trim_ms; /* the group's last pressure trim of it */
    uint64_t rss_after;                 /* its RSS right after its last trim (any trigger) */
    int64_t heap_ms_seen;               /* the heap reading its reports carry */
    uint64_t rss_at_heap;               /* its RSS in the first report that carried it */
    int64_t last_sample_ns;
    uint64_t peak_rss;                  /* its RSS high-water mark since peak_ns (group_ahead) */
    int64_t peak_ns;                    /* ...started again from its RSS then, every PEAK_NS */
    uint64_t press_req;                 /* its pressure request in flight, 0 none */
    int64_t press_sent_ns;              /* ...sent then */
};

struct group_request {
    int used, done, rc, pid;
    uint64_t id;
    struct mt_trim_result r;
};

struct group {
    struct memtrim *mt;
    int role;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a request was answered */
    pthread_t thread;
    int started, stop;   /* stop: guarded by lock */
    int wake[2];
    uint64_t wake_id;    /* the wake pipe's identity (pipe_id): its two ends share it */
    /* leader */
    struct group_member m[GROUP_MAX_MEMBERS]; /* m[0]: the leader itself */
    struct group_request req[GROUP_MAX_REQUESTS];
    uint64_t next_req;
    int fork_fds[2];
    int forks_join;   /* forked children join over a socketpair (FollowFork) */
    int listen_fd;    /* a named group's socket (the caller's), -1 */
    uint64_t listen_chan; /* ...its identity (chan_id) */
    int64_t accept_after_ns; /* ...not polled until then: accept failed for want of resources */
    int64_t chan_check_ns;   /* the channels' identities next checked then (leader_drop_lost) */
    struct mt_log_limit accept_log; /* the accept's warnings (a peer may cause them) */
    char name[MT_GROUP_NAME_MAX + 1]; /* GroupName, "" */
    uint64_t joined, left, refused, pressure_trims, pressure_released;
    int64_t usage, limit, base_usage; /* base: the low-water mark since the last group trim */
    int64_t zone_seen_ns;             /* the usage was last inside the zone then */
    int64_t moved_usage;              /* the usage when it last moved by USAGE_MOVED_BYTES */
    int64_t moving_until_ns;          /* the zone's tick until then (the usage climbs) */
    struct group_rise rise;           /* the usage's recent climbs (group_ahead) */
    int zone;
    const char *usage_source;
    int64_t last_manual_ns;
    int64_t press_sent_ns; /* when the last pressure request went out */
    int64_t next_total_ns;
    /* member */
    int fd;
    uint64_t fd_chan;                  /* fd's identity (chan_id), set before the thread starts */
    atomic_int fd_lost;                /* fd was closed by someone else: never used again */
    int forks_wait;                    /* its forked children wait on a channel to it */
    int pending[GROUP_MAX_MEMBERS];    /* ...their channels: adopted if it takes the group over */
    uint64_t pending_chan[GROUP_MAX_MEMBERS]; /* ...their identities */
    int npending;
    atomic_int index; /* its place in the join order (MSG_WELCOME) */
    void (*leader_gone)(void *);
    void *gone_arg;
    atomic_uint_fast64_t send_dropped;
};

/*
 * A channel's identity: its socket's inode when it became the group's. A host
 * that closes descriptors it does not own (a daemon closing "every descriptor"
 * after its fork) frees the number, and its next open() may take it: poll then
 * says POLLNVAL, or reports the new file's events. Such a number is no channel
 * of ours: its entry is dropped without reading or closing it (a close() would
 * close the host's file). 0: no socket.
 */
static uint64_t fd_ino(int fd, mode_t type)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == type ? (uint64_t)st.st_ino
                                                                             : 0;
}

static uint64_t chan_id(int fd)
{
    return fd_ino(fd, S_IFSOCK);
}

static int chan_ours(int fd, uint64_t id)
{
    return id != 0 && chan_id(fd) == id;
}

/* The wake pipe's identity, as chan_id's: its inode (both ends'), 0 no pipe. */
static uint64_t pipe_id(int fd)
{
    return fd_ino(fd, S_IFIFO);
}

static int pipe_ours(const struct group *g, int fd)
{
    return g->wake_id != 0 && pipe_id(fd) == g->wake_id;
}

/* Both ends of the wake pipe, each only while its number is still the pipe. */
static void wake_close(struct group *g)
{
    if (pipe_ours(g, g->wake[0]))
        close(g->wake[0]);
    if (pipe_ours(g, g->wake[1]))
        close(g->wake[1]);
}

static void chan_close(int fd, uint64_t id)
{
    if (chan_ours(fd, id))
        close(fd);
}

static void chan_lost_log(int fd, int pid, const char *what)
{
    mt_log(MT_LOG_WARNING, "group", "descriptor %d, %s (pid %d), was closed by someone else in "
                                    "pid %ld (the host?): dropped from the group, left alone",
           fd, what, pid, (long)getpid());
}

static void msg_init(struct group_msg *msg, int kind)
{
    memset(msg, 0, sizeof(*msg));
    msg->magic = GROUP_MAGIC;
    msg->version = GROUP_VERSION;
    msg->kind = (uint16_t)kind;
    msg->pid = (int32_t)getpid();
}

/* Non-blocking: a channel that is full drops the message (counted), never waits. */
static int msg_send(struct group *g, int fd, const struct group_msg *msg)
{
    ssize_t n = send(fd, msg, sizeof(*msg), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)sizeof(*msg))
        return 0;
    atomic_fetch_add(&g->send_dropped, 1);
    return n < 0 ? -errno : -EIO;
}

/* To a channel only while its number is still that channel (chan_id): else dropped. */
static int chan_send(struct group *g, int fd, uint64_t chan, const struct group_msg *msg)
{
    if (!chan_ours(fd, chan)) {
        atomic_fetch_add(&g->send_dropped, 1);
        return -EBADF;
    }
    return msg_send(g, fd, msg);
}

/* 1 with *msg, 0 nothing to read now, -1 the channel closed or spoke nonsense. */
static int msg_recv(int fd, struct group_msg *msg)
{
    ssize_t n = recv(fd, msg, sizeof(*msg), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n != (ssize_t)sizeof(*msg) || msg->magic != GROUP_MAGIC || msg->version != GROUP_VERSION)
        return -1;
    return 1;
}

/* Pointers in a snapshot are this process's: the other end must not follow them. */
static void snap_strip(struct mt_snapshot *s)
{
    s->allocator = NULL;
    s->allocator_release = NULL;
    s->heap.allocator = NULL;
    s->heap.nfigures = 0;
    memset(s->heap.figures, 0, sizeof(s->heap.figures));
}

static void wake(struct group *g)
{
    char c = 1;
    /* Only into our pipe: a number the host closed and reused is its file now. */
    if (pipe_ours(g, g->wake[1]) && write(g->wake[1], &c, 1) < 0) {
        /* full: the thread is awake already */
    }
}

/* The wake pipe's read end was closed by someone else (POLLNVAL, or its number is another
 * file now): not polled, read or closed any more (the threads' ticks still see a stop).
 * The group thread's. */
static void wake_lost(struct group *g)
{
    pthread_mutex_lock(&g->lock);
    chan_lost_log(g->wake[0], (int)getpid(), "the group thread's wake pipe");
    g->wake[0] = -1;
    pthread_mutex_unlock(&g->lock);
}

static void drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}

static int pipe_open(int fds[2])
{
    return pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0 ? 0 : -errno;
}

static struct group *group_alloc(struct memtrim *mt, int role)
{
    struct group *g = mt_calloc(1, sizeof(*g));
    pthread_condattr_t attr;
    if (!g)
        return NULL;
    if (pipe_open(g->wake) != 0) {
        free(g);
        return NULL;
    }
    g->wake_id = pipe_id(g->wake[0]);
    g->mt = mt;
    g->role = role;
    g->fd = -1;
    atomic_init(&g->fd_lost, 0);
    g->fork_fds[0] = g->fork_fds[1] = -1;
    g->listen_fd = -1;
    mt_log_limit_init(&g->accept_log, 10 * MT_SEC, 5);
    g->usage = -1;
    g->limit = -1;
    g->base_usage = -1;
    g->usage_source = "none";
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cond, &attr);
    pthread_condattr_destroy(&attr);
    atomic_init(&g->send_dropped, 0);
    return g;
}

static void group_free(struct group *g)
{
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].fd >= 0)
            chan_close(g->m[i].fd, g->m[i].chan);
    if (g->fd >= 0 && !atomic_load(&g->fd_lost))
        chan_close(g->fd, g->fd_chan);
    for (int i = 0; i < g->npending; i++)
        chan_close(g->pending[i], g->pending_chan[i]);
    wake_close(g);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    pthread_mutex_destroy(&g->accept_log.lock);
    free(g);
}

static int stopping(struct group *g)
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
static uint64_t own_snapshot(struct memtrim *mt, int64_t cheap_age_ns, double factor,
                             struct mt_snapshot *out)
{
    struct snapshot_want want = {.stale_ok = 1,
                                 .heap_max_age_ns = factor > 0 ? cheap_age_ns : INT64_MAX};
    pthread_mutex_lock(&mt->cfg_lock);
    uint64_t min_releasable = (uint64_t)mt->cfg.trim_min_releasable_bytes;
    want.cheap_max_age_ns = cheap_age_ns;
    want.budget_percent = mt->cfg.probe_budget_percent * (factor > 0 ? factor : 1.0);
    want.memory_limit_cfg = mt->cfg.memory_limit_bytes;
    pthread_mutex_unlock(&mt->cfg_lock);
    snapshot_get(&mt->cache, &want, out);
    return min_releasable; /* TrimMinReleasableBytes, read with the rest */
}

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

void group_member_trim_sink(void *arg, const struct mt_trim_result *r)
{
    struct memtrim *mt = arg;
    struct group_msg msg;
    if (!mt->group)
        return;
    msg_init(&msg, MSG_TRIM_DONE);
    msg.u.trim = *r;
    member_send(mt->group, &msg);
}

void group_member_refault_sink(void *arg, const struct mt_refault *rf)
{
    struct memtrim *mt = arg;
    struct group_msg msg;
    if (!mt->group)
        return;
    msg_init(&msg, MSG_REFAULT);
    msg.u.refault = *rf;
    member_send(mt->group, &msg);
}

static void member_trim(struct group *g, const struct group_msg *req)
{
    struct memtrim *mt = g->mt;
    struct group_msg ans;
    int trigger = req->arg == MT_TRIGGER_PRESSURE ? MT_TRIGGER_PRESSURE : MT_TRIGGER_MANUAL;
    uint64_t pad = req->pad >= 0 ? (uint64_t)req->pad : 0;
    msg_init(&ans, MSG_TRIM_ANSWER);
    ans.req_id = req->req_id;
    if (req->pad < 0) {
        struct mt_config cfg;
        mt_config_get(mt, &cfg);
        pad = (uint64_t)cfg.trim_pad_bytes;
    }
    /* A host that suspended trims is obeyed under pressure, as by its own pressure path. */
    if (trigger == MT_TRIGGER_PRESSURE && atomic_load(&mt->suspend_depth) > 0) {
        trim_count_skip(&mt->trims, MT_SKIP_SUSPENDED);
        ans.arg = -EBUSY;
    } else {
        /* No cost gate: the memory another member needs is not this one's to keep. */
        ans.arg = trim_run(&mt->trims, &mt->cache, trigger, pad, -1, TRIM_WAIT_IF_BUSY,
                           &ans.u.trim, NULL);
    }
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

static void *member_main(void *arg)
{
    struct group *g = arg;
    struct memtrim *mt = g->mt;
    struct group_msg msg;
    char exe[256];
    int gone = 0;

    msg_init(&msg, MSG_HELLO);
    proctree_self(exe, sizeof(exe), msg.u.program, sizeof(msg.u.program));
    member_send(g, &msg);
    int64_t next_report = 0, next_watch = 0;
    uint64_t reported_free = 0; /* the releasable estimate of the last report */
    while (!gone) {
        int zone = atomic_load(&mt->group_zone);
        int64_t period = zone ? REPORT_ZONE_NS : REPORT_NS, now = mt_mono_ns();
        struct mt_snapshot s;
        if (now >= next_report) {
            own_snapshot(mt, period, zone ? ZONE_BUDGET_FACTOR : 0, &s);
            member_report(g, &s);
            reported_free = s.releasable_estimate_bytes;
            next_report = now + period;
            next_watch = now + ZONE_WATCH_NS;
        } else if (zone && now >= next_watch) {
            /*
             * Inside the zone a worker that just freed a study holds it resident, and
             * the others under the limit need it within tens of milliseconds (a study
             * of 80 MB takes ~50 ms): read the heap every ZONE_WATCH_NS (on the zone's
             * budget, which may space the readings further) and report at once when
             * what it holds free grew by TrimMinReleasableBytes, so the leader can ask
             * it first. (Measured: at the zone's 50 ms reports, a worker's freed study
             * was seen 50-90 ms late, and the limit was reached meanwhile.)
             */
            uint64_t min = own_snapshot(mt, ZONE_WATCH_NS, WATCH_BUDGET_FACTOR, &s);
            if (s.releasable_estimate_bytes >= reported_free + (min ? min : 1)) {
                member_report(g, &s);
                next_report = now + period;
                reported_free = s.releasable_estimate_bytes;
            } else if (s.releasable_estimate_bytes < reported_free) {
                reported_free = s.releasable_estimate_bytes; /* a rise from here counts */
            }
            next_watch = now + ZONE_WATCH_NS;
        }
        int64_t until = zone && next_watch < next_report ? next_watch : next_report;
        int64_t wait_ms = (until - now) / MT_MS + 1;
        struct pollfd p[2 + GROUP_MAX_MEMBERS] = {{.fd = g->fd, .events = POLLIN},
                                                  {.fd = g->wake[0], .events = POLLIN}};
        nfds_t np = 2 + (nfds_t)pending_poll(g, p + 2);
        if (poll(p, np, (int)wait_ms) < 0 && errno != EINTR)
            break;
        if ((p[1].revents & POLLNVAL) || (p[1].revents && !pipe_ours(g, g->wake[0])))
            wake_lost(g);
        else if (p[1].revents)
            drain(g->wake[0]);
        pending_reap(g, p + 2, (int)np - 2);
        if (stopping(g))
            break;
        if ((p[0].revents && ((p[0].revents & POLLNVAL) || !chan_ours(g->fd, g->fd_chan))) ||
            atomic_load(&g->fd_lost)) {
            atomic_store(&g->fd_lost, 1); /* its number is not ours to read or close */
            chan_lost_log(g->fd, (int)getpid(), "this member's channel to its leader");
            gone = 1;
        }
        while (p[0].revents && !gone) {
            int rc = msg_recv(g->fd, &msg);
            if (rc == 0)
                break;
            if (rc < 0) {
                gone = 1;
                break;
            }
            if (msg.kind == MSG_TRIM_REQ) {
                member_trim(g, &msg);
                /* what was left, or freed meanwhile (a study trimmed mid-way through its
                 * free), is told at the next watch: the leader's word is now "after the
                 * trim", and a rise from the old report would come too late */
                reported_free = 0;
            } else if (msg.kind == MSG_WELCOME)
                atomic_store(&g->index, msg.arg);
            else if (msg.kind == MSG_ZONE && atomic_exchange(&mt->group_zone, msg.arg != 0) !=
                                                 (msg.arg != 0))
                next_report = 0; /* report at the zone's pace from now */
        }
    }
    if (gone && atomic_load(&g->fd_lost)) /* said at warning level above */
        mt_log(MT_LOG_INFO, "group", "pid %ld leaves the group: its channel to the leader "
                                     "was closed in this process, not by the leader",
               (long)getpid());
    else if (gone)
        mt_log(MT_LOG_INFO, "group", "the group's leader closed its channel (it exited): "
                                     "pid %ld leaves the group", (long)getpid());
    if (gone) {
        if (g->leader_gone)
            g->leader_gone(g->gone_arg);
    }
    return NULL;
}

int group_join(struct memtrim *mt, int fd, void (*leader_gone)(void *), void *arg, char **err)
{
    struct group *g = group_alloc(mt, GROUP_MEMBER);
    if (!g) {
        close(fd);
        *err = mt_strdup("group: out of memory or descriptors");
        return -ENOMEM;
    }
    g->fd = fd;
    g->fd_chan = chan_id(fd);
    g->leader_gone = leader_gone;
    g->gone_arg = arg;
    pthread_mutex_lock(&mt->cfg_lock);
    g->forks_wait = mt->cfg.group_name[0] == '\0'; /* a named member's children join by name */
    pthread_mutex_unlock(&mt->cfg_lock);
    mt->group = g;
    int rc = mt_thread_start(&g->thread, "memtrim-group", member_main, g);
    if (rc) {
        mt->group = NULL;
        group_free(g);
        *err = mt_strdup("group: cannot start the member's thread");
        return -rc;
    }
    g->started = 1;
    return 0;
}

/* ==== the leader ============================================================ */

static struct group_member *member_by_pid(struct group *g, int pid)
{
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid == pid && pid > 0)
            return &g->m[i];
    return NULL;
}

/* Answer every request to pid with rc (the member left). Under g->lock. */
static void fail_requests(struct group *g, int pid, int rc)
{
    for (int i = 0; i < GROUP_MAX_REQUESTS; i++)
        if (g->req[i].used && !g->req[i].done && g->req[i].pid == pid) {
            g->req[i].done = 1;
            g->req[i].rc = rc;
        }
    pthread_cond_broadcast(&g->cond);
}

/* The channel closed (the member exited, was killed, or exec'd): forget it at once. */
static void member_remove(struct group *g, struct group_member *m)
{
    int pid;
    pthread_mutex_lock(&g->lock);
    pid = m->pid;
    chan_close(m->fd, m->chan); /* not when the number is no longer this channel */
    if (pid > 0) {
        g->left++;
        fail_requests(g, pid, -ECONNRESET);

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
    m->trims++;
    m->rss_after = t->rss_after_bytes;
    if (t->released_bytes > 0)
        m->released += (uint64_t)t->released_bytes;
    pthread_mutex_unlock(&g->lock);
    store_push_trim(&g->mt->store, t);
    store_wake(&g->mt->store);
}

/* m's RSS was rss at now: its peak over about PEAK_NS (what it would hold, had no trim
 * taken it since: group_ahead's in->kept). Locked. */
static void note_peak(struct group_member *m, uint64_t rss, int64_t now)
{
    if (rss >= m->peak_rss || now - m->peak_ns > PEAK_NS) {
        m->peak_rss = rss;
        m->peak_ns = now;
    }
}

static void leader_answer(struct group *g, struct group_member *m, const struct group_msg *msg)
{
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < GROUP_MAX_REQUESTS; i++)
        if (g->req[i].used && g->req[i].id == msg->req_id && g->req[i].pid == m->pid) {
            g->req[i].done = 1;
            g->req[i].rc = msg->arg;
            g->req[i].r = msg->u.trim;
            g->req[i].r.pid = m->pid;
            pthread_cond_broadcast(&g->cond);
        }
    if (m->press_req && msg->req_id == m->press_req) {
        m->press_req = 0;
        if (msg->arg == 0) {
            m->rss_after = msg->u.trim.rss_after_bytes;
            note_peak(m, msg->u.trim.rss_before_bytes, mt_mono_ns());
            m->pressure_trims++;
            g->pressure_trims++;
            if (msg->u.trim.released_bytes > 0)
                g->pressure_released += (uint64_t)msg->u.trim.released_bytes;
        }
    }
    pthread_mutex_unlock(&g->lock);
}

/* A new heap reading in m's snapshot: the RSS it came with (growth since counts). Locked. */
static void note_heap(struct group_member *m)
{
    if (m->snap.heap.timestamp_ms != m->heap_ms_seen) {
        m->heap_ms_seen = m->snap.heap.timestamp_ms;
        m->rss_at_heap = m->snap.cheap.rss_bytes;
    }
}

static void leader_sample(struct group *g, struct group_member *m, const struct mt_snapshot *s,
                          int64_t now, double interval_s)
{
    if (interval_s <= 0 || !store_enabled(&g->mt->store) ||
        now - m->last_sample_ns < (int64_t)(interval_s * MT_SEC))
        return;
    m->last_sample_ns = now;
    struct mt_snapshot copy = *s;
    copy.pid = m->pid;
    store_push_sample(&g->mt->store, &copy);
}

/* A byte count or a time a member may report: the leader adds up to GROUP_MAX_MEMBERS of
 * them in int64_t (rss_sum) and subtracts times (now_ms - heap_ms); 2^56 bytes (64 PiB)
 * and 2^53 ms keep those sums and differences far from overflow. */
#define PEER_BYTES_MAX (UINT64_C(1) << 56)
#define PEER_MS_MAX (INT64_C(1) << 53)

static int peer_bytes_ok(uint64_t v)
{
    return v <= PEER_BYTES_MAX;
}

static int peer_sbytes_ok(int64_t v) /* signed: -1 unknown, or a (negative) difference */
{
    return v >= -(int64_t)PEER_BYTES_MAX && v <= (int64_t)PEER_BYTES_MAX;
}

static int peer_ms_ok(int64_t v)
{
    return v >= 0 && v <= PEER_MS_MAX;
}

/* The figures the leader adds up or subtracts (the group's totals, the policy's inputs). */
static int report_in_range(const struct mt_snapshot *s)
{
    const struct mt_cheap *c = &s->cheap;
    const struct mt_heap *h = &s->heap;
    const uint64_t bytes[] = {c->rss_bytes,          c->rss_anon_bytes,     c->rss_file_bytes,
                              c->swap_bytes,         h->arena_bytes,        h->heap_in_use_bytes,
                              h->heap_free_bytes,    h->heap_mmapped_bytes,
                              s->releasable_estimate_bytes};
    for (size_t i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++)
        if (!peer_bytes_ok(bytes[i]))
            return 0;
    return peer_ms_ok(c->timestamp_ms) && peer_ms_ok(h->timestamp_ms);
}

static int trim_in_range(const struct mt_trim_result *t)
{
    return peer_ms_ok(t->start_ms) && peer_bytes_ok(t->rss_before_bytes) &&
           peer_bytes_ok(t->rss_after_bytes) && peer_bytes_ok(t->heap_free_before_bytes) &&
           peer_bytes_ok(t->heap_free_after_bytes) && peer_sbytes_ok(t->released_bytes) &&
           peer_sbytes_ok(t->refaulted_bytes);
}

/* A member's message as the leader may use it (group.h), or -1 (nonsense: the member is
 * dropped). The member strips its pointers before it sends (snap_strip), but
 * a named group's socket takes any process of this uid: nothing a message
 * says may be followed as a pointer, read past its array, or index a table,
 * nor may its figures overflow what the leader adds up (PEER_*_MAX). */
int group_msg_check(struct group_msg *msg)
{
    switch (msg->kind) {
    case MSG_REPORT: {
        struct mt_snapshot *s = &msg->u.snap;
        snap_strip(s);
        s->allocator_version[sizeof(s->allocator_version) - 1] = '\0';
        if (s->heap.arena_count < -1 || s->heap.arena_count > (1 << 20))
            s->heap.arena_count = -1;
        if (!(s->fragmentation_ratio >= 0 && s->fragmentation_ratio <= 1e9)) /* NaN too */
            s->fragmentation_ratio = 0;
        return report_in_range(s) ? 0 : -1;
    }
    case MSG_TRIM_DONE:
    case MSG_TRIM_ANSWER:
        if (msg->u.trim.trigger < 0 || msg->u.trim.trigger >= MT_TRIGGER_COUNT)
            return -1;
        if (msg->u.trim.arena_count < -1 || msg->u.trim.arena_count > (1 << 20))
            msg->u.trim.arena_count = -1;
        return trim_in_range(&msg->u.trim) ? 0 : -1;
    case MSG_REFAULT:
        if (msg->u.refault.trigger < 0 || msg->u.refault.trigger >= MT_TRIGGER_COUNT)
            return -1;
        return peer_ms_ok(msg->u.refault.start_ms) && peer_sbytes_ok(msg->u.refault.refaulted_bytes)
                   ? 0
                   : -1;
    default:
        return 0;
    }
}

/* One message from member m. Returns -1 when the member must go. */
static int leader_handle(struct group *g, struct group_member *m, struct group_msg *msg,
                         double sample_s)
{
    int64_t now = mt_mono_ns();
    if (group_msg_check(msg) < 0)
        return -1;
    switch (msg->kind) {
    case MSG_HELLO: {
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
        g->joined++;
        msg_init(&w, MSG_WELCOME);
        w.arg = (int32_t)g->joined;
        chan_send(g, m->fd, m->chan, &w);
        if (g->zone) {
            msg_init(&w, MSG_ZONE);
            w.arg = 1;
            chan_send(g, m->fd, m->chan, &w);
        }
        pthread_mutex_unlock(&g->lock);
        mt_log(MT_LOG_DEBUG, "group", "pid %d (%s) joined the group", m->pid, m->program);
        return 0;
    }
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
        leader_store_trim(g, m, &msg->u.trim);
        return 0;
    case MSG_TRIM_ANSWER:
        if (m->pid == 0)
            return -1;
        leader_answer(g, m, msg);
        return 0;
    case MSG_REFAULT:
        if (m->pid == 0)
            return -1;
        msg->u.refault.pid = m->pid;
        store_push_refault(&g->mt->store, &msg->u.refault);
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
    own_snapshot(g->mt, LEADER_TICK_NS, 0, &s);
    s.pid = g->mt->pid;
    pthread_mutex_lock(&g->lock);
    g->m[0].snap = s;
    g->m[0].report_ns = now;
    note_heap(&g->m[0]);
    note_peak(&g->m[0], s.cheap.rss_bytes, now);
    pthread_mutex_unlock(&g->lock);
}

/* The group's totals as one sample for `samples` (the host's view). */
static void leader_total_sample(struct group *g, int64_t now, double sample_s)
{
    if (sample_s <= 0 || !store_enabled(&g->mt->store) || now < g->next_total_ns)
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
    store_push_sample(&g->mt->store, &t);
}

/* Tell every member the zone began or ended (they probe their heap at its pace). */
static void leader_zone(struct group *g, int zone)
{
    struct group_msg msg;
    msg_init(&msg, MSG_ZONE);
    msg.arg = zone;
    atomic_store(&g->mt->group_zone, zone);
    pthread_mutex_lock(&g->lock);
    g->zone = zone;
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid > 0)
            chan_send(g, g->m[i].fd, g->m[i].chan, &msg);
    pthread_mutex_unlock(&g->lock);
}

/* The group's pressure: one member at a time, the largest estimate first. */
static void leader_pressure(struct group *g, int64_t now, const struct mt_config *cfg)
{
    struct group_candidate c[GROUP_MAX_MEMBERS];
    int idx[GROUP_MAX_MEMBERS], n = 0, rule;
    int64_t now_ms = mt_now_ms(), usage = -1, rss_sum = 0, peak_sum = 0, now_sum = 0;
    struct group_pressure_in in = {.now_ns = now, .ratio = cfg->pressure_ratio,
                                   .min_releasable = (uint64_t)cfg->trim_min_releasable_bytes,
                                   .burst_bytes = (uint64_t)cfg->trim_releasable_trigger_bytes};

    pthread_mutex_lock(&g->lock);
    int level = g->m[0].snap.cheap.cgroup_limit_level;
    pthread_mutex_unlock(&g->lock);
    usage = probe_cgroup_usage(&g->mt->cache.cg, level); /* the limit's cgroup, as the kernel */
    pthread_mutex_lock(&g->lock);
    /* Staggered: one request at a time, but a member slow to answer (a loaded node)
     * holds the next one back PRESSURE_STAGGER_NS at most, itself 2 s at most. */
    int waiting = 0;
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        struct group_member *m = &g->m[i];
        if (m->press_req && now - m->press_sent_ns > PRESSURE_TIMEOUT_NS)
            m->press_req = 0;
        if (m->press_req && now - m->press_sent_ns < PRESSURE_STAGGER_NS)
            waiting = 1;
    }
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        const struct group_member *m = &g->m[i];
        if (!m->used || m->pid <= 0 || m->report_ns == 0)
            continue;
        rss_sum += (int64_t)m->snap.cheap.rss_bytes;
        peak_sum += (int64_t)(now - m->peak_ns <= PEAK_NS && m->peak_rss > m->snap.cheap.rss_bytes
                                  ? m->peak_rss
                                  : m->snap.cheap.rss_bytes);
        /* its RSS now: after a pressure trim since its report, what that trim left (its
         * report says what it held before; or the last trim's, lower: less taken off) */
        now_sum += (int64_t)(m->last_trim_ns > m->report_ns && m->rss_after > 0 &&
                                     m->rss_after < m->snap.cheap.rss_bytes
                                 ? m->rss_after
                                 : m->snap.cheap.rss_bytes);
        int64_t heap_ms = m->snap.heap.timestamp_ms;
        c[n] = (struct group_candidate){
            .releasable = heap_ms ? m->snap.releasable_estimate_bytes : 0,
            .estimate_fresh = heap_ms > m->last_trim_ms &&
                              now_ms - heap_ms < GROUP_ESTIMATE_STALE_NS / MT_MS,
            .estimate_after_trim = heap_ms > m->last_trim_ms,
            .rss = m->snap.cheap.rss_bytes,
            .rss_since_estimate = heap_ms && m->snap.cheap.rss_bytes > m->rss_at_heap
                                      ? m->snap.cheap.rss_bytes - m->rss_at_heap
                                      : 0,
            .rss_after_trim = m->rss_after,
            .last_trim_ns = m->last_trim_ns,
            .busy = m->press_req != 0 || waiting,
        };
        idx[n++] = i;
    }
    in.limit = cfg->memory_limit_bytes > 0 ? cfg->memory_limit_bytes
                                           : g->m[0].snap.memory_limit_bytes;
    in.usage = usage >= 0 ? usage : rss_sum;
    if (g->base_usage < 0 || in.usage < g->base_usage)
        g->base_usage = in.usage;
    in.base_usage = g->base_usage;
    group_rise_note(&g->rise, now, in.usage);
    in.rise = group_rise(&g->rise, now);
    /* The members at their peaks, less what their RSS counts twice, or the usage if more
     * (group_kept): the usage less the members' RSS is no measure of the rest (their
     * reports lag the cgroup's reading mid-study). */
    in.kept = group_kept(in.usage, (uint64_t)now_sum, (uint64_t)peak_sum);
    g->usage = in.usage;
    /* Climbing above a quarter of the limit, or by a growth step since the last reading
     * (a study starting far below it: its climb is what group_ahead learns from): the
     * next readings at the zone's tick for a second (a worker fills 80 MB in 50 ms: the
     * 100 ms tick saw the zone half of that late, and a first study's climb not at all). */
    if (in.usage - g->moved_usage >= USAGE_MOVED_BYTES ||
        g->moved_usage - in.usage >= USAGE_MOVED_BYTES) {
        if (in.limit > 0 && in.usage > g->moved_usage &&
            (in.usage >= in.limit / 4 || in.usage - g->moved_usage >= group_growth_step(in.limit)))
            g->moving_until_ns = now + MT_SEC;
        g->moved_usage = in.usage;
    }
    g->limit = in.limit > 0 ? in.limit : -1;
    g->usage_source = usage >= 0 ? "cgroup" : "members";
    int was_zone = g->zone;
    /* Inside the zone, or ahead of it (the last climb, again from here, would reach it):
     * there the members watch their heap, so that a freed study is seen at once. */
    int inside = (in.limit > 0 && cfg->pressure_ratio > 0 &&
                  (uint64_t)in.usage >= pressure_zone_floor(in.limit, cfg->pressure_ratio)) ||
                 group_ahead(&in);
    /* The members keep the zone's pace ZONE_HOLD_NS after the usage left it: a group's
     * usage swings in and out with every study, and the next one must find them fast. */
    if (inside)
        g->zone_seen_ns = now;
    int zone = inside || (was_zone && now - g->zone_seen_ns < ZONE_HOLD_NS);
    int pick = group_pressure_pick(&in, c, n, &rule);
    struct group_member *m = pick >= 0 ? &g->m[idx[pick]] : NULL;
    int fd = -1, pid = 0;
    uint64_t id = 0;
    if (m) {
        m->last_trim_ns = now;
        m->last_trim_ms = now_ms;
        g->base_usage = INT64_MAX; /* growth counts again from the low after this trim */
        pid = m->pid;
        if (!m->self) {
            id = ++g->next_req;
            fd = m->fd;
            m->press_req = id;
            m->press_sent_ns = now;
            g->press_sent_ns = now;
        }
    }
    pthread_mutex_unlock(&g->lock);
    if (zone != was_zone)
        leader_zone(g, zone);
    if (!m)
        return;
    if (atomic_load(&g->mt->suspend_depth) > 0 && !id) {
        trim_count_skip(&g->mt->trims, MT_SKIP_SUSPENDED);
        return;
    }
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
    /* The leader itself: trim here (its sink stores the result with its pid). */
    struct mt_trim_result r;
    if (trim_run_at(&g->mt->trims, &g->mt->cache, MT_TRIGGER_PRESSURE,
                    (uint64_t)cfg->trim_pad_bytes, -1, TRIM_WAIT_IF_BUSY, now, &r, NULL) == 0) {
        pthread_mutex_lock(&g->lock);
        g->m[0].pressure_trims++;
        g->pressure_trims++;
        if (r.released_bytes > 0)
            g->pressure_released += (uint64_t)r.released_bytes;
        pthread_mutex_unlock(&g->lock);
        store_wake(&g->mt->store);
    }
    (void)pid;
}

/* A new member's channel into a free entry (under g->lock); 0, or -1 when the registry is full. */
static int member_add(struct group *g, int fd, int cred_pid)
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
    g->refused++;
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
            g->accept_after_ns = mt_mono_ns() + ACCEPT_PAUSE_NS;
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
            g->refused++;
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

static void *leader_main(void *arg)
{
    struct group *g = arg;
    struct memtrim *mt = g->mt;
    struct pollfd p[GROUP_MAX_MEMBERS + 2];
    struct group_member *who[GROUP_MAX_MEMBERS + 2];
    struct mt_config cfg;
    uint64_t generation;
    pthread_mutex_lock(&mt->cfg_lock);
    cfg = mt->cfg;
    generation = mt->cfg_generation;
    pthread_mutex_unlock(&mt->cfg_lock);

    for (;;) {
        pthread_mutex_lock(&mt->cfg_lock);
        if (generation != mt->cfg_generation) {
            cfg = mt->cfg;
            generation = mt->cfg_generation;
        }
        pthread_mutex_unlock(&mt->cfg_lock);
        int64_t now = mt_mono_ns();
        leader_self_refresh(g, now, cfg.sample_interval_seconds);
        leader_pressure(g, now, &cfg);
        leader_total_sample(g, now, cfg.sample_interval_seconds);

        int n = 0;
        p[n] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        who[n++] = NULL;
        p[n] = (struct pollfd){.fd = now >= g->accept_after_ns ? g->listen_fd : -1,
                               .events = POLLIN}; /* -1: ignored by poll */
        who[n++] = NULL;
        leader_drop_silent(g, now);
        leader_drop_lost(g, now);
        pthread_mutex_lock(&g->lock);
        int zone = g->zone || mt_mono_ns() < g->moving_until_ns, stop = g->stop;
        for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
            if (g->m[i].used && g->m[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = g->m[i].fd, .events = POLLIN};
                who[n++] = &g->m[i];
            }
        pthread_mutex_unlock(&g->lock);
        if (stop)
            break;
        int timeout = (int)((zone ? LEADER_ZONE_TICK_NS : LEADER_TICK_NS) / MT_MS);
        if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR)
            continue;
        if ((p[0].revents & POLLNVAL) || (p[0].revents && !pipe_ours(g, g->wake[0])))
            wake_lost(g);
        else if (p[0].revents)
            drain(g->wake[0]);
        /* the caller's socket, closed by someone else (its number maybe the host's file) */
        if ((p[1].revents & POLLNVAL) ||
            (p[1].revents && !chan_ours(g->listen_fd, g->listen_chan))) {
            chan_lost_log(g->listen_fd, (int)getpid(), "the named group's socket");
            g->listen_fd = -1;
        } else if (p[1].revents) {
            leader_accept(g);
        }
        for (int i = 2; i < n; i++) {
            if (!p[i].revents)
                continue;
            if ((p[i].revents & POLLNVAL) || !chan_ours(who[i]->fd, who[i]->chan)) {
                chan_lost_log(who[i]->fd, who[i]->pid, "a member's channel");
                member_remove(g, who[i]); /* which does not close it: not ours */
                continue;
            }
            leader_read(g, who[i], cfg.sample_interval_seconds);
        }
    }
    return NULL;
}

static int group_lead_with(struct memtrim *mt, int listen_fd, const char *name, int forks_join,
                           char **err)
{
    struct group *g = group_alloc(mt, GROUP_LEADER);
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
    own_snapshot(mt, 0, 0, &g->m[0].snap);
    g->m[0].snap.pid = g->m[0].pid;
    g->m[0].report_ns = mt_mono_ns();
    /* From here on the instance's own trims and samples carry its pid. */
    atomic_store(&mt->record_pid, (int)getpid());
    mt->group = g;
    int rc = mt_thread_start(&g->thread, "memtrim-group", leader_main, g);
    if (rc) {
        atomic_store(&mt->record_pid, 0);
        mt->group = NULL;
        group_free(g);
        *err = mt_strdup("group: cannot start the group thread");
        return -rc;
    }
    g->started = 1;
    if (g->name[0])
        mt_log(MT_LOG_INFO, "group", "pid %ld leads the worker group %s: processes started with "
                                     "GroupName %s join it (one port, one store)",
               (long)getpid(), g->name, g->name);
    else
        mt_log(MT_LOG_INFO, "group", "pid %ld leads a worker group: its forked children join it "
                                     "(one port, one store)", (long)getpid());
    return 0;
}

int group_lead(struct memtrim *mt, char **err)
{
    return group_lead_with(mt, -1, NULL, 1, err);
}

int mt_group_lead_named(struct memtrim *mt, int listen_fd, const char *name, int forks_join,
                        char **err)
{
    if (!mt || mt->group || listen_fd < 0)
        return -EINVAL;
    return group_lead_with(mt, listen_fd, name, forks_join, err);
}

int mt_group_lead(struct memtrim *mt, char **err)
{
    if (!mt || mt->group)
        return -EINVAL;
    return group_lead(mt, err);
}

void group_stop(struct memtrim *mt)
{
    struct group *g = mt->group;
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    g->stop = 1;
    for (int i = 0; i < GROUP_MAX_REQUESTS; i++)
        if (g->req[i].used && !g->req[i].done) {
            g->req[i].done = 1;
            g->req[i].rc = -ESHUTDOWN;
        }
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    wake(g);
    if (g->started)
        pthread_join(g->thread, NULL);
    /* Requests still waiting hold g->lock's cond: let them see ESHUTDOWN first. */
    for (;;) {
        pthread_mutex_lock(&g->lock);
        int waiting = 0;
        for (int i = 0; i < GROUP_MAX_REQUESTS; i++)
            waiting += g->req[i].used;
        pthread_mutex_unlock(&g->lock);
        if (!waiting)
            break;
        struct timespec ms = {0, MT_MS};
        nanosleep(&ms, NULL);
    }
    atomic_store(&mt->record_pid, 0);
    atomic_store(&mt->group_zone, 0);
    mt->group = NULL;
    group_free(g); /* closes the channels: every member sees EOF */
}

void group_count_self(struct memtrim *mt, const struct mt_trim_result *r)
{
    struct group *g = mt->group;
    if (!g || g->role != GROUP_LEADER)
        return;
    pthread_mutex_lock(&g->lock);
    g->m[0].trims++;
    g->m[0].rss_after = r->rss_after_bytes;
    if (r->released_bytes > 0)
        g->m[0].released += (uint64_t)r->released_bytes;
    pthread_mutex_unlock(&g->lock);
}

int mt_pid(void)
{
    return (int)getpid();
}

int mt_group_join_index(struct memtrim *mt)
{
    return mt && mt->group && mt->group->role == GROUP_MEMBER ? atomic_load(&mt->group->index)
                                                                : 0;
}

int group_role(struct memtrim *mt)
{
    return mt && mt->group ? mt->group->role : GROUP_NONE;
}

/* ---- fork ------------------------------------------------------------------ */

void mt_group_fork_prepare(struct memtrim *mt)
{
    struct group *g = mt ? mt->group : NULL;
    /* No SQLite transaction open across fork(): a child that later opens the store (a
     * FollowFork restart, a member taking over) would find its locks in SQLite's
     * per-process state, copied at fork, and the file locked for good. */
    if (mt && !mt->member)
        store_fork_prepare(&mt->store);
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    int wanted = g->role == GROUP_LEADER ? g->forks_join
                                         : g->forks_wait && g->npending < GROUP_MAX_MEMBERS;
    if (g->stop || !wanted ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, g->fork_fds) != 0)
        g->fork_fds[0] = g->fork_fds[1] = -1;
}

void mt_group_fork_parent(struct memtrim *mt)
{
    struct group *g = mt ? mt->group : NULL;
    if (mt && !mt->member)
        store_fork_after(&mt->store);
    if (!g)
        return;
    int added = 0;
    if (g->fork_fds[0] >= 0 && g->role != GROUP_LEADER) {
        close(g->fork_fds[1]);
        g->pending_chan[g->npending] = chan_id(g->fork_fds[0]);
        g->pending[g->npending++] = g->fork_fds[0]; /* room checked in prepare */
        added = 1;
    } else if (g->fork_fds[0] >= 0) {
        close(g->fork_fds[1]);
        added = member_add(g, g->fork_fds[0], 0) == 0;
        if (!added)
            close(g->fork_fds[0]); /* full: the child sees EOF and runs without memtrim */
    }
    g->fork_fds[0] = g->fork_fds[1] = -1;
    pthread_mutex_unlock(&g->lock);
    if (added)
        wake(g);
}

int mt_group_fork_child(struct memtrim *mt, int *waits)
{
    struct group *g = mt ? mt->group : NULL;
    int fd = -1;
    *waits = 0;
    if (mt && !mt->member)
        store_fork_after(&mt->store); /* taken by this thread in prepare */
    if (!g)
        return -1;
    /* Only close() (and fstat, chan_ours): this process has none of the instance's
     * threads. A number the host reused is the child's copy of the host's file: kept. */
    fd = g->fork_fds[1];
    if (g->fork_fds[0] >= 0)
        close(g->fork_fds[0]);
    if (g->role == GROUP_LEADER) {
        for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
            if (g->m[i].used && g->m[i].fd >= 0)
                chan_close(g->m[i].fd, g->m[i].chan);
    } else {
        if (g->fd >= 0 && !atomic_load(&g->fd_lost))
            chan_close(g->fd, g->fd_chan); /* a member's child: the leader's channel is its parent's */
        for (int i = 0; i < g->npending; i++)
            chan_close(g->pending[i], g->pending_chan[i]);
        *waits = fd >= 0; /* its channel leads to a member: it waits to be adopted */
    }
    pthread_mutex_unlock(&g->lock); /* taken by this thread in prepare */
    wake_close(g);
    return fd;
}

int mt_group_take_pending(struct memtrim *mt, int *fds, int cap)
{
    struct group *g = mt ? mt->group : NULL;
    int n = 0;
    if (!g || g->role != GROUP_MEMBER)
        return 0;
    pthread_mutex_lock(&g->lock);
    while (g->npending > 0 && n < cap)
        fds[n++] = g->pending[--g->npending];
    pthread_mutex_unlock(&g->lock);
    return n;
}

int mt_group_hold_pending(struct memtrim *mt, const int *fds, int n)
{
    struct group *g = mt ? mt->group : NULL;
    int held = 0;
    if (!g || g->role != GROUP_MEMBER)
        return 0;
    pthread_mutex_lock(&g->lock);
    while (held < n && g->npending < GROUP_MAX_MEMBERS) {
        g->pending_chan[g->npending] = chan_id(fds[held]);
        g->pending[g->npending++] = fds[held++];
    }
    pthread_mutex_unlock(&g->lock);
    wake(g); /* its thread watches them from now on */
    return held;
}

int mt_group_adopt(struct memtrim *mt, int fd)
{
    struct group *g = mt ? mt->group : NULL;
    struct group_msg msg;
    if (!g || g->role != GROUP_LEADER)
        return -ENOTCONN;
    pthread_mutex_lock(&g->lock);
    int rc = g->stop ? -1 : member_add(g, fd, 0);
    if (rc == 0) { /* the first word on the channel: the waiting child starts its member */
        msg_init(&msg, MSG_ZONE);
        msg.arg = g->zone;
        msg_send(g, fd, &msg);
    }
    pthread_mutex_unlock(&g->lock);
    if (rc)
        return -ENOSPC;
    wake(g);
    return 0;
}

/* ---- the API's view ------------------------------------------------------------ */

int mt_group_info(struct memtrim *mt, struct mt_group_info *info, struct mt_member *out, int cap,
                  int *n)
{
    struct group *g = mt ? mt->group : NULL;
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

int mt_group_trim(struct memtrim *mt, int pid, int64_t pad, struct mt_member_trim *out, int cap,
                  int *n, int64_t *retry_after_ms)
{
    struct group *g = mt ? mt->group : NULL;
    int pids[GROUP_MAX_MEMBERS], np = 0;
    struct mt_config cfg;
    *n = 0;
    if (!g || g->role != GROUP_LEADER)
        return -ENOTCONN;
    mt_config_get(mt, &cfg);
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
        if (pids[i] == mt->pid) {
            memset(o, 0, sizeof(*o));
            o->pid = pids[i];
            uint64_t p = pad >= 0 ? (uint64_t)pad : (uint64_t)cfg.trim_pad_bytes;
            o->rc = trim_run(&mt->trims, &mt->cache, MT_TRIGGER_MANUAL, p, -1, TRIM_WAIT_IF_BUSY,
                             &o->r, NULL);
            o->r.pid = pids[i];
            if (o->rc)
                snprintf(o->error, sizeof(o->error), "%s", strerror(-o->rc));
            else
                store_wake(&mt->store);
        } else {
            request_member(g, pids[i], pad, o);
        }
    }
    pthread_mutex_lock(&g->lock);
    g->last_manual_ns = mt_mono_ns();
    pthread_mutex_unlock(&g->lock);
    return 0;
}
