/*
 * group_chan.c - a group's channels (group_int.h): each channel's identity, sends
 * that never block, receives, the group thread's wake pipe, and a member's
 * message checked as data before the leader uses it (group_msg_check).
 *
 * Why a socketpair made at fork: only the two processes hold it (nobody can
 * connect to it, no path, no permissions to get right), it closes by itself
 * when either process dies however it dies (SIGKILL included), so a member
 * that is gone leaves no entry: EOF on its channel removes it. SOCK_SEQPACKET
 * keeps each message whole. Close-on-exec: a child that execs a new program
 * drops its end, and the leader forgets it the same way.
 * Descriptors closed by someone else (a host closing every descriptor): each
 * channel's identity (its socket's inode) is kept; a number that says POLLNVAL
 * or is no longer that socket is dropped without read, send or close (chan_id);
 * so are the wake pipe (pipe_id and the stamp of fdid.h: never read, written or
 * closed once its number is another file, or another open of the same pipe) and
 * a named group's socket (never accepted on).
 * Any thread; what it touches of struct group is atomic (send_dropped) or the
 * caller's to lock (wake_lost takes g->lock).
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
#include "control.h"
#include "fdid.h"
#include "group_int.h"

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

uint64_t chan_id(int fd)
{
    return fd_ino(fd, S_IFSOCK);
}

int chan_ours(int fd, uint64_t id)
{
    return id != 0 && chan_id(fd) == id;
}

/* The wake pipe's identity, as chan_id's: its inode (both ends'), 0 no pipe. */
uint64_t pipe_id(int fd)
{
    return fd_ino(fd, S_IFIFO);
}

/* Its inode, and the stamp wake_pipe_open put on each end's open file description
 * (fdid.h): a host that opened this very pipe again (by the other end's /proc/self/fd
 * link) at a freed number has a description without it. */
int pipe_ours(const struct group *g, int fd)
{
    return g->wake_id != 0 && pipe_id(fd) == g->wake_id && mt_fdid_stamped(fd);
}

/* Both ends of the wake pipe, each only while its number is still the pipe. */
void wake_close(struct group *g)
{
    if (pipe_ours(g, g->wake[0]))
        close(g->wake[0]);
    if (pipe_ours(g, g->wake[1]))
        close(g->wake[1]);
}

void chan_close(int fd, uint64_t id)
{
    if (chan_ours(fd, id))
        close(fd);
}

void chan_lost_log(int fd, int pid, const char *what)
{
    mt_log(MT_LOG_WARNING, "group", "descriptor %d, %s (pid %d), was closed by someone else in "
                                    "pid %ld (the host?): dropped from the group, left alone",
           fd, what, pid, (long)getpid());
}

void msg_init(struct group_msg *msg, int kind)
{
    memset(msg, 0, sizeof(*msg));
    msg->magic = GROUP_MAGIC;
    msg->version = GROUP_VERSION;
    msg->kind = (uint16_t)kind;
    msg->pid = (int32_t)getpid();
}

/* Non-blocking: a channel that is full drops the message (counted), never waits. */
int msg_send(struct group *g, int fd, const struct group_msg *msg)
{
    ssize_t n = send(fd, msg, sizeof(*msg), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)sizeof(*msg))
        return 0;
    atomic_fetch_add(&g->send_dropped, 1);
    return n < 0 ? -errno : -EIO;
}

/* To a channel only while its number is still that channel (chan_id): else dropped. */
int chan_send(struct group *g, int fd, uint64_t chan, const struct group_msg *msg)
{
    if (!chan_ours(fd, chan)) {
        atomic_fetch_add(&g->send_dropped, 1);
        return -EBADF;
    }
    return msg_send(g, fd, msg);
}

/* 1 with *msg, 0 nothing to read now, -1 the channel closed or spoke nonsense. */
int msg_recv(int fd, struct group_msg *msg)
{
    ssize_t n = recv(fd, msg, sizeof(*msg), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n != (ssize_t)sizeof(*msg) || msg->magic != GROUP_MAGIC || msg->version != GROUP_VERSION)
        return -1;
    return 1;
}

/* Pointers in a snapshot are this process's: the other end must not follow them. */
void snap_strip(struct mt_snapshot *s)
{
    s->allocator = NULL;
    s->allocator_release = NULL;
    s->heap.allocator = NULL;
    s->heap.nfigures = 0;
    memset(s->heap.figures, 0, sizeof(s->heap.figures));
}

void group_wake(struct group *g)
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
void wake_lost(struct group *g)
{
    pthread_mutex_lock(&g->lock);
    chan_lost_log(g->wake[0], (int)getpid(), "the group thread's wake pipe");
    g->wake[0] = -1;
    pthread_mutex_unlock(&g->lock);
}

void wake_drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}

/* Each end stamped (pipe_ours), or none kept. */
int wake_pipe_open(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        return -errno;
    int rc = mt_fdid_stamp(fds[0]);
    if (rc == 0)
        rc = mt_fdid_stamp(fds[1]);
    if (rc == 0)
        return 0;
    close(fds[0]);
    close(fds[1]);
    return rc;
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

/* A time the leader stores (a trim's start, a reading's): the members share its clock,
 * so it lies within the last day or a minute ahead (a step of the wall clock). One dated
 * years ahead would outlive every retention (#31 F6: year 287,396). 0: none (a reading
 * not taken) where zero_ok. */
#define PEER_PAST_MS (24LL * 3600 * 1000)
#define PEER_AHEAD_MS (60LL * 1000)

static int peer_ms_near(int64_t v, int zero_ok)
{
    if (v == 0 && zero_ok)
        return 1;
    int64_t now = mt_now_ms();
    return peer_ms_ok(v) && v >= now - PEER_PAST_MS && v <= now + PEER_AHEAD_MS;
}

/* The figures the leader adds up or subtracts (the group's totals, the policy's inputs). */
static int report_in_range(const struct mt_snapshot *s)
{
    const struct mt_cheap *c = &s->cheap;
    const struct mt_heap *h = &s->heap;
    const uint64_t bytes[] = {c->rss_bytes,          c->rss_peak_bytes,     c->rss_anon_bytes,
                              c->rss_file_bytes,
                              c->swap_bytes,         h->arena_bytes,        h->heap_in_use_bytes,
                              h->heap_free_bytes,    h->heap_mmapped_bytes,
                              s->releasable_estimate_bytes,
                              s->saved.rss_without_memtrim_bytes, s->saved.saved_bytes,
                              s->saved.rss_peak_bytes, s->saved.rss_without_memtrim_peak_bytes};
    for (size_t i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++)
        if (!peer_bytes_ok(bytes[i]))
            return 0;
    return peer_ms_near(c->timestamp_ms, 1) && peer_ms_near(h->timestamp_ms, 1);
}

/* A trim id in [0, MT_TRIM_ID_MAX] (0: a failed trim's answer): stored, an id near
 * INT64_MAX once made the leader's next id overflow after a restart (trim.c). */
static int peer_id_ok(int64_t id)
{
    return id >= 0 && id <= MT_TRIM_ID_MAX;
}

static int trim_in_range(const struct mt_trim_result *t)
{
    return peer_id_ok(t->id) && peer_ms_ok(t->start_ms) && peer_bytes_ok(t->rss_before_bytes) &&
           peer_bytes_ok(t->rss_after_bytes) && peer_bytes_ok(t->heap_free_before_bytes) &&
           peer_bytes_ok(t->heap_free_after_bytes) && peer_sbytes_ok(t->released_bytes) &&
           peer_sbytes_ok(t->refaulted_bytes) && t->nothing_reason >= 0 &&
           t->nothing_reason < MT_NOTHING_COUNT;
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
        if ((s->cheap.read_errno < -4095 || s->cheap.read_errno > 0) && /* a negative errno, or 0 */
            !mt_control("eng-msg-errno"))
            s->cheap.read_errno = -EIO; /* (-INT_MIN, as a reading's error, is no int) */
        if (!(s->fragmentation_ratio >= 0 && s->fragmentation_ratio <= 1e9)) /* NaN too */
            s->fragmentation_ratio = 0;
        if (!(s->saved.saved_byte_seconds_total >= 0 && s->saved.saved_byte_seconds_total <= 1e30))
            s->saved.saved_byte_seconds_total = 0;
        if (!report_in_range(s))
            return -1;
        /* what it saved: the counterfactual is its RSS + saved in every view, whatever it sent */
        s->saved.rss_without_memtrim_bytes = s->cheap.rss_bytes + s->saved.saved_bytes;
        return 0;
    }
    case MSG_TRIM_DONE:
    case MSG_TRIM_ANSWER:
    case MSG_TRIM_OWN:
        if (msg->u.trim.trigger < 0 || msg->u.trim.trigger >= MT_TRIGGER_COUNT)
            return -1;
        if (msg->u.trim.arena_count < -1 || msg->u.trim.arena_count > (1 << 20))
            msg->u.trim.arena_count = -1;
        if (msg->kind == MSG_TRIM_DONE && !peer_ms_near(msg->u.trim.start_ms, 0))
            return -1; /* stored: dated now */
        return trim_in_range(&msg->u.trim) ? 0 : -1;
    case MSG_REFAULT:
        if (msg->u.refault.trigger < 0 || msg->u.refault.trigger >= MT_TRIGGER_COUNT)
            return -1;
        return peer_id_ok(msg->u.refault.id) && peer_ms_near(msg->u.refault.start_ms, 0) &&
                       peer_sbytes_ok(msg->u.refault.refaulted_bytes)
                   ? 0
                   : -1;
    default:
        return 0;
    }
}
