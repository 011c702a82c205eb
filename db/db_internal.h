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
#include "fields.h" /* common/: the samples columns are its stored fields */

/* PRAGMA application_id of a memtrim store: "mtrm". */
#define DB_APPLICATION_ID 0x6d74726d
/* How long a connection waits for another one's lock before -EBUSY. */
#define DB_BUSY_TIMEOUT_MS 100
/* Largest number of buckets a series query may return. */
#define DB_SERIES_MAX_BUCKETS 100000

/* Rows in one batch transaction before add_* commits it without waiting for a flush. */
#define DB_BATCH_MAX 10000

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
    DB_W_INSERT_MEMBER_SAMPLE, /* worker groups: a member's sample */
    DB_W_RETAIN_MEMBER_SAMPLES,
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
    sqlite3_stmt **series; /* [2m] aggregate, [2m+1] seek, for metric m; lazily prepared;
                            * [2n + 2m], [2n + 2m + 1] the same for one member (n metrics) */
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
