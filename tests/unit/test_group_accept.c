/*
 * test_group_accept.c - a named group's leader whose accept fails for want
 * of descriptors (EMFILE: the host ran out) must not spin: the connection
 * stays queued and the socket readable, so polling it again at once made the
 * "memtrim-group" thread loop (each turn reading the cgroup's usage). This
 * binary's own accept4 (memtrim's static libraries take the call from it)
 * fails with EMFILE on the group's socket while the test says so and counts
 * the calls; the test plays a member over a socketpair (group_adopt) and
 * wakes the leader 20 times with reports, each waited for in mt_group_info:
 * the pause after a failed accept is an hour here (group_test_accept_pause_ns), so
 * the failing accept must not have been retried at all meanwhile (no time window:
 * a count that must be 0). Then the pause is 1 ns and accept works again: at the
 * leader's next wake-up the queued process joins. Control suite-accept-no-pause
 * (the pause not taken, dc8f874's defect): thousands of retries. And a process in a
 * pid namespace the leader's does not contain (SO_PEERCRED's pid 0) is
 * refused: real namespaces (unshare, as root), the leader pid 1 in its own.
 * Threads: the test's main thread and the instance's; the counters are atomics.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "api.h"
#include "core.h"
#include "group_int.h"
#include "group_peer.h"
#include "instance.h"
#include "start.h"

#define FAKE_PID 999999 /* the test's member (its hello's word: an adopted channel) */
#define ROUNDS 20

static atomic_int listen_fd = -1, failing, calls;

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    if (fd == atomic_load(&listen_fd)) {
        atomic_fetch_add(&calls, 1);
        if (atomic_load(&failing)) {
            errno = EMFILE;
            return -1;
        }
    }
    return (int)syscall(SYS_accept4, fd, addr, len, flags);
}

static void send_msg(int fd, int kind, uint64_t rss)
{
    struct group_msg msg;
    peer_msg(&msg, kind, FAKE_PID);
    msg.u.snap.cheap.rss_bytes = rss;
    CHECK(send(fd, &msg, sizeof(msg), MSG_NOSIGNAL) == (ssize_t)sizeof(msg));
}

/* 1 when the leader shows the test's member with rss (the report was handled). */
static int shows(struct memtrim *mt, uint64_t rss)
{
    struct mt_group_info info;
    struct mt_member m[MT_GROUP_MAX];
    int n = 0;
    if (mt_group_info(mt, &info, m, MT_GROUP_MAX, &n) != 0)
        return 0;
    for (int i = 0; i < n; i++)
        if (m[i].pid == FAKE_PID && m[i].snap.cheap.rss_bytes == rss)
            return 1;
    return 0;
}

static int members(struct memtrim *mt)
{
    struct mt_group_info info;
    struct mt_member m[MT_GROUP_MAX];
    int n = 0;
    return mt_group_info(mt, &info, m, MT_GROUP_MAX, &n) == 0 ? info.members : -1;
}

static void test_accept_out_of_descriptors_does_not_spin(void)
{
    /* The pause is an hour: no retry may come during the ROUNDS wake-ups, however slow. */
    group_test_accept_pause_ns(3600 * MT_SEC);
    struct memtrim *mt = start("{\"MemoryTrim\": {\"HttpPort\": 0, \"Database\": \"\"}}");
    if (!mt)
        return;
    struct sockaddr_un a;
    socklen_t alen;
    int l = peer_listener("accept", &a, &alen); /* the group's socket: abstract (no file) */
    CHECK(l >= 0);
    atomic_store(&listen_fd, l);
    char *err = NULL;
    CHECK_EQ_INT(mt_group_lead_named(mt, l, "accept", 0, &err), 0);
    free(err);

    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    CHECK_EQ_INT(group_adopt(mt->group, pair[0]), 0); /* the leader owns pair[0] from here */
    send_msg(pair[1], MSG_HELLO, 0);
    WAIT_FOR(members(mt) == 2, 60);
    CHECK_EQ_INT(members(mt), 2);

    /* A process connects and says hello; the leader's accept fails: no descriptor left. */
    atomic_store(&failing, 1);
    int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(c >= 0 && connect(c, (struct sockaddr *)&a, alen) == 0);
    send_msg(c, MSG_HELLO, 0);
    WAIT_FOR(atomic_load(&calls) >= 1, 60);
    CHECK(atomic_load(&calls) >= 1);
    int before = atomic_load(&calls);
    for (uint64_t i = 1; i <= ROUNDS; i++) { /* each one wakes the leader at least once */
        send_msg(pair[1], MSG_REPORT, i << 20);
        WAIT_FOR(shows(mt, i << 20), 60);
        CHECK(shows(mt, i << 20));
    }
    int retried = atomic_load(&calls) - before;
    CHECK_MSG(retried == 0, "accept retried %d times over %d wake-ups within its pause",
              retried, ROUNDS);

    /* Descriptors again, and the pause over (1 ns): at its next wake-up the leader accepts
     * the queued process, which joins. */
    atomic_store(&failing, 0);
    group_test_accept_pause_ns(1);
    send_msg(pair[1], MSG_REPORT, (uint64_t)(ROUNDS + 1) << 20);
    WAIT_FOR(members(mt) == 3, 60);
    CHECK_EQ_INT(members(mt), 3);

    mt_destroy(mt);
    group_test_accept_pause_ns(0);
    atomic_store(&listen_fd, -1);
    close(l);
    close(c);
    close(pair[1]);
}

static int refused(struct memtrim *mt)
{
    struct mt_group_info info;
    struct mt_member m[MT_GROUP_MAX];
    int n = 0;
    return mt_group_info(mt, &info, m, MT_GROUP_MAX, &n) == 0 ? (int)info.refused : -1;
}

/* The leader, in a pid namespace of its own (pid 1 there): a process outside it connects
 * and says hello with a pid of its own namespace; the kernel's SO_PEERCRED gives pid 0.
 * The exit status: the checks' (harness_end). */
static int pidns_leader(const struct sockaddr_un *a, socklen_t alen, int ready)
{
    struct memtrim *mt = start("{\"MemoryTrim\": {\"HttpPort\": 0, \"Database\": \"\"}}");
    if (!mt)
        return harness_end();
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    CHECK(l >= 0 && bind(l, (const struct sockaddr *)a, alen) == 0 && listen(l, 8) == 0);
    char *err = NULL;
    CHECK_EQ_INT(mt_group_lead_named(mt, l, "pidns", 0, &err), 0);
    free(err);
    CHECK(write(ready, "r", 1) == 1);
    WAIT_FOR(refused(mt) >= 1 || members(mt) >= 2, 60);
    CHECK_EQ_INT(refused(mt), 1);
    CHECK_EQ_INT(members(mt), 1); /* the leader alone: the claimed pid is nobody's here */
    mt_destroy(mt);
    close(l);
    int rc = harness_end();
    fflush(NULL); /* its caller _exits */
    return rc;
}

static void test_peer_in_another_pid_namespace_is_refused(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "memtrim-test-pidns-%ld", (long)getpid());
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1));
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t outer = fork(); /* unshare(CLONE_NEWPID) there: this process may start threads */
    CHECK(outer >= 0);
    if (outer == 0) {
        close(ready[0]);
        if (unshare(CLONE_NEWPID) != 0) {
            fprintf(stderr, "unshare(CLONE_NEWPID): %s (needs CAP_SYS_ADMIN: CI runs as root)\n",
                    strerror(errno));
            _exit(1);
        }
        pid_t leader = fork(); /* pid 1 of the new namespace */
        if (leader == 0)
            _exit(pidns_leader(&a, alen, ready[1]));
        int st = 0;
        _exit(leader > 0 && waitpid(leader, &st, 0) == leader && WIFEXITED(st) ? WEXITSTATUS(st)
                                                                             : 1);
    }
    close(ready[1]);
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1); /* the leader listens */
    close(ready[0]);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, alen) == 0);
    /* Its hello says "pid FAKE_PID": a claim the leader cannot check. The leader may have
     * closed the connection already (EPIPE): then the hello is not needed. */
    struct group_msg msg;
    peer_msg(&msg, MSG_HELLO, FAKE_PID);
    ssize_t sent = send(fd, &msg, sizeof(msg), MSG_NOSIGNAL);
    CHECK_MSG(sent == (ssize_t)sizeof(msg) || errno == EPIPE, "send: %s", strerror(errno));
    struct timeval tv = {.tv_sec = 30};
    CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
    ssize_t r = recv(fd, &msg, sizeof(msg), 0); /* closed: 0, or ECONNRESET (hello unread) */
    CHECK_MSG(r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE)),
              "the leader welcomed a peer it has no pid for (recv %zd: %s)", r,
              r < 0 ? strerror(errno) : "a message");
    close(fd);
    int st = 0;
    CHECK(waitpid(outer, &st, 0) == outer);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the leader's checks (above) failed: %d", st);
}

int main(void)
{
    RUN(test_peer_in_another_pid_namespace_is_refused); /* first: it forks, no thread yet */
    RUN(test_accept_out_of_descriptors_does_not_spin);
    return harness_end();
}
