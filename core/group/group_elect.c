/*
 * group_elect.c - a named group's "memtrim-named" thread (GroupName, for processes
 * started separately; group_host.c starts it, or a forked child's thread goes on to
 * it). It elects (named.c): the winner holds the group's lock for its life, listens on
 * the group's socket and starts the full instance; the others connect and run as
 * members on that channel; when their leader's end closes they elect again (one takes
 * over, the others join it). The thread ends once this process leads, at exit, or for
 * good on a refusal.
 * Threads: this thread only, besides the fork hooks and the stop. Locks: host.lock
 * (group_host_int.h) guards the rendezvous (host.named, host.named_chan) and
 * host.instance, never across a start or a stop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"
#include "group_host.h"
#include "group_host_int.h"

#define NAMED_RETRY_MS 20    /* a named group's role being taken: ask again this often... */
#define NAMED_RETRY_MAX 500  /* ...for 10 s, then: */
#define NAMED_RETRY_SLOW_MS 1000 /* once a second, for as long as the lock stays held */
#define NAMED_REFUSALS_WARN 5 /* channels closed before a welcome, in a row: said once... */
#define NAMED_REFUSED_MAX_MS 5000 /* ...and asked again on a back-off up to this (#31 F8) */

static void resign(void)
{
    pthread_mutex_lock(&host.lock);
    mt_named_resign(&host.named); /* another member may take the role */
    pthread_mutex_unlock(&host.lock);
}

/* Won the election: serve the port and the store, accept the members. 1 leads, 0 not. */
static int named_lead(void)
{
    void *mt = NULL;
    char *err = NULL;
    /* A leader that was killed closes its descriptors one by one: its port may outlive
     * its lock a moment. */
    for (int i = 0; i < FORK_RETRY_MAX && !group_host_port_free(&host.cfg); i++)
        if (group_host_wait_exiting(FORK_RETRY_MS))
            return 0;
    if (host.ops->create(host.json, &mt, &err) != 0 || !mt) {
        fprintf(stderr, "memtrim: GroupName %s: pid %ld cannot lead the group (see above); "
                        "the program runs on without memtrim\n", host.cfg.group_name,
                (long)getpid());
        free(err);
        resign();
        return 0;
    }
    free(err);
    err = NULL;
    pthread_mutex_lock(&host.lock);
    int listen_fd = host.named.listen_fd;
    pthread_mutex_unlock(&host.lock);
    if (host.ops->lead(mt, listen_fd, host.cfg.group_name,
                       host.cfg.follow_fork && host.cfg.group, &err) != 0) {
        mt_log(MT_LOG_WARNING, "preload", "GroupName %s: %s; memtrim stops in this process",
               host.cfg.group_name, err ? err : "cannot lead");
        free(err);
        host.ops->destroy(mt);
        resign();
        return 0;
    }
    free(err);
    host.ops->serves(mt);
    pthread_mutex_lock(&host.lock);
    if (host.exiting) { /* the stop waits for us; it withdraws the socket after */
        pthread_mutex_unlock(&host.lock);
        host.ops->withdraw(mt);
        host.ops->destroy(mt);
        return 0;
    }
    host.instance = mt;
    pthread_mutex_unlock(&host.lock);
    return 1;
}

/* Connected to the leader: run as a member on that channel. 1 joined, 0 not. */
static int named_join(int fd)
{
    void *mt = NULL;
    char *err = NULL;
    int rc = host.ops->create_member(host.json, fd, group_host_leader_gone, NULL, &mt, &err);
    free(err);
    pthread_mutex_lock(&host.lock);
    host.named_chan = -1; /* the instance's (or closed) from here on */
    if (rc != 0 || !mt) {
        pthread_mutex_unlock(&host.lock);
        fprintf(stderr, "memtrim: GroupName %s: pid %ld did not join the group (see above); "
                        "the program runs on without memtrim\n", host.cfg.group_name,
                (long)getpid());
        return 0;
    }
    if (host.exiting) {
        pthread_mutex_unlock(&host.lock);
        host.ops->destroy(mt);
        return 0;
    }
    host.instance = mt;
    pthread_mutex_unlock(&host.lock);
    mt_log(MT_LOG_DEBUG, "preload", "pid %ld joined the worker group %s", (long)getpid(),
           host.cfg.group_name);
    return 1;
}

/* The lock is held and nobody answers: a leader stopping slowly, or stopped (SIGSTOP, a
 * debugger); or the socket's backlog is full (err says so). Said once, after 10 s. */
static void named_busy_warn(const char *err)
{
    if (err)
        mt_log(MT_LOG_WARNING, "preload", "%s (for %d s now); pid %ld asks again every "
                                          "second",
               err, NAMED_RETRY_MAX * NAMED_RETRY_MS / 1000, (long)getpid());
    else
        mt_log(MT_LOG_WARNING, "preload", "GroupName %s: the group's lock is held but "
                                          "nobody answered on its socket for %d s; pid %ld "
                                          "asks again every second",
               host.cfg.group_name, NAMED_RETRY_MAX * NAMED_RETRY_MS / 1000, (long)getpid());
}

/* Elect until this process leads or is a member: 1, or 0 when memtrim stays off here. */
static int named_attempt(void)
{
    for (int tries = 0;; tries++) {
        int fd = -1;
        char *err = NULL;
        pthread_mutex_lock(&host.lock);
        if (host.exiting) {
            pthread_mutex_unlock(&host.lock);
            return 0;
        }
        int rc = mt_named_elect(&host.named, &fd, &err);
        if (rc == MT_NAMED_MEMBER)
            host.named_chan = fd; /* a fork from here on closes the child's copy */
        pthread_mutex_unlock(&host.lock);
        if (rc == MT_NAMED_LEADER) {
            free(err);
            return named_lead();
        }
        if (rc == MT_NAMED_MEMBER) {
            free(err);
            return named_join(fd);
        }
        if (rc != -EAGAIN) {
            fprintf(stderr, "memtrim: not started: %s\n", err ? err : strerror(-rc));
            free(err);
            return 0;
        }
        /* Ask fast for 10 s, then once a second for as long as it lasts: giving up would
         * leave this process without memtrim until it restarts. */
        if (tries == NAMED_RETRY_MAX)
            named_busy_warn(err);
        free(err);
        if (group_host_wait_exiting(tries >= NAMED_RETRY_MAX ? NAMED_RETRY_SLOW_MS
                                                             : NAMED_RETRY_MS))
            return 0;
    }
}

/* A member whose leader's end closed (mt, stopped here): its refusals in a row, and the
 * back-off before it elects again. 1 when it exits meanwhile. */
static int named_left(void *mt, int *refusals)
{
    /* Closed before its welcome: refused (the group is full, or not ours). */
    *refusals = group_join_index(host.ops->group(mt)) > 0 ? 0 : *refusals + 1;
    host.ops->destroy(mt);
    mt_log(MT_LOG_INFO, "preload", "GroupName %s: the group's leader is gone; pid %ld "
                                   "takes part in choosing the next one",
           host.cfg.group_name, (long)getpid());
    /* Refused (the registry full, maybe of connections that never said hello): ask
     * again on a back-off, never give up for good (a full group frees places). */
    if (*refusals == NAMED_REFUSALS_WARN)
        mt_log(MT_LOG_WARNING, "preload", "GroupName %s: the leader closed the channel "
                                          "before welcoming pid %ld %d times in a row "
                                          "(the group is full?); asking again every "
                                          "%d s at most",
               host.cfg.group_name, (long)getpid(), *refusals, NAMED_REFUSED_MAX_MS / 1000);
    if (!*refusals)
        return 0;
    int backoff = FORK_RETRY_MS << (*refusals < 8 ? *refusals - 1 : 7);
    return group_host_wait_exiting(backoff < NAMED_REFUSED_MAX_MS ? backoff
                                                                  : NAMED_REFUSED_MAX_MS);
}

/*
 * The "memtrim-named" thread: elect; as a member, wait until the leader's end
 * closes, then elect again. Ends once this process leads (the instance stays
 * until exit), at exit, or when memtrim stays off here.
 */
void *group_elect_main(void *arg)
{
    int refusals = 0;
    (void)arg;
    for (;;) {
        void *mt = NULL;
        pthread_mutex_lock(&host.lock);
        while (host.instance && !host.leader_gone && !host.exiting)
            pthread_cond_wait(&host.cond, &host.lock);
        if (host.exiting) { /* the stop destroys host.instance once it joined us */
            pthread_mutex_unlock(&host.lock);
            return NULL;
        }
        if (host.instance && host.leader_gone) {
            mt = host.instance;
            host.instance = NULL;
        }
        host.leader_gone = 0;
        pthread_mutex_unlock(&host.lock);
        if (mt && named_left(mt, &refusals))
            return NULL;
        if (!named_attempt())
            return NULL;
        pthread_mutex_lock(&host.lock);
        int leads = host.named.lock_fd >= 0;
        pthread_mutex_unlock(&host.lock);
        if (leads)
            return NULL;
    }
}
