/*
 * db_internal.h - what the files of db/ share and nobody else sees: the
 * writer and reader structs, error mapping, connection setup and the schema.
 *
 * Threads: a struct is used by one thread at a time (see db.h); no locks here.
 */
#ifndef MEMTRIM_DB_INTERNAL_H
#define MEMTRIM_DB_INTERNAL_H

#include <sqlite3.h>
#include <stdint.h>
#include <sys/types.h>
#include "db.h"

/* PRAGMA application_id of a memtrim store: "mtrm". */
#define DB_APPLICATION_ID 0x6d74726d
/* How long a connection waits for another one's lock before -EBUSY. */
#define DB_BUSY_TIMEOUT_MS 100
/* Largest number of buckets a series query may return. */
#define DB_SERIES_MAX_BUCKETS 100000

/* Rows in one batch transaction before add_* commits it without waiting for a flush. */
#define DB_BATCH_MAX 10000

/*
 * The sample columns after timestamp_ms, in order: name (a column, and the
 * /memory/stats field it stores), where the value comes from in struct
 * mt_snapshot, and when it is NULL. db_series_metrics[] and the INSERT are
 * generated from this one list.
 */
enum db_src {
    DB_SRC_U64,      /* uint64_t, always known */
    DB_SRC_HEAP_U64, /* uint64_t, NULL until mallinfo2 has run (heap.timestamp_ms == 0) */
    DB_SRC_HEAP_INT, /* int, NULL until mallinfo2 has run or when < 0 */
    DB_SRC_HEAP_NS,  /* int64_t ns stored as seconds, NULL until mallinfo2 has run */
    DB_SRC_I64,      /* int64_t, NULL when < 0 (unknown / none) */
    DB_SRC_RATIO,    /* double, NULL when 0 (unknown) */
};
#define DB_SAMPLE_COLUMNS(X)                                        \
    X(rss_bytes, DB_SRC_U64, cheap.rss_bytes)                       \
    X(rss_anon_bytes, DB_SRC_U64, cheap.rss_anon_bytes)             \
    X(rss_file_bytes, DB_SRC_U64, cheap.rss_file_bytes)             \
    X(swap_bytes, DB_SRC_U64, cheap.swap_bytes)                     \
    X(heap_in_use_bytes, DB_SRC_HEAP_U64, heap.heap_in_use_bytes)   \
    X(heap_free_bytes, DB_SRC_HEAP_U64, heap.heap_free_bytes)       \
    X(heap_mmapped_bytes, DB_SRC_HEAP_U64, heap.heap_mmapped_bytes) \
    X(arena_bytes, DB_SRC_HEAP_U64, heap.arena_bytes)               \
    X(arena_count, DB_SRC_HEAP_INT, heap.arena_count)               \
    X(fragmentation_ratio, DB_SRC_RATIO, fragmentation_ratio)       \
    X(releasable_estimate_bytes, DB_SRC_HEAP_U64, releasable_estimate_bytes) \
    X(cgroup_usage_bytes, DB_SRC_I64, cheap.cgroup_usage_bytes)     \
    X(memory_limit_bytes, DB_SRC_I64, memory_limit_bytes)           \
    X(heap_probe_duration_seconds, DB_SRC_HEAP_NS, heap.duration_ns)

/* Writer statements, prepared once at open and reused. */
enum db_wstmt {
    DB_W_BEGIN = 0,
    DB_W_COMMIT,
    DB_W_ROLLBACK,
    DB_W_INSERT_SAMPLE,
    DB_W_INSERT_TRIM,
    DB_W_RETAIN_SAMPLES,
    DB_W_RETAIN_TRIMS,
    DB_W_SET_REFAULT,
    DB_W_COUNT
};

/* Not ":memory:" nor a "file:" URI (db_common.c). */
int db_is_plain_path(const char *path);
/* -EINVAL with *err when something other than a regular file is at a plain path. */
int db_check_plain_path(const char *path, char **err);

struct db_writer {
    sqlite3 *db;
    sqlite3_stmt *stmt[DB_W_COUNT];
    char *path;        /* as given to db_writer_open */
    char *reader_path; /* what readers open (a shared-cache URI for ":memory:") */
    int64_t pending;   /* rows in the open batch transaction */
    int on_disk;       /* a plain file path: dev/ino below identify the file opened */
    dev_t dev;
    ino_t ino;
};

/* Reader statements: prepared on first use, [0] any trigger, [1] one trigger. */
enum db_rstmt { DB_R_TRIM_ROWS = 0, DB_R_TRIM_SUMMARY, DB_R_TRIM_PCTL, DB_R_COUNT };

struct db_reader {
    sqlite3 *db;
    sqlite3_stmt *stmt[DB_R_COUNT][2];
    sqlite3_stmt **series; /* [2m] aggregate, [2m+1] seek, for metric m; lazily prepared */
};

/* db_common.c */
int db_errno(sqlite3 *db, int rc);
int db_fail(char **err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int db_fail_sql(char **err, sqlite3 *db, int rc, const char *what);
int db_connect(const char *path, int readonly, sqlite3 **out, char **err);
int db_exec(sqlite3 *db, const char *sql, const char *what, char **err);
int db_pragma_int(sqlite3 *db, const char *pragma, int64_t *out, char **err);
int db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out, char **err);
int db_step_done(sqlite3_stmt *st, const char *what, char **err);
int db_is_memory_path(const char *path);
int db_series_metric_index(const char *metric);
int db_series_metric_count(void);
int db_reader_stmt(struct db_reader *r, sqlite3_stmt **slot, const char *fmt, const char *arg,
                   char **err);

/* db_series.c */
int db_series_register(sqlite3 *db, char **err);

/* db_schema.c */
int db_schema_check(sqlite3 *db, int for_reader, int64_t *version, char **err);
int db_schema_migrate(sqlite3 *db, char **err);

#endif /* MEMTRIM_DB_INTERNAL_H */
