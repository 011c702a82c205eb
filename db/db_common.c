/*
 * db_common.c - what the writer and the readers share: opening a connection
 * with the store's settings, SQLite result codes as errno values with a
 * message, the table of series metrics, the readers' cached statements and
 * the one builder of the in-memory store's URI.
 *
 * Threads: any; the functions touch only the connection they are given and
 * constant tables. No locks.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mt_alloc.h"
#include "db_internal.h"

static _Atomic int test_busy_timeout_ms; /* db_test_busy_timeout_ms; 0 in every host */

void db_test_busy_timeout_ms(int ms)
{
    atomic_store(&test_busy_timeout_ms, ms);
}

/*
 * Exactly the sample columns a series can name: the stored fields of common/fields.h,
 * in their columns' order, then NULL. A field that is not stored takes a slot of its
 * own past that NULL (and leaves it NULL), so that no two initializers share one.
 */
#define DB_METRIC_NAME(name, type, member, known, column, metric, sample, help)                \
    [(column) ? (column) - 1 : MT_FIELD_COLUMNS + 1 + MT_FIELD_##name] = (column) ? #name : NULL,
const char *const db_series_metrics[MT_FIELD_COLUMNS + 1 + MT_FIELD_COUNT] = {
    MT_SNAPSHOT_FIELDS(DB_METRIC_NAME)};
#undef DB_METRIC_NAME

int db_series_metric_count(void)
{
    int n = 0;
    while (db_series_metrics[n] != NULL)
        n++;
    return n;
}

int db_series_metric_index(const char *metric)
{
    if (metric == NULL)
        return -1;
    for (int i = 0; db_series_metrics[i] != NULL; i++)
        if (strcmp(db_series_metrics[i], metric) == 0)
            return i;
    return -1;
}

int db_series_metric_valid(const char *metric)
{
    return db_series_metric_index(metric) >= 0;
}

int db_is_memory_path(const char *path)
{
    return strcmp(path, ":memory:") == 0;
}

void db_memory_uri(char *buf, size_t size, const void *owner)
{
    snprintf(buf, size, "file:memtrim-%p?mode=memory&cache=shared", owner);
}

/* The cached statement, prepared on first use from fmt and its one string argument. */
int db_reader_stmt(struct db_reader *r, sqlite3_stmt **slot, const char *fmt, const char *arg,
                   char **err)
{
    char *sql = NULL;
    int rc;

    if (*slot != NULL)
        return 0;
    if (mt_asprintf(&sql, fmt, arg) < 0)
        return db_fail(err, -ENOMEM, "out of memory");
    rc = db_prepare(r->db, sql, slot, err);
    free(sql);
    return rc;
}

/* A result code as a negative errno; the OS error refines open and I/O failures. */
int db_errno(sqlite3 *db, int rc)
{
    int sys = db != NULL ? sqlite3_system_errno(db) : 0;

    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_READONLY:
        return -EROFS;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
        return -EBADMSG;
    case SQLITE_TOOBIG:
        return -E2BIG;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
    case SQLITE_CONSTRAINT:
        return -EINVAL;
    case SQLITE_CANTOPEN:
        return sys > 0 ? -sys : -ENOENT;
    case SQLITE_IOERR:
        if (sys == ENOSPC || sys == EDQUOT)
            return -ENOSPC;
        return sys > 0 ? -sys : -EIO;
    default:
        return -EIO;
    }
}

int db_fail(char **err, int code, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL) {
        va_start(ap, fmt);
        if (mt_vasprintf(err, fmt, ap) < 0)
            *err = NULL;
        va_end(ap);
    }
    return code;
}

/* Fail with what SQLite said about rc on db (which may be NULL). */
int db_fail_sql(char **err, sqlite3 *db, int rc, const char *what)
{
    int code = db_errno(db, rc);
    int sys = db != NULL ? sqlite3_system_errno(db) : 0;
    const char *msg = db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    int prim = rc & 0xff;

    if (code == 0)
        code = -EIO;
    if (sys > 0 && (prim == SQLITE_CANTOPEN || prim == SQLITE_IOERR || prim == SQLITE_FULL))
        return db_fail(err, code, "%s: %s (%s)", what, msg, strerror(sys));
    return db_fail(err, code, "%s: %s", what, msg);
}

int db_exec(sqlite3 *db, const char *sql, const char *what, char **err)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

    if (rc != SQLITE_OK)
        return db_fail_sql(err, db, rc, what);
    return 0;
}

int db_pragma_int(sqlite3 *db, const char *pragma, int64_t *out, char **err)
{
    sqlite3_stmt *st = NULL;
    char sql[64], what[64];
    int rc;

    snprintf(sql, sizeof(sql), "PRAGMA %s", pragma);
    snprintf(what, sizeof(what), "read %s", pragma);
    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        rc = db_fail_sql(err, db, rc, what);
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    return 0;
}

int db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out, char **err)
{
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);

    if (rc != SQLITE_OK)
        return db_fail_sql(err, db, rc, "prepare");
    return 0;
}

/* Run a statement that returns no rows, then reset it for the next use. */
int db_step_done(sqlite3_stmt *st, const char *what, char **err)
{
    int rc = sqlite3_step(st);
    int ret = 0;

    if (rc != SQLITE_DONE)
        ret = db_fail_sql(err, sqlite3_db_handle(st), rc, what);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ret;
}

int db_is_plain_path(const char *path)
{
    return !db_is_memory_path(path) && strncmp(path, "file:", 5) != 0;
}

/*
 * Before SQLite creates anything beside it (a -journal, a -wal): a path that
 * exists must be a regular file, not a device (/dev/full), a directory, a
 * FIFO or a symbolic link.
 */
int db_check_plain_path(const char *path, char **err)
{
    struct stat st;
    if (!db_is_plain_path(path) || lstat(path, &st) != 0)
        return 0; /* a URI, or nothing there yet: SQLite creates a regular file */
    if (S_ISREG(st.st_mode))
        return 0;
    return db_fail(err, -EINVAL, "%.200s is %s, not a regular file: the store needs a file of its own",
                   path,
                   S_ISLNK(st.st_mode)   ? "a symbolic link"
                   : S_ISDIR(st.st_mode) ? "a directory"
                   : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                   : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                                                                : "a special file");
}

/*
 * Open a connection with the store's settings: URI names allowed, one thread
 * at a time per connection (NOMUTEX), extended codes, a short busy timeout.
 */
int db_connect(const char *path, int readonly, sqlite3 **out, char **err)
{
    /* NOFOLLOW: a symbolic link planted at the path does not redirect the store. */
    int flags = SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
    sqlite3 *db = NULL;
    char what[96];
    int rc;

    *out = NULL;
    if ((rc = db_check_plain_path(path, err)) < 0)
        return rc;
    flags |= readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        snprintf(what, sizeof(what), "cannot open %.80s", path);
        rc = db_fail_sql(err, db, rc, what);
        goto fail;
    }
    sqlite3_extended_result_codes(db, 1);
    int busy_ms = atomic_load(&test_busy_timeout_ms);
    sqlite3_busy_timeout(db, busy_ms > 0 ? busy_ms : DB_BUSY_TIMEOUT_MS);
    *out = db;
    return 0;
fail:
    sqlite3_close(db);
    return rc;
}
