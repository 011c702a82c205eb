/*
 * instance.h - struct memtrim, the one object that owns everything an
 * instance runs: configuration, snapshot cache, trim service, housekeeper,
 * store, HTTP server. Private to core/; other modules use core.h.
 *
 * Locks, never nested except as store.h says: patch_lock (PATCH /config; it
 * takes cfg_lock and tun_lock under it), cfg_lock (the configuration),
 * the cache's, the trim service's, the housekeeper's and the store's own
 * locks. suspend_depth is an atomic.
 */
#ifndef MEMTRIM_INSTANCE_H
#define MEMTRIM_INSTANCE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "arenas.h"
#include "common.h"
#include "config.h"
#include "group.h"
#include "housekeeper.h"
#include "snapshot.h"
#include "store.h"
#include "trim.h"

struct server;
struct pressure;
struct group;

/* The PATCH line: at most PATCH_LOG_BURST per PATCH_LOG_WINDOW_NS (README: one per 10 s). */
#define PATCH_LOG_BURST 1
#define PATCH_LOG_WINDOW_NS (10 * MT_SEC)

struct role;

struct memtrim {
    pthread_mutex_t cfg_lock;   /* copies of cfg in and out, nothing else under it */
    pthread_mutex_t patch_lock; /* PATCH /config as a whole (its mallopt calls): cfg is
                                 * written only under it (instance.c) */
    struct mt_config cfg;
    uint64_t cfg_generation; /* bumped by PATCH /config; the housekeeper re-reads */
    struct mt_log_limit patch_log; /* the PATCH line: one per 10 s (its own lock) */

    struct snapshot_cache cache;
    struct trim_service trims;
    struct stall_canary stall; /* times a small malloc while a trim runs (stall.h) */
    struct housekeeper hk;
    struct store store;
    struct pressure *pressure; /* the pressure thread (core/pressure/engine.c); created with the instance */
    atomic_int suspend_depth;

    struct server *server;
    int http_port;
    int64_t started_ms;
    pid_t pid; /* the process that started it (a forked child must not stop it) */

    struct arenas_cache arenas; /* /memory/arenas (arenas.c; read by advice.c); its own lock */

    /* Worker groups (core/group/): set before the group's thread starts, cleared after it stopped. */
    struct group *group;
    atomic_int record_pid;  /* stamped on own trims and samples: 0 alone, getpid() leading */
    const struct role *role; /* what kind of process (memtrim.c): alone, or a group's member */
};

/*
 * In a forked child: forget that an instance runs (its threads are the
 * parent's), so the child may start its own. Installed as an atfork handler
 * by the first start; core/group/'s host side calls it again (group_host.h).
 */
void mt_after_fork_child(void);
/* Install the core's atfork handlers now (once; the first start does it otherwise). An
 * adapter (core/group/'s host side) that registers its own handlers before any start calls
 * it first: the core's child handler must run before one that calls mt_after_fork_child
 * (child handlers run in registration order, and the core's prepare handler holds its lock). */
void mt_fork_hooks_install(void);

/* Start as a member on channel fd (owned from here on, closed on failure): no
 * port, no store, no pressure thread of its own. leader_gone runs once, on the
 * member's group thread, when the leader's end closes. */
int mt_create_member(const char *config_json, int fd, void (*leader_gone)(void *), void *arg,
                     struct memtrim **out, char **err);
/* group_calls.c: lead a group (FollowFork with a fixed HttpPort), or a named one: accept
 * members on listen_fd (the caller's; polled until the group stops); forks_join: forked
 * children also join over a socketpair (FollowFork). */
int mt_group_lead(struct memtrim *mt, char **err);
int mt_group_lead_named(struct memtrim *mt, int listen_fd, const char *name, int forks_join,
                        char **err);

/* memtrim.c: what a group is handed (group_calls.c, the member's start step). */
struct group_deps mt_group_deps(struct memtrim *mt);

/* advice.c: the exit summary, logged by mt_destroy once the housekeeper stopped. */
void advice_exit_summary(struct memtrim *mt);

/* Tests (memtrim.c): the next mt_create fails at its start step of that index (0, 1, ...)
 * as if it had run out of memory, and undoes the steps before it; -1 none. Returns how
 * many steps a start has. */
int mt_test_fail_start_step(int index);

#endif /* MEMTRIM_INSTANCE_H */
