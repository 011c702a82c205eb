/*
 * db_series.c - one metric between two times, bucketed to a step, with
 * count/min/avg/max per bucket computed by SQL aggregates.
 *
 * Threads: the reader's thread (one reader per thread). No locks; a query
 * runs in one read transaction, so it sees one snapshot.
 *
 * Why one aggregate query per bucket and not one GROUP BY: samples are
 * keyed by timestamp_ms (the rowid), so a bucket is a rowid range that
 * SQLite seeks to and scans in order, and the aggregate streams. GROUP BY
 * (timestamp_ms - since) / step cannot use that order: SQLite feeds every
 * row through a temporary B-tree first, which more than doubled the time of
 * a week at 1,000 buckets (see docs/benchmarks.md). An empty bucket costs
 * one seek to the next sample, so sparse data does not make the loop walk
 * every empty bucket.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mt_alloc.h"
#include "db_internal.h"

/* ?1 bucket start, ?2 bucket end; %1$s is a column validated against db_series_metrics. */
static const char db_series_agg_sql[] =
    "SELECT memtrim_bucket(%1$s) FROM samples WHERE timestamp_ms >= ?1 AND timestamp_ms < ?2";

/* The same for one member of a worker group: ?3 its pid. */
static const char db_member_agg_sql[] =
    "SELECT memtrim_bucket(%1$s) FROM member_samples WHERE pid = ?3 AND timestamp_ms >= ?1"
    " AND timestamp_ms < ?2";

/* What memtrim_bucket() accumulates and returns (as a blob). */
struct db_bucket_acc {
    int64_t count;
    double min, max, sum;
};

/*
 * memtrim_bucket(x): count, min, max and sum of the non-NULL x in one
 * aggregate. The same as count(x), min(x), max(x), total(x), but one call
 * and one column read per row instead of four: the scan of a week went from
 * 80-100 ms to 44 ms (docs/benchmarks.md, the series query). Values are doubles: exact for
 * integers below 2^53 (8 PiB).
 */
static void db_bucket_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct db_bucket_acc *acc;
    double v;

    if (sqlite3_value_type(argv[0]) == SQLITE_NULL)
        return;
    acc = sqlite3_aggregate_context(ctx, sizeof(*acc));
    if (acc == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    v = sqlite3_value_double(argv[0]);
    if (acc->count == 0 || v < acc->min)
        acc->min = v;
    if (acc->count == 0 || v > acc->max)
        acc->max = v;
    acc->sum += v;
    acc->count++;
}

static void db_bucket_final(sqlite3_context *ctx)
{
    struct db_bucket_acc *acc = sqlite3_aggregate_context(ctx, 0);
    struct db_bucket_acc none = {0, 0, 0, 0};

    sqlite3_result_blob(ctx, acc != NULL ? acc : &none, sizeof(*acc), SQLITE_TRANSIENT);
}

int db_series_register(sqlite3 *db, char **err)
{
    int rc = sqlite3_create_function_v2(db, "memtrim_bucket", 1,
                                        SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY,
                                        NULL, NULL, db_bucket_step, db_bucket_final, NULL);
    if (rc != SQLITE_OK)
        return db_fail_sql(err, db, rc, "register memtrim_bucket");
    return 0;
}
/* The first sample at or after ?1 (before ?2) where the metric is known. */
static const char db_series_seek_sql[] =
    "SELECT timestamp_ms FROM samples WHERE timestamp_ms >= ?1 AND timestamp_ms < ?2"
    " AND %1$s IS NOT NULL ORDER BY timestamp_ms LIMIT 1";
static const char db_member_seek_sql[] =
    "SELECT timestamp_ms FROM member_samples WHERE pid = ?3 AND timestamp_ms >= ?1"
    " AND timestamp_ms < ?2 AND %1$s IS NOT NULL ORDER BY timestamp_ms LIMIT 1";

/* Step a one-row statement over [a, b); SQLITE_ROW with the row, SQLITE_DONE, or an error. */
static int db_series_step(sqlite3_stmt *st, int64_t a, int64_t b)
{
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    return sqlite3_step(st);
}

/* Fill out[0..cap) with the non-empty buckets; *n receives how many. */
static int db_series_scan(sqlite3_stmt *agg, sqlite3_stmt *seek, int64_t since_ms,
                          int64_t until_ms, int64_t step_ms, struct db_bucket *out, size_t cap,
                          size_t *n, char **err)
{
    struct db_bucket_acc acc;
    /* k stays below the bucket count, so k * step_ms <= until - since - 1: no sum overflows
     * even with until near INT64_MAX. */
    int64_t k = 0, a, b, nb = (until_ms - since_ms - 1) / step_ms + 1;
    int rc = SQLITE_DONE;

    *n = 0;
    while (*n < cap && k < nb) {
        a = since_ms + k * step_ms;
        b = until_ms - a > step_ms ? a + step_ms : until_ms;
        rc = db_series_step(agg, a, b);
        if (rc != SQLITE_ROW)
            break;
        if (sqlite3_column_bytes(agg, 0) == sizeof(acc))
            memcpy(&acc, sqlite3_column_blob(agg, 0), sizeof(acc));
        else
            acc.count = 0;
        if (acc.count > 0) {
            struct db_bucket *bk = &out[(*n)++];
            bk->start_ms = a;
            bk->count = acc.count;
            bk->min = acc.min;
            bk->avg = acc.sum / (double)acc.count;
            bk->max = acc.max;
            k++;
            continue;
        }
        /* Empty: jump to the bucket of the next known value, if any. */
        rc = db_series_step(seek, b, until_ms);
        if (rc != SQLITE_ROW)
            break;
        k = (sqlite3_column_int64(seek, 0) - since_ms) / step_ms;
    }
    sqlite3_reset(agg);
    sqlite3_reset(seek);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return db_fail_sql(err, sqlite3_db_handle(agg), rc, "query series");
    return 0;
}

static int db_query_series_of(struct db_reader *r, int pid, const char *metric, int64_t since_ms,
                              int64_t until_ms, int64_t step_ms, struct db_bucket **buckets,
                              size_t *nbuckets, char **err)
{
    int m = db_series_metric_index(metric);
    struct db_bucket *out = NULL;
    size_t n = 0;
    int64_t nb;
    int rc;

    *buckets = NULL;
    *nbuckets = 0;
    if (r == NULL || m < 0)
        return db_fail(err, -EINVAL, "unknown metric \"%.64s\"", metric ? metric : "(null)");
    if (since_ms < 0 || until_ms <= since_ms || step_ms <= 0)
        return db_fail(err, -EINVAL, "series: need 0 <= since < until and step > 0");
    nb = (until_ms - since_ms - 1) / step_ms + 1;
    if (nb > DB_SERIES_MAX_BUCKETS)
        return db_fail(err, -EINVAL, "series: %lld buckets, at most %d (use a larger step)",
                       (long long)nb, DB_SERIES_MAX_BUCKETS);
    /* The statements of the host's samples, or of one member's (the second half). */
    sqlite3_stmt **agg = &r->series[2 * m + (pid > 0 ? 2 * db_series_metric_count() : 0)];
    rc = db_reader_stmt(r, &agg[0], pid > 0 ? db_member_agg_sql : db_series_agg_sql,
                        db_series_metrics[m], err);
    if (rc == 0)
        rc = db_reader_stmt(r, &agg[1], pid > 0 ? db_member_seek_sql : db_series_seek_sql,
                            db_series_metrics[m], err);
    if (rc < 0)
        return rc;
    if (pid > 0) { /* bound once: db_series_step resets and binds only ?1 and ?2 */
        sqlite3_reset(agg[0]);
        sqlite3_reset(agg[1]);
        sqlite3_bind_int(agg[0], 3, pid);
        sqlite3_bind_int(agg[1], 3, pid);
    }
    out = mt_calloc((size_t)nb, sizeof(*out));
    if (out == NULL)
        return db_fail(err, -ENOMEM, "out of memory");
    rc = db_exec(r->db, "BEGIN", "begin read", err);
    if (rc == 0) {
        rc = db_series_scan(agg[0], agg[1], since_ms, until_ms, step_ms, out, (size_t)nb, &n,
                            err);
        sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
    }
    if (rc < 0 || n == 0) {
        free(out);
        out = NULL;
        n = 0;
    }
    *buckets = out;
    *nbuckets = n;
    return rc;
}

int db_query_series(struct db_reader *r, const char *metric, int64_t since_ms, int64_t until_ms,
                    int64_t step_ms, struct db_bucket **buckets, size_t *nbuckets, char **err)
{
    return db_query_series_of(r, 0, metric, since_ms, until_ms, step_ms, buckets, nbuckets, err);
}

int db_query_member_series(struct db_reader *r, int pid, const char *metric, int64_t since_ms,
                           int64_t until_ms, int64_t step_ms, struct db_bucket **buckets,
                           size_t *nbuckets, char **err)
{
    if (pid <= 0) {
        *buckets = NULL;
        *nbuckets = 0;
        return db_fail(err, -EINVAL, "series: a member's pid must be > 0");
    }
    return db_query_series_of(r, pid, metric, since_ms, until_ms, step_ms, buckets, nbuckets, err);
}
