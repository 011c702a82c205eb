/*
 * group_host.h - the face of core/group/ for a host adapter whose process forks
 * (plugin/host_preload.c): the one instance this process runs, FollowFork's
 * restart in a forked child, a worker group's election, adoption and takeover
 * (group_host.c, group_follow.c, group_elect.c; docs/groups.md). The room never
 * sees the instance: the adapter hands it a struct group_host_ops, whose calls
 * take the instance as an opaque handle (the instance room fills its part,
 * core.h's mt_group_host_calls; the adapter adds its own).
 * Threads: start on the host's thread that starts memtrim, stop from the
 * library's destructor, the fork hooks (installed by a start) on the thread
 * that forks, report on any thread. The lock is group_host_int.h's.
 */
#ifndef MEMTRIM_GROUP_HOST_H
#define MEMTRIM_GROUP_HOST_H

#include <stddef.h>
#include "config.h"

struct group;

/* What the room calls on the host and on the instance (mt: the instance, opaque). */
struct group_host_ops {
    /* The adapter's: start the full instance (the port, the store) with its routes,
     * 0 or -errno with *err; publish that an instance of this process serves (the
     * PortFile), and withdraw that before its stop. */
    int (*create)(const char *json, void **mt, char **err);
    void (*serves)(void *mt);
    void (*withdraw)(void *mt);
    /* The instance's (mt_group_host_calls): start as a member on channel fd (owned from
     * here on); stop; its port and "host:port"; lead a group (name NULL: a forked one's;
     * else a named one's, on its socket listen_fd); its group (NULL none, or mt NULL);
     * the core's fork hooks. */
    int (*create_member)(const char *json, int fd, void (*leader_gone)(void *), void *arg,
                         void **mt, char **err);
    void (*destroy)(void *mt);
    int (*http_port)(void *mt);
    int (*http_address)(void *mt, char *buf, size_t size);
    int (*lead)(void *mt, int listen_fd, const char *name, int forks_join, char **err);
    struct group *(*group)(void *mt);
    void (*fork_hooks_install)(void);
    void (*after_fork_child)(void);
};

/* GroupName set (and Enabled): a named group's election decides this process's role. */
int group_host_named(const struct mt_config *cfg);
/* 1 when HttpPort is taken by memtrim in an ancestor (a shell, /usr/bin/time, the parent
 * of a forked child): not an error, said once at info level. */
int group_host_held_by_ancestor(const struct mt_config *cfg);

/* Start, once per process (json and cfg stay the caller's, alive until exit):
 * - a named group (group_host_named): its election on a "memtrim-named" thread; 0, or
 *   -EINVAL / -EAGAIN with *err, and then nothing is left running or open;
 * - or the instance mt the adapter started (ops->create): held as this process's; it
 *   leads a group of its forked children when cfg asks (FollowFork, Group, a fixed
 *   HttpPort), publishes itself (ops->serves).
 * Both install the fork hooks: a forked child forgets the parent's instance and, with
 * FollowFork, starts its own (a member, or a restart) from a "memtrim-fork" thread. */
int group_host_start_named(const struct group_host_ops *ops, const char *json,
                           const struct mt_config *cfg, char **err);
void group_host_start(const struct group_host_ops *ops, const char *json,
                      const struct mt_config *cfg, void *mt);
/* This process's instance's address into buf: 0, -ESRCH no instance (a named group still
 * electing), or the instance's -errno (no HTTP server). *running: a restart or election
 * thread runs (a start happened). */
int group_host_report(char *buf, size_t size, int *running);
/* At exit: stop the threads, then the instance (ops->withdraw first), drop a named
 * group's lock (a member takes the role over). */
void group_host_stop(void);

#endif /* MEMTRIM_GROUP_HOST_H */
