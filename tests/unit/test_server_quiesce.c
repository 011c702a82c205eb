/*
 * test_server_quiesce.c - a stop that meets libmicrohttpd 0.9.75's quiesce race
 * (server/panic.c, server_quiesce): with a pool of threads on epoll, MHD_quiesce_daemon
 * marks a worker quiesced, then removes the listening socket from its epoll set and
 * panics on ENOENT, which the worker makes when it runs its loop in between and removes
 * the socket first. MHD_PANIC is followed by __builtin_unreachable: a handler that
 * returns runs into undefined code (a loaded unit suite once crashed there, SIGSEGV).
 *
 * The race is made, not waited for: this binary's epoll_ctl stands in front of libc's
 * (exported to libmicrohttpd, CMakeLists.txt). When the stopping thread comes to remove
 * the listening socket from a worker's set, it first connects to the server, which wakes
 * that worker, and lets it go on only once the worker removed the socket itself: the
 * order of the real race. The stop must come through (no crash), the race counted as
 * met, the server answering until its stop, and a new server on the same port after it.
 * The control is server/panic.c without its jump: the handler returns into undefined
 * code (a crash, or a stop that goes on with a worker half quiesced).
 *
 * Threads: the test's, and libmicrohttpd's. Files: none.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api.h"
#include "common.h"
#include "harness.h"
#include "internal.h"
#include "server.h"

static atomic_int armed;          /* 1: the stopping thread's next removal makes the race */
static pthread_t stopper;         /* the thread that stops the server */
static atomic_int race_port;      /* the server's port */
static atomic_int race_epfd = -1; /* the worker's set the stopping thread came to */
static atomic_int race_fd = -1;   /* the listening socket it came to remove */
static atomic_int worker_removed; /* that worker removed it itself */
static atomic_int races_made;

static int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

__attribute__((visibility("default"))) int epoll_ctl(int epfd, int op, int fd,
                                                    struct epoll_event *ev)
{
    static int (*real)(int, int, int, struct epoll_event *);
    if (real == NULL)
        real = (int (*)(int, int, int, struct epoll_event *))dlsym(RTLD_NEXT, "epoll_ctl");
    if (op == EPOLL_CTL_DEL && atomic_load(&race_epfd) == epfd && atomic_load(&race_fd) == fd &&
        !pthread_equal(pthread_self(), stopper))
        atomic_store(&worker_removed, 1);
    if (op == EPOLL_CTL_DEL && pthread_equal(pthread_self(), stopper) &&
        atomic_exchange(&armed, 0)) {
        atomic_store(&race_fd, fd);
        atomic_store(&race_epfd, epfd);
        /* A connection wakes the workers; the one of epfd may miss it (the other took it
         * first, and a level-triggered set forgets a socket no longer readable): again,
         * until it ran. */
        int64_t until = mt_mono_ns() + 10 * MT_SEC; /* a hang guard */
        while (!atomic_load(&worker_removed) && mt_mono_ns() < until) {
            int c = connect_port(atomic_load(&race_port));
            for (int64_t next = mt_mono_ns() + MT_SEC / 50;
                 !atomic_load(&worker_removed) && mt_mono_ns() < next;)
                sched_yield();
            if (c >= 0)
                close(c);
        }
        if (atomic_load(&worker_removed))
            atomic_fetch_add(&races_made, 1);
    }
    return real(epfd, op, fd, ev);
}

static struct server *start(int port)
{
    struct server_options opt = {.bind = "127.0.0.1", .port = port, .threads = 2};
    struct server *s = NULL;
    char *err = NULL;
    int rc = server_start(&opt, &api_routes, NULL, NULL, &s, &err);
    CHECK_MSG(rc == 0 && s != NULL, "start: %d %s", rc, err ? err : "");
    free(err);
    return s;
}

/* One request answered: the server serves. */
static int serves(int port)
{
    int fd = connect_port(port);
    if (fd < 0)
        return 0;
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char buf[512];
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n = send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) > 0 ? recv(fd, buf, sizeof(buf) - 1, 0)
                                                                   : -1;
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strncmp(buf, "HTTP/1.1 ", 9) == 0;
}

static void test_stop_meets_the_race(void)
{
    stopper = pthread_self();
    for (int round = 0; round < 5; round++) {
        struct server *s = start(0);
        if (s == NULL)
            return;
        int port = server_port(s);
        CHECK(serves(port));
        atomic_store(&race_port, port);
        atomic_store(&worker_removed, 0);
        atomic_store(&race_epfd, -1);
        atomic_store(&race_fd, -1);
        unsigned before = server_mhd_panics_survived();
        atomic_store(&armed, 1);
        server_stop(s); /* the race is made in its quiesce */
        CHECK_EQ_INT(atomic_load(&races_made), round + 1);
        CHECK_MSG(server_mhd_panics_survived() > before, "round %d: the race was not met", round);
        /* The listening socket was closed once, by us: the port is free for a new server. */
        struct server *again = start(port);
        if (again == NULL)
            return;
        CHECK(serves(port));
        server_stop(again);
    }
}

int main(void)
{
    RUN(test_stop_meets_the_race);
    return harness_end();
}
