/*
 * test_cli_room.c - the room the command reads under a target's memory cgroup before it maps
 * anything there (cli/target_proc.c; docs/command-rules.md, "The target is OOM-killed by our
 * call"): a level's clean page cache counts as room, since the kernel reclaims it before it
 * OOM-kills: memory.stat's inactive file pages less its dirty, writeback and mapped file
 * pages, v1's hierarchy totals or v2's, never past the usage; a missing, partial, odd or
 * hostile memory.stat counts nothing (the old room). Control cmd-room-cache-unseen: the cache
 * is not counted, Orthanc's cgroup full of its storage's cache has no room; control
 * cmd-stat-wrap: a figure's digits checked after each step, so 20 digits wrap to a count.
 * Pure functions;
 * the test's one thread.
 */
#include "harness.h"

#include "target.h"

#include <stdint.h>
#include <stdio.h>

#define KIB ((int64_t)1 << 10)
#define MIB ((int64_t)1 << 20)

/* Orthanc in 340 MiB in its uploads (docs/agent.md): anonymous 210 MiB, its storage's page
 * cache 120 MiB, the cgroup 160 KiB from its limit. v1's file as the kernel writes it, the
 * cgroup's own figures first, then its hierarchy's totals. */
static const char V1[] =
    "cache 125829120\nrss 220200960\nmapped_file 8388608\ndirty 4194304\nwriteback 0\n"
    "inactive_anon 0\nactive_anon 220200960\ninactive_file 100663296\nactive_file 25165824\n"
    "hierarchical_memory_limit 356515840\n"
    "total_cache 125829120\ntotal_rss 220200960\ntotal_mapped_file 8388608\n"
    "total_dirty 4194304\ntotal_writeback 1048576\ntotal_inactive_anon 0\n"
    "total_active_anon 220200960\ntotal_inactive_file 100663296\ntotal_active_file 25165824\n";
/* v2's names: file_dirty, file_writeback, file_mapped (no prefix: its figures are the
 * hierarchy's already) */
static const char V2[] =
    "anon 220200960\nfile 125829120\nfile_mapped 8388608\nfile_dirty 4194304\n"
    "file_writeback 1048576\nshmem 0\ninactive_anon 0\nactive_anon 220200960\n"
    "inactive_file 100663296\nactive_file 25165824\nunevictable 0\n";

static void test_stat_reclaimable(void)
{
    /* 96 MiB inactive less 4 dirty, 1 under writeback and 8 mapped: 83 MiB */
    CHECK_EQ_INT(target_stat_reclaimable(V1, 0), 83 * MIB);
    CHECK_EQ_INT(target_stat_reclaimable(V2, 1), 83 * MIB);
    /* v1's names are not v2's: read as the other version, nothing is counted */
    CHECK_EQ_INT(target_stat_reclaimable(V1, 1), 0);
    CHECK_EQ_INT(target_stat_reclaimable(V2, 0), 0);
    /* v1 without its totals (an odd kernel): the cgroup's own figures, a part of them */
    CHECK_EQ_INT(target_stat_reclaimable("inactive_file 1048576\ndirty 0\nwriteback 0\n"
                                         "mapped_file 4096\n", 0), MIB - 4096);
    /* a family missing one figure counts nothing: the dirty pages could be all of it */
    CHECK_EQ_INT(target_stat_reclaimable("total_inactive_file 1048576\ntotal_writeback 0\n"
                                         "total_mapped_file 0\n", 0), 0);
    CHECK_EQ_INT(target_stat_reclaimable("inactive_file 1048576\nfile_dirty 0\n", 1), 0);
    CHECK_EQ_INT(target_stat_reclaimable("", 1), 0);
    CHECK_EQ_INT(target_stat_reclaimable(NULL, 0), 0);
    /* dirty, writeback and mapped past the inactive pages (they count on both lists): 0 */
    CHECK_EQ_INT(target_stat_reclaimable("inactive_file 4096\nfile_dirty 8192\n"
                                         "file_writeback 0\nfile_mapped 0\n", 1), 0);
    /* no byte count: a sign, a fraction, trailing words, past 2^62, 2^64 and more */
    static const char *const odd[] = {"-1", "+5", "12.5", "12 KiB", "4611686018427387904",
                                      "18446744073709551616", "99999999999999999999999", "",
                                      "max", "0x10"};
    char text[256];
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
        snprintf(text, sizeof text, "inactive_file %s\nfile_dirty 0\nfile_writeback 0\n"
                 "file_mapped 0\n", odd[i]);
        CHECK_EQ_INT(target_stat_reclaimable(text, 1), 0);
    }
    /* 20 digits that wrap past 2^64 to a count under 2^62 (2^64 + 2^61, 2^64 - 2^61 read as
     * -2^61): never a count, never a negative dirty figure turned into 2^61 of cache */
    CHECK_EQ_INT(target_stat_reclaimable("inactive_file 20752587082923245568\nfile_dirty 0\n"
                                         "file_writeback 0\nfile_mapped 0\n", 1), 0);
    CHECK_EQ_INT(target_stat_reclaimable("inactive_file 1048576\nfile_dirty "
                                         "16140901064495857664\nfile_writeback 0\n"
                                         "file_mapped 0\n", 1), 0);
    CHECK_EQ_INT(target_stat_reclaimable("total_inactive_file 1048576\ntotal_dirty 0\n"
                                         "total_writeback 0\ntotal_mapped_file "
                                         "16140901064495857664\n", 0), 0);
    /* the largest count taken, and a key only at a line's start, whole */
    CHECK_EQ_INT(target_stat_reclaimable("inactive_file 4611686018427387903\nfile_dirty 0\n"
                                         "file_writeback 0\nfile_mapped 0", 1),
                 (INT64_C(1) << 62) - 1);
    CHECK_EQ_INT(target_stat_reclaimable("xinactive_file 1048576\ninactive_files 7\n"
                                         "file_dirty 0\nfile_writeback 0\nfile_mapped 0\n", 1), 0);
    /* the first of two lines of one key (a kernel writes each once) */
    CHECK_EQ_INT(target_stat_reclaimable("inactive_file 8192\ninactive_file 1048576\n"
                                         "file_dirty 0\nfile_writeback 0\nfile_mapped 0\n", 1),
                 8192);
}

static void test_room_of(void)
{
    /* Orthanc's cgroup: 160 KiB left, 83 MiB of clean cache: room for the call */
    int64_t limit = 340 * MIB, usage = limit - 160 * KIB;
    int64_t cache = target_stat_reclaimable(V1, 0);
    CHECK_EQ_INT(target_room_of(limit, usage, 0), 160 * KIB); /* the old room: refused */
    CHECK_EQ_INT(target_room_of(limit, usage, cache), 160 * KIB + 83 * MIB);
    /* at or past its limit (memory.max lowered under the usage, memory.high crossed) */
    CHECK_EQ_INT(target_room_of(limit, limit + 50 * MIB, 0), 0);
    CHECK_EQ_INT(target_room_of(limit, limit + 50 * MIB, 83 * MIB), 33 * MIB);
    CHECK_EQ_INT(target_room_of(limit, limit + 50 * MIB, 20 * MIB), 0);
    /* the cache never counts past the usage (each figure is read apart) */
    CHECK_EQ_INT(target_room_of(limit, 10 * MIB, 200 * MIB), limit);
    CHECK_EQ_INT(target_room_of(limit, 0, INT64_MAX), limit);
    /* no limit ("max": -1; v1's page-rounded LONG_MAX), or no usage read: no room figure */
    CHECK_EQ_INT(target_room_of(-1, usage, cache), -1);
    CHECK_EQ_INT(target_room_of(INT64_C(9223372036854771712), usage, cache), -1);
    CHECK_EQ_INT(target_room_of(limit, -1, cache), -1);
    /* the extremes: no overflow */
    CHECK_EQ_INT(target_room_of(INT64_MAX / 2 - 1, INT64_MAX, INT64_MAX), INT64_MAX / 2 - 1);
    CHECK_EQ_INT(target_room_of(INT64_MAX / 2 - 1, INT64_MAX, 0), 0);
    CHECK_EQ_INT(target_room_of(0, 0, -5), 0);
}

/* /proc/PID/limits' RLIMIT_NPROC: a soft limit at or past 2^63 (set below RLIM_INFINITY,
 * printed as a number) binds nothing; control cmd-nproc-wrap: it was cast to a negative
 * limit, no room, every call refused (and the agent held the process for want of room). */
static void test_nproc_limit(void)
{
    static const char head[] = "Limit                     Soft Limit           Hard Limit"
                               "           Units     \nMax cpu time              unlimited   "
                               "         unlimited            seconds   \n";
    char text[512];
    snprintf(text, sizeof text, "%sMax processes             96367                96367      "
             "          processes \n", head);
    CHECK_EQ_INT(target_nproc_limit(text), 96367);
    snprintf(text, sizeof text, "%sMax processes             unlimited            unlimited  "
             "          processes \n", head);
    CHECK_EQ_INT(target_nproc_limit(text), -1);
    snprintf(text, sizeof text, "%sMax processes             9223372036854775807  unlimited  "
             "          processes \n", head);
    CHECK_EQ_INT(target_nproc_limit(text), -1);
    snprintf(text, sizeof text, "%sMax processes             18446744073709551614 unlimited  "
             "          processes \n", head);
    CHECK_EQ_INT(target_nproc_limit(text), -1);
    snprintf(text, sizeof text, "%sMax processes             9223372036854775806  unlimited  "
             "          processes \n", head);
    CHECK_EQ_INT(target_nproc_limit(text), INT64_MAX - 1);
    CHECK_EQ_INT(target_nproc_limit(head), -1);
    CHECK_EQ_INT(target_nproc_limit(NULL), -1);
}

int main(void)
{
    RUN(test_stat_reclaimable);
    RUN(test_room_of);
    RUN(test_nproc_limit);
    return harness_end();
}
