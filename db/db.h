/*
 * db.h - the SQLite store: samples and trims, retention, queries.
 *
 * Threads: one writer (struct db_writer), owned and used only by the
 * housekeeper thread; any number of readers (struct db_reader), one per
 * thread that queries (each HTTP worker opens its own). SQLite connections
 * are not shared across threads, so this module has no locks of its own;
 * WAL lets readers run while the writer writes.
 *
 * Every function returns 0 or a negative errno value; *err, when given,
 * receives a message the caller frees with free().
 */
#ifndef MEMTRIM_DB_H
#define MEMTRIM_DB_H

#include <stddef.h>
#include <stdint.h>
#include "../plugin/types.h"

#define DB_SCHEMA_VERSION 2

struct db_writer;
struct db_reader;

/* Open or create the database at path (":memory:" allowed), migrate the schema. */
int db_writer_open(const char *path, struct db_writer **out, char **err);
void db_writer_close(struct db_writer *w); /* flushes; accepts NULL */

/* Buffer a sample / a trim; written in the current batch transaction. */
int db_writer_add_sample(struct db_writer *w, const struct mt_snapshot *s, char **err);
int db_writer_add_trim(struct db_writer *w, const struct mt_trim_result *t, char **err);

/* Commit the current batch (the housekeeper calls this every tick). */
int db_writer_flush(struct db_writer *w, char **err);

/*
 * Delete rows older than cutoff_ms, at most max_rows per table per call, so
 * it never holds the writer long. *deleted (may be NULL) receives the count.
 */
int db_writer_retention(struct db_writer *w, int64_t cutoff_ms, int max_rows, int64_t *deleted,
                        char **err);

/* Readers: their own connection, read-only. */
int db_reader_open(const char *path, struct db_reader **out, char **err);
void db_reader_close(struct db_reader *r);

/* One stored trim (the trim result plus its row id). */
struct db_trim_row {
    struct mt_trim_result t;
};

struct db_trim_query {
    int64_t since_ms;  /* inclusive; INT64_MIN = no bound */
    int64_t until_ms;  /* exclusive; INT64_MAX = no bound */
    int trigger;       /* -1 = any */
    int limit;         /* rows to return, newest first */
};

struct db_trim_summary {
    int64_t count;
    double duration_p50_seconds;
    double duration_p95_seconds;
    double duration_p99_seconds;
    double duration_max_seconds;
    int64_t released_bytes; /* sum over the range (positive releases only) */
};

/*
 * Trims matching q, newest first, into a malloc'd array (*rows, caller frees);
 * the summary covers every matching trim, not only the returned ones.
 */
int db_query_trims(struct db_reader *r, const struct db_trim_query *q, struct db_trim_row **rows,
                   size_t *nrows, struct db_trim_summary *summary, char **err);

/* The metrics a series can name: the /memory/stats field names. */
int db_series_metric_valid(const char *metric);
/* The list, NULL-terminated, for error messages and the OpenAPI enum. */
extern const char *const db_series_metrics[];

struct db_bucket {
    int64_t start_ms; /* bucket start: since + k * step */
    int64_t count;    /* samples in the bucket */
    double min, avg, max;
};

/*
 * One metric between since (inclusive) and until (exclusive) bucketed to
 * step_ms, computed in SQL. Empty buckets are omitted. *buckets is malloc'd.
 */
int db_query_series(struct db_reader *r, const char *metric, int64_t since_ms, int64_t until_ms,
                    int64_t step_ms, struct db_bucket **buckets, size_t *nbuckets, char **err);

#endif /* MEMTRIM_DB_H */
