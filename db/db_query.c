/*
 * db_query.c - readers of the store: opening them, and the trim history
 * with its summary computed in SQL on a read-only connection (the series
 * are in db_series.c).
 *
 * Threads: one reader per thread that queries (each HTTP worker opens its
 * own). No locks: WAL lets readers run beside the writer, and a query reads
 * one snapshot (it runs in one read transaction).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_alloc.h"
#include "db_internal.h"

#define DB_TRIM_COLUMNS                                                                        \
    "rowid, seq, trigger, start_ms, duration_ns, rss_before_bytes, rss_after_bytes,"           \
    " heap_free_before_bytes, heap_free_after_bytes, released_bytes, malloc_trim_ret,"         \
    " pad_bytes, coalesced, arena_count, refaulted_bytes, reaction_seconds, pid,"     \
    " nothing_reason"

/* ?1 since, ?2 until, ?3 trigger (variant 1 only), ?7 pid (0 = any), ?8 from when that pid's
 * rows without a pid are its own (a single process's trims carry none; INT64_MAX = none are). */
#define DB_TRIM_PID "(?7 = 0 OR pid = ?7 OR (pid IS NULL AND start_ms >= ?8))"
static const char *const db_trim_where[2] = {
    "start_ms >= ?1 AND start_ms < ?2 AND " DB_TRIM_PID,
    "trigger = ?3 AND start_ms >= ?1 AND start_ms < ?2 AND " DB_TRIM_PID,
};

/* Each takes a WHERE clause; ?4.. are the statement's own parameters. */
static const char *const db_rsql[DB_R_COUNT] = {
    [DB_R_TRIM_ROWS] = "SELECT " DB_TRIM_COLUMNS " FROM trims WHERE %s"
                       " ORDER BY start_ms DESC, rowid DESC LIMIT ?4",
    [DB_R_TRIM_SUMMARY] = "SELECT count(*), max(duration_ns),"
                          /* total(), a double: sum() of integers fails with "integer
                           * overflow" (200 rows of 2^56 made every query a 500) */
                          " total(CASE WHEN released_bytes > 0 THEN released_bytes END),"
                          " total(CASE WHEN refaulted_bytes > 0 THEN refaulted_bytes END)"
                          " FROM trims WHERE %s",
    /* One sort for the three ranks (nearest-rank percentiles). */
    [DB_R_TRIM_PCTL] = "SELECT rn, duration_ns FROM (SELECT duration_ns,"
                       " row_number() OVER (ORDER BY duration_ns) AS rn FROM trims WHERE %s)"
                       " WHERE rn IN (?4, ?5, ?6)",
};

void db_reader_forget(struct db_reader *r)
{
    if (r == NULL)
        return;
    free(r->series); /* no SQLite call: see db_writer_forget */
    free(r);
}

void db_reader_close(struct db_reader *r)
{
    int n = db_series_metric_count();

    if (r == NULL)
        return;
    for (int i = 0; i < DB_R_COUNT; i++) {
        sqlite3_finalize(r->stmt[i][0]);
        sqlite3_finalize(r->stmt[i][1]);
    }
    for (int i = 0; r->series != NULL && i < 4 * n; i++)
        sqlite3_finalize(r->series[i]);
    free(r->series);
    sqlite3_close(r->db);
    free(r);
}

int db_reader_open(const char *path, struct db_reader **out, char **err)
{
    struct db_reader *r = NULL;
    int64_t version = 0;
    int rc;

    *out = NULL;
    if (path == NULL || path[0] == '\0')
        return db_fail(err, -EINVAL, "no database path");
    if (db_is_memory_path(path))
        return db_fail(err, -ENOTSUP, "\":memory:\" is private to its writer: readers open "
                                      "db_writer_reader_path() instead");
    r = mt_calloc(1, sizeof(*r));
    if (r != NULL)
        r->series = mt_calloc(4 * (size_t)db_series_metric_count(), sizeof(*r->series));
    if (r == NULL || r->series == NULL) {
        rc = db_fail(err, -ENOMEM, "out of memory");
        goto fail;
    }
    rc = db_connect(path, 1, &r->db, err);
    /*
     * read_uncommitted only matters for a shared-cache (in-memory) store: no
     * table locks against the writer. mmap: a week-long scan reads 50 MB; it
     * maps address space, not memory.
     */
    if (rc == 0)
        rc = db_exec(r->db, "PRAGMA read_uncommitted = 1; PRAGMA mmap_size = 268435456;",
                     "set pragmas", err);
    if (rc == 0)
        rc = db_series_register(r->db, err);
    if (rc == 0)
        rc = db_schema_check(r->db, 1, &version, err);
    if (rc == 0 && version < DB_SCHEMA_VERSION)
        rc = db_fail(err, -EAGAIN, "%s: store at schema version %lld, not yet %d (no writer yet?)",
                     path, (long long)version, DB_SCHEMA_VERSION);
    if (rc < 0)
        goto fail;
    *out = r;
    return 0;
fail:
    db_reader_close(r);
    return rc;
}

/* Bind the common range/trigger parameters and the statement's own. */
static void db_bind_trim_query(sqlite3_stmt *st, const struct db_trim_query *q)
{
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, q->since_ms);
    sqlite3_bind_int64(st, 2, q->until_ms);
    sqlite3_bind_int(st, 3, q->trigger);
    sqlite3_bind_int(st, 7, q->pid > 0 ? q->pid : 0);
    sqlite3_bind_int64(st, 8, q->pid > 0 && q->self_since_ms > 0 ? q->self_since_ms : INT64_MAX);
}

static void db_trim_row_read(sqlite3_stmt *st, struct db_trim_row *row)
{
    struct mt_trim_result *t = &row->t;

    memset(row, 0, sizeof(*row));
    row->row_id = sqlite3_column_int64(st, 0);
    t->id = sqlite3_column_int64(st, 1);
    t->trigger = sqlite3_column_int(st, 2);
    t->start_ms = sqlite3_column_int64(st, 3);
    t->duration_ns = sqlite3_column_int64(st, 4);
    t->rss_before_bytes = (uint64_t)sqlite3_column_int64(st, 5);
    t->rss_after_bytes = (uint64_t)sqlite3_column_int64(st, 6);
    t->heap_free_before_bytes = (uint64_t)sqlite3_column_int64(st, 7);
    t->heap_free_after_bytes = (uint64_t)sqlite3_column_int64(st, 8);
    t->heap_skipped = sqlite3_column_type(st, 7) == SQLITE_NULL;
    t->released_bytes = sqlite3_column_int64(st, 9);
    t->malloc_trim_ret = sqlite3_column_int(st, 10);
    t->pad_bytes = (uint64_t)sqlite3_column_int64(st, 11);
    t->coalesced = sqlite3_column_int(st, 12);
    t->arena_count = sqlite3_column_type(st, 13) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 13);
    t->refaulted_bytes =
        sqlite3_column_type(st, 14) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 14);
    t->reaction_ns = sqlite3_column_type(st, 15) == SQLITE_NULL
                         ? -1
                         : (int64_t)(sqlite3_column_double(st, 15) * 1e9 + 0.5);
    t->pid = sqlite3_column_type(st, 16) == SQLITE_NULL ? 0 : sqlite3_column_int(st, 16);
    t->nothing_reason = sqlite3_column_type(st, 17) == SQLITE_NULL
                            ? MT_NOTHING_NONE
                            : mt_nothing_parse((const char *)sqlite3_column_text(st, 17));
}

static int db_query_trim_rows(sqlite3_stmt *st, const struct db_trim_query *q, int64_t count,
                              struct db_trim_row **rows, size_t *nrows, char **err)
{
    size_t cap = (size_t)(count < q->limit ? count : q->limit), n = 0;
    struct db_trim_row *out;
    int rc = SQLITE_DONE;

    if (cap == 0)
        return 0;
    out = mt_calloc(cap, sizeof(*out));
    if (out == NULL)
        return db_fail(err, -ENOMEM, "out of memory");
    db_bind_trim_query(st, q);
    sqlite3_bind_int(st, 4, q->limit);
    while (n < cap && (rc = sqlite3_step(st)) == SQLITE_ROW)
        db_trim_row_read(st, &out[n++]);
    if (n < cap && rc != SQLITE_DONE) {
        free(out);
        return db_fail_sql(err, sqlite3_db_handle(st), rc, "query trims");
    }
    sqlite3_reset(st);
    *rows = out;
    *nrows = n;
    return 0;
}

/* A sum of non-negative byte counts read as a double (total()), saturated at INT64_MAX. */
static int64_t db_sum_int64(double v)
{
    if (!(v > 0))
        return 0;
    return v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)v;
}

static int db_query_trim_summary(sqlite3_stmt *sum, sqlite3_stmt *pctl,
                                 const struct db_trim_query *q, struct db_trim_summary *s,
                                 char **err)
{
    static const int pct[3] = {50, 95, 99};
    double *out[3] = {&s->duration_p50_seconds, &s->duration_p95_seconds,
                      &s->duration_p99_seconds};
    int64_t rank[3];
    int rc;

    memset(s, 0, sizeof(*s));
    db_bind_trim_query(sum, q);
    rc = sqlite3_step(sum);
    if (rc != SQLITE_ROW)
        return db_fail_sql(err, sqlite3_db_handle(sum), rc, "summarise trims");
    s->count = sqlite3_column_int64(sum, 0);
    s->duration_max_seconds = (double)sqlite3_column_int64(sum, 1) / 1e9;
    s->released_bytes = db_sum_int64(sqlite3_column_double(sum, 2));
    s->refaulted_bytes = db_sum_int64(sqlite3_column_double(sum, 3));
    sqlite3_reset(sum);
    if (s->count == 0)
        return 0;
    db_bind_trim_query(pctl, q);
    for (int i = 0; i < 3; i++) {
        rank[i] = (pct[i] * s->count + 99) / 100; /* ceil(p * N / 100) */
        sqlite3_bind_int64(pctl, 4 + i, rank[i]);
    }
    while ((rc = sqlite3_step(pctl)) == SQLITE_ROW) {
        int64_t rn = sqlite3_column_int64(pctl, 0);
        for (int i = 0; i < 3; i++)
            if (rank[i] == rn)
                *out[i] = (double)sqlite3_column_int64(pctl, 1) / 1e9;
    }
    sqlite3_reset(pctl);
    if (rc != SQLITE_DONE)
        return db_fail_sql(err, sqlite3_db_handle(pctl), rc, "trim percentiles");
    return 0;
}

int db_query_trims(struct db_reader *r, const struct db_trim_query *q, struct db_trim_row **rows,
                   size_t *nrows, struct db_trim_summary *summary, char **err)
{
    int v, rc;

    *rows = NULL;
    *nrows = 0;
    memset(summary, 0, sizeof(*summary));
    if (r == NULL || q == NULL || q->limit < 0 || q->since_ms >= q->until_ms ||
        q->trigger < -1 || q->trigger >= MT_TRIGGER_COUNT)
        return db_fail(err, -EINVAL, "query trims: bad range, limit or trigger");
    v = q->trigger >= 0;
    for (int i = 0; i < DB_R_COUNT; i++) {
        rc = db_reader_stmt(r, &r->stmt[i][v], db_rsql[i], db_trim_where[v], err);
        if (rc < 0)
            return rc;
    }
    rc = db_exec(r->db, "BEGIN", "begin read", err);
    if (rc < 0)
        return rc;
    rc = db_query_trim_summary(r->stmt[DB_R_TRIM_SUMMARY][v], r->stmt[DB_R_TRIM_PCTL][v], q,
                               summary, err);
    if (rc == 0)
        rc = db_query_trim_rows(r->stmt[DB_R_TRIM_ROWS][v], q, summary->count, rows, nrows, err);
    sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
    if (rc < 0)
        memset(summary, 0, sizeof(*summary));
    return rc;
}
