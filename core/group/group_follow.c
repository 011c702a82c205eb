/*
 * group_follow.c - a forked child's "memtrim-fork" thread (FollowFork; started by
 * group_host.c's fork hook). With a channel to its parent's group it runs as a member
 * (no port, no store), then waits: when the leader's end closes (it exited), the member
 * stops and, first in the join order, takes the port over as the new leader
 * (docs/groups.md); the channels of the children it forked meanwhile are adopted by
 * that leader. A child forked by a member waits on its channel until its parent leads
 * (adopted) or closes it. Without a channel: FollowFork's restart, once the parent frees
 * the port. A named group's member goes on to its election (group_elect.c).
 * Threads: this thread only, besides the fork hooks and the stop. Locks: host.lock
 * (group_host_int.h), never across a start or a stop.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "group.h"
#include "group_host.h"
#include "group_host_int.h"

/* 1 while pid runs (a zombie has closed its files: it does not). */
static int process_running(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

/*
 * The member's leader left (its instance stopped, in join order index): wait until it
 * is gone for good, then take the turn in the join order. 1 when this process should
 * try to take the port over, 0 when memtrim stays off here (or it exits).
 */
static int takeover_turn(pid_t leader, int index)
{
    /* Until the leader is gone for good: the kernel re-parents us after it closed its
     * files, so its store's locks are released by then (at most 5 s). */
    for (int i = 0; i < 250 && (getppid() == leader || process_running(leader)); i++)
        if (group_host_wait_exiting(20))
            return 0; /* this process exits meanwhile: its exit must not wait 5 s for us */
    /* Members take over in their join order, 300 ms apart: the first binds the port,
     * the others then find it taken and stay off, without racing each other for it. */
    struct timespec pause = {0, FORK_RETRY_MS * 1000000L};
    for (int i = 0; i < 3 * (index > 1 ? (index - 1) % 16 : 0); i++) {
        nanosleep(&pause, NULL);
        if (group_host_exiting())
            return 0;
    }
    if (!group_host_port_free(&host.cfg)) {
        mt_log(MT_LOG_INFO, "preload", "pid %ld: the group's leader exited and port %d is "
                                       "served again; memtrim stays off in this process",
               (long)getpid(), host.cfg.http_port);
        return 0;
    }
    return 1;
}

/*
 * A member of its parent's group until the leader goes; 1 when this process
 * should then try to take the port over (the caller goes on as a FollowFork
 * restart), 2 when a named group elects its next leader, 0 when it is done
 * (exiting, or the member could not start).
 */
static int run_member(int fd)
{
    void *mt = NULL;
    char *err = NULL;
    pid_t leader = getppid(); /* the process that forked us leads the group */
    int rc = host.ops->create_member(host.json, fd, group_host_leader_gone, NULL, &mt, &err);
    free(err);
    if (rc != 0 || !mt) {
        fprintf(stderr, "memtrim: FollowFork: pid %ld did not join its parent's group (see "
                        "above); the program runs on without memtrim\n", (long)getpid());
        return 0;
    }
    pthread_mutex_lock(&host.lock);
    host.instance = mt;
    /* Children forked before the member started waited on channels to us: it watches them. */
    int held = group_hold_pending(host.ops->group(mt), host.adopt_fds, host.adopt_n);
    for (int i = held; i < host.adopt_n; i++)
        close(host.adopt_fds[i]);
    host.adopt_n = 0;
    host.adopting = 0;
    while (!host.leader_gone && !host.exiting)
        pthread_cond_wait(&host.cond, &host.lock);
    if (host.exiting) { /* the stop destroys host.instance once it joined us */
        pthread_mutex_unlock(&host.lock);
        return 0;
    }
    host.instance = NULL;
    if (!group_host_named(&host.cfg)) { /* its waiting children: adopted if it leads */
        host.adopting = 1;
        host.adopt_n += group_take_pending(host.ops->group(mt), host.adopt_fds + host.adopt_n,
                                           MT_GROUP_MAX - host.adopt_n);
    }
    pthread_mutex_unlock(&host.lock);
    int index = group_join_index(host.ops->group(mt));
    host.ops->destroy(mt);
    if (group_host_named(&host.cfg))
        return 2; /* the named group elects its next leader (group_elect.c) */
    return takeover_turn(leader, index);
}

/* The waiting children's channels into leader mt's registry (NULL: closed; they stay off). */
static void adopt_finish(void *mt)
{
    pthread_mutex_lock(&host.lock);
    int adopted = 0;
    for (int i = 0; i < host.adopt_n; i++) {
        if (mt && group_adopt(host.ops->group(mt), host.adopt_fds[i]) == 0)
            adopted++;
        else
            close(host.adopt_fds[i]);
    }
    if (adopted)
        mt_log(MT_LOG_DEBUG, "preload", "the new leader pid %ld adopts %d children that "
                                        "waited for it", (long)getpid(), adopted);
    host.adopt_n = 0;
    host.adopting = 0;
    pthread_mutex_unlock(&host.lock);
}

/* A child forked by a member: 1 once its parent, now the leader, adopted its channel. */
static int wait_adopted(int fd)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, FORK_RETRY_MS) < 0 && errno != EINTR)
            p.revents = POLLERR;
        if (p.revents & POLLIN)
            return 1;
        int stop = group_host_exiting();
        if (stop || (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
            if (!(p.revents & POLLNVAL)) /* closed by someone else: the number is not ours */
                close(fd);
            if (!stop)
                mt_log(MT_LOG_DEBUG, "preload", "pid %ld: forked by a member of a worker "
                                                "group that did not take it over: memtrim "
                                                "stays off in this process", (long)getpid());
            return 0;
        }
    }
}

/* FollowFork's restart (or a member's takeover): once the port is free, this process's
 * own instance; leading its forked children when the configuration asks. */
static void restart_instance(void)
{
    struct timespec pause = {0, FORK_RETRY_MS * 1000000L};
    void *mt = NULL;
    char *err = NULL;

    for (int i = 0; i < FORK_RETRY_MAX && !group_host_port_free(&host.cfg); i++) {
        nanosleep(&pause, NULL);
        if (group_host_exiting())
            return;
    }
    if (group_host_held_by_ancestor(&host.cfg))
        return; /* a parent that lives on keeps the port: said once, not an error */
    if (host.ops->create(host.json, &mt, &err) != 0)
        fprintf(stderr, "memtrim: FollowFork: not restarted in child %ld (see above); "
                        "the program runs on without memtrim\n", (long)getpid());
    free(err);
    if (mt && group_host_forks_join(&host.cfg)) { /* the new leader: its own forks join it */
        err = NULL;
        if (host.ops->lead(mt, -1, NULL, 1, &err) != 0)
            mt_log(MT_LOG_WARNING, "preload", "%s; forked children will not join a group",
                   err ? err : "group: cannot lead");
        else
            adopt_finish(mt);
        free(err);
    }
    if (mt)
        host.ops->serves(mt);
    pthread_mutex_lock(&host.lock);
    if (host.exiting) { /* the stop is waiting for us: stop what we started */
        pthread_mutex_unlock(&host.lock);
        if (mt) {
            host.ops->withdraw(mt);
            host.ops->destroy(mt);
        }
        return;
    }
    host.instance = mt;
    pthread_mutex_unlock(&host.lock);
}

static void *follow_run(void *arg)
{
    pthread_mutex_lock(&host.lock);
    int fd = host.member_fd, waits = host.member_waits;
    host.member_fd = -1;
    /* Nothing until the child has lived a while; exiting meanwhile, it leaves the
     * channel to the kernel's close at exit (the leader then sees its end close). */
    if (group_host_wait_exiting_locked(FORK_JOIN_DELAY_MS) &&
        host.exiting_ms - host.forked_ms < FORK_JOIN_DELAY_MS) {
        pthread_mutex_unlock(&host.lock);
        return NULL;
    } /* one that lived that long joins even if this thread woke late, into its exit */
    pthread_mutex_unlock(&host.lock);
    if (fd >= 0 && !mt_fdid_is(fd, &host.member_id)) {
        mt_log(MT_LOG_DEBUG, "preload", "pid %ld: the channel to the worker group's leader "
                                        "was closed by the program (its number is not "
                                        "memtrim's now): memtrim stays off in this process",
               (long)getpid());
        return NULL; /* the host's number now: left alone */
    }
    if (fd >= 0 && waits && !wait_adopted(fd))
        return NULL;
    int rc = fd >= 0 ? run_member(fd) : 1;
    if (rc == 2 || (fd < 0 && group_host_named(&host.cfg)))
        return group_elect_main(arg); /* a named group: its election, not the port's race */
    if (rc == 1)
        restart_instance();
    return NULL;
}

void *group_follow_main(void *arg)
{
    void *r = follow_run(arg);
    adopt_finish(NULL); /* channels nobody adopted (this process did not lead) */
    return r;
}
