/*
 * test_fields.c - the field table (common/fields.h) drives /memory/stats, the
 * store's columns and the series names, and changed none of them: the JSON of
 * three synthetic readings is byte for byte what the hand-written code before
 * the table printed (the strings below were printed by it, with the cgroup
 * fields of issue 20 added since, one line each in the table); the table's rules
 * hold (one name once, the columns 1..N in the series list's order, a HELP for
 * each metric family). The store's side is in test_db.c (test_roundtrip,
 * test_new_field_column).
 *
 * Threads: one. No files.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "db.h"
#include "fields.h"
#include "harness.h"

/* Three readings: 0 everything known (glibc), 1 no heap reading and no cgroup,
 * 2 a heap reading without mallinfo2 (another allocator), no arena count, no ratio. */
static void snap_fill(struct mt_snapshot *s, int which)
{
    memset(s, 0, sizeof(*s));
    struct mt_cheap *c = &s->cheap;
    struct mt_heap *h = &s->heap;
    c->timestamp_ms = 1764600000123LL;
    c->rss_bytes = 5000000000ULL; c->rss_anon_bytes = 4000000001ULL; c->rss_file_bytes = 12345;
    c->rss_shmem_bytes = 777; c->swap_bytes = 3; c->vm_size_bytes = 9000000000ULL;
    c->minor_faults = 4294967296ULL; c->major_faults = 17;
    c->cgroup_usage_bytes = which == 1 ? -1 : 6000000000LL;
    c->cgroup_limit_bytes = which == 1 ? -1 : 8589934592LL;
    c->cgroup_version = which == 1 ? 0 : 2;
    c->duration_ns = 123456;
    c->read_errno = which == 1 ? -13 : 0;
    s->cheap_age_ms = which == 1 ? -1 : 42;
    s->rss_age_ms = which == 1 ? -1 : 0;
    s->memory_limit_bytes = which == 1 ? -1 : 8589934592LL;
    /* the cgroup in detail (issue 20): all known in 0, none in 1, v1-like in 2 */
    c->cgroup_max_bytes = which == 1 ? -1 : 8589934592LL;
    c->cgroup_high_bytes = which == 0 ? 9000000000LL : -1;
    c->cgroup_anon_bytes = which == 1 ? -1 : 5500000000LL;
    c->cgroup_file_bytes = which == 1 ? -1 : 400000000LL;
    c->cgroup_shmem_bytes = which == 1 ? -1 : 4096;
    for (int i = 0; i < MT_CG_EVENTS; i++)
        c->cgroup_events[i] = which == 1 || (which == 2 && (i == MT_CG_EV_HIGH || i == MT_CG_EV_OOM))
                                  ? -1 : 10 + i;
    s->allocator = "glibc"; s->allocator_release = "malloc_trim";
    if (which != 1) {
        s->saved.rss_without_memtrim_bytes = 5400000000ULL; s->saved.saved_bytes = 400000000ULL;
        s->saved.rss_peak_bytes = 6000000000ULL; s->saved.rss_without_memtrim_peak_bytes = 6500000000ULL;
        s->saved.saved_byte_seconds_total = 1234.5;
    }
    if (which == 1) { s->heap_age_ms = -1; return; }
    h->timestamp_ms = 1764600000000LL;
    s->heap_age_ms = 123;
    h->duration_ns = 2500000;
    h->heap_in_use_bytes = 3000000000ULL; h->heap_free_bytes = 1000000000ULL;
    h->heap_mmapped_bytes = 50000; h->arena_bytes = 4000000000ULL; h->ordblks = 99;
    h->heap_mapped_bytes = 4100000000ULL; h->heap_resident_bytes = 3900000000ULL; h->heap_retained_bytes = 5;
    h->arena_count = which == 2 ? -1 : 4;
    s->arena_count_age_ms = which == 2 ? -1 : 2500;
    h->known = which == 2 ? (MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_MAPPED | MT_HEAP_HAS_RESIDENT | MT_HEAP_HAS_RETAINED)
                          : (MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_FREE | MT_HEAP_HAS_MALLINFO);
    s->releasable_estimate_bytes = 700000000ULL;
    s->fragmentation_ratio = which == 2 ? 0 : 1.6666666666666667;
}

static const char *const golden_json[3] = {
    /* snapshot 0 */
    "{\"timestamp_ms\":1764600000123,\"cheap_age_ms\":42,\"rss_age_ms\":0,\"rss_bytes\":5000000000,"
    "\"rss_anon_bytes\":4000000001,\"rss_file_bytes\":12345,\"rss_shmem_bytes\":777,"
    "\"swap_bytes\":3,\"vm_size_bytes\":9000000000,\"minor_faults\":4294967296,"
    "\"major_faults\":17,\"cgroup_version\":2,\"cgroup_usage_bytes\":6000000000,"
    "\"cgroup_limit_bytes\":8589934592,\"memory_limit_bytes\":8589934592,"
    "\"cgroup_max_bytes\":8589934592,\"cgroup_high_bytes\":9000000000,"
    "\"cgroup_anon_bytes\":5500000000,\"cgroup_file_bytes\":400000000,\"cgroup_shmem_bytes\":4096,"
    "\"cgroup_events_high\":10,\"cgroup_events_max\":11,\"cgroup_events_oom\":12,"
    "\"cgroup_events_oom_kill\":13,"
    "\"rss_without_memtrim_bytes\":5400000000,\"saved_bytes\":400000000,"
    "\"rss_peak_bytes\":6000000000,\"rss_without_memtrim_peak_bytes\":6500000000,"
    "\"saved_byte_seconds_total\":1234.5,"
    "\"cheap_probe_duration_seconds\":0.000123456,\"probe_error\":null,"
    "\"heap_timestamp_ms\":1764600000000,\"heap_age_ms\":123,"
    "\"heap_in_use_bytes\":3000000000,\"heap_free_bytes\":1000000000,"
    "\"heap_mapped_bytes\":null,\"heap_resident_bytes\":null,\"heap_retained_bytes\":null,"
    "\"heap_mmapped_bytes\":50000,\"arena_bytes\":4000000000,\"heap_free_chunks\":99,"
    "\"arena_count\":4,\"arena_count_age_ms\":2500,\"releasable_estimate_bytes\":700000000,"
    "\"fragmentation_ratio\":1.6666666666666667,\"heap_probe_duration_seconds\":0.0025,"
    "\"mallinfo2\":{\"arena\":4000000000,\"ordblks\":99,\"smblks\":0,\"hblks\":0,\"hblkhd\":0,"
    "\"fsmblks\":0,\"uordblks\":0,\"fordblks\":0,\"keepcost\":0},\"allocator\":{\"name\":\"glibc\","
    "\"version\":null,\"release\":\"malloc_trim\",\"stats_call\":\"mallinfo2\",\"stats\":{}},"
    "\"malloc_tunables\":{\"glibc\":true,\"mmap_threshold_bytes\":null,\"arena_max\":null,"
    "\"trim_threshold_bytes\":null,\"top_pad_bytes\":null,\"arena_max_auto\":null}}"
    ,
    /* snapshot 1 */
    "{\"timestamp_ms\":1764600000123,\"cheap_age_ms\":-1,\"rss_age_ms\":-1,\"rss_bytes\":5000000000,"
    "\"rss_anon_bytes\":4000000001,\"rss_file_bytes\":12345,\"rss_shmem_bytes\":777,"
    "\"swap_bytes\":3,\"vm_size_bytes\":9000000000,\"minor_faults\":4294967296,"
    "\"major_faults\":17,\"cgroup_version\":0,\"cgroup_usage_bytes\":null,"
    "\"cgroup_limit_bytes\":null,\"memory_limit_bytes\":null,"
    "\"cgroup_max_bytes\":null,\"cgroup_high_bytes\":null,\"cgroup_anon_bytes\":null,"
    "\"cgroup_file_bytes\":null,\"cgroup_shmem_bytes\":null,\"cgroup_events_high\":null,"
    "\"cgroup_events_max\":null,\"cgroup_events_oom\":null,\"cgroup_events_oom_kill\":null,"
    "\"rss_without_memtrim_bytes\":0,\"saved_bytes\":0,\"rss_peak_bytes\":0,"
    "\"rss_without_memtrim_peak_bytes\":0,\"saved_byte_seconds_total\":0,"
    "\"cheap_probe_duration_seconds\":0.000123456,"
    "\"probe_error\":\"reading /proc/self failed: Permission denied\","
    "\"heap_timestamp_ms\":null,\"heap_age_ms\":null,\"heap_in_use_bytes\":null,"
    "\"heap_free_bytes\":null,\"heap_mapped_bytes\":null,\"heap_resident_bytes\":null,"
    "\"heap_retained_bytes\":null,\"heap_mmapped_bytes\":null,\"arena_bytes\":null,"
    "\"heap_free_chunks\":null,\"arena_count\":null,\"arena_count_age_ms\":null,\"releasable_estimate_bytes\":null,"
    "\"fragmentation_ratio\":null,\"heap_probe_duration_seconds\":null,\"mallinfo2\":null,"
    "\"allocator\":{\"name\":\"glibc\",\"version\":null,\"release\":\"malloc_trim\",\"stats_call\":\"mallinfo2\","
    "\"stats\":null},\"malloc_tunables\":{\"glibc\":true,\"mmap_threshold_bytes\":null,"
    "\"arena_max\":null,\"trim_threshold_bytes\":null,\"top_pad_bytes\":null,\"arena_max_auto\":null}}"
    ,
    /* snapshot 2 */
    "{\"timestamp_ms\":1764600000123,\"cheap_age_ms\":42,\"rss_age_ms\":0,\"rss_bytes\":5000000000,"
    "\"rss_anon_bytes\":4000000001,\"rss_file_bytes\":12345,\"rss_shmem_bytes\":777,"
    "\"swap_bytes\":3,\"vm_size_bytes\":9000000000,\"minor_faults\":4294967296,"
    "\"major_faults\":17,\"cgroup_version\":2,\"cgroup_usage_bytes\":6000000000,"
    "\"cgroup_limit_bytes\":8589934592,\"memory_limit_bytes\":8589934592,"
    "\"cgroup_max_bytes\":8589934592,\"cgroup_high_bytes\":null,"
    "\"cgroup_anon_bytes\":5500000000,\"cgroup_file_bytes\":400000000,\"cgroup_shmem_bytes\":4096,"
    "\"cgroup_events_high\":null,\"cgroup_events_max\":11,\"cgroup_events_oom\":null,"
    "\"cgroup_events_oom_kill\":13,"
    "\"rss_without_memtrim_bytes\":5400000000,\"saved_bytes\":400000000,"
    "\"rss_peak_bytes\":6000000000,\"rss_without_memtrim_peak_bytes\":6500000000,"
    "\"saved_byte_seconds_total\":1234.5,"
    "\"cheap_probe_duration_seconds\":0.000123456,\"probe_error\":null,"
    "\"heap_timestamp_ms\":1764600000000,\"heap_age_ms\":123,"
    "\"heap_in_use_bytes\":3000000000,\"heap_free_bytes\":null,"
    "\"heap_mapped_bytes\":4100000000,\"heap_resident_bytes\":3900000000,"
    "\"heap_retained_bytes\":5,\"heap_mmapped_bytes\":null,\"arena_bytes\":null,"
    "\"heap_free_chunks\":null,\"arena_count\":null,\"arena_count_age_ms\":null,"
    "\"releasable_estimate_bytes\":700000000,\"fragmentation_ratio\":null,"
    "\"heap_probe_duration_seconds\":0.0025,\"mallinfo2\":null,"
    "\"allocator\":{\"name\":\"glibc\",\"version\":null,\"release\":\"malloc_trim\",\"stats_call\":\"mallinfo2\",\"stats\":{}},"
    "\"malloc_tunables\":{\"glibc\":true,\"mmap_threshold_bytes\":null,\"arena_max\":null,"
    "\"trim_threshold_bytes\":null,\"top_pad_bytes\":null,\"arena_max_auto\":null}}"
};

static void test_stats_json_unchanged(void)
{
    for (int w = 0; w < 3; w++) {
        struct mt_snapshot s;
        snap_fill(&s, w);
        cJSON *j = api_stats_to_json(&s);
        char *text = j ? cJSON_PrintUnformatted(j) : NULL;
        CHECK_MSG(text && strcmp(text, golden_json[w]) == 0, "snapshot %d:\n%s\nwanted\n%s", w,
                  h_str(text), golden_json[w]);
        free(text);
        cJSON_Delete(j);
    }
}

static void test_table_rules(void)
{
    int stored = 0, series = 0;
    for (int i = 0; i < MT_FIELD_COUNT; i++) {
        const struct mt_field *f = &mt_fields[i];
        for (int k = 0; k < i; k++)
            CHECK_MSG(strcmp(mt_fields[k].name, f->name) != 0, "%s twice", f->name);
        stored += f->column != 0;
        if (f->metric != MT_METRIC_NONE) {
            CHECK_MSG(strncmp(f->sample, "memtrim_", 8) == 0, "%s: %s", f->name, f->sample);
            size_t len = strcspn(f->sample, "{");
            int continues = i > 0 && mt_fields[i - 1].metric != MT_METRIC_NONE &&
                            strncmp(mt_fields[i - 1].sample, f->sample, len) == 0 &&
                            strcspn(mt_fields[i - 1].sample, "{") == len;
            CHECK_MSG(continues || f->help[0] != '\0', "%s: a family's first line needs a HELP",
                      f->name);
        }
    }
    while (db_series_metrics[series])
        series++;
    CHECK_EQ_INT(series, stored);
    CHECK_EQ_INT(stored, MT_FIELD_COLUMNS);
    for (int i = 0; i < MT_FIELD_COUNT; i++) /* column k is the series list's k-th, no gaps */
        if (mt_fields[i].column)
            CHECK_MSG(mt_fields[i].column <= series &&
                          strcmp(db_series_metrics[mt_fields[i].column - 1], mt_fields[i].name) == 0,
                      "%s", mt_fields[i].name);
}

int main(void)
{
    RUN(test_stats_json_unchanged);
    RUN(test_table_rules);
    return harness_end();
}
