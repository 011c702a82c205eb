/*
 * db_writer.c - the store's one writer: open and migrate, batched inserts of
 * samples and trims (one transaction per batch), retention by age.
 *
 * Threads: the store thread (core/threads/store.c), alone (the writer is opened, used and closed by
 * one thread at a time). No locks of its own; SQLite's file locks keep other
 * connections out, and a lock held by another process surfaces as -EBUSY
 * after DB_BUSY_TIMEOUT_MS instead of blocking the store thread.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "db_internal.h"

static const char *const db_wsql[DB_W_COUNT] = {
    [DB_W_BEGIN] = "BEGIN IMMEDIATE",
    [DB_W_COMMIT] = "COMMIT",
    [DB_W_ROLLBACK] = "ROLLBACK",
    [DB_W_INSERT_SAMPLE] = NULL, /* built from the field table (common/fields.h) */
    [DB_W_INSERT_TRIM] =
        "INSERT INTO trims (start_ms, trigger, duration_ns, rss_before_bytes, rss_after_bytes,"
        " released_bytes, malloc_trim_ret, seq, heap_free_before_bytes, heap_free_after_bytes,"
        " pad_bytes, coalesced, arena_count, refaulted_bytes, reaction_seconds, pid,"
        " nothing_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [DB_W_RETAIN_SAMPLES] =
        "DELETE FROM samples WHERE timestamp_ms IN (SELECT timestamp_ms FROM samples"
        " WHERE timestamp_ms < ?1 ORDER BY timestamp_ms LIMIT ?2)",
    [DB_W_RETAIN_TRIMS] = "DELETE FROM trims WHERE rowid IN (SELECT rowid FROM trims"
                          " WHERE start_ms < ?1 ORDER BY start_ms LIMIT ?2)",
    [DB_W_SET_REFAULT] =
        "UPDATE trims SET refaulted_bytes = ?3 WHERE start_ms = ?1 AND seq = ?2 AND pid IS ?4",
    [DB_W_INSERT_MEMBER_SAMPLE] = NULL, /* built from db_sample_cols */
    [DB_W_RETAIN_MEMBER_SAMPLES] =
        "DELETE FROM member_samples WHERE (pid, timestamp_ms) IN (SELECT pid, timestamp_ms"
        " FROM member_samples WHERE timestamp_ms < ?1 ORDER BY timestamp_ms LIMIT ?2)",
};

/* "INSERT OR REPLACE INTO samples (timestamp_ms, <stored fields>) VALUES (?, ...)": malloc'd;
 * member: "... INTO member_samples (timestamp_ms, <stored fields>, pid) ...". */
static char *db_sample_insert_sql(int member)
{
    size_t cap = 160;
    char *sql;
    size_t len;

    for (int i = 0; i < MT_FIELD_COUNT; i++)
        cap += strlen(mt_fields[i].name) + 5;
    sql = mt_malloc(cap);
    if (sql == NULL)
        return NULL;
    len = (size_t)snprintf(sql, cap, "INSERT OR REPLACE INTO %s (timestamp_ms",
                           member ? "member_samples" : "samples");
    for (int i = 0; i < MT_FIELD_COUNT; i++)
        if (mt_fields[i].column)
            len += (size_t)snprintf(sql + len, cap - len, ", %s", mt_fields[i].name);
    len += (size_t)snprintf(sql + len, cap - len, "%s) VALUES (?", member ? ", pid" : "");
    for (int i = 0; i < MT_FIELD_COUNT; i++)
        if (mt_fields[i].column)
            len += (size_t)snprintf(sql + len, cap - len, ", ?");
    if (member)
        len += (size_t)snprintf(sql + len, cap - len, ", ?");
    snprintf(sql + len, cap - len, ")");
    return sql;
}

static int db_writer_prepare(struct db_writer *w, char **err)
{
    char *insert = db_sample_insert_sql(0), *member = db_sample_insert_sql(1);
    int rc = 0;

    if (insert == NULL || member == NULL) {
        free(insert);
        free(member);
        return db_fail(err, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < DB_W_COUNT; i++) {
        const char *sql = db_wsql[i] != NULL               ? db_wsql[i]
                          : i == DB_W_INSERT_MEMBER_SAMPLE ? member
                                                           : insert;
        rc = db_prepare(w->db, sql, &w->stmt[i], err);
        if (rc < 0)
            break;
    }
    free(insert);
    free(member);
    return rc;
}

static int db_writer_set_paths(struct db_writer *w, const char *path)
{
    w->path = mt_strdup(path);
    if (db_is_memory_path(path)) {
        /* A private name per writer, so readers of this store can find it and nobody else. */
        char uri[64];
        db_memory_uri(uri, sizeof(uri), w);
        w->reader_path = mt_strdup(uri);
    } else {
        w->reader_path = mt_strdup(path);
    }
    return w->path != NULL && w->reader_path != NULL ? 0 : -ENOMEM;
}

/*
 * SQLite retries a failed create read-only and reports that as "no such
 * file"; say why the directory refused it instead (read-only, permissions).
 */
static int db_writer_why_cannot_create(const char *path, int rc, char **err)
{
    char *dir = mt_strdup(path), *slash;
    int code;

    if (rc != -ENOENT || dir == NULL || db_is_memory_path(path) || strncmp(path, "file:", 5) == 0)
        goto out;
    slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    else
        strcpy(dir, ".");
    if (access(dir, W_OK) != 0 && errno != ENOENT) {
        code = -errno;
        free(*err);
        *err = NULL;
        rc = db_fail(err, code, "cannot create %s: directory %s is not writable (%s)", path, dir,
                     strerror(-code));
    }
out:
    free(dir);
    return rc;
}

int db_writer_open(const char *path, struct db_writer **out, char **err)
{
    struct db_writer *w = NULL;
    int64_t version = 0;
    int rc;

    *out = NULL;
    if (path == NULL || path[0] == '\0')
        return db_fail(err, -EINVAL, "no database path");
    w = mt_calloc(1, sizeof(*w));
    if (w == NULL || db_writer_set_paths(w, path) < 0) {
        rc = db_fail(err, -ENOMEM, "out of memory");
        goto fail;
    }
    rc = db_connect(w->reader_path, 0, &w->db, err);
    if (rc < 0) {
        rc = db_writer_why_cannot_create(path, rc, err);
        goto fail;
    }
    if (sqlite3_db_readonly(w->db, "main") == 1) {
        rc = db_fail(err, -EROFS, "%s: the database is read-only (file or file system)", path);
        goto fail;
    }
    /* Recognise the file before changing anything in it. */
    rc = db_schema_check(w->db, 0, &version, err);
    if (rc == 0 && !db_is_memory_path(path))
        rc = db_exec(w->db, "PRAGMA journal_mode = WAL", "set WAL", err);
    if (rc == 0)
        rc = db_exec(w->db,
                     "PRAGMA synchronous = NORMAL; PRAGMA journal_size_limit = 4194304;",
                     "set pragmas", err);
    if (rc == 0)
        rc = db_schema_migrate(w->db, err);
    if (rc == 0)
        rc = db_writer_prepare(w, err);
    if (rc < 0)
        goto fail;
    struct stat st;
    if (db_is_plain_path(path) && stat(path, &st) == 0) {
        w->on_disk = 1;
        w->dev = st.st_dev;
        w->ino = st.st_ino;
    }
    *out = w;
    return 0;
fail:
    db_writer_close(w);
    return rc;
}

int db_writer_check_file(struct db_writer *w, char **err)
{
    struct stat st;
    if (w == NULL || !w->on_disk)
        return 0;
    if (stat(w->path, &st) != 0)
        return db_fail(err, -ENOENT,
                       "%.200s was deleted while open (%s); what was written since is lost",
                       w->path, strerror(errno));
    if (st.st_dev != w->dev || st.st_ino != w->ino)
        return db_fail(err, -ESTALE,
                       "%.100s was replaced by another file (inode %llu, now %llu): not written "
                       "to, left alone; restart to use it",
                       w->path, (unsigned long long)w->ino, (unsigned long long)st.st_ino);
    return 0;
}

int db_writer_file_id(const struct db_writer *w, uint64_t *dev, uint64_t *ino)
{
    if (w == NULL || !w->on_disk)
        return 0;
    *dev = (uint64_t)w->dev;
    *ino = (uint64_t)w->ino;
    return 1;
}

int db_path_is_file(const char *path, uint64_t dev, uint64_t ino)
{
    struct stat st;
    if (!db_is_plain_path(path))
        return 1;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    return (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino ? 1 : -ESTALE;
}

void db_writer_abandon(struct db_writer *w)
{
    if (w == NULL)
        return;
    /* Nothing more is committed: what the open batch holds is lost with the old file. */
    if (w->db != NULL && !sqlite3_get_autocommit(w->db))
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    w->pending = 0;
    /*
     * The WAL file is found by name ("<path>-wal"): left with its frames, whoever opens
     * the file now at the path reads them into it (the backup's rows were gone). SQLite
     * itself, seeing the file moved, neither checkpoints nor removes the WAL at close.
     * So: checkpoint into the file this writer opened and truncate the WAL to 0 bytes,
     * both through the descriptors it holds; if readers hold the checkpoint off,
     * truncate the WAL all the same (those frames are lost with the old file). Then
     * persistent WAL: close deletes no file by name (a WAL moved in beside the new
     * file would be its own).
     */
    if (w->db != NULL) {
        if (sqlite3_wal_checkpoint_v2(w->db, "main", SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) !=
            SQLITE_OK) {
            sqlite3_file *wal = NULL;
            if (sqlite3_file_control(w->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) ==
                    SQLITE_OK &&
                wal != NULL && wal->pMethods != NULL)
                wal->pMethods->xTruncate(wal, 0);
        }
        int persist = 1;
        sqlite3_file_control(w->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    }
    for (int i = 0; i < DB_W_COUNT; i++) {
        sqlite3_finalize(w->stmt[i]);
        w->stmt[i] = NULL;
    }
    db_writer_close(w);
}

const char *db_writer_reader_path(const struct db_writer *w)
{
    return w->reader_path;
}

int db_writer_max_trim_id(struct db_writer *w, int64_t *max_id, char **err)
{
    sqlite3_stmt *st = NULL;
    /* Ids past MT_TRIM_ID_MAX (a member's, before they were checked) would hide the largest
     * real one: they are not counted. */
    int rc = db_prepare(w->db, "SELECT coalesce(max(seq), 0) FROM trims WHERE seq <= ?1", &st,
                        err);

    *max_id = 0;
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, MT_TRIM_ID_MAX);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *max_id = sqlite3_column_int64(st, 0);
        rc = 0;
    } else {
        rc = db_fail_sql(err, w->db, rc, "read the last trim id");
    }
    sqlite3_finalize(st);
    return rc;
}

/* Roll the open batch back, if any: the writer is clean for the next one. */
static void db_writer_abort(struct db_writer *w)
{
    if (!sqlite3_get_autocommit(w->db)) {
        sqlite3_step(w->stmt[DB_W_ROLLBACK]);
        sqlite3_reset(w->stmt[DB_W_ROLLBACK]);
    }
    w->pending = 0;
}

void db_writer_forget(struct db_writer *w)
{
    if (w == NULL)
        return;
    /* No SQLite call: finalizing, rolling back or closing would unlock, write or close
     * descriptors by number, and those numbers are the host's now. The connection's
     * memory stays with it. */
    free(w->path);
    free(w->reader_path);
    free(w);
}

void db_writer_close(struct db_writer *w)
{
    if (w == NULL)
        return;
    if (w->db != NULL && w->stmt[DB_W_COMMIT] != NULL) {
        char *err = NULL;
        if (db_writer_flush(w, &err) < 0)
            free(err);
    }
    for (int i = 0; i < DB_W_COUNT; i++)
        sqlite3_finalize(w->stmt[i]);
    if (w->db != NULL && !sqlite3_get_autocommit(w->db))
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(w->db);
    free(w->path);
    free(w->reader_path);
    free(w);
}

/* Join the open batch, or start one (committing a batch that grew too large). */
static int db_writer_begin(struct db_writer *w, char **err)
{
    int rc;

    if (!sqlite3_get_autocommit(w->db)) {
        if (w->pending < DB_BATCH_MAX)
            return 0;
        rc = db_writer_flush(w, err);
        if (rc < 0)
            return rc;
    }
    w->pending = 0;
    return db_step_done(w->stmt[DB_W_BEGIN], "begin batch", err);
}

/* Bind a stored field: its value, or NULL when the field is not known (fields.h's rule). */
static void db_bind_field(sqlite3_stmt *st, int i, const struct mt_field *f,
                          const struct mt_snapshot *s)
{
    struct mt_field_value v;
    if (!mt_field_get(f, s, &v))
        sqlite3_bind_null(st, i);
    else if (v.real)
        sqlite3_bind_double(st, i, v.d);
    else
        sqlite3_bind_int64(st, i, v.i);
}

/* Run an insert in the batch; on failure the whole batch is rolled back and says so. */
static int db_writer_insert(struct db_writer *w, sqlite3_stmt *st, const char *what, char **err)
{
    char msg[96];
    int rc;

    snprintf(msg, sizeof(msg), "%s (batch of %lld rows dropped)", what,
             (long long)w->pending + 1);
    rc = db_step_done(st, msg, err);
    if (rc < 0) {
        db_writer_abort(w);
        return rc;
    }
    w->pending++;
    return 0;
}

int db_writer_add_sample(struct db_writer *w, const struct mt_snapshot *s, char **err)
{
    sqlite3_stmt *st;
    int64_t ts;
    int rc;

    if (w == NULL || s == NULL)
        return db_fail(err, -EINVAL, "add sample: no writer or no sample");
    ts = s->cheap.timestamp_ms != 0 ? s->cheap.timestamp_ms : s->heap.timestamp_ms;
    if (ts <= 0)
        return db_fail(err, -EINVAL, "add sample: the sample has no timestamp");
    rc = db_writer_begin(w, err);
    if (rc < 0)
        return rc;
    st = w->stmt[s->pid > 0 ? DB_W_INSERT_MEMBER_SAMPLE : DB_W_INSERT_SAMPLE];
    sqlite3_bind_int64(st, 1, ts);
    int col = 2;
    for (int i = 0; i < MT_FIELD_COUNT; i++)
        if (mt_fields[i].column)
            db_bind_field(st, col++, &mt_fields[i], s);
    if (s->pid > 0)
        sqlite3_bind_int(st, col, s->pid);
    return db_writer_insert(w, st, "insert sample", err);
}

int db_writer_add_trim(struct db_writer *w, const struct mt_trim_result *t, char **err)
{
    sqlite3_stmt *st;
    int rc;

    if (w == NULL || t == NULL)
        return db_fail(err, -EINVAL, "add trim: no writer or no trim");
    rc = db_writer_begin(w, err);
    if (rc < 0)
        return rc;
    st = w->stmt[DB_W_INSERT_TRIM];
    sqlite3_bind_int64(st, 1, t->start_ms);
    sqlite3_bind_int(st, 2, t->trigger);
    sqlite3_bind_int64(st, 3, t->duration_ns);
    sqlite3_bind_int64(st, 4, (int64_t)t->rss_before_bytes);
    sqlite3_bind_int64(st, 5, (int64_t)t->rss_after_bytes);
    sqlite3_bind_int64(st, 6, t->released_bytes);
    sqlite3_bind_int(st, 7, t->malloc_trim_ret);
    sqlite3_bind_int64(st, 8, t->id);
    if (t->heap_skipped) { /* NULL: not measured */
        sqlite3_bind_null(st, 9);
        sqlite3_bind_null(st, 10);
    } else {
        sqlite3_bind_int64(st, 9, (int64_t)t->heap_free_before_bytes);
        sqlite3_bind_int64(st, 10, (int64_t)t->heap_free_after_bytes);
    }
    sqlite3_bind_int64(st, 11, (int64_t)t->pad_bytes);
    sqlite3_bind_int(st, 12, t->coalesced != 0);
    if (t->arena_count >= 0)
        sqlite3_bind_int(st, 13, t->arena_count);
    else
        sqlite3_bind_null(st, 13);
    if (t->refaulted_bytes >= 0)
        sqlite3_bind_int64(st, 14, t->refaulted_bytes);
    else
        sqlite3_bind_null(st, 14);
    if (t->trigger == MT_TRIGGER_PRESSURE && t->reaction_ns >= 0)
        sqlite3_bind_double(st, 15, (double)t->reaction_ns / 1e9);
    else
        sqlite3_bind_null(st, 15);
    if (t->pid > 0)
        sqlite3_bind_int(st, 16, t->pid);
    else
        sqlite3_bind_null(st, 16);
    const char *why = mt_nothing_name(t->nothing_reason); /* a static name */
    if (why)
        sqlite3_bind_text(st, 17, why, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 17);
    return db_writer_insert(w, st, "insert trim", err);
}

int db_writer_set_refault(struct db_writer *w, const struct mt_refault *rf, char **err)
{
    sqlite3_stmt *st;
    int rc;

    if (w == NULL || rf == NULL)
        return db_fail(err, -EINVAL, "set re-fault: no writer or no figure");
    rc = db_writer_begin(w, err);
    if (rc < 0)
        return rc;
    st = w->stmt[DB_W_SET_REFAULT];
    sqlite3_bind_int64(st, 1, rf->start_ms);
    sqlite3_bind_int64(st, 2, rf->id);
    sqlite3_bind_int64(st, 3, rf->refaulted_bytes);
    if (rf->pid > 0)
        sqlite3_bind_int(st, 4, rf->pid);
    else
        sqlite3_bind_null(st, 4);
    return db_writer_insert(w, st, "set re-fault", err);
}

int db_writer_flush(struct db_writer *w, char **err)
{
    char what[64];
    int rc;

    if (w == NULL)
        return db_fail(err, -EINVAL, "flush: no writer");
    if (sqlite3_get_autocommit(w->db)) {
        w->pending = 0;
        return 0;
    }
    snprintf(what, sizeof(what), "commit (batch of %lld rows dropped)", (long long)w->pending);
    rc = db_step_done(w->stmt[DB_W_COMMIT], what, err);
    if (rc < 0) {
        db_writer_abort(w);
        return rc;
    }
    w->pending = 0;
    return 0;
}

static int db_writer_delete_old(struct db_writer *w, enum db_wstmt which, int64_t cutoff_ms,
                                int max_rows, int64_t *deleted, char **err)
{
    sqlite3_stmt *st = w->stmt[which];
    int rc;

    sqlite3_bind_int64(st, 1, cutoff_ms);
    sqlite3_bind_int(st, 2, max_rows);
    rc = db_step_done(st, which == DB_W_RETAIN_TRIMS ? "delete old trims" : "delete old samples",
                      err);
    if (rc == 0)
        *deleted += sqlite3_changes64(w->db);
    return rc;
}

int db_writer_retention(struct db_writer *w, int64_t cutoff_ms, int max_rows, int64_t *deleted,
                        char **err)
{
    int64_t n = 0;
    int rc;

    if (deleted != NULL)
        *deleted = 0;
    if (w == NULL || max_rows <= 0)
        return db_fail(err, -EINVAL, "retention: no writer or max_rows <= 0");
    rc = db_writer_begin(w, err);
    if (rc == 0)
        rc = db_writer_delete_old(w, DB_W_RETAIN_SAMPLES, cutoff_ms, max_rows, &n, err);
    if (rc == 0)
        rc = db_writer_delete_old(w, DB_W_RETAIN_TRIMS, cutoff_ms, max_rows, &n, err);
    if (rc == 0)
        rc = db_writer_delete_old(w, DB_W_RETAIN_MEMBER_SAMPLES, cutoff_ms, max_rows, &n, err);
    if (rc < 0) {
        db_writer_abort(w);
        return rc;
    }
    rc = db_writer_flush(w, err);
    if (rc == 0 && deleted != NULL)
        *deleted = n;
    return rc;
}
