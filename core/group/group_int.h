/*
 * group_int.h - what the files of core/group/ share (private to the room; the
 * face is group.h): the wire between a leader and its members, the registry,
 * and the helpers each file lends the others.
 *   group.c         a group's life: made, its instance's snapshot, stopped
 *   group_chan.c    the channels: identities, sends, receives, the wake pipe,
 *                   and a member's message checked as data (group_msg_check)
 *   group_member.c  the member: its reports, trims when asked, its children waiting
 *   group_leader.c  the leader: registry, members' messages, named accept, its thread,
 *                   the members' records into the engine's look at the set (core/pressure/zone.h)
 *   group_trim.c    manual trims fanned out to every member, the API's view
 *   group_fork.c    the fork hooks: a channel made at fork, a member's waiting children
 *   named.c         a named group's rendezvous (named.h)
 *   group_host.c, group_follow.c, group_elect.c: the host side, a forking process's
 *                   instance, election and adoption (group_host.h, group_host_int.h)
 *
 * Threads: one "memtrim-group" thread per instance in a group (leader or
 * member). Locks: g->lock guards the registry, the requests and the
 * counters (a member's: its waiting children's channels); it is held across
 * fork() by the fork hooks of a leader and of a member (prepare ..
 * parent/child), never across a trim, a store push or a blocking send. It
 * may be taken while holding host.lock (group_host_int.h), never the
 * reverse. The pure pressure decision is core/pressure/'s (decision.c, zone.c).
 */
#ifndef MEMTRIM_GROUP_INT_H
#define MEMTRIM_GROUP_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "common.h"
#include "group.h"
#include "coop.h"
#include "pressure.h" /* the engine: its zone is the group's */
#include "stagger.h"

#define GROUP_MAX_MEMBERS 64   /* the registry's size, the leader included */
#define GROUP_PROGRAM_MAX 64

/* ---- the wire: one SOCK_SEQPACKET message each (group_chan.c) -------------------- */

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
    MSG_ZONE,        /* leader -> member: arg = ZONE_* flags (0 outside), u.grant with ZONE_ACT */
    MSG_TRIM_OWN,    /* member -> leader: a trim it ran on its own in the zone (the result) */
};

#define ZONE_ON 1  /* the zone's pace: watch the heap, report what it freed at once */
#define ZONE_ACT 2 /* ...and trim what it freed on its own, in its slot (u.grant) */
#define ZONE_LINE 4 /* ...the group is at its line: at once, not waiting for its slot */

/*
 * The leader's grant to a member that may trim on its own (MSG_ZONE with ZONE_ACT;
 * group_leader.c): member `slot` of `slots` may start such a trim only in its slots,
 * [epoch + (k * slots + slot) * width, ... + width) for any k (CLOCK_MONOTONIC: one
 * clock for the processes of a host), before until_ns (the leader renews it while the
 * group stays in the zone: a stopped leader's grant runs out), and only when it holds
 * free `threshold` bytes or more. So no two members acting alone start a trim in the
 * same slot. Except at the group's line, where surviving comes before not stalling the
 * node together: with ZONE_LINE (the leader's reading), or when the member's own
 * reading of the cgroup's usage is line_bytes or more (0: the leader reads no cgroup),
 * it trims at once; and a member that waited for its slot and was not running while it
 * was open (a loaded node) trims as soon as it runs, not a whole rotation later.
 */
struct group_grant {
    int64_t epoch_ns, width_ns, until_ns;
    uint64_t threshold;
    int32_t slot, slots;
    int64_t line_bytes;
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
        struct group_grant grant;
    } u;
};

/* A member's message made safe for the leader to use: pointers cleared, strings
 * ended, counts in range; -1 when it is nonsense (the member is then dropped). */
int group_msg_check(struct group_msg *msg);

/* ---- the registry ----------------------------------------------------------- */

#define LEADER_TICK_NS (100 * MT_MS)
#define LEADER_ZONE_TICK_NS (10 * MT_MS)
#define REPORT_NS (250 * MT_MS)
#define REPORT_ZONE_NS (50 * MT_MS)
#define ZONE_WATCH_NS (10 * MT_MS)  /* a member's heap reading inside the zone (its budget) */
#define ZONE_BUDGET_FACTOR 10.0 /* as the housekeeper's inside the zone */
/* The zone's watch (ZONE_WATCH_NS): a reading every 10 ms at most, and the budget may
 * space them no further than that costs. Measured under qemu TCG, where a heap reading
 * costs some 15 times the host's: at 10 times the budget a worker's freed study went
 * unseen for 0.5-2 s and the kernel killed a worker meanwhile. */
#define WATCH_BUDGET_FACTOR 100.0
/* A grant to trim alone (ZONE_ACT) lasts ACT_LEASE_NS from its sending; the leader sends
 * it again as core/pressure/zone.h's PZ_ACT_RENEW_NS and PZ_ACT_RESEND_NS say. */
#define ACT_LEASE_NS (2 * MT_SEC)
#define MANUAL_ANSWER_NS (2 * MT_SEC)        /* a manual request's answer, at most */
/* A wait the tests may shorten: the hook's value (set by a group_test_*_ns below; 0 in
 * every host) or, when 0, the product's. */
static inline int64_t group_test_wait_ns(_Atomic int64_t *hook, int64_t product_ns)
{
    int64_t t = atomic_load(hook);
    return t > 0 ? t : product_ns;
}
/* Tests only: the answer's bound in ns instead (0: MANUAL_ANSWER_NS). */
void group_test_answer_ns(int64_t ns);
/* Tests only: the pause after an accept that found no descriptor (0: ACCEPT_PAUSE_NS). */
void group_test_accept_pause_ns(int64_t ns);
/* Tests only: the leader's poll outside the zone and a member's report period, in ns (0:
 * LEADER_TICK_NS and REPORT_NS); group_tick_ns(product) is what the threads wait. */
void group_test_tick_ns(int64_t ns);
int64_t group_tick_ns(int64_t product_ns);
/* Tests only: a manual trim's stagger between members, in ns (0: MANUAL_STAGGER_NS). */
void group_test_stagger_ns(int64_t ns);
#define MANUAL_STAGGER_NS (250 * MT_MS)     /* the next member is asked after this at most */
#define PRESSURE_TIMEOUT_NS (2 * MT_SEC)     /* a pressure request's answer, at most */
#define HELLO_DEADLINE_NS (30 * MT_SEC)      /* a named connection's hello, at most */
#define PRESSURE_STAGGER_NS (100 * MT_MS)    /* the next member waits for an answer this long */
#define ACCEPT_PAUSE_NS (1 * MT_SEC)         /* a named group's accept out of descriptors */
#define CHAN_CHECK_NS (1 * MT_SEC)           /* every channel's identity checked this often */
#define PEAK_NS COOP_PEAK_NS /* a member's peak RSS: over about this long (the decision's, coop.h) */
/* A member's input is rate-limited as data (#31 F6): its trims and re-fault figures reach
 * the store at MEMBER_ROWS_PER_SEC (bursts of MEMBER_ROWS_BURST), the rest counted as
 * dropped; a member sending more than MEMBER_MSGS_PER_SEC messages in a second is no
 * memtrim (one reports every 50 ms at most, and trims far less often): dropped. */
#define MEMBER_ROWS_PER_SEC 20
#define MEMBER_ROWS_BURST 40
#define MEMBER_MSGS_PER_SEC 1000

/* A counter a member's input moves: saturates instead of wrapping. */
static inline void sat_add(uint64_t *a, uint64_t v)
{
    *a = *a > UINT64_MAX - v ? UINT64_MAX : *a + v;
}

struct group_member {
    int used, fd, pid, self; /* fd -1 for the leader itself; pid 0 until its hello */
    uint64_t chan;           /* fd's identity (chan_id) when it became the group's */
    int cred_pid;            /* a named group's member: its pid as the kernel says (SO_PEERCRED) */
    int64_t accepted_ns;     /* a named group's member: when its connection was accepted */
    char program[GROUP_PROGRAM_MAX];
    int64_t joined_ms, report_ns;
    struct mt_snapshot snap;
    uint64_t trims, released, pressure_trims;
    uint64_t own_trims;                 /* ...of them, run on its own in the zone (MSG_TRIM_OWN) */
    int64_t last_trim_ns, last_trim_ms; /* the group's last pressure trim of it */
    uint64_t rss_after;                 /* its RSS right after its last trim (any trigger) */
    int64_t heap_ms_seen;               /* the heap reading its reports carry */
    uint64_t rss_at_heap;               /* its RSS in the first report that carried it */
    int64_t last_sample_ns;
    uint64_t peak_rss;                  /* its RSS high-water mark since peak_ns (group_ahead) */
    int64_t peak_ns;                    /* ...started again from its RSS then, every PEAK_NS */
    uint64_t press_req;                 /* its pressure request in flight, 0 none */
    int64_t press_sent_ns;              /* ...sent then */
    int64_t rows_ns;                    /* its store rows' bucket: last filled then... */
    double rows_tokens;                 /* ...holding this many rows (group thread only) */
    int64_t msgs_sec_ns;                /* its messages counted since then (a second)... */
    uint64_t msgs;                      /* ...this many (group thread only) */
};

/*
 * A manual trim of the group (group_trim.c): the HTTP thread trims the leader and
 * hands the members to the group thread, which asks them one after the other (the
 * next once the last answered, or MANUAL_STAGGER_NS after it was asked) and gives
 * each MANUAL_ANSWER_NS: its whole time is bounded by the members asked. One at a
 * time; the manual rate limit counts from its end. Under g->lock.
 */
struct group_job {
    int active;               /* a group trim runs (from its admission to its end) */
    int ready;                /* the leader's own trim is done: members may be asked */
    int n, next;              /* members to ask, and how many were asked */
    int pids[GROUP_MAX_MEMBERS];
    uint64_t ids[GROUP_MAX_MEMBERS];
    int answered[GROUP_MAX_MEMBERS];
    int64_t pad;              /* the request's pad (-1: each member's TrimPadBytes) */
    int64_t asked_ns;         /* the last member was asked then */
    int64_t deadline_ns;      /* it ends by then whatever the members do */
};

struct group {
    struct group_deps d; /* what the instance hands it (group.h) */
    int role;
    pthread_mutex_t lock;
    pthread_t thread;
    int started, stop;   /* stop: guarded by lock */
    int wake[2];
    uint64_t wake_id;    /* the wake pipe's identity (pipe_id): its two ends share it */
    /* leader */
    struct group_member m[GROUP_MAX_MEMBERS]; /* m[0]: the leader itself */
    struct group_job job;
    uint64_t next_req;
    int fork_fds[2];
    int forks_join;   /* forked children join over a socketpair (FollowFork) */
    int listen_fd;    /* a named group's socket (the caller's), -1 */
    uint64_t listen_chan; /* ...its identity (chan_id) */
    int64_t accept_failed_ns; /* ...not polled for ACCEPT_PAUSE_NS after its accept failed for
                               * want of resources (0: never did) */
    int64_t chan_check_ns;   /* the channels' identities next checked then (leader_drop_lost) */
    struct mt_log_limit accept_log; /* the accept's warnings (a peer may cause them) */
    char name[MT_GROUP_NAME_MAX + 1]; /* GroupName, "" */
    uint64_t joined, left, refused, pressure_trims, pressure_released;
    uint64_t self_verified;           /* its own guessed picks a heap reading refused (group_leader.c) */
    uint64_t rows_dropped, flooded;   /* members' rows not stored; members dropped for floods */
    atomic_int kernel_woke;           /* the engine's kernel woke the leader (not locked) */
    uint64_t kernel_looks, kernel_picks; /* looks at a kernel wake-up; of those, that picked */
    uint64_t members_gen;             /* joins and leaves */
    int64_t slot_epoch_ns;            /* the members' slots count from here */
    uint64_t own_trims, own_released; /* members' trims of their own (in pressure_trims too) */
    int64_t press_sent_ns; /* when the last pressure request went out */
    int64_t next_total_ns;
    /* member */
    int fd;
    uint64_t fd_chan;                  /* fd's identity (chan_id), set before the thread starts */
    atomic_int fd_lost;                /* fd was closed by someone else: never used again */
    int forks_wait;                    /* its forked children wait on a channel to it */
    int pending[GROUP_MAX_MEMBERS];    /* ...their channels: adopted if it takes the group over */
    uint64_t pending_chan[GROUP_MAX_MEMBERS]; /* ...their identities */
    int npending;
    atomic_int index; /* its place in the join order (MSG_WELCOME) */
    void (*leader_gone)(void *);
    void *gone_arg;
    atomic_uint_fast64_t send_dropped;
};

/* ---- group_chan.c ----------------------------------------------------------- */
uint64_t chan_id(int fd);
int chan_ours(int fd, uint64_t id);
uint64_t pipe_id(int fd);
int pipe_ours(const struct group *g, int fd);
void wake_close(struct group *g);
void chan_close(int fd, uint64_t id);
void chan_lost_log(int fd, int pid, const char *what);
void msg_init(struct group_msg *msg, int kind);
int msg_send(struct group *g, int fd, const struct group_msg *msg);
int chan_send(struct group *g, int fd, uint64_t chan, const struct group_msg *msg);
int msg_recv(int fd, struct group_msg *msg);
void snap_strip(struct mt_snapshot *s);
void group_wake(struct group *g);
void wake_lost(struct group *g);
void wake_drain(int fd);
int wake_pipe_open(int fds[2]);

/* ---- group.c ---------------------------------------------------------------- */
struct group *group_alloc(const struct group_deps *d, int role);
void group_free(struct group *g);
int group_stopping(struct group *g);
struct group_member *member_by_pid(struct group *g, int pid);
uint64_t own_snapshot(const struct group_deps *d, int64_t cheap_age_ns, double factor,
                      struct mt_snapshot *out);

/* ---- group_leader.c --------------------------------------------------------- */
int member_add(struct group *g, int fd, int cred_pid);
void note_peak(struct group_member *m, uint64_t rss, int64_t now);
void note_heap(struct group_member *m); /* a new heap reading: the RSS it saw (locked) */

/* ---- group_trim.c ----------------------------------------------------------- */
void job_answer(struct group *g, int pid, uint64_t id); /* under g->lock */
void job_step(struct group *g, int64_t now);

#endif /* MEMTRIM_GROUP_INT_H */
