/*
 * test_group_act.c - a group's member trimming what it freed on its own inside the
 * zone (core/group/group_member.c member_act; docs/groups.md "Members that act at
 * once"). The test plays the leader on the other end of a member's channel and the
 * host in this process: it grants the zone with or without ZONE_ACT, frees a 40 MB
 * study of this process's heap, and reads what the member sends. With the grant the
 * member trims it on its own (MSG_TRIM_OWN), asked nothing; without it, or with a lease that ran out, its first word is the report of
 * what it freed (then the leader's request trims it); with a slot that opens later it
 * reports first, and its own trim comes once its slot opened. Orders and conditions,
 * no timing thresholds. Threads: the test's main thread and the member's.
 */
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

static void zone(int fd, int flags, int64_t epoch, int64_t width, int64_t until, int slot,
                 int slots)
{
    struct group_msg msg;
    peer_msg(&msg, MSG_ZONE, 0);
    msg.arg = flags;
    msg.u.grant = (struct group_grant){.epoch_ns = epoch, .width_ns = width, .until_ns = until,
                                       .threshold = 8 * MIB, .slot = slot, .slots = slots};
    CHECK(send(fd, &msg, sizeof(msg), 0) == (ssize_t)sizeof(msg));
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
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ch) == 0);
    struct memtrim *mt = NULL;
    char *err = NULL;
    CHECK_EQ_INT(mt_create_member(JSON, ch[0], on_gone, NULL, &mt, &err), 0);
    free(err);
    if (!mt)
        return;
    struct group_msg msg;
    CHECK_EQ_INT(next_msg(ch[1], &msg), MSG_HELLO);
    malloc_trim(0);
    int64_t now = mt_mono_ns();

    /* Granted, its slot open now (one slot of one): it trims what it freed before it
     * says anything else of it, and counts it as a pressure trim. */
    zone(ch[1], ZONE_ON | ZONE_ACT, now, 10 * MT_MS, now + ACT_LEASE_NS, 0, 1);
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
    drain(ch[1]);
    study();
    CHECK_EQ_INT(first_word(ch[1], &msg), MSG_REPORT);
    CHECK(send(ch[1], &req, sizeof(req), 0) == (ssize_t)sizeof(req));
    while ((kind = next_msg(ch[1], &msg)) != 0 && kind != MSG_TRIM_ANSWER)
        CHECK(kind != MSG_TRIM_OWN);

    /* Its slot, the second of two of 1 s, opens 1 s after the epoch: it reports what it
     * freed at once (the leader may ask it sooner), and trims on its own only once its
     * slot opened. */
    now = mt_mono_ns();
    int64_t opens = now + MT_SEC;
    zone(ch[1], ZONE_ON | ZONE_ACT, now, MT_SEC, now + 3 * MT_SEC, 1, 2);
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

int main(void)
{
    RUN(test_a_grant_with_nothing_freed);
    RUN(test_a_member_acts_on_its_grant);
    return harness_end();
}
