/*
 * group.h - worker groups: the processes of a preforking server (a master
 * and the workers it forks with FollowFork) share one memory limit, one API
 * port, one store and one pressure decision. The process that serves (the
 * leader) keeps a registry of members; each member reports over its own
 * channel (a SOCK_SEQPACKET socketpair made at fork, so only the two
 * processes hold it; in a named group, a connection accepted on the group's
 * unix socket, named.c) and trims itself when asked, because malloc_trim must
 * run in the process that owns the heap. Private to core/; api/ and plugin/
 * use core.h.
 *
 * Threads: one "memtrim-group" thread per instance in a group (leader or
 * member). Locks: g->lock guards the registry, the requests and the
 * counters (a member's: its waiting children's channels); it is held across
 * fork() by the fork hooks of a leader and of a member (prepare ..
 * parent/child), never across a trim, a store push or a blocking send. It
 * may be taken while holding preload_lock (plugin/host_preload.c), never the
 * reverse. The pure pressure decision is core/decide/group_policy.c.
 */
#ifndef MEMTRIM_GROUP_H
#define MEMTRIM_GROUP_H

#include <pthread.h>
#include <stdint.h>
#include "types.h"
#include "group_policy.h"

struct memtrim;

#define GROUP_MAX_MEMBERS 64   /* the registry's size, the leader included */
#define GROUP_MAX_REQUESTS 16  /* trim requests waiting for a member's answer */
#define GROUP_PROGRAM_MAX 64

/* ---- the wire: one SOCK_SEQPACKET message each (group.c) -------------------- */

#define GROUP_MAGIC 0x4d544752u /* "MTGR" */
#define GROUP_VERSION 1

enum group_msg_kind {
    MSG_HELLO = 1,   /* member -> leader: pid, program */
    MSG_WELCOME,     /* leader -> member: arg = its place in the join order */
    MSG_REPORT,      /* member -> leader: its snapshot */
    MSG_TRIM_REQ,    /* leader -> member: req_id, arg = trigger, pad */
    MSG_TRIM_ANSWER, /* member -> leader: req_id, arg = rc, the result */
    MSG_TRIM_DONE,   /* member -> leader: a trim it ran (any trigger), for the store */
    MSG_REFAULT,     /* member -> leader: a trim's re-fault figure */
    MSG_ZONE,        /* leader -> member: arg = 1 inside the pressure zone, 0 outside */
};

struct group_msg {
    uint32_t magic;
    uint16_t version, kind;
    int32_t pid, arg;
    uint64_t req_id;
    int64_t pad;
    union {
        char program[GROUP_PROGRAM_MAX];
        struct mt_snapshot snap;
        struct mt_trim_result trim;
        struct mt_refault refault;
    } u;
};

/* A member's message made safe for the leader to use: pointers cleared, strings
 * ended, counts in range; -1 when it is nonsense (the member is then dropped). */
int group_msg_check(struct group_msg *msg);

/* ---- the instance's group (group.c) ----------------------------------------- */

enum group_role { GROUP_NONE = 0, GROUP_LEADER, GROUP_MEMBER };

/* Start leading a group (the instance serves the API): its thread and registry. */
int group_lead(struct memtrim *mt, char **err);
/* Start as a member on channel fd (owned from here on); leader_gone runs on the
 * group thread once, when the leader's end closes. */
int group_join(struct memtrim *mt, int fd, void (*leader_gone)(void *), void *arg, char **err);
/* Stop the thread, close every channel (members see EOF); frees mt->group. */
void group_stop(struct memtrim *mt);

/* The trim sinks of a member: every result and re-fault figure to the leader. */
void group_member_trim_sink(void *arg, const struct mt_trim_result *r);
void group_member_refault_sink(void *arg, const struct mt_refault *rf);

/* The leader's own trim (its trim sink, under the trim service's lock): counted in its entry. */
void group_count_self(struct memtrim *mt, const struct mt_trim_result *r);

/* 1 when the instance leads a group, or is a member (mt->group set). */
int group_role(struct memtrim *mt);

#endif /* MEMTRIM_GROUP_H */
