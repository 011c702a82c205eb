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
 * outright (POLLNVAL). Threads: the test's main thread and the instance's.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "api.h"
#include "core.h"
#include "group.h"
#include "group_peer.h"
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
    CHECK_EQ_INT(mt_group_adopt(mt, pair[0]), 0); /* the group's from here */
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
    CHECK_EQ_INT(mt_group_adopt(mt, pair[0]), 0);
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
    CHECK_EQ_INT(mt_group_hold_pending(mt, &child[0], 1), 1);
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

int main(void)
{
    RUN(test_leader_drops_a_reused_channel_without_closing_it);
    RUN(test_member_drops_reused_channels_without_closing_them);
    return harness_end();
}
