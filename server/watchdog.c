/*
 * watchdog.c - DESIGN. The request deadline (RequestTimeoutSeconds).
 * libmicrohttpd's connection timeout counts idle time only: a client that
 * sends one header byte every few seconds holds its connection, and one of
 * the host's file descriptors, for ever. Every connection is listed here
 * from its start (MHD's connection notification) with a deadline for its
 * request line, headers and body to arrive whole; the deadline stops while
 * the handler and the reply run, and restarts for the next request of a
 * kept-alive connection. One thread of ours sleeps until the earliest
 * deadline (for ever while none is armed) and shuts down the socket of a
 * connection past it; MHD then closes that connection as one whose client
 * went away.
 *
 * The same list is what the connection limits count (conns.c): a connection
 * whose deadline is armed is one the server waits on.
 *
 * Locks: w->lock guards the list and the counters. MHD's close notification
 * removes a connection under it before MHD closes the descriptor, so a
 * shutdown never reaches a descriptor the host has reused.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "mt_alloc.h"
#include "common.h"
#include "internal.h"

#define WATCHDOG_LOG_EVERY_NS (60 * MT_SEC)

static int64_t watchdog_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * MT_SEC + ts.tv_nsec;
}

/* Shut the connection's socket down while its number is still that socket (the host may
 * have closed it and opened a file of its own there: common/fdid.h). */
void server_conn_shutdown(struct server_conn *c)
{
    if (mt_fdid_is(c->fd, &c->fd_id))
        shutdown(c->fd, SHUT_RDWR);
}

/* Cut what is past its deadline; the earliest deadline still armed (0 = none). Locked. */
static int64_t watchdog_sweep(struct server_watchdog *w, int64_t now)
{
    int64_t next = 0;
    for (struct server_conn *c = w->head.next; c != &w->head; c = c->next) {
        if (c->deadline_ns == 0)
            continue;
        if (c->deadline_ns <= now) {
            server_conn_shutdown(c);
            c->deadline_ns = 0;
            c->gone = 1;
            w->cut++;
        } else if (next == 0 || c->deadline_ns < next) {
            next = c->deadline_ns;
        }
    }
    return next;
}

static void *watchdog_main(void *arg)
{
    struct server_watchdog *w = arg;
    uint64_t logged = 0;
    int64_t logged_at = 0;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        int64_t now = watchdog_now();
        int64_t next = watchdog_sweep(w, now);
        if (w->cut != logged && (logged_at == 0 || now - logged_at >= WATCHDOG_LOG_EVERY_NS)) {
            /* At most one line a minute, however many a flood makes us cut. */
            mt_log(MT_LOG_WARNING, "server",
                   "cut %llu connection(s) that did not send a whole request within %lld s "
                   "(RequestTimeoutSeconds)",
                   (unsigned long long)(w->cut - logged), (long long)(w->timeout_ns / MT_SEC));
            logged = w->cut;
            logged_at = now;
        }
        w->idle = next == 0;
        if (next == 0) {
            pthread_cond_wait(&w->cond, &w->lock);
        } else {
            struct timespec ts = {.tv_sec = (time_t)(next / MT_SEC), .tv_nsec = (long)(next % MT_SEC)};
            pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        }
        w->idle = 0;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int server_watchdog_start(struct server_watchdog *w, int timeout_seconds)
{
    pthread_condattr_t attr;
    memset(w, 0, sizeof(*w));
    w->head.next = w->head.prev = &w->head;
    w->timeout_ns = (int64_t)(timeout_seconds > 0 ? timeout_seconds : 10) * MT_SEC;
    w->limits.cap = w->limits.per_addr = w->limits.hard = ~0u; /* server.c sets them */
    mt_log_limit_init(&w->evict_log, WATCHDOG_LOG_EVERY_NS, 1);
    mt_log_limit_init(&w->refuse_log, WATCHDOG_LOG_EVERY_NS, 1);
    if (pthread_mutex_init(&w->lock, NULL))
        return -ENOMEM;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (rc == 0 && (rc = mt_thread_start(&w->thread, "memtrim-httpdog", watchdog_main, w)) != 0)
        pthread_cond_destroy(&w->cond);
    if (rc != 0) {
        pthread_mutex_destroy(&w->lock);
        return -rc;
    }
    w->started = 1;
    return 0;
}

/* After MHD has stopped: every connection has been removed. */
void server_watchdog_stop(struct server_watchdog *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    w->started = 0;
}

/* Arm (on) or stop a connection's deadline. Locked. */
static void watchdog_arm_locked(struct server_watchdog *w, struct server_conn *c, int on)
{
    if (c->gone)
        return; /* shut down already: neither waiting nor busy */
    c->deadline_ns = on ? watchdog_now() + w->timeout_ns : 0;
    if (on && w->idle) /* later deadlines than those armed need no wake */
        pthread_cond_signal(&w->cond);
}

struct server_conn *server_watchdog_add(struct server_watchdog *w, int fd,
                                        const struct server_addr_key *key)
{
    struct server_conn *c = mt_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->fd = fd;
    mt_fdid_take(fd, &c->fd_id); /* on MHD's thread, as it hands the new socket over */
    if (key != NULL)
        c->key = *key;
    pthread_mutex_lock(&w->lock);
    c->next = &w->head;
    c->prev = w->head.prev;
    w->head.prev->next = c;
    w->head.prev = c;
    watchdog_arm_locked(w, c, 1);
    pthread_mutex_unlock(&w->lock);
    return c;
}

void server_watchdog_remove(struct server_watchdog *w, struct server_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    pthread_mutex_unlock(&w->lock);
    free(c);
}

void server_watchdog_arm(struct server_watchdog *w, struct server_conn *c, int on)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    if (on)
        c->served = 1; /* re-armed after a request: idle kept-alive from now */
    watchdog_arm_locked(w, c, on);
    pthread_mutex_unlock(&w->lock);
}

uint64_t server_watchdog_cut(struct server_watchdog *w)
{
    pthread_mutex_lock(&w->lock);
    uint64_t n = w->cut;
    pthread_mutex_unlock(&w->lock);
    return n;
}
