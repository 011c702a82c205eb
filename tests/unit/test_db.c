/*
 * test_db.c - the store on a temporary directory: schema creation, migration
 * from a version-1 file written here with raw SQL, refusal of newer and
 * foreign files, a column for a field added later (common/fields.h), exact round trips, bucketing, percentiles, retention and
 * the in-memory store. Faults are in test_db_faults.c.
 *
 * Threads: one. Files: a mkdtemp directory under /tmp, removed at the end.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db.h"
#include "harness.h"

#define CHECK_NEAR(a, b) CHECK(fabs((double)(a) - (double)(b)) < 1e-9)
/* A call that must succeed; prints its message otherwise. */
#define CHECK_OK(call)                                                                         \
    do {                                                                                       \
        char *err_ = NULL;                                                                     \
        int rc_ = (call);                                                                      \
        if (rc_ != 0)                                                                          \
            fprintf(stderr, "%d %s\n", rc_, err_ ? err_ : "");                                   \
        CHECK_MSG(rc_ == 0, "%s", #call);                                                                  \
        free(err_);                                                                            \
    } while (0)
#define E (&err_)

static char tmpdir[64];

static char *tpath(const char *name)
{
    return harness_path(tmpdir, name);
}

static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    char *msg = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK || sqlite3_exec(db, sql, NULL, NULL, &msg) != 0)
        fprintf(stderr, "raw_exec %s: %s\n", path, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    sqlite3_close(db);
}

static long long raw_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long v = -999;
    if (sqlite3_open(path, &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static struct mt_snapshot snap(int64_t ts, uint64_t base)
{
    struct mt_snapshot s;
    memset(&s, 0, sizeof(s));
    s.cheap.timestamp_ms = ts;
    s.cheap.rss_bytes = base + 1;
    s.cheap.rss_anon_bytes = base + 2;
    s.cheap.rss_file_bytes = base + 3;
    s.cheap.swap_bytes = base + 4;
    s.cheap.cgroup_usage_bytes = (int64_t)base + 5;
    s.heap.timestamp_ms = ts;
    s.heap.known = MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_FREE | MT_HEAP_HAS_MAPPED | MT_HEAP_HAS_MALLINFO;
    s.heap.heap_in_use_bytes = base + 6;
    s.heap.heap_free_bytes = base + 7;
    s.heap.heap_mmapped_bytes = base + 8;
    s.heap.arena_bytes = base + 9;
    s.heap.arena_count = 3;
    s.heap.duration_ns = 1500000;
    s.fragmentation_ratio = 1.25;
    s.releasable_estimate_bytes = base + 10;
    s.memory_limit_bytes = (int64_t)base + 11;
    s.cheap.cgroup_anon_bytes = (int64_t)base + 12;
    s.cheap.cgroup_file_bytes = (int64_t)base + 13;
    for (int i = 0; i < MT_CG_EVENTS; i++)
        s.cheap.cgroup_events[i] = (int64_t)base + 14 + i;
    s.cheap.cgroup_max_bytes = s.cheap.cgroup_high_bytes = s.cheap.cgroup_shmem_bytes = -1;
    s.saved.rss_without_memtrim_bytes = base + 18;
    s.saved.saved_bytes = base + 19;
    return s;
}

static struct mt_trim_result trim(int64_t start_ms, int trigger, int64_t duration_ms)
{
    struct mt_trim_result t;
    memset(&t, 0, sizeof(t));
    t.id = start_ms;
    t.trigger = trigger;
    t.start_ms = start_ms;
    t.duration_ns = duration_ms * 1000000;
    t.rss_before_bytes = 5000;
    t.rss_after_bytes = 3000;
    t.heap_free_before_bytes = 700;
    t.heap_free_after_bytes = 70;
    t.released_bytes = 2000;
    t.malloc_trim_ret = 1;
    t.pad_bytes = 4096;
    t.coalesced = 0;
    t.arena_count = -1;
    t.refaulted_bytes = -1;
    t.reaction_ns = -1;
    return t;
}

/* The series of one metric as buckets; returns how many. */
static size_t series(struct db_reader *r, const char *metric, int64_t since, int64_t until,
                     int64_t step, struct db_bucket **b)
{
    size_t n = 0;
    CHECK_OK(db_query_series(r, metric, since, until, step, b, &n, E));
    return n;
}

static void test_schema_fresh(void)
{
    struct db_writer *w = NULL;
    const char *p = tpath("fresh.sqlite");

    CHECK_OK(db_writer_open(p, &w, E));
    CHECK_EQ_INT(raw_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    CHECK_EQ_INT(raw_int(p, "PRAGMA application_id"), 0x6d74726d);
    /* trims_start, trims_trigger_start, trims_pid_start, member_samples_time */
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM sqlite_schema WHERE type = 'index'"), 4);
    /* the samples' columns and pid */
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM pragma_table_info('member_samples')"),
                 raw_int(p, "SELECT count(*) FROM pragma_table_info('samples')") + 1);
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM pragma_table_info('samples')"),
                 1 + 22);
    CHECK(strcmp(db_writer_reader_path(w), p) == 0);
    db_writer_close(w);
    /* Reopening a current store changes nothing. */
    CHECK_OK(db_writer_open(p, &w, E));
    db_writer_close(w);
    {
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        sqlite3_open(p, &db);
        sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
        CHECK(sqlite3_step(st) == SQLITE_ROW &&
              strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
}

/* Version 1 exactly as an older memtrim wrote it. */
static const char v1_sql[] =
    "PRAGMA application_id = 1836348013;"
    "CREATE TABLE samples (timestamp_ms INTEGER PRIMARY KEY, rss_bytes INTEGER NOT NULL,"
    " rss_anon_bytes INTEGER, rss_file_bytes INTEGER, swap_bytes INTEGER,"
    " heap_in_use_bytes INTEGER, heap_free_bytes INTEGER, heap_mmapped_bytes INTEGER,"
    " arena_bytes INTEGER, fragmentation_ratio REAL);"
    "CREATE TABLE trims (start_ms INTEGER NOT NULL, trigger INTEGER NOT NULL,"
    " duration_ns INTEGER NOT NULL, rss_before_bytes INTEGER, rss_after_bytes INTEGER,"
    " released_bytes INTEGER, malloc_trim_ret INTEGER);"
    "CREATE INDEX trims_start ON trims (start_ms);"
    "INSERT INTO samples VALUES (1000, 111, 112, 113, 114, 115, 116, 117, 118, 1.5);"
    "INSERT INTO trims VALUES (2000, 2, 7000000, 900, 400, 500, 1);"
    "PRAGMA user_version = 1;";

/* A version-4 store written by two runs that each numbered trims from 1. */
static void test_migration_v5_unique_ids(void)
{
    const char *p = tpath("v4ids.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 10, 0, 0};
    struct db_trim_summary sum;
    struct db_trim_row *rows = NULL;
    struct mt_trim_result t = trim(9000, 1, 3);
    size_t n = 0;

    CHECK_OK(db_writer_open(p, &w, E));
    for (int run = 0; run < 2; run++) {
        for (int i = 1; i <= 2; i++) {
            struct mt_trim_result old = trim(1000 * (run * 2 + i), 1, 0);
            old.id = i;
            CHECK_OK(db_writer_add_trim(w, &old, E));
        }
    }
    CHECK_OK(db_writer_flush(w, E));
    db_writer_close(w);
    w = NULL;
    /* Back to version 4: without what versions 6 and 7 added. */
    raw_exec(p, "DROP INDEX trims_pid_start; DROP INDEX member_samples_time;"
                " DROP TABLE member_samples; ALTER TABLE trims DROP COLUMN pid;"
                " ALTER TABLE trims DROP COLUMN nothing_reason;"
                " PRAGMA user_version = 4;");
    CHECK_OK(db_writer_open(p, &w, E));
    CHECK_EQ_INT(raw_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    t.id = 1764000000000LL; /* an id from the clock, as memtrim now gives */
    CHECK_OK(db_writer_add_trim(w, &t, E));
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_reader_open(p, &r, E));
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &sum, E));
    CHECK_EQ_INT(n, 5);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            CHECK_MSG(rows[i].t.id != rows[j].t.id, "rows %zu and %zu share id %lld", i, j,
                      (long long)rows[i].t.id);
    if (n == 5) {
        CHECK_EQ_INT(rows[0].t.id, 1764000000000LL); /* newer ids are left alone */
        CHECK_EQ_INT(rows[4].t.id, rows[4].row_id);
    }
    free(rows);
    db_reader_close(r);
    db_writer_close(w);
}

static void test_migration_v1(void)
{
    const char *p = tpath("v1.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 10, 0, 0};
    struct db_trim_summary sum;
    struct db_trim_row *rows = NULL;
    struct db_bucket *b = NULL;
    struct mt_trim_result t = trim(3000, 1, 3);
    size_t n = 0;

    raw_exec(p, v1_sql);
    CHECK_EQ_INT(raw_int(p, "PRAGMA user_version"), 1);
    CHECK_OK(db_writer_open(p, &w, E));
    CHECK_EQ_INT(raw_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    CHECK_OK(db_writer_add_trim(w, &t, E));
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_reader_open(p, &r, E));
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &sum, E));
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        /* The old row: its fields kept, the new ones at their defaults. */
        CHECK_EQ_INT(rows[1].t.start_ms, 2000);
        CHECK_EQ_INT(rows[1].t.trigger, 2);
        CHECK_EQ_INT(rows[1].t.duration_ns, 7000000);
        CHECK_EQ_INT(rows[1].t.rss_before_bytes, 900);
        CHECK_EQ_INT(rows[1].t.rss_after_bytes, 400);
        CHECK_EQ_INT(rows[1].t.released_bytes, 500);
        CHECK_EQ_INT(rows[1].t.malloc_trim_ret, 1);
        CHECK_EQ_INT(rows[1].t.id, rows[1].row_id); /* version 5: its row id */
        CHECK_EQ_INT(rows[1].t.pad_bytes, 0);
        CHECK_EQ_INT(rows[1].t.heap_free_before_bytes, 0);
        CHECK_EQ_INT(rows[1].t.arena_count, -1);     /* version 3: unknown in old rows */
        CHECK_EQ_INT(rows[1].t.refaulted_bytes, -1);
        CHECK_EQ_INT(rows[1].t.reaction_ns, -1);      /* version 4: unknown in old rows */
        CHECK_EQ_INT(rows[0].t.pad_bytes, 4096);
        CHECK_EQ_INT(rows[0].t.heap_free_before_bytes, 700);
    }
    free(rows);
    CHECK_EQ_INT(series(r, "rss_bytes", 0, 5000, 5000, &b), 1);
    CHECK_NEAR(b[0].avg, 111);
    free(b);
    CHECK_EQ_INT(series(r, "fragmentation_ratio", 0, 5000, 5000, &b), 1);
    CHECK_NEAR(b[0].max, 1.5);
    free(b);
    /* Columns added by version 2 are unknown in old rows: no buckets. */
    CHECK_EQ_INT(series(r, "releasable_estimate_bytes", 0, 5000, 5000, &b), 0);
    free(b);
    db_reader_close(r);
    db_writer_close(w);
}

/* A store from before a stored field of common/fields.h existed (its column dropped
 * here): the writer adds the column at its next opening and keeps the rows. */
static void test_new_field_column(void)
{
    const char *p = tpath("newfield.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    struct db_bucket *b = NULL;
    struct mt_snapshot s = snap(1700000000000, 0);
    const char *has = "SELECT count(*) FROM pragma_table_info('samples') WHERE "
                      "name = 'heap_probe_duration_seconds' AND type = 'REAL'";

    CHECK_OK(db_writer_open(p, &w, E));
    CHECK_OK(db_writer_add_sample(w, &s, E));
    CHECK_OK(db_writer_flush(w, E));
    db_writer_close(w);
    raw_exec(p, "ALTER TABLE samples DROP COLUMN heap_probe_duration_seconds");
    CHECK_EQ_INT(raw_int(p, has), 0);
    CHECK_OK(db_writer_open(p, &w, E));
    CHECK_EQ_INT(raw_int(p, has), 1);
    CHECK_EQ_INT(raw_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    s.cheap.timestamp_ms += 1000;
    CHECK_OK(db_writer_add_sample(w, &s, E));
    CHECK_OK(db_writer_flush(w, E));
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM samples"), 2);
    CHECK_OK(db_reader_open(p, &r, E));
    /* The older row's value is gone with its column (NULL); the new one is kept. */
    CHECK_EQ_INT(series(r, "heap_probe_duration_seconds", 1700000000000, 1700000002000, 2000, &b), 1);
    if (b)
        CHECK_EQ_INT(b[0].count, 1);
    free(b);
    CHECK_EQ_INT(series(r, "rss_bytes", 1700000000000, 1700000002000, 2000, &b), 1);
    if (b)
        CHECK_EQ_INT(b[0].count, 2);
    free(b);
    db_reader_close(r);
    db_writer_close(w);
}

static void test_refused(void)
{
    const char *newer = tpath("newer.sqlite"), *foreign = tpath("foreign.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    char *err = NULL;
    int rc;

    char sql[160];
    snprintf(sql, sizeof(sql),
             "PRAGMA application_id = 1836348013; CREATE TABLE future (x);"
             "PRAGMA user_version = %d;", DB_SCHEMA_VERSION + 1);
    raw_exec(newer, sql);
    rc = db_writer_open(newer, &w, &err);
    CHECK_EQ_INT(rc, -EPROTONOSUPPORT);
    CHECK(w == NULL && err != NULL && strstr(err, "newer") != NULL);
    printf("newer store: %s\n", err ? err : "");
    free(err);
    err = NULL;
    CHECK_EQ_INT(raw_int(newer, "PRAGMA user_version"), DB_SCHEMA_VERSION + 1); /* untouched */
    CHECK_EQ_INT(db_reader_open(newer, &r, &err), -EPROTONOSUPPORT);
    free(err);
    err = NULL;

    raw_exec(foreign, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);");
    rc = db_writer_open(foreign, &w, &err);
    CHECK_EQ_INT(rc, -EBADMSG);
    CHECK(err != NULL && strstr(err, "not a memtrim store") != NULL);
    printf("foreign database: %s\n", err ? err : "");
    free(err);
    CHECK_EQ_INT(raw_int(foreign, "SELECT count(*) FROM sqlite_schema"), 1);
}

static void check_trim_equal(const struct mt_trim_result *a, const struct mt_trim_result *b)
{
    CHECK_EQ_INT(a->id, b->id);
    CHECK_EQ_INT(a->trigger, b->trigger);
    CHECK_EQ_INT(a->start_ms, b->start_ms);
    CHECK_EQ_INT(a->duration_ns, b->duration_ns);
    CHECK_EQ_INT(a->rss_before_bytes, b->rss_before_bytes);
    CHECK_EQ_INT(a->rss_after_bytes, b->rss_after_bytes);
    CHECK_EQ_INT(a->heap_free_before_bytes, b->heap_free_before_bytes);
    CHECK_EQ_INT(a->heap_free_after_bytes, b->heap_free_after_bytes);
    CHECK_EQ_INT(a->released_bytes, b->released_bytes);
    CHECK_EQ_INT(a->malloc_trim_ret, b->malloc_trim_ret);
    CHECK_EQ_INT(a->pad_bytes, b->pad_bytes);
    CHECK_EQ_INT(a->coalesced, b->coalesced);
    CHECK_EQ_INT(a->arena_count, b->arena_count);
    CHECK_EQ_INT(a->refaulted_bytes, b->refaulted_bytes);
    CHECK_EQ_INT(a->reaction_ns, b->reaction_ns);
    CHECK_EQ_INT(a->nothing_reason, b->nothing_reason);
}

static void test_roundtrip(void)
{
    const char *p = tpath("roundtrip.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    struct mt_snapshot s = snap(1700000000123, 4000000000000ULL), nh = snap(1700000001000, 0);
    struct mt_trim_result t = trim(1700000000500, 3, 12), pt = trim(1700000000400, 2, 1);
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 10, 0, 0};
    struct db_trim_row *rows = NULL;
    struct db_trim_summary sum;
    struct db_bucket *b = NULL;
    size_t n = 0;
    double want[] = {1, 2, 3, 4, 6, 7, 8, 9, 3, 1.25, 10, 5, 11, 0.0015, 12, 13, 14, 15, 16, 17, 18, 19};

    t.id = 77;
    t.released_bytes = -123456789012;
    t.rss_before_bytes = 9000000000000ULL;
    t.coalesced = 1;
    t.malloc_trim_ret = 0;
    t.arena_count = 17;
    t.nothing_reason = MT_NOTHING_PINNED_TOP; /* stored by name, read back */
    nh.heap.timestamp_ms = 0;          /* no mallinfo2 yet */
    nh.cheap.cgroup_usage_bytes = -1;  /* unknown */
    nh.cheap.cgroup_anon_bytes = nh.cheap.cgroup_file_bytes = -1;
    for (int i = 0; i < MT_CG_EVENTS; i++)
        nh.cheap.cgroup_events[i] = -1;
    nh.memory_limit_bytes = -1;        /* no limit */
    nh.fragmentation_ratio = 0;        /* unknown */
    CHECK_OK(db_writer_open(p, &w, E));
    CHECK_OK(db_writer_add_sample(w, &s, E));
    CHECK_OK(db_writer_add_sample(w, &nh, E));
    CHECK_OK(db_writer_add_trim(w, &t, E));
    pt.reaction_ns = 1500000; /* a pressure trim 1.5 ms after its crossing */
    CHECK_OK(db_writer_add_trim(w, &pt, E));
    CHECK_OK(db_reader_open(p, &r, E));
    /* Not flushed yet: a reader sees nothing. */
    CHECK_EQ_INT(series(r, "rss_bytes", 0, INT64_MAX / 2, INT64_MAX / 4, &b), 0);
    free(b);
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &sum, E));
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        check_trim_equal(&rows[0].t, &t); /* newest first */
        CHECK(rows[0].row_id > 0);
        check_trim_equal(&rows[1].t, &pt);
    }
    free(rows);
    CHECK_EQ_INT(sum.released_bytes, 2000); /* only positive releases count */
    CHECK_EQ_INT(sum.refaulted_bytes, 0); /* not known yet */

    /* The re-fault figure arrives later and names its trim by start and sequence. */
    struct mt_refault rf = {.id = 77, .start_ms = t.start_ms, .trigger = 3,
                            .refaulted_bytes = 4096 * 300};
    struct mt_refault other = {.id = 78, .start_ms = t.start_ms, .refaulted_bytes = 1};
    CHECK_OK(db_writer_set_refault(w, &rf, E));
    CHECK_OK(db_writer_set_refault(w, &other, E)); /* no such trim: nothing changes */
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &sum, E));
    CHECK_EQ_INT(n, 2);
    t.refaulted_bytes = 4096 * 300;
    if (n == 2)
        check_trim_equal(&rows[0].t, &t);
    free(rows);
    CHECK_EQ_INT(sum.refaulted_bytes, 4096 * 300);
    for (int i = 0; db_series_metrics[i] != NULL; i++) {
        double base = strcmp(db_series_metrics[i], "arena_count") == 0 ||
                              strstr(db_series_metrics[i], "ratio") ||
                              strstr(db_series_metrics[i], "seconds")
                          ? 0
                          : 4000000000000.0;
        size_t k = series(r, db_series_metrics[i], 1700000000000, 1700000002000, 1000, &b);
        CHECK(db_series_metric_valid(db_series_metrics[i]));
        CHECK(k >= 1);
        if (k >= 1) {
            CHECK_EQ_INT(b[0].start_ms, 1700000000000);
            CHECK_EQ_INT(b[0].count, 1);
            CHECK_NEAR(b[0].min, base + want[i]);
            CHECK_NEAR(b[0].max, base + want[i]);
        }
        /* The second sample knows only rss, anon, file, swap and the counterfactual. */
        CHECK_EQ_INT(k, i < 4 || i >= 20 ? 2 : 1);
        free(b);
    }
    /* An allocator without in-use, free or mallinfo2 figures (mimalloc): those are NULL. */
    struct mt_snapshot mi = snap(1700000005000, 4000000000000ULL);
    mi.heap.known = MT_HEAP_HAS_MAPPED;
    CHECK_OK(db_writer_add_sample(w, &mi, E));
    CHECK_OK(db_writer_flush(w, E));
    const char *absent[] = {"heap_in_use_bytes", "heap_free_bytes", "heap_mmapped_bytes",
                            "arena_bytes"};
    for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++) {
        CHECK_EQ_INT(series(r, absent[i], 1700000005000, 1700000006000, 1000, &b), 0);
        free(b);
    }
    CHECK_EQ_INT(series(r, "rss_bytes", 1700000005000, 1700000006000, 1000, &b), 1);
    free(b);
    CHECK_EQ_INT(series(r, "releasable_estimate_bytes", 1700000005000, 1700000006000, 1000, &b), 1);
    free(b);
    CHECK(!db_series_metric_valid("rss_bytes; DROP TABLE samples"));
    CHECK(!db_series_metric_valid("timestamp_ms"));
    CHECK_EQ_INT(db_query_series(r, "rss_bytes) FROM samples --", 0, 10, 1, &b, &n, NULL),
                 -EINVAL);
    db_reader_close(r);
    db_writer_close(w);
}

static void test_bucketing(void)
{
    const char *p = tpath("buckets.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    struct db_bucket *b = NULL;
    const int64_t base = 1000000;
    size_t n;

    CHECK_OK(db_writer_open(p, &w, E));
    for (int i = 0; i < 100; i++) {
        struct mt_snapshot s = snap(base + i * 1000, 0);
        s.cheap.rss_bytes = (uint64_t)i * 10;
        CHECK_OK(db_writer_add_sample(w, &s, E));
    }
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_reader_open(p, &r, E));
    n = series(r, "rss_bytes", base, base + 100000, 10000, &b);
    CHECK_EQ_INT(n, 10);
    for (size_t k = 0; k < n; k++) {
        CHECK_EQ_INT(b[k].start_ms, base + (int64_t)k * 10000);
        CHECK_EQ_INT(b[k].count, 10);
        CHECK_NEAR(b[k].min, k * 100.0);
        CHECK_NEAR(b[k].avg, k * 100.0 + 45);
        CHECK_NEAR(b[k].max, k * 100.0 + 90);
    }
    free(b);
    /* Unaligned since, exclusive until: samples 5..24 in buckets of 7 s from base+4500. */
    n = series(r, "rss_bytes", base + 4500, base + 24001, 7000, &b);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK_EQ_INT(b[0].start_ms, base + 4500);
        CHECK_EQ_INT(b[0].count, 7); /* samples 5..11 */
        CHECK_NEAR(b[0].min, 50);
        CHECK_NEAR(b[0].avg, 80);
        CHECK_NEAR(b[0].max, 110);
        CHECK_EQ_INT(b[2].start_ms, base + 18500);
        CHECK_EQ_INT(b[2].count, 6); /* samples 19..24 */
        CHECK_NEAR(b[2].max, 240);
    }
    free(b);
    /* Gaps: empty buckets are omitted. */
    n = series(r, "rss_bytes", base - 50000, base + 1000, 10000, &b);
    CHECK_EQ_INT(n, 1);
    free(b);
    CHECK_EQ_INT(db_query_series(r, "rss_bytes", base, base, 10, &b, &n, NULL), -EINVAL);
    CHECK_EQ_INT(db_query_series(r, "rss_bytes", base, base + 10, 0, &b, &n, NULL), -EINVAL);
    CHECK_EQ_INT(db_query_series(r, "rss_bytes", 0, 1000000000, 1, &b, &n, NULL), -EINVAL);
    db_reader_close(r);
    db_writer_close(w);
}

static void test_percentiles(void)
{
    const char *p = tpath("pct.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 5, 0, 0};
    struct db_trim_row *rows = NULL;
    struct db_trim_summary s;
    size_t n = 0;

    CHECK_OK(db_writer_open(p, &w, E));
    /* Durations 1..100 ms in a scrambled order; even ones periodic, odd ones manual. */
    for (int i = 0; i < 100; i++) {
        int d = (i * 37) % 100 + 1;
        struct mt_trim_result t = trim(10000 + i, d % 2 == 0 ? 1 : 0, d);
        t.released_bytes = d % 10 == 0 ? -5 : d;
        CHECK_OK(db_writer_add_trim(w, &t, E));
    }
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_reader_open(p, &r, E));
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &s, E));
    CHECK_EQ_INT(s.count, 100);
    CHECK_NEAR(s.duration_p50_seconds, 0.050);
    CHECK_NEAR(s.duration_p95_seconds, 0.095);
    CHECK_NEAR(s.duration_p99_seconds, 0.099);
    CHECK_NEAR(s.duration_max_seconds, 0.100);
    CHECK_EQ_INT(s.released_bytes, 5050 - (10 + 20 + 30 + 40 + 50 + 60 + 70 + 80 + 90 + 100));
    CHECK_EQ_INT(n, 5);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(rows[i].t.start_ms, 10099 - (int64_t)i); /* newest first */
    free(rows);
    /* Periodic only: 2, 4, ..., 100 -> ranks 25, 48, 50. */
    q.trigger = 1;
    q.limit = 0;
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &s, E));
    CHECK_EQ_INT(s.count, 50);
    CHECK_EQ_INT(n, 0);
    CHECK(rows == NULL);
    CHECK_NEAR(s.duration_p50_seconds, 0.050);
    CHECK_NEAR(s.duration_p95_seconds, 0.096);
    CHECK_NEAR(s.duration_p99_seconds, 0.100);
    /* A range: the first 10 trims (i = 0..9), durations 1, 38, 75, 12, 49, 86, 23, 60, 97, 34. */
    q.trigger = -1;
    q.since_ms = 10000;
    q.until_ms = 10010;
    q.limit = 100;
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &s, E));
    CHECK_EQ_INT(s.count, 10);
    CHECK_EQ_INT(n, 10);
    CHECK_NEAR(s.duration_p50_seconds, 0.038); /* rank 5 of 1,12,23,34,38,... */
    CHECK_NEAR(s.duration_p95_seconds, 0.097);
    CHECK_NEAR(s.duration_max_seconds, 0.097);
    free(rows);
    /* Nothing matches: all zero. */
    q.trigger = 2;
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &s, E));
    CHECK_EQ_INT(s.count, 0);
    CHECK_NEAR(s.duration_p99_seconds, 0);
    q.trigger = 9;
    CHECK_EQ_INT(db_query_trims(r, &q, &rows, &n, &s, NULL), -EINVAL);
    db_reader_close(r);
    db_writer_close(w);
}

/* #31 F6 (the SQL part) and F7: 200 rows of released_bytes 2^56 (what a member may report)
 * once made every /memory/trims a 500 (sum(): integer overflow); the sums saturate. A stored
 * id past MT_TRIM_ID_MAX does not hide the largest real one. */
static void test_sums_and_ids_bounded(void)
{
    const char *p = tpath("huge.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 5, 0, 0};
    struct db_trim_row *rows = NULL;
    struct db_trim_summary s;
    size_t n = 0;
    int64_t max_id = -1;

    CHECK_OK(db_writer_open(p, &w, E));
    for (int i = 0; i < 200; i++) {
        struct mt_trim_result t = trim(20000 + i, 1, 1);
        t.released_bytes = INT64_C(1) << 56;
        t.refaulted_bytes = INT64_C(1) << 56;
        CHECK_OK(db_writer_add_trim(w, &t, E));
    }
    struct mt_trim_result bogus = trim(30000, 1, 1);
    bogus.id = INT64_MAX - 1;
    CHECK_OK(db_writer_add_trim(w, &bogus, E));
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_writer_max_trim_id(w, &max_id, E));
    CHECK_EQ_INT(max_id, 20199);
    CHECK_OK(db_reader_open(p, &r, E));
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &s, E));
    CHECK_EQ_INT(s.count, 201);
    CHECK_EQ_INT(s.released_bytes, INT64_MAX);
    CHECK_EQ_INT(s.refaulted_bytes, INT64_MAX);
    free(rows);
    /* Below the end, the sum is exact. */
    q.until_ms = 20002;
    CHECK_OK(db_query_trims(r, &q, &rows, &n, &s, E));
    CHECK_EQ_INT(s.released_bytes, INT64_C(2) << 56);
    free(rows);
    db_reader_close(r);
    db_writer_close(w);
}

static void test_retention(void)
{
    const char *p = tpath("retention.sqlite");
    struct db_writer *w = NULL;
    int64_t deleted = -1, total = 0;

    CHECK_OK(db_writer_open(p, &w, E));
    for (int i = 1; i <= 100; i++) {
        struct mt_snapshot s = snap(i * 1000, 0);
        struct mt_trim_result t = trim(i * 1000 + 1, 1, 1);
        CHECK_OK(db_writer_add_sample(w, &s, E));
        CHECK_OK(db_writer_add_trim(w, &t, E));
    }
    CHECK_OK(db_writer_flush(w, E));
    /* Cutoff 50500: samples 1000..50000 (50) and trims 1001..50001 (50) are old. */
    CHECK_OK(db_writer_retention(w, 50500, 20, &deleted, E));
    CHECK_EQ_INT(deleted, 40); /* 20 per table */
    total = deleted;
    for (int i = 0; i < 10 && deleted > 0; i++) {
        CHECK_OK(db_writer_retention(w, 50500, 20, &deleted, E));
        total += deleted;
    }
    CHECK_EQ_INT(deleted, 0);
    CHECK_EQ_INT(total, 100);
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM samples"), 50);
    CHECK_EQ_INT(raw_int(p, "SELECT min(timestamp_ms) FROM samples"), 51000);
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM trims"), 50);
    CHECK_EQ_INT(raw_int(p, "SELECT min(start_ms) FROM trims"), 51001);
    CHECK_EQ_INT(db_writer_retention(w, 50500, 0, NULL, NULL), -EINVAL);
    db_writer_close(w);
}

/* A batch that is never flushed is committed once it holds 10,000 rows. */
static void test_batch_cap(void)
{
    const char *p = tpath("cap.sqlite");
    struct db_writer *w = NULL;

    CHECK_OK(db_writer_open(p, &w, E));
    for (int i = 0; i < 10001; i++) {
        struct mt_snapshot s = snap(1000 + i, 0);
        CHECK_OK(db_writer_add_sample(w, &s, E));
    }
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM samples"), 10000);
    CHECK_OK(db_writer_flush(w, E));
    CHECK_EQ_INT(raw_int(p, "SELECT count(*) FROM samples"), 10001);
    CHECK_OK(db_writer_flush(w, E)); /* nothing pending: 0 */
    db_writer_close(w);
}

static void test_memory(void)
{
    struct db_writer *w = NULL, *w2 = NULL;
    struct db_reader *r = NULL, *r2 = NULL;
    struct db_bucket *b = NULL;
    struct mt_snapshot s = snap(5000, 100);
    char *err = NULL;

    CHECK_OK(db_writer_open(":memory:", &w, E));
    CHECK_OK(db_writer_open(":memory:", &w2, E));
    CHECK(strcmp(db_writer_reader_path(w), db_writer_reader_path(w2)) != 0);
    CHECK_EQ_INT(db_reader_open(":memory:", &r, &err), -ENOTSUP);
    printf("reader on :memory: %s\n", err ? err : "");
    free(err);
    CHECK_OK(db_writer_add_sample(w, &s, E));
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_reader_open(db_writer_reader_path(w), &r, E));
    CHECK_OK(db_reader_open(db_writer_reader_path(w2), &r2, E));
    CHECK_EQ_INT(series(r, "rss_bytes", 0, 10000, 10000, &b), 1);
    free(b);
    CHECK_EQ_INT(series(r2, "rss_bytes", 0, 10000, 10000, &b), 0); /* w2's own store */
    free(b);
    db_reader_close(r);
    db_reader_close(r2);
    db_writer_close(w2);
    db_writer_close(w);

    /* The core may name the shared-cache store itself (core/instance/memtrim.c does). */
    w = NULL;
    r = NULL;
    CHECK_OK(db_writer_open("file:memtrim-test?mode=memory&cache=shared", &w, E));
    CHECK_OK(db_writer_add_sample(w, &s, E));
    CHECK_OK(db_writer_flush(w, E));
    CHECK_OK(db_reader_open("file:memtrim-test?mode=memory&cache=shared", &r, E));
    CHECK_EQ_INT(series(r, "rss_bytes", 0, 10000, 10000, &b), 1);
    free(b);
    db_reader_close(r);
    db_writer_close(w);
}

int main(void)
{
    if (harness_tmpdir(tmpdir, sizeof(tmpdir), "test-db"))
        return 1;
    RUN(test_schema_fresh);
    RUN(test_migration_v1);
    RUN(test_migration_v5_unique_ids);
    RUN(test_new_field_column);
    RUN(test_refused);
    RUN(test_roundtrip);
    RUN(test_bucketing);
    RUN(test_percentiles);
    RUN(test_sums_and_ids_bounded);
    RUN(test_retention);
    RUN(test_batch_cap);
    RUN(test_memory);
    harness_rmtree(tmpdir);
    return harness_end();
}
