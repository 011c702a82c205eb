/*
 * fuzz_group_msg.c - libFuzzer harness for a worker group's wire message as its leader
 * receives it (core/group/group_chan.c, group_msg_check): a named group's socket takes any
 * process of the leader's uid, so any bytes may arrive. The first byte picks how the times
 * in the message are read: odd, as offsets from now (so that a message may be dated near
 * the leader's clock and pass the check), even, as sent. A message the check accepts must
 * be safe to use: no pointer left, its figures' count and strings bounded, its byte counts
 * under what the leader adds up for a full group without overflow; and what the leader
 * does with it runs (the group's sums, the API's JSON of a report and of a trim) under
 * ASan and UBSan. Build and run with tests/fuzz/run.sh. One thread; no locks.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api.h"
#include "common.h"
#include "group_int.h"

/* A time field as an offset from now (unsigned: wraps, never undefined). */
static void from_now(int64_t *t, int64_t now)
{
    *t = (int64_t)((uint64_t)*t + (uint64_t)now);
}

/* What the leader adds up over a full group (group_leader.c: leader_total_sample, pressure_candidates,
 * api_group_stats): GROUP_MAX_MEMBERS copies of an accepted report, each figure summed in
 * the leader's type; a sum that overflows is a check that let too much through. */
static void sums(const struct mt_snapshot *s)
{
    const uint64_t figures[] = {s->cheap.rss_bytes,       s->cheap.rss_peak_bytes,
                                s->cheap.rss_anon_bytes,  s->cheap.rss_file_bytes,
                                s->cheap.swap_bytes,      s->heap.heap_in_use_bytes,
                                s->heap.heap_free_bytes,  s->heap.heap_mmapped_bytes,
                                s->heap.arena_bytes,      s->releasable_estimate_bytes,
                                s->saved.saved_bytes};
    for (size_t f = 0; f < sizeof(figures) / sizeof(figures[0]); f++) {
        int64_t sum = 0;
        for (int i = 0; i < GROUP_MAX_MEMBERS; i++)
            if (figures[f] > INT64_MAX || __builtin_add_overflow(sum, (int64_t)figures[f], &sum))
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct group_msg msg;
    if (size < 1)
        return 0;
    int relative = data[0] & 1;
    memset(&msg, 0, sizeof(msg));
    memcpy(&msg, data + 1, size - 1 < sizeof(msg) ? size - 1 : sizeof(msg));
    if (relative) {
        int64_t now = mt_now_ms();
        from_now(&msg.u.snap.cheap.timestamp_ms, now);
        from_now(&msg.u.snap.heap.timestamp_ms, now);
        if (msg.kind == MSG_TRIM_DONE || msg.kind == MSG_TRIM_ANSWER || msg.kind == MSG_TRIM_OWN)
            from_now(&msg.u.trim.start_ms, now);
        if (msg.kind == MSG_REFAULT)
            from_now(&msg.u.refault.start_ms, now);
    }
    if (group_msg_check(&msg) != 0)
        return 0;
    cJSON *j = NULL;
    switch (msg.kind) {
    case MSG_REPORT: {
        const struct mt_snapshot *s = &msg.u.snap;
        if (s->allocator || s->allocator_release || s->heap.allocator || s->heap.nfigures != 0 ||
            memchr(s->allocator_version, 0, sizeof(s->allocator_version)) == NULL ||
            s->heap.arena_count < -1 || !(s->fragmentation_ratio >= 0))
            abort();
        sums(s);
        j = api_stats_to_json(s);
        break;
    }
    case MSG_TRIM_DONE:
    case MSG_TRIM_ANSWER:
    case MSG_TRIM_OWN:
        if (msg.u.trim.trigger < 0 || msg.u.trim.trigger >= MT_TRIGGER_COUNT)
            abort();
        j = api_trim_to_json(&msg.u.trim, 1);
        break;
    case MSG_REFAULT:
        if (msg.u.refault.trigger < 0 || msg.u.refault.trigger >= MT_TRIGGER_COUNT)
            abort();
        break;
    default:
        break;
    }
    if (j) {
        char *text = cJSON_PrintUnformatted(j);
        free(text);
        cJSON_Delete(j);
    }
    return 0;
}
