/*
 * group_host_int.h - what the host side of core/group/ shares (private to the room;
 * the face is group_host.h):
 *   group_host.c    this process's state: start, report, stop, the fork hooks, the port
 *   group_follow.c  a forked child's "memtrim-fork" thread: a member of its parent's
 *                   group, the takeover when the leader goes, adoption, FollowFork's restart
 *   group_elect.c   a named group's "memtrim-named" thread: the election, and again when
 *                   the leader's end closes
 *
 * Locks: host.lock guards host.instance and the threads' state below; it is held across
 * fork() (prepare .. parent/child), never across a start or a stop; it also guards the
 * named group's rendezvous (host.named, host.named_chan), so that a forked child closes
 * every copy of its descriptors. A group's g->lock and the instance's locks may be taken
 * under it, never the reverse. host.ops, host.json and host.cfg are written by a start,
 * under host.lock (a fork on another host thread then copies all or none of them), before
 * any thread of ours runs, and read only after; a start that fails clears host.json
 * (the caller frees it), and a forked child then starts nothing.
 */
#ifndef MEMTRIM_GROUP_HOST_INT_H
#define MEMTRIM_GROUP_HOST_INT_H

#include <pthread.h>
#include <stdint.h>
#include "common.h"
#include "config.h"
#include "fdid.h"
#include "named.h"

struct group_host_ops;

#define FORK_RETRY_MS 100    /* the child retries a taken port this often... */
#define FORK_RETRY_MAX 50    /* ...for 5 s: a daemon's parent exits well within that */
/* A forked child starts its member (or instance) only once it has lived this long: a
 * child that exits or execs sooner (a shell's, a CGI server's, a test runner's) pays
 * the fork handlers' few system calls and one thread, not a member's start and stop
 * (#31 F13: 500 fork/exit cycles cost 8-13x without memtrim). */
#define FORK_JOIN_DELAY_MS 200

struct group_host_state {
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* leader_gone or exiting */
    const struct group_host_ops *ops;
    const char *json;          /* the configuration, kept for FollowFork (the adapter's) */
    struct mt_config cfg;      /* ...parsed */
    void *instance;            /* this process's instance, NULL none */
    pthread_t restart_thread;  /* a "memtrim-fork" or "memtrim-named" thread, with: */
    int restart_running, exiting;
    int member_fd;             /* a forked child's channel to its leader */
    struct mt_fdid member_id;  /* ...its identity: a host's closefrom frees it */
    int64_t forked_ms, exiting_ms; /* when this child was forked, when its exit began */
    int member_waits;          /* ...which leads to a member: wait to be adopted */
    /* A member whose leader left, until it leads (or stays off): the channels of the
     * children forked by it meanwhile or while it was a member, adopted by its new leader
     * instance. */
    int adopting, adopt_n, adopt_fds[MT_GROUP_MAX];
    int adopt_pair[2];         /* made in the fork prepare handler */
    int leader_gone;           /* the leader's end closed */
    struct mt_named named;     /* GroupName's */
    int named_chan;            /* a named member's channel until its instance owns it */
};
extern struct group_host_state host;

/* Forked children join this process's group: FollowFork on one fixed port. */
int group_host_forks_join(const struct mt_config *cfg);
/* 1 when HttpBind:HttpPort can be bound now (or the port is ephemeral). */
int group_host_port_free(const struct mt_config *cfg);
int64_t group_host_mono_ms(void);
/* Wait up to ms for exiting (_locked: under host.lock); returns exiting. */
int group_host_wait_exiting_locked(int ms);
int group_host_wait_exiting(int ms);
/* A member's leader_gone callback (its group thread): the leader's end closed. */
void group_host_leader_gone(void *arg);
/* Read exiting under host.lock. */
int group_host_exiting(void);

/* The "memtrim-fork" thread (group_follow.c) and the "memtrim-named" one (group_elect.c). */
void *group_follow_main(void *arg);
void *group_elect_main(void *arg);

#endif /* MEMTRIM_GROUP_HOST_INT_H */
