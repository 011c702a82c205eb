/*
 * group.h - the face of core/group/, worker groups: the processes of a
 * preforking server (a master and the workers it forks with FollowFork, or
 * processes started with one GroupName) share one memory limit, one API port,
 * one store and one pressure decision. The process that serves (the leader)
 * keeps a registry of members; each member reports over its own channel (a
 * SOCK_SEQPACKET socketpair made at fork, so only the two processes hold it;
 * in a named group, a connection accepted on the group's unix socket,
 * named.c) and trims itself when asked, because malloc_trim must run in the
 * process that owns the heap. The instance (core/instance) hands a group what
 * it uses (struct group_deps) and keeps the struct group it gets back; api/
 * reaches it through core.h (core/instance/group_calls.c), plugin/host_preload.c
 * through the host side (group_host.h). What the
 * room's files share is group_int.h; its locking rule is there.
 */
#ifndef MEMTRIM_GROUP_H
#define MEMTRIM_GROUP_H

#include <stdatomic.h>
#include <stdint.h>
#include "common.h"
#include "config.h"

struct group;
struct snapshot_cache;
struct trim_service;
struct store;
struct pressure;

/* What a group uses, each part with its own lock (the instance fills it). */
struct group_deps {
    struct mt_config_feed config;    /* re-read when PATCH /config changed it */
    const atomic_int *suspend_depth; /* mt_suspend's nesting: > 0 holds pressure trims off */
    struct snapshot_cache *cache;    /* the instance's readings; its cgroup, found at start */
    struct trim_service *trims;      /* runs this process's trims */
    struct store *store;             /* the leader's: the members' samples, trims, re-faults */
    atomic_int *record_pid;          /* stamped on the instance's own trims and samples:
                                      * getpid() while it leads, 0 otherwise */
    int pid;                         /* the process that started the instance */
    struct pressure *pressure;       /* the instance's pressure engine: its zone is the
                                      * group's (a leader's looks, a member's word from its
                                      * leader), and a leader's decision runs at its kernel
                                      * wake-ups */
};

enum group_role { GROUP_NONE = 0, GROUP_LEADER, GROUP_MEMBER };

/* Start leading a group (the instance serves the API): its thread and registry. *slot
 * is set before the thread starts (the trim sinks read it), NULL again on failure.
 * listen_fd: a named group's socket (the caller's), -1; forks_join: forked children
 * join over a socketpair (FollowFork). */
int group_lead(struct group **slot, const struct group_deps *d, int listen_fd, const char *name,
               int forks_join, char **err);
/* Start as a member on channel fd (owned from here on); leader_gone runs on the
 * group thread once, when the leader's end closes. */
int group_join(struct group **slot, const struct group_deps *d, int fd,
               void (*leader_gone)(void *), void *arg, char **err);
/* Stop the thread, close every channel (members see EOF); frees *slot, sets it NULL. */
void group_stop(struct group **slot);

/* The trim sinks of a member: every result and re-fault figure to the leader. */
void group_member_trim_sink(struct group *g, const struct mt_trim_result *r);
void group_member_refault_sink(struct group *g, const struct mt_refault *rf);
/* The leader's own trim (its trim sink, under the trim service's lock): counted in its entry. */
void group_count_self(struct group *g, const struct mt_trim_result *r);

/* A leader's view of the group's peak: its live members' highest RSS (the kernel's
 * VmHWM each reported, or their recent peak) summed, saturating; 0 in no group or in a
 * member. PATCH's MemoryLimitBytes floor for a group (core/instance/instance.c). */
uint64_t group_peak_bytes(struct group *g);

/* GROUP_NONE (g NULL), GROUP_LEADER or GROUP_MEMBER. */
int group_role(const struct group *g);
/* A member's place in its leader's join order (1 = the first), 0 unknown. */
int group_join_index(struct group *g);

/* The fork hooks (group_fork.c; the host side, group_host.c, calls them): a leader makes a
 * channel before fork(), keeps one end in the parent; the child gets the other (-1: none)
 * and closes the group's inherited descriptors (a member's child closes its parent's
 * channel). *waits: the child's channel leads to a member (its parent, not the leader):
 * the child waits for a first message (adopted) or the channel's end before it starts a
 * member. A member's side: its waiting children's channels, taken out when it stops to
 * take the group over (the caller owns them), and the new leader's adoption of each (0,
 * or -ENOSPC / -ENOTCONN: the caller closes it); the other way, a new member holds
 * channels made before it started (the first n it can; the caller closes the rest). */
void group_fork_prepare(struct group *g);
void group_fork_parent(struct group *g);
int group_fork_child(struct group *g, int *waits);
int group_take_pending(struct group *g, int *fds, int cap);
int group_hold_pending(struct group *g, const int *fds, int n);
int group_adopt(struct group *g, int fd);

/* The API's view and manual trims (group_trim.c; core.h's mt_group_info, mt_trim). */
int group_info(struct group *g, struct mt_group_info *info, struct mt_member *out, int cap,
               int *n);
int group_trim(struct group *g, int pid, int64_t pad, struct mt_member_trim *out, int cap,
               int *n, int64_t *retry_after_ms);

#endif /* MEMTRIM_GROUP_H */
