/*
 * test_group_act.c - a group's member trimming what it freed on its own inside the
 * zone (core/group/group_member.c member_act; docs/groups.md "Members that act at
 * once"). The test plays the leader on the other end of a member's channel and the
 * host in this process: it grants the zone with or without ZONE_ACT, frees a 40 MB
 * study of this process's heap, and reads what the member sends. With the grant the
 * member trims it on its own (MSG_TRIM_OWN), asked nothing; without it, or with a lease that ran out, its first word is the report of
 * what it freed (then the leader's request trims it); with a slot that opens later it
 * reports first, and its own trim comes once its slot opened; a slot a new grant moved is
 * waited for on a virtual clock the test moves (clock_gettime, below). Orders and
 * conditions, no timing thresholds. Threads: the test's main thread and the member's.
 */
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "core.h"
#include "group_int.h"
#include "group_peer.h"
#include "instance.h"

#define MIB (1u << 20)
#define STUDY_MB 40
#define BLOCK 1024
/* No trims of the member's own housekeeper (periodic, burst): only the group's. */
#define JSON "{\"MemoryTrim\": {\"HttpPort\": 0, \"Database\": \"\", \"TrimIntervalSeconds\": 0, " \
             "\"TrimReleasableTriggerBytes\": 0}}"

static char *keeper;

static void on_gone(void *arg)
{
    (void)arg;
}

/*
 * A virtual CLOCK_MONOTONIC for memtrim's threads (the moved-slot case): this file's
 * clock_gettime, to which the static libraries' calls resolve. While vclock_ns is 0 it is
 * the kernel's; set, every thread but the test's main one reads that value, which moves
 * only when the test moves it (forward): a slot opens when the test says, not when a
 * window of real time has passed, whatever the machine's load. The main thread keeps the
 * real clock, so the harness's hang guards (WAIT_FOR) stay real. Not in the sanitizer
 * builds (their runtimes intercept clock_gettime; the case skips there).
 */
static pthread_t main_thread;
static _Atomic int64_t vclock_ns;

#if !HARNESS_SANITIZER_ALLOCATOR
int clock_gettime(clockid_t id, struct timespec *ts)
{
    int64_t v = atomic_load(&vclock_ns);
    if (v && id == CLOCK_MONOTONIC && !pthread_equal(pthread_self(), main_thread)) {
        ts->tv_sec = (time_t)(v / 1000000000);
        ts->tv_nsec = (long)(v % 1000000000);
        return 0;
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
}
#endif

/* A study: STUDY_MB in small blocks, a block above them kept, the rest freed (resident
 * until a trim gives it back). */
static void study(void)
{
    size_t n = (size_t)STUDY_MB * MIB / BLOCK;
    char **p = malloc(n * sizeof(*p));
    CHECK(p != NULL);
    if (!p)
        return;
    for (size_t i = 0; i < n; i++) {
        p[i] = malloc(BLOCK);
        if (p[i])
            memset(p[i], (int)(i & 0xff), BLOCK);
    }
    free(keeper);
    keeper = p[n - 1];
    for (size_t i = 0; i + 1 < n; i++)
        free(p[i]);
    free(p);
}

/* The member's next message (up to 60 s, a hang guard): its kind, or 0. */
static int next_msg(int fd, struct group_msg *msg)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 60000) != 1 || recv(fd, msg, sizeof(*msg), 0) != (ssize_t)sizeof(*msg))
        return 0;
    return msg->kind;
}

/* The first message after a free that says what was freed: a report holding half the
 * study or more, or an own trim (reports from before the free, and the store's copy of
 * a trim, are skipped). */
static int first_word(int fd, struct group_msg *msg)
{
    for (int i = 0; i < 1000; i++) {
        int kind = next_msg(fd, msg); /* a trim's MSG_TRIM_DONE (for the store) comes first */
        if (kind == 0 || kind == MSG_TRIM_OWN || kind == MSG_TRIM_ANSWER)
            return kind;
        if (kind == MSG_REPORT && msg->u.snap.releasable_estimate_bytes >= STUDY_MB / 2 * MIB)
            return kind;
    }
    return 0;
}

static void zone_line(int fd, int flags, int64_t epoch, int64_t width, int64_t until, int slot,
                      int slots, int64_t line)
{
    struct group_msg msg;
    peer_msg(&msg, MSG_ZONE, 0);
    msg.arg = flags;
    msg.u.grant = (struct group_grant){.epoch_ns = epoch, .width_ns = width, .until_ns = until,
                                       .threshold = 8 * MIB, .slot = slot, .slots = slots,
                                       .line_bytes = line};
    CHECK(send(fd, &msg, sizeof(msg), 0) == (ssize_t)sizeof(msg));
}

static void zone(int fd, int flags, int64_t epoch, int64_t width, int64_t until, int slot,
                 int slots)
{
    zone_line(fd, flags, epoch, width, until, slot, slots, 0);
}

static int member_end = -1; /* ch[0] of granted_member: the member's end */

/* The member has read every word the test sent it (its end's queue is empty): what it
 * sees freed after this, it sees under the grant just sent. Without it a loaded node's
 * member could read the study before the grant (2 of 10 runs beside two busy loops
 * failed "at the line ... at once" so). The member reads and takes a word in one step. */
static void zone_read(void)
{
    int n = 1;
    WAIT_FOR(ioctl(member_end, SIOCINQ, &n) == 0 && n == 0, 10); /* a hang guard */
    CHECK_MSG(n == 0, "the member did not read the leader's word (%d bytes queued)", n);
}

/* A member on ch[0] (the test plays its leader on ch[1]) that said hello, this process's
 * heap trimmed; NULL when it could not start. */
static struct memtrim *granted_member(int ch[2])
{
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ch) == 0);
    struct memtrim *mt = NULL;
    char *err = NULL;
    CHECK_EQ_INT(mt_create_member(JSON, ch[0], on_gone, NULL, &mt, &err), 0);
    free(err);
    if (!mt)
        return NULL;
    member_end = ch[0];
    struct group_msg msg;
    CHECK_EQ_INT(next_msg(ch[1], &msg), MSG_HELLO);
    malloc_trim(0);
    return mt;
}

/* Drain what the member said until now (its reports at the zone's pace). */
static void drain(int fd)
{
    struct group_msg msg;
    while (recv(fd, &msg, sizeof(msg), MSG_DONTWAIT) == (ssize_t)sizeof(msg))
        ;
}

/* In every build (the sanitizers' too: their allocator replaces glibc's, and then this
 * is all that runs here): a member granted the zone that holds nothing freed trims
 * nothing, reports at the zone's pace, and takes a malformed grant as none. */
static void test_a_grant_with_nothing_freed(void)
{
    int ch[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ch) == 0);
    struct memtrim *mt = NULL;
    char *err = NULL;
    CHECK_EQ_INT(mt_create_member(JSON, ch[0], on_gone, NULL, &mt, &err), 0);
    free(err);
    if (!mt)
        return;
    struct group_msg msg;
    CHECK_EQ_INT(next_msg(ch[1], &msg), MSG_HELLO);
    int64_t now = mt_mono_ns();
    zone(ch[1], ZONE_ON | ZONE_ACT, now, 10 * MT_MS, now + ACT_LEASE_NS, 0, 1);
    zone(ch[1], ZONE_ON | ZONE_ACT, now, 10 * MT_MS, now + ACT_LEASE_NS, 3, 2); /* no slot 3 */
    zone(ch[1], ZONE_ON | ZONE_ACT, now, 0, now + ACT_LEASE_NS, 0, 1);          /* no width */
    zone(ch[1], ZONE_ON | ZONE_ACT, now, 10 * MT_MS, now + 600 * MT_SEC, 0, 1); /* a lease too long */
    zone(ch[1], ZONE_ON | ZONE_ACT, now, 10 * MT_MS, now + ACT_LEASE_NS, 0, 1);
    int reports = 0, kind;
    while (reports < 3 && (kind = next_msg(ch[1], &msg)) != 0) {
        CHECK(kind == MSG_REPORT || kind == MSG_WELCOME);
        reports += kind == MSG_REPORT;
    }
    CHECK_EQ_INT(reports, 3);
    mt_destroy(mt);
    close(ch[1]);
}

static void test_a_member_acts_on_its_grant(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    int ch[2];
    struct memtrim *mt = granted_member(ch);
    if (!mt)
        return;
    struct group_msg msg;
    int64_t now = mt_mono_ns();

    /* Granted, its slot open now (one slot of one): it trims what it freed before it
     * says anything else of it, and counts it as a pressure trim. */
    zone(ch[1], ZONE_ON | ZONE_ACT, now, 10 * MT_MS, now + ACT_LEASE_NS, 0, 1);
    zone_read();
    drain(ch[1]);
    study();
    /* (a watch may read the heap mid-way through the free: its trim takes part, the next
     * the rest) */
    int64_t own = 0;
    int kind = 0;
    for (int i = 0; i < 100 && own < STUDY_MB / 2 * MIB; i++) {
        kind = next_msg(ch[1], &msg);
        CHECK(kind != 0 && kind != MSG_TRIM_ANSWER);
        if (kind == 0)
            break;
        if (kind == MSG_TRIM_OWN) {
            CHECK_EQ_INT(msg.u.trim.trigger, MT_TRIGGER_PRESSURE);
            own += msg.u.trim.released_bytes;
        }
    }
    CHECK_MSG(own >= STUDY_MB / 2 * MIB, "released %lld on its own", (long long)own);

    /* Control: the zone's pace without the grant (GroupTrimSlotMs 0): it reports what it
     * freed and waits for the leader; the leader's request trims it. */
    zone(ch[1], ZONE_ON, 0, 0, 0, 0, 0);
    zone_read();
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT);
    struct group_msg req;
    peer_msg(&req, MSG_TRIM_REQ, 0);
    req.req_id = 7;
    req.arg = MT_TRIGGER_PRESSURE;
    CHECK(send(ch[1], &req, sizeof(req), 0) == (ssize_t)sizeof(req));
    while ((kind = next_msg(ch[1], &msg)) != 0 && kind != MSG_TRIM_ANSWER)
        CHECK(kind != MSG_TRIM_OWN);
    CHECK(kind == MSG_TRIM_ANSWER && msg.req_id == 7 && msg.arg == 0 &&
          msg.u.trim.released_bytes >= STUDY_MB / 2 * MIB);

    /* A grant whose lease ran out (a stopped leader's): as without one. */
    now = mt_mono_ns();
    zone(ch[1], ZONE_ON | ZONE_ACT, now - 10 * MT_SEC, 10 * MT_MS, now - MT_SEC, 0, 1);
    zone_read();
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT);
    CHECK(send(ch[1], &req, sizeof(req), 0) == (ssize_t)sizeof(req));
    while ((kind = next_msg(ch[1], &msg)) != 0 && kind != MSG_TRIM_ANSWER)
        CHECK(kind != MSG_TRIM_OWN);

    /* A grant whose epoch is before CLOCK_MONOTONIC's zero (no leader's clock reads
     * that; near INT64_MIN the slot's arithmetic, now - epoch, overflows): malformed, as
     * without one. Before the check its one slot of 1 s was open now: it trimmed at once. */
    now = mt_mono_ns();
    zone(ch[1], ZONE_ON | ZONE_ACT, -1000 * MT_SEC, MT_SEC, now + ACT_LEASE_NS, 0, 1);
    zone_read();
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT);
    CHECK(send(ch[1], &req, sizeof(req), 0) == (ssize_t)sizeof(req));
    while ((kind = next_msg(ch[1], &msg)) != 0 && kind != MSG_TRIM_ANSWER)
        CHECK(kind != MSG_TRIM_OWN);

    /* Its slot, the second of two of 1 s, opens 1 s after the epoch, 0.4 s from now (the
     * epoch 0.6 s ago: the test need not wait out a whole slot; the study before the report
     * takes 30 ms, 150 ms on a loaded machine): it reports what it freed at once (the
     * leader may ask it sooner), and trims on its own only once its slot opened. */
    now = mt_mono_ns();
    int64_t opens = now + 400 * MT_MS;
    zone(ch[1], ZONE_ON | ZONE_ACT, opens - MT_SEC, MT_SEC, now + 3 * MT_SEC, 1, 2);
    zone_read();
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT);
    while ((kind = next_msg(ch[1], &msg)) != 0 && kind != MSG_TRIM_OWN)
        ;
    CHECK_EQ_INT(kind, MSG_TRIM_OWN);
    CHECK_MSG(mt_mono_ns() >= opens, "its own trim came %lld ms before its slot",
              (long long)((opens - mt_mono_ns()) / MT_MS));
    CHECK(msg.u.trim.released_bytes >= STUDY_MB / 2 * MIB);

    mt_destroy(mt);
    close(ch[1]);
    free(keeper);
    keeper = NULL;
}

/* The leader's request for what the member freed: its answer (after its reports). */
static void leader_asks(int fd, uint64_t id)
{
    struct group_msg req, msg;
    int kind;
    peer_msg(&req, MSG_TRIM_REQ, 0);
    req.req_id = id;
    req.arg = MT_TRIGGER_PRESSURE;
    CHECK(send(fd, &req, sizeof(req), 0) == (ssize_t)sizeof(req));
    while ((kind = next_msg(fd, &msg)) != 0 && kind != MSG_TRIM_ANSWER)
        ;
    CHECK(kind == MSG_TRIM_ANSWER && msg.req_id == id);
}

/* The member's first word after a free, or 0 when none came before the lease's end
 * (reports holding the study until then: it never trimmed on its own). */
static int word_in_lease(int fd, int64_t until, struct group_msg *msg)
{
    int kind;
    while ((kind = first_word(fd, msg)) == MSG_REPORT && mt_mono_ns() < until)
        ;
    return kind;
}

/*
 * Survival comes before the stagger (docs/groups.md, "Members that act at once"). At the
 * group's line a member trims what it freed at once, not in its slot (here the 64th of
 * 64 of 1 s: 63 s away, past its lease): with the leader's ZONE_LINE, or by its own
 * reading of the cgroup's usage at the grant's line_bytes (1: any usage read). And a
 * member that waited for its slot and was not running while it was open (here its
 * thread held back on the configuration's lock for the whole slot, as a loaded node's
 * scheduler holds it back) trims once it runs, not in its next slot (6.4 s later, past
 * its lease). Before: the first two reported and waited for the leader, the third
 * reported and trimmed nothing on its own before its lease ended.
 */
static void test_at_the_line_or_past_its_slot_a_member_acts_at_once(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    int ch[2];
    struct memtrim *mt = granted_member(ch);
    if (!mt)
        return;
    struct group_msg msg;

    /* Control: its slot 63 s away, not at the line: it reports, the leader asks. */
    int64_t now = mt_mono_ns();
    zone(ch[1], ZONE_ON | ZONE_ACT, now, MT_SEC, now + ACT_LEASE_NS, 63, 64);
    zone_read();
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT);
    leader_asks(ch[1], 11);

    /* At the line by the leader's word: at once. */
    now = mt_mono_ns();
    zone(ch[1], ZONE_ON | ZONE_ACT | ZONE_LINE, now, MT_SEC, now + ACT_LEASE_NS, 63, 64);
    zone_read();
    drain(ch[1]);
    study();
    /* On its own, within its lease (a report that fell due as it freed may come first: a
     * loaded node's member read the study at its report, 2 of 20 runs beside two busy
     * loops, and trimmed at its next look, 10 ms on). */
    CHECK_EQ_INT(word_in_lease(ch[1], now + ACT_LEASE_NS, &msg), MSG_TRIM_OWN);
    CHECK(msg.u.trim.trigger == MT_TRIGGER_PRESSURE);

    /* At the line by its own reading of the cgroup (line_bytes 1): at once. A host where
     * it reads no cgroup usage cannot show it: a skipped part (tests/skips.txt), not a pass. */
    now = mt_mono_ns();
    zone_line(ch[1], ZONE_ON | ZONE_ACT, now, MT_SEC, now + ACT_LEASE_NS, 63, 64, 1);
    zone_read();
    drain(ch[1]);
    int kind;
    while ((kind = next_msg(ch[1], &msg)) != 0 && kind != MSG_REPORT) /* the zone's pace */
        ;
    int usage_read = msg.u.snap.cheap.cgroup_usage_bytes >= 1;
    drain(ch[1]);
    study();
    if (usage_read) {
        CHECK_EQ_INT(word_in_lease(ch[1], now + ACT_LEASE_NS, &msg), MSG_TRIM_OWN);
    } else {
        SKIP_PART("own-reading", "the member reads no cgroup usage on this host");
        if (first_word(ch[1], &msg) == MSG_REPORT) /* not at the line: it reports */
            leader_asks(ch[1], 12);
    }

    /* Its slot, the first of 64 of 0.1 s, opens 0.4 s from now (the study before the report
     * takes 30 ms, 150 ms on a loaded machine); its thread is held for the whole of it: it
     * trims once it runs again, within its lease (its next slot, 6.4 s later, is past it). */
    now = mt_mono_ns();
    int64_t closes = now + 500 * MT_MS, until = now + 2 * ACT_LEASE_NS - MT_SEC / 10;
    zone(ch[1], ZONE_ON | ZONE_ACT, now + 400 * MT_MS, 100 * MT_MS, until, 0, 64);
    zone_read();
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT); /* it waits for its slot */
    pthread_mutex_lock(&mt->cfg_lock);                 /* its next reading waits here */
    while (mt_mono_ns() < closes)
        usleep(20 * 1000);
    pthread_mutex_unlock(&mt->cfg_lock);
    CHECK_EQ_INT(word_in_lease(ch[1], until, &msg), MSG_TRIM_OWN);

    mt_destroy(mt);
    close(ch[1]);
    free(keeper);
    keeper = NULL;
}

/* The member's thread waits on this lock (futex(2) on its word), not on anything else. */
static int member_waits_on(pthread_mutex_t *lock)
{
    unsigned long addr = 0;
    return harness_thread_in("memtrim-group", SYS_futex, &addr) && addr == (unsigned long)lock;
}

/* The member's thread sleeps in its loop's poll(2): it finished a turn. */
static int member_polls(void)
{
    unsigned long arg0 = 0;
    return harness_thread_in("memtrim-group", SYS_poll, &arg0) ||
           harness_thread_in("memtrim-group", SYS_ppoll, &arg0);
}

/*
 * A new grant while the member waits for its slot (a member joined or left: every slot
 * moves) is no missed slot. On the virtual clock (above), stopped: the member holds the
 * study, granted its slot, the second of two of 0.25 s from an epoch 0.25 s ahead, and
 * waits for it; its thread is held (on the configuration's lock, in a heap reading) while
 * the leader moves it to the third of three and the clock moves into its old slot; it runs
 * again there, reads the new grant and goes through a whole turn: no trim of its own then
 * (its new slot is 0.19 s ahead). Then the clock moves to its new slot: it trims. Before:
 * the old slot's start, passed, with the new slot ahead, was taken for a missed slot, and
 * it trimmed at once, in another's slot. Each step waits on a condition (the member read a
 * word, waits on the lock, sleeps in its poll): no window of real time, whatever the load.
 */
static void test_a_moved_slot_is_not_a_missed_one(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    int ch[2];
    struct memtrim *mt = granted_member(ch);
    if (!mt)
        return;
    struct group_msg msg;

    /* The zone without a grant yet: it reports the study and keeps it. */
    zone(ch[1], ZONE_ON, 0, 0, 0, 0, 0);
    zone_read();
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT);

    /* The clock stops, ahead of the real one (memtrim's timed waits then sleep longer,
     * never spin), and the grant comes: its slot opens 0.5 s ahead on that clock. */
    const int64_t width = 250 * MT_MS;
    int64_t now = mt_mono_ns() + 10 * MT_SEC;
    atomic_store(&vclock_ns, now);
    int64_t epoch = now + width, old_opens = epoch + width, opens = epoch + 2 * width;
    int64_t until = now + 2 * ACT_LEASE_NS - MT_SEC / 10;
    zone(ch[1], ZONE_ON | ZONE_ACT, epoch, width, until, 1, 2);
    zone_read();
    pthread_mutex_lock(&mt->cfg_lock); /* its next heap reading waits here: */
    atomic_store(&vclock_ns, now + 2 * ZONE_WATCH_NS); /* the one the clock makes due */
    WAIT_FOR(member_waits_on(&mt->cfg_lock), 60);
    CHECK_MSG(member_waits_on(&mt->cfg_lock), "the member's thread never waited on the lock");
    /* Held in a turn that began before its old slot (the clock stood still): the slot
     * moves, the clock goes a quarter into the old slot, and it runs again. */
    zone(ch[1], ZONE_ON | ZONE_ACT, epoch, width, until, 2, 3);
    atomic_store(&vclock_ns, old_opens + width / 4);
    pthread_mutex_unlock(&mt->cfg_lock);
    zone_read();                      /* it read the new grant... */
    WAIT_FOR(member_polls(), 60);     /* ...and went through the turn after it */
    CHECK_MSG(member_polls(), "the member's thread never slept in its poll again");
    int trimmed = 0;
    while (recv(ch[1], &msg, sizeof(msg), MSG_DONTWAIT) == (ssize_t)sizeof(msg))
        trimmed += msg.kind == MSG_TRIM_OWN;
    CHECK_MSG(trimmed == 0, "it trimmed on its own in its old slot, %lld ms before its new one",
              (long long)((opens - atomic_load(&vclock_ns)) / MT_MS));

    /* Its new slot opens: it trims what it freed, on its own (unless it did already). */
    atomic_store(&vclock_ns, opens);
    int kind = 0;
    for (int i = 0; !trimmed && i < 1000 && (kind = next_msg(ch[1], &msg)) != 0 &&
                    kind != MSG_TRIM_OWN; i++)
        ;
    CHECK(trimmed || (kind == MSG_TRIM_OWN && msg.u.trim.released_bytes >= STUDY_MB / 2 * MIB));

    mt_destroy(mt);
    atomic_store(&vclock_ns, 0);
    close(ch[1]);
    free(keeper);
    keeper = NULL;
}

int main(void)
{
    main_thread = pthread_self();
    RUN(test_a_grant_with_nothing_freed);
    RUN(test_a_member_acts_on_its_grant);
    RUN(test_at_the_line_or_past_its_slot_a_member_acts_at_once);
    RUN(test_a_moved_slot_is_not_a_missed_one);
    return harness_end();
}
