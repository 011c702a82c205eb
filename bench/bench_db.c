/*
 * bench_db.c - the store against its targets: a week of 1 s samples
 * (604,800 rows) and 20,000 trims written as the housekeeper writes them
 * (one commit per tick), then the series query over the week at 1,000
 * buckets, the trims summary, retention, and the file size.
 *
 * Usage: bench_db [directory] [query runs]   (default: a mkdtemp dir under /tmp, 9 runs)
 * Prints one line per figure (median, min, max over the runs) and the
 * EXPLAIN QUERY PLAN of the queries the figures rely on.
 * Threads: one. Targets: series <= 100 ms, summary <= 50 ms, insert <= 50 us
 * amortised, file <= 64 MB.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <time.h>

#include "db.h"
#include "db_internal.h" /* db_series_register, to explain its query */

#define WEEK_SAMPLES 604800
#define WEEK_TRIMS 20000
#define T0_MS 1764000000000LL
#define MAX_RUNS 51

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, const char *unit, double scale, double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    printf("%-44s median %9.3f %s   min %9.3f   max %9.3f   (%d runs)\n", what,
           v[n / 2] * scale, unit, v[0] * scale, v[n - 1] * scale, n);
}

static int die(const char *what, int rc, char *err)
{
    fprintf(stderr, "bench_db: %s: %d %s\n", what, rc, err ? err : "");
    free(err);
    exit(1);
}

/* A host whose RSS wanders between 1.5 and 3.5 GB, with a heap probe in every sample. */
static void make_sample(int64_t i, uint64_t *rss, struct mt_snapshot *s)
{
    uint64_t step = rng() % (8u << 20);

    memset(s, 0, sizeof(*s));
    *rss = *rss + step - (4u << 20);
    if (*rss < (1536ull << 20) || *rss > (3584ull << 20))
        *rss = 2560ull << 20;
    s->cheap.timestamp_ms = T0_MS + i * 1000 + (int64_t)(rng() % 5);
    s->cheap.rss_bytes = *rss;
    s->cheap.rss_anon_bytes = *rss / 10 * 9;
    s->cheap.rss_file_bytes = *rss - s->cheap.rss_anon_bytes;
    s->cheap.swap_bytes = i % 1000 == 0 ? rng() % (64u << 20) : 0;
    s->cheap.cgroup_usage_bytes = (int64_t)(*rss + (200u << 20) + rng() % (16u << 20));
    s->heap.timestamp_ms = s->cheap.timestamp_ms;
    s->heap.known = MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_FREE | MT_HEAP_HAS_MAPPED | MT_HEAP_HAS_MALLINFO;
    s->heap.heap_in_use_bytes = *rss / 3 * 2 + rng() % (32u << 20);
    s->heap.heap_free_bytes = rng() % (512u << 20);
    s->heap.heap_mmapped_bytes = (96u << 20) + rng() % (8u << 20);
    s->heap.arena_bytes = s->heap.heap_in_use_bytes + s->heap.heap_free_bytes;
    s->heap.arena_count = 8;
    s->heap.duration_ns = 500000 + (int64_t)(rng() % 13500000);
    s->fragmentation_ratio = (double)*rss / (double)s->heap.heap_in_use_bytes;
    s->releasable_estimate_bytes = s->heap.heap_free_bytes / 5 * 4;
    s->memory_limit_bytes = 8ll << 30;
}

static void make_trim(int64_t k, struct mt_trim_result *t)
{
    memset(t, 0, sizeof(*t));
    t->id = k + 1;
    t->trigger = (int)(rng() % 10 < 7 ? MT_TRIGGER_PERIODIC : rng() % MT_TRIGGER_COUNT);
    t->start_ms = T0_MS + k * (WEEK_SAMPLES * 1000LL / WEEK_TRIMS) + 500;
    t->duration_ns = 100000 + (int64_t)(rng() % 200000000) * (int64_t)(rng() % 4 == 0) +
                     (int64_t)(rng() % 5000000);
    t->rss_before_bytes = (2048ull << 20) + rng() % (1024u << 20);
    t->released_bytes = (int64_t)(rng() % (256u << 20)) - (1 << 20);
    t->rss_after_bytes = t->rss_before_bytes - (uint64_t)t->released_bytes;
    t->heap_free_before_bytes = rng() % (512u << 20);
    t->heap_free_after_bytes = t->heap_free_before_bytes / 10;
    t->malloc_trim_ret = t->released_bytes > 0;
}

/* Write the week as the housekeeper would: one sample per tick, a commit per tick. */
static double load_week(const char *path)
{
    struct db_writer *w = NULL;
    struct mt_snapshot s;
    struct mt_trim_result t;
    uint64_t rss = 2560ull << 20;
    int64_t next_trim = 0;
    char *err = NULL;
    double t0;
    int rc;

    rc = db_writer_open(path, &w, &err);
    if (rc < 0)
        die("open", rc, err);
    t0 = now_s();
    for (int64_t i = 0; i < WEEK_SAMPLES; i++) {
        make_sample(i, &rss, &s);
        rc = db_writer_add_sample(w, &s, &err);
        while (rc == 0 && next_trim < WEEK_TRIMS &&
               T0_MS + next_trim * (WEEK_SAMPLES * 1000LL / WEEK_TRIMS) <= s.cheap.timestamp_ms) {
            make_trim(next_trim++, &t);
            rc = db_writer_add_trim(w, &t, &err);
        }
        if (rc == 0)
            rc = db_writer_flush(w, &err);
        if (rc < 0)
            die("load", rc, err);
    }
    t0 = now_s() - t0;
    db_writer_close(w);
    return t0;
}

/* Batched inserts: n samples per commit, on a fresh file; seconds per sample. */
static double insert_batched(const char *path, int per_commit, int total)
{
    struct db_writer *w = NULL;
    struct mt_snapshot s;
    uint64_t rss = 2560ull << 20;
    char *err = NULL;
    double t0;
    int rc;

    remove(path);
    rc = db_writer_open(path, &w, &err);
    if (rc < 0)
        die("open", rc, err);
    t0 = now_s();
    for (int i = 0; i < total; i++) {
        make_sample(i, &rss, &s);
        rc = db_writer_add_sample(w, &s, &err);
        if (rc == 0 && (i + 1) % per_commit == 0)
            rc = db_writer_flush(w, &err);
        if (rc < 0)
            die("insert", rc, err);
    }
    rc = db_writer_flush(w, &err);
    t0 = (now_s() - t0) / total;
    db_writer_close(w);
    return t0;
}

/* What the series query would be as one GROUP BY: measured for comparison only. */
#define GROUP_BY_SQL                                                                           \
    "SELECT (timestamp_ms - ?1) / ?3, count(rss_bytes), min(rss_bytes), avg(rss_bytes),"       \
    " max(rss_bytes) FROM samples WHERE timestamp_ms >= ?1 AND timestamp_ms < ?2"              \
    " AND rss_bytes IS NOT NULL GROUP BY 1 ORDER BY 1"

static double group_by_once(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    double t0;
    int n = 0;

    sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    sqlite3_exec(db, "PRAGMA mmap_size = 268435456", NULL, NULL, NULL);
    sqlite3_prepare_v2(db, GROUP_BY_SQL, -1, &st, NULL);
    sqlite3_bind_int64(st, 1, T0_MS);
    sqlite3_bind_int64(st, 2, T0_MS + WEEK_SAMPLES * 1000LL);
    sqlite3_bind_int64(st, 3, WEEK_SAMPLES);
    t0 = now_s();
    while (sqlite3_step(st) == SQLITE_ROW)
        n++;
    t0 = now_s() - t0;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n == 1000 ? t0 : -1;
}

static void explain(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *q = NULL;

    if (asprintf(&q, "EXPLAIN QUERY PLAN %s", sql) < 0)
        return;
    sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    db_series_register(db, NULL);
    printf("\n%s\n", sql);
    if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK)
        printf("  (cannot explain: %s)\n", sqlite3_errmsg(db));
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW)
        printf("  %d|%d|%s\n", sqlite3_column_int(st, 0), sqlite3_column_int(st, 1),
               (const char *)sqlite3_column_text(st, 3));
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(q);
}

static void explain_all(const char *path)
{
    explain(path, "SELECT memtrim_bucket(rss_bytes) FROM samples WHERE timestamp_ms >= ?1"
                  " AND timestamp_ms < ?2");
    explain(path, "SELECT timestamp_ms FROM samples WHERE timestamp_ms >= ?1 AND timestamp_ms < ?2"
                  " AND rss_bytes IS NOT NULL ORDER BY timestamp_ms LIMIT 1");
    explain(path, GROUP_BY_SQL);
    explain(path, "SELECT count(*), max(duration_ns), coalesce(sum(CASE WHEN released_bytes > 0"
                  " THEN released_bytes END), 0) FROM trims WHERE start_ms >= ?1 AND start_ms < ?2");
    explain(path, "SELECT rn, duration_ns FROM (SELECT duration_ns, row_number() OVER (ORDER BY"
                  " duration_ns) AS rn FROM trims WHERE trigger = ?3 AND start_ms >= ?1 AND"
                  " start_ms < ?2) WHERE rn IN (?4, ?5, ?6)");
    explain(path, "SELECT rowid, seq, trigger, start_ms, duration_ns, rss_before_bytes,"
                  " rss_after_bytes, heap_free_before_bytes, heap_free_after_bytes, released_bytes,"
                  " malloc_trim_ret, pad_bytes, coalesced FROM trims WHERE start_ms >= ?1 AND"
                  " start_ms < ?2 ORDER BY start_ms DESC, rowid DESC LIMIT ?4");
    explain(path, "DELETE FROM samples WHERE timestamp_ms IN (SELECT timestamp_ms FROM samples"
                  " WHERE timestamp_ms < ?1 ORDER BY timestamp_ms LIMIT ?2)");
}

static void bench_queries(const char *path, int runs)
{
    struct db_reader *r = NULL;
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 100, 0, 0};
    struct db_trim_summary sum;
    struct db_trim_row *rows = NULL;
    struct db_bucket *b = NULL;
    double v[MAX_RUNS], v2[MAX_RUNS], v3[MAX_RUNS];
    size_t n = 0, nb = 0;
    char *err = NULL;
    int rc;

    rc = db_reader_open(path, &r, &err);
    if (rc < 0)
        die("reader", rc, err);
    for (int i = 0; i < runs; i++) {
        double t0 = now_s();
        rc = db_query_series(r, i % 2 ? "heap_free_bytes" : "rss_bytes", T0_MS,
                             T0_MS + WEEK_SAMPLES * 1000LL, WEEK_SAMPLES, &b, &nb, &err);
        v[i] = now_s() - t0;
        if (rc < 0 || nb != 1000)
            die("series", rc, err);
        free(b);
        q.trigger = -1;
        t0 = now_s();
        rc = db_query_trims(r, &q, &rows, &n, &sum, &err);
        v2[i] = now_s() - t0;
        if (rc < 0 || sum.count != WEEK_TRIMS)
            die("trims", rc, err);
        free(rows);
        q.trigger = MT_TRIGGER_PERIODIC;
        t0 = now_s();
        rc = db_query_trims(r, &q, &rows, &n, &sum, &err);
        v3[i] = now_s() - t0;
        free(rows);
    }
    report("series, week, 1000 buckets (ms)", "ms", 1e3, v, runs);
    for (int i = 0; i < runs; i++)
        v[i] = group_by_once(path);
    report("  same as one GROUP BY, for comparison (ms)", "ms", 1e3, v, runs);
    report("trims: 100 rows + summary, all 20k (ms)", "ms", 1e3, v2, runs);
    report("trims: periodic only (ms)", "ms", 1e3, v3, runs);
    printf("periodic summary: count %lld p50 %.4f s p95 %.4f s p99 %.4f s max %.4f s released %lld\n",
           (long long)sum.count, sum.duration_p50_seconds, sum.duration_p95_seconds,
           sum.duration_p99_seconds, sum.duration_max_seconds, (long long)sum.released_bytes);
    db_reader_close(r);
}

/* Retention as the housekeeper runs it: one hour out of the week, 1,000 rows per call. */
static void bench_retention(const char *path)
{
    struct db_writer *w = NULL;
    int64_t deleted = 1, total = 0;
    double v[MAX_RUNS * 4];
    char *err = NULL;
    int calls = 0, rc;

    rc = db_writer_open(path, &w, &err);
    if (rc < 0)
        die("open", rc, err);
    while (deleted > 0 && calls < MAX_RUNS * 4) {
        double t0 = now_s();
        rc = db_writer_retention(w, T0_MS + 3600 * 1000, 1000, &deleted, &err);
        v[calls++] = now_s() - t0;
        if (rc < 0)
            die("retention", rc, err);
        total += deleted;
    }
    report("retention call, <= 1000 rows/table (ms)", "ms", 1e3, v, calls);
    printf("retention: %lld rows deleted in %d calls\n", (long long)total, calls);
    db_writer_close(w);
}

static double file_mb(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / (1024.0 * 1024.0) : -1;
}

int main(int argc, char **argv)
{
    char dir[256], path[300], path2[300];
    int runs = argc > 2 ? atoi(argv[2]) : 9;
    double v[3];

    if (runs < 1 || runs > MAX_RUNS)
        runs = 9;
    snprintf(dir, sizeof(dir), "%s", argc > 1 ? argv[1] : "/tmp/memtrim-bench-db-XXXXXX");
    if (argc <= 1 && mkdtemp(dir) == NULL)
        return 1;
    snprintf(path, sizeof(path), "%s/week.sqlite", dir);
    snprintf(path2, sizeof(path2), "%s/batch.sqlite", dir);
    remove(path);
    printf("bench_db: SQLite %s, %s\n", sqlite3_libversion(), path);
    v[0] = load_week(path) / WEEK_SAMPLES;
    printf("%-44s %9.3f us per sample (%d samples + %d trims, %.1f s)\n",
           "load, one commit per sample", v[0] * 1e6, WEEK_SAMPLES, WEEK_TRIMS,
           v[0] * WEEK_SAMPLES);
    printf("%-44s %9.1f MB\n", "file size after a week", file_mb(path));
    for (int i = 0; i < 3; i++)
        v[i] = insert_batched(path2, 60, 60000);
    report("insert, 60 samples per commit (us)", "us", 1e6, v, 3);
    remove(path2);
    bench_queries(path, runs);
    explain_all(path);
    bench_retention(path);
    remove(path);
    if (argc <= 1)
        remove(dir);
    return 0;
}
