/*
 * test_group_lost_fd.c - a host that closes descriptors it does not own (a
 * daemon closing "every descriptor" after its fork) frees the number of a
 * worker group's channel, and its next open() may take it. The group thread
 * must then drop that entry without reading or closing the number: a close()
 * would close the host's file. The test plays the host: dup2() puts a pipe of
 * its own on the number of a channel the group holds (atomically: closed
 * elsewhere and reused at once), and after the group dropped the entry the
 * pipe must still be open. The leader's member channel, a member's channel to
 * its leader and a member's waiting child's channel, and a channel closed
 * outright (POLLNVAL); the group thread's wake pipe and a named group's
 * socket, whose numbers the host reuses for its own files (a file it reads,
 * one it writes, its own TCP listener): never read, written, accepted on or
 * closed; and the wake pipe's numbers taken by the host's own opens of that very
 * pipe. Threads: the test's main thread and the instance's.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "api.h"
#include "core.h"
#include "group_int.h"
#include "group_peer.h"
#include "instance.h"
#include "start.h"

#define FAKE_PID 999998
#define JSON "{\"MemoryTrim\": {\"HttpPort\": 0, \"Database\": \"\"}}"

static void send_hello(int fd)
{
    struct group_msg msg;
    peer_msg(&msg, MSG_HELLO, FAKE_PID);
    CHECK(send(fd, &msg, sizeof(msg), MSG_NOSIGNAL) == (ssize_t)sizeof(msg));
}

static int members(struct memtrim *mt)
{
    struct mt_group_info info;
    struct mt_member m[MT_GROUP_MAX];
    int n = 0;
    return mt_group_info(mt, &info, m, MT_GROUP_MAX, &n) == 0 ? info.members : -1;
}

static int is_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

/* The host's pipe on the number `fd`: readable (a byte in it) and, with its write end
 * closed, hung up. Returns the byte's read end, which is `fd` now. */
static void host_takes(int fd)
{
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "h", 1) == 1);
    close(p[1]);
    if (p[0] != fd) { /* (a free number: pipe() took it already) */
        CHECK(dup2(p[0], fd) == fd); /* the channel's file closed, its number reused at once */
        close(p[0]);
    }
}

/* The host's file is untouched: still open, its byte unread. */
static void host_file_intact(int fd)
{
    char c = 0;
    CHECK_MSG(is_open(fd), "descriptor %d, the host's now, was closed by memtrim", fd);
    CHECK_MSG(read(fd, &c, 1) == 1 && c == 'h', "the host's pipe was read");
    close(fd);
}

static void test_leader_drops_a_reused_channel_without_closing_it(void)
{
    struct memtrim *mt = start(JSON);
    if (!mt)
        return;
    char *err = NULL;
    CHECK_EQ_INT(mt_group_lead(mt, &err), 0);
    free(err);
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    CHECK_EQ_INT(group_adopt(mt->group, pair[0]), 0); /* the group's from here */
    send_hello(pair[1]);
    WAIT_FOR(members(mt) == 2, 60);
    CHECK_EQ_INT(members(mt), 2);

    host_takes(pair[0]);
    WAIT_FOR(members(mt) == 1, 60); /* the member is gone from the group... */
    CHECK_EQ_INT(members(mt), 1);
    host_file_intact(pair[0]); /* ...and the host's file is intact */
    close(pair[1]);

    /* Closed outright (POLLNVAL): dropped; nothing closed later when the number is reused. */
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    CHECK_EQ_INT(group_adopt(mt->group, pair[0]), 0);
    send_hello(pair[1]);
    WAIT_FOR(members(mt) == 2, 60);
    CHECK_EQ_INT(members(mt), 2);
    close(pair[0]);
    WAIT_FOR(members(mt) == 1, 60);
    CHECK_EQ_INT(members(mt), 1);
    host_takes(pair[0]);
    mt_destroy(mt); /* its group_free closes what is its own, nothing else */
    host_file_intact(pair[0]);
    close(pair[1]);
}

static pthread_mutex_t gone_lock = PTHREAD_MUTEX_INITIALIZER;
static int gone;

static void on_gone(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gone_lock);
    gone = 1;
    pthread_mutex_unlock(&gone_lock);
}

static int is_gone(void)
{
    pthread_mutex_lock(&gone_lock);
    int g = gone;
    pthread_mutex_unlock(&gone_lock);
    return g;
}

static void test_member_drops_reused_channels_without_closing_them(void)
{
    int leader[2], child[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, leader) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, child) == 0);
    struct memtrim *mt = NULL;
    char *err = NULL;
    CHECK_EQ_INT(mt_create_member(JSON, leader[0], on_gone, NULL, &mt, &err), 0);
    free(err);
    if (!mt)
        return;
    /* A child it forked waits on a channel to it (FollowFork without a GroupName). */
    CHECK_EQ_INT(group_hold_pending(mt->group, &child[0], 1), 1);
    struct group_msg hello;
    CHECK(recv(leader[1], &hello, sizeof(hello), 0) == (ssize_t)sizeof(hello)); /* it runs */

    /* The host takes the child's channel's number, then the leader's: the member leaves
     * the group (its leader's channel is gone) and closes neither of the host's files. */
    host_takes(child[0]);
    host_takes(leader[0]);
    WAIT_FOR(is_gone(), 60);
    CHECK(is_gone());
    mt_destroy(mt);
    host_file_intact(child[0]);
    host_file_intact(leader[0]);
    close(child[1]);
    close(leader[1]);
}

/* The pipes' ends among the open descriptors (3..1023): ino[fd] its pipe's inode, 0
 * for anything else. */
static void pipe_fds(unsigned long ino[1024])
{
    memset(ino, 0, 1024 * sizeof(ino[0]));
    for (int i = 3; i < 1024; i++) {
        char link[64] = "", path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", i);
        if (readlink(path, link, sizeof(link) - 1) > 0 && strncmp(link, "pipe:[", 6) == 0)
            ino[i] = strtoul(link + 6, NULL, 10);
    }
}

/* A temporary file of the host's with `text` in it, its offset at 0. */
static int host_file(const char *text)
{
    char path[] = "/tmp/memtrim-test-lost-fd.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return -1;
    unlink(path);
    size_t n = strlen(text);
    CHECK(write(fd, text, n) == (ssize_t)n);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    return fd;
}

/* mt leads the named group `name` on a listener of its own (*l, the named group's socket):
 * the group's wake pipe is the one pipe that is new (by its inode: a number may have been
 * another file's before), its two ends into *rd and *wr. 0, or -1 (mt destroyed). */
static int lead_named_wake(struct memtrim *mt, const char *tag, const char *name, int *l,
                           int *rd, int *wr)
{
    struct sockaddr_un a;
    socklen_t alen;
    unsigned long before[1024], after[1024];
    char *err = NULL;
    *l = peer_listener(tag, &a, &alen);
    CHECK(*l >= 0);
    pipe_fds(before);
    CHECK_EQ_INT(mt_group_lead_named(mt, *l, name, 0, &err), 0);
    free(err);
    pipe_fds(after);
    *rd = *wr = -1;
    for (int i = 3; i < 1024; i++) {
        int seen = 0;
        for (int k = 3; k < 1024 && after[i] && !seen; k++)
            seen = before[k] == after[i];
        if (!after[i] || seen)
            continue;
        if ((fcntl(i, F_GETFL) & O_ACCMODE) == O_RDONLY)
            *rd = i;
        else
            *wr = i;
    }
    CHECK_MSG(*rd >= 0 && *wr >= 0, "the group's wake pipe was not found (%d, %d)", *rd, *wr);
    if (*rd >= 0 && *wr >= 0)
        return 0;
    mt_destroy(mt);
    return -1;
}

static void test_reused_wake_pipe_and_socket_are_left_alone(void)
{
    struct memtrim *mt = start(JSON);
    int l, rd, wr;
    if (!mt || lead_named_wake(mt, "lost-fd", "lostfd", &l, &rd, &wr) != 0)
        return;
    /* The host closed them and opened its files on the numbers: one it reads, one it
     * writes, and its own TCP listener where the group's socket was. */
    int f = host_file("host data");
    CHECK(dup2(f, rd) == rd);
    close(f);
    f = host_file("");
    CHECK(dup2(f, wr) == wr);
    close(f);
    int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t inlen = sizeof(in);
    CHECK(t >= 0 && bind(t, (struct sockaddr *)&in, sizeof(in)) == 0 && listen(t, 8) == 0 &&
          getsockname(t, (struct sockaddr *)&in, &inlen) == 0);
    CHECK(dup2(t, l) == l);
    close(t);
    /* A client of the host's is waiting on its listener before the group's next turn... */
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(c >= 0 && connect(c, (struct sockaddr *)&in, sizeof(in)) == 0);
    /* ...which a member's hello brings (its adoption wakes the group: wake()). */
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    CHECK_EQ_INT(group_adopt(mt->group, pair[0]), 0);
    send_hello(pair[1]);
    WAIT_FOR(members(mt) == 2, 60);
    CHECK_EQ_INT(members(mt), 2);
    CHECK_MSG(lseek(rd, 0, SEEK_CUR) == 0, "the host's file on the wake pipe's number was read");
    struct stat st;
    CHECK_MSG(fstat(wr, &st) == 0 && st.st_size == 0,
              "the wake pipe's byte was written into the host's file");
    struct pollfd pl = {.fd = l, .events = POLLIN}; /* the host's connection is there */
    CHECK(poll(&pl, 1, 30000) == 1);
    int h = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    CHECK_MSG(h >= 0, "the host's connection was accepted (and closed) by the group: %s",
              strerror(errno));
    if (h >= 0)
        close(h);
    close(c);
    mt_destroy(mt);
    CHECK_MSG(is_open(rd) && is_open(wr) && is_open(l), "a host's file was closed by memtrim");
    close(rd);
    close(wr);
    close(l);
    close(pair[1]);
}

/* The host's open of the pipe at number `fd` (its other end's /proc/self/fd link): the
 * same pipe, a description of the host's; 0, -1 when it cannot. */
static int host_reopens(int fd, int other, int flags)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", other);
    int h = open(link, flags | O_CLOEXEC | O_NONBLOCK);
    int rc = h >= 0 && dup2(h, fd) == fd ? 0 : -1;
    if (h >= 0 && h != fd)
        close(h);
    return rc;
}

/* The wake pipe's two numbers, taken by the host's own opens of that very pipe (the same
 * inode): the group never reads the host's byte, never writes into it, never closes them. */
static void test_wake_pipe_reopened_by_the_host(void)
{
    struct memtrim *mt = start(JSON);
    int l, rd, wr;
    if (!mt || lead_named_wake(mt, "lost-fd-same", "lostfdsame", &l, &rd, &wr) != 0)
        return;
    unsigned long was[1024], now[1024];
    pipe_fds(was);
    /* The read end first (by the write end's link, still memtrim's), then the write end
     * (by the host's read end's): both numbers the host's, on the same pipe. */
    CHECK_EQ_INT(host_reopens(rd, wr, O_RDONLY), 0);
    CHECK_EQ_INT(host_reopens(wr, rd, O_WRONLY), 0);
    pipe_fds(now);
    CHECK_MSG(now[rd] == was[rd] && now[wr] == was[wr], "not the same pipe any more");
    char c = 0;
    while (read(rd, &c, 1) == 1) /* (a wake already in it: the group's own) */
        ;
    CHECK(write(wr, "h", 1) == 1); /* the host's byte, for the host's reader */
    int pair[2]; /* a member's hello wakes the group (its adoption: group_wake) */
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    CHECK_EQ_INT(group_adopt(mt->group, pair[0]), 0);
    send_hello(pair[1]);
    WAIT_FOR(members(mt) == 2, 60);
    CHECK_EQ_INT(members(mt), 2);
    mt_destroy(mt);
    CHECK_MSG(is_open(rd) && is_open(wr), "the host's opens of the pipe were closed by memtrim");
    c = 0;
    CHECK_MSG(read(rd, &c, 1) == 1 && c == 'h', "the host's byte was read by the group");
    CHECK_MSG(read(rd, &c, 1) < 0 && errno == EAGAIN, "the group wrote into the host's pipe");
    close(rd);
    close(wr);
    close(l);
    close(pair[1]);
}

int main(void)
{
    /* The leader polls, and a member reports, every 10 ms instead of 100 and 250 (tests
     * only): a number reused under a poll is seen at the next one, which waited that long. */
    group_test_tick_ns(10 * MT_MS);
    RUN(test_leader_drops_a_reused_channel_without_closing_it);
    RUN(test_member_drops_reused_channels_without_closing_them);
    RUN(test_reused_wake_pipe_and_socket_are_left_alone);
    RUN(test_wake_pipe_reopened_by_the_host);
    return harness_end();
}
