/*
 * db_agent.c - the node agent's history (docs/agent.md, "History"): its own SQLite file, two
 * tables beside nothing of the plugin's schema: agent_samples (a cgroup's usage, limit,
 * working set, anonymous memory and its agent's counters at a time) and agent_trims (each
 * trim made or refused: the process, what it gave back, what it cost, why not). Opened
 * with the store's own connection rules (db_connect: a plain file, no symbolic link, WAL);
 * retention by age. Threads: the writer belongs to the agent's loop thread; a history query
 * opens a read-only connection of its own (any thread: an HTTP worker).
 * Locks: none of its own; SQLite's per connection (each connection one thread).
 */
#include "db.h"
#include "db_internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

struct db_agent {
    sqlite3 *db;
    sqlite3_stmt *sample, *trim;
    char path[1024];
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS agent_samples (ts_ms INTEGER NOT NULL, cgroup TEXT NOT NULL,"
    " usage INTEGER, limit_bytes INTEGER, working_set INTEGER, anon INTEGER,"
    " trims INTEGER NOT NULL, released INTEGER NOT NULL, oom_kills INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS agent_samples_by_cgroup ON agent_samples (cgroup, ts_ms);"
    "CREATE TABLE IF NOT EXISTS agent_trims (ts_ms INTEGER NOT NULL, cgroup TEXT NOT NULL,"
    " pid INTEGER NOT NULL, program TEXT NOT NULL, released INTEGER NOT NULL,"
    " wall_seconds REAL NOT NULL, cpu_seconds REAL NOT NULL, reason TEXT);"
    "CREATE INDEX IF NOT EXISTS agent_trims_by_cgroup ON agent_trims (cgroup, ts_ms);";

void db_agent_close(struct db_agent *a)
{
    if (!a)
        return;
    sqlite3_finalize(a->sample);
    sqlite3_finalize(a->trim);
    sqlite3_close(a->db);
    free(a);
}

int db_agent_open(const char *path, struct db_agent **out, char **err)
{
    *out = NULL;
    struct db_agent *a = calloc(1, sizeof *a);
    if (!a)
        return db_fail(err, -ENOMEM, "out of memory");
    int rc;
    if (strlen(path) >= sizeof a->path) {
        rc = db_fail(err, -ENAMETOOLONG, "database path too long");
        goto fail;
    }
    strcpy(a->path, path);
    if ((rc = db_connect(path, 0, &a->db, err)) < 0 ||
        (rc = db_exec(a->db, schema, "create the agent's tables", err)) < 0 ||
        (rc = db_prepare(a->db, "INSERT INTO agent_samples VALUES (?,?,?,?,?,?,?,?,?)",
                         &a->sample, err)) < 0 ||
        (rc = db_prepare(a->db, "INSERT INTO agent_trims VALUES (?,?,?,?,?,?,?,?)", &a->trim,
                         err)) < 0)
        goto fail;
    *out = a;
    return 0;
fail:
    db_agent_close(a);
    return rc;
}

static void bind_or_null(sqlite3_stmt *st, int i, int64_t v)
{
    if (v < 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_int64(st, i, v);
}

int db_agent_begin(struct db_agent *a, char **err)
{
    return db_exec(a->db, "BEGIN", "begin a batch", err);
}

int db_agent_commit(struct db_agent *a, char **err)
{
    return db_exec(a->db, "COMMIT", "commit a batch", err);
}

int db_agent_add_sample(struct db_agent *a, const struct db_agent_sample *s, char **err)
{
    sqlite3_stmt *st = a->sample;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, s->ts_ms);
    sqlite3_bind_text(st, 2, s->cgroup, -1, SQLITE_TRANSIENT);
    bind_or_null(st, 3, s->usage);
    bind_or_null(st, 4, s->limit);
    bind_or_null(st, 5, s->working_set);
    bind_or_null(st, 6, s->anon);
    sqlite3_bind_int64(st, 7, (int64_t)s->trims);
    sqlite3_bind_int64(st, 8, (int64_t)s->released);
    sqlite3_bind_int64(st, 9, (int64_t)s->oom_kills);
    return db_step_done(st, "add an agent sample", err);
}

int db_agent_add_trim(struct db_agent *a, const struct db_agent_trim *t, char **err)
{
    sqlite3_stmt *st = a->trim;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, t->ts_ms);
    sqlite3_bind_text(st, 2, t->cgroup, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, t->pid);
    sqlite3_bind_text(st, 4, t->program, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, t->released);
    sqlite3_bind_double(st, 6, t->wall_s);
    sqlite3_bind_double(st, 7, t->cpu_s);
    if (t->reason && t->reason[0])
        sqlite3_bind_text(st, 8, t->reason, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 8);
    return db_step_done(st, "add an agent trim", err);
}

int db_agent_retention(struct db_agent *a, int64_t cutoff_ms, char **err)
{
    sqlite3_stmt *st = NULL;
    static const char *const sql[] = {"DELETE FROM agent_samples WHERE ts_ms < ?",
                                      "DELETE FROM agent_trims WHERE ts_ms < ?"};
    for (int i = 0; i < 2; i++) {
        int rc = db_prepare(a->db, sql[i], &st, err);
        if (rc < 0)
            return rc;
        sqlite3_bind_int64(st, 1, cutoff_ms);
        rc = db_step_done(st, "apply the agent's retention", err);
        sqlite3_finalize(st);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int64_t col_or_minus(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
}

/* sql's rows of cgroup (NULL: all) from since_ms on, at most max_rows: ?1, ?2, ?3. */
static int prepare_range(sqlite3 *db, const char *sql, const char *cgroup, int64_t since_ms,
                         int max_rows, sqlite3_stmt **st, char **err)
{
    int rc = db_prepare(db, sql, st, err);
    if (rc < 0)
        return rc;
    if (cgroup)
        sqlite3_bind_text(*st, 1, cgroup, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(*st, 2, since_ms);
    sqlite3_bind_int(*st, 3, max_rows);
    return 0;
}

int db_agent_history(const char *path, const char *cgroup, int64_t since_ms, int max_rows,
                     db_agent_sample_fn on_sample, db_agent_trim_fn on_trim, void *ctx, char **err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = db_connect(path, 1, &db, err);
    if (rc < 0)
        return rc;
    rc = prepare_range(db, "SELECT ts_ms, cgroup, usage, limit_bytes, working_set, anon, trims, "
                       "released, oom_kills FROM agent_samples WHERE (?1 IS NULL OR cgroup = ?1) "
                       "AND ts_ms >= ?2 ORDER BY ts_ms LIMIT ?3", cgroup, since_ms, max_rows, &st, err);
    if (rc < 0)
        goto done;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct db_agent_sample s = {
            .ts_ms = sqlite3_column_int64(st, 0), .cgroup = (const char *)sqlite3_column_text(st, 1),
            .usage = col_or_minus(st, 2), .limit = col_or_minus(st, 3),
            .working_set = col_or_minus(st, 4), .anon = col_or_minus(st, 5),
            .trims = (uint64_t)sqlite3_column_int64(st, 6),
            .released = (uint64_t)sqlite3_column_int64(st, 7),
            .oom_kills = (uint64_t)sqlite3_column_int64(st, 8)};
        on_sample(ctx, &s);
    }
    if (rc != SQLITE_DONE) {
        rc = db_fail_sql(err, db, rc, "read the agent's samples");
        goto done;
    }
    sqlite3_finalize(st);
    st = NULL;
    rc = prepare_range(db, "SELECT ts_ms, cgroup, pid, program, released, wall_seconds, "
                       "cpu_seconds, reason FROM agent_trims WHERE (?1 IS NULL OR cgroup = ?1) AND "
                       "ts_ms >= ?2 ORDER BY ts_ms LIMIT ?3", cgroup, since_ms, max_rows, &st, err);
    if (rc < 0)
        goto done;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct db_agent_trim t = {
            .ts_ms = sqlite3_column_int64(st, 0), .cgroup = (const char *)sqlite3_column_text(st, 1),
            .pid = sqlite3_column_int(st, 2), .program = (const char *)sqlite3_column_text(st, 3),
            .released = sqlite3_column_int64(st, 4), .wall_s = sqlite3_column_double(st, 5),
            .cpu_s = sqlite3_column_double(st, 6), .reason = (const char *)sqlite3_column_text(st, 7)};
        on_trim(ctx, &t);
    }
    rc = rc == SQLITE_DONE ? 0 : db_fail_sql(err, db, rc, "read the agent's trims");
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}
