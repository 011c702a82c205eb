/*
 * group_fork.c - a group's fork hooks (group.h): a leader makes a channel
 * before fork() and keeps one end in the parent, the child gets the other;
 * a member's children wait on a channel to it (adopted if it takes the group
 * over, group_take_pending / group_hold_pending / group_adopt).
 * Threads: the host's forking thread (prepare .. parent/child hold g->lock
 * across fork(), group_int.h); the child has none of the instance's threads.
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
#include "group_int.h"

/* ---- fork ------------------------------------------------------------------ */

void group_fork_prepare(struct group *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    int wanted = g->role == GROUP_LEADER ? g->forks_join
                                         : g->forks_wait && g->npending < GROUP_MAX_MEMBERS;
    if (g->stop || !wanted ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, g->fork_fds) != 0)
        g->fork_fds[0] = g->fork_fds[1] = -1;
}

void group_fork_parent(struct group *g)
{
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
        group_wake(g);
}

int group_fork_child(struct group *g, int *waits)
{
    int fd = -1;
    *waits = 0;
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

int group_take_pending(struct group *g, int *fds, int cap)
{
    int n = 0;
    if (!g || g->role != GROUP_MEMBER)
        return 0;
    pthread_mutex_lock(&g->lock);
    while (g->npending > 0 && n < cap)
        fds[n++] = g->pending[--g->npending];
    pthread_mutex_unlock(&g->lock);
    return n;
}

int group_hold_pending(struct group *g, const int *fds, int n)
{
    int held = 0;
    if (!g || g->role != GROUP_MEMBER)
        return 0;
    pthread_mutex_lock(&g->lock);
    while (held < n && g->npending < GROUP_MAX_MEMBERS) {
        g->pending_chan[g->npending] = chan_id(fds[held]);
        g->pending[g->npending++] = fds[held++];
    }
    pthread_mutex_unlock(&g->lock);
    group_wake(g); /* its thread watches them from now on */
    return held;
}

int group_adopt(struct group *g, int fd)
{
    struct group_msg msg;
    if (!g || g->role != GROUP_LEADER)
        return -ENOTCONN;
    pthread_mutex_lock(&g->lock);
    int rc = g->stop ? -1 : member_add(g, fd, 0);
    if (rc == 0) { /* the first word on the channel: the waiting child starts its member */
        msg_init(&msg, MSG_ZONE);
        msg.arg = pressure_set_zone(g->d.pressure);
        msg_send(g, fd, &msg);
    }
    pthread_mutex_unlock(&g->lock);
    if (rc)
        return -ENOSPC;
    group_wake(g);
    return 0;
}
