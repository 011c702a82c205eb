/*
 * db_schema.c - the store's schema: recognising a memtrim database, refusing
 * a newer or foreign one, and migrating forward one version at a time.
 *
 * The samples table's columns are the stored fields of common/fields.h: a field
 * added there becomes a column at the writer's next opening (db_schema_migrate),
 * without a version step; the steps below are the history, never edited.
 *
 * Threads: the writer's thread, at db_writer_open (readers only check). No
 * locks of its own: the migration runs in one BEGIN IMMEDIATE transaction
 * (SQLite's write lock on the file), so two writers racing to migrate the
 * same file cannot both apply a step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "db_internal.h"

/*
 * Version 1: the first schema. A fresh store is created by applying every
 * step from 0, so this SQL is exercised on every new file, and a file left
 * at version 1 by an older memtrim takes the same path from 1.
 * trims.trigger holds enum mt_trigger (0 manual, 1 periodic, 2 pressure,
 * 3 burst): those values are part of the file format and never renumbered.
 */
static const char db_schema_v1[] =
    "PRAGMA application_id = 1836348013;" /* DB_APPLICATION_ID */
    "CREATE TABLE samples ("
    " timestamp_ms INTEGER PRIMARY KEY,"
    " rss_bytes INTEGER NOT NULL,"
    " rss_anon_bytes INTEGER,"
    " rss_file_bytes INTEGER,"
    " swap_bytes INTEGER,"
    " heap_in_use_bytes INTEGER,"
    " heap_free_bytes INTEGER,"
    " heap_mmapped_bytes INTEGER,"
    " arena_bytes INTEGER,"
    " fragmentation_ratio REAL);"
    "CREATE TABLE trims ("
    " start_ms INTEGER NOT NULL,"
    " trigger INTEGER NOT NULL,"
    " duration_ns INTEGER NOT NULL,"
    " rss_before_bytes INTEGER,"
    " rss_after_bytes INTEGER,"
    " released_bytes INTEGER,"
    " malloc_trim_ret INTEGER);"
    "CREATE INDEX trims_start ON trims (start_ms);";

/*
 * Version 2: the probe's wider view in samples (arena count, the releasable
 * estimate, cgroup usage, the limit, the mallinfo2 cost) and the full trim
 * result; an index for the trigger filter of /memory/trims. ADD COLUMN does
 * not rewrite the table, so this is instant even on a week of samples.
 */
static const char db_schema_v2[] =
    "ALTER TABLE samples ADD COLUMN arena_count INTEGER;"
    "ALTER TABLE samples ADD COLUMN releasable_estimate_bytes INTEGER;"
    "ALTER TABLE samples ADD COLUMN cgroup_usage_bytes INTEGER;"
    "ALTER TABLE samples ADD COLUMN memory_limit_bytes INTEGER;"
    "ALTER TABLE samples ADD COLUMN heap_probe_duration_seconds REAL;"
    "ALTER TABLE trims ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE trims ADD COLUMN heap_free_before_bytes INTEGER;"
    "ALTER TABLE trims ADD COLUMN heap_free_after_bytes INTEGER;"
    "ALTER TABLE trims ADD COLUMN pad_bytes INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE trims ADD COLUMN coalesced INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX trims_trigger_start ON trims (trigger, start_ms);";

/*
 * Version 3: what a trim cost the host: the arena count when it ran
 * (malloc_trim locks each in turn) and the re-faulted bytes, written seconds
 * later once known (NULL until then, and for trims stored before).
 */
static const char db_schema_v3[] =
    "ALTER TABLE trims ADD COLUMN arena_count INTEGER;"
    "ALTER TABLE trims ADD COLUMN refaulted_bytes INTEGER;";

/*
 * Version 4: how long after the crossing each pressure trim began (seconds;
 * NULL for other triggers and for trims stored before this version).
 */
static const char db_schema_v4[] = "ALTER TABLE trims ADD COLUMN reaction_seconds REAL;";

/*
 * Version 5: trim ids unique for the life of the store. Before, trims were
 * numbered from 1 at every start (ids 3, 2, 1, 3, 2, 1 after a restart; 0 in
 * version-1 rows). Ids now count up from the clock in ms (core/measure/trim.c), far
 * above any row id, so the older rows take their row id: unique, and in the
 * order they were stored.
 */
static const char db_schema_v5[] = "UPDATE trims SET seq = rowid WHERE seq < 1000000000000;";

/*
 * Version 6: worker groups (core/group/). A trim names the member that ran
 * it (NULL: the process that owns the store, as before); each member's
 * samples go to their own table keyed by (pid, time), while `samples` keeps
 * the host's view: the process, or in a group the group's totals.
 */
static const char db_schema_v6[] =
    "ALTER TABLE trims ADD COLUMN pid INTEGER;"
    "CREATE INDEX trims_pid_start ON trims (pid, start_ms);"
    "CREATE TABLE member_samples ("
    " pid INTEGER NOT NULL,"
    " timestamp_ms INTEGER NOT NULL,"
    " rss_bytes INTEGER NOT NULL,"
    " rss_anon_bytes INTEGER,"
    " rss_file_bytes INTEGER,"
    " swap_bytes INTEGER,"
    " heap_in_use_bytes INTEGER,"
    " heap_free_bytes INTEGER,"
    " heap_mmapped_bytes INTEGER,"
    " arena_bytes INTEGER,"
    " fragmentation_ratio REAL,"
    " arena_count INTEGER,"
    " releasable_estimate_bytes INTEGER,"
    " cgroup_usage_bytes INTEGER,"
    " memory_limit_bytes INTEGER,"
    " heap_probe_duration_seconds REAL,"
    " PRIMARY KEY (pid, timestamp_ms)) WITHOUT ROWID;"
    "CREATE INDEX member_samples_time ON member_samples (timestamp_ms);";

/*
 * Version 7: why a trim released under a page (core/measure/trim.c's
 * trim_nothing_reason, by name: "nothing_free", "pinned_small_chunks", ...);
 * NULL when it released a page or more, and in rows stored before this version.
 */
static const char db_schema_v7[] = "ALTER TABLE trims ADD COLUMN nothing_reason TEXT;";

/* Step i takes the schema from version i to version i + 1. */
static const char *const db_migrations[DB_SCHEMA_VERSION] = {
    db_schema_v1,
    db_schema_v2,
    db_schema_v3,
    db_schema_v4,
    db_schema_v5,
    db_schema_v6,
    db_schema_v7,
};

static int db_count_objects(sqlite3 *db, int64_t *n, char **err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema", -1, &st, NULL);

    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = db_fail_sql(err, db, rc, "read schema");
        sqlite3_finalize(st);
        return rc;
    }
    *n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

/*
 * What is at this connection: *version 0 for an empty database (nothing in
 * it yet), 1..DB_SCHEMA_VERSION for a memtrim store. A file that is not a
 * database or is someone else's is -EBADMSG; a newer memtrim's store is
 * -EPROTONOSUPPORT.
 */
int db_schema_check(sqlite3 *db, int for_reader, int64_t *version, char **err)
{
    int64_t app_id = 0, v = 0, objects = 0;
    int rc;

    rc = db_pragma_int(db, "application_id", &app_id, err);
    if (rc == 0)
        rc = db_pragma_int(db, "user_version", &v, err);
    if (rc == 0)
        rc = db_count_objects(db, &objects, err);
    if (rc == -EBADMSG) {
        free(*err);
        *err = NULL;
        return db_fail(err, rc, "not a memtrim store: the file is not an SQLite database");
    }
    if (rc < 0)
        return rc;
    if (app_id == 0 && v == 0 && objects == 0) {
        *version = 0;
        return 0;
    }
    if (app_id != DB_APPLICATION_ID || v < 1)
        return db_fail(err, -EBADMSG,
                       "not a memtrim store: an SQLite database of another application "
                       "(application_id %lld, user_version %lld, %lld schema objects)",
                       (long long)app_id, (long long)v, (long long)objects);
    if (v > DB_SCHEMA_VERSION)
        return db_fail(err, -EPROTONOSUPPORT,
                       "store schema version %lld is newer than this memtrim supports (%d); "
                       "refusing to %s it (upgrade memtrim or use another file)",
                       (long long)v, DB_SCHEMA_VERSION, for_reader ? "read" : "write");
    *version = v;
    return 0;
}

/* Apply the steps from version `from` up to DB_SCHEMA_VERSION; the caller holds the transaction. */
static int db_schema_apply(sqlite3 *db, int64_t from, char **err)
{
    char sql[64], what[64];
    int rc;

    for (int v = (int)from; v < DB_SCHEMA_VERSION; v++) {
        snprintf(what, sizeof(what), "migrate schema %d -> %d", v, v + 1);
        rc = db_exec(db, db_migrations[v], what, err);
        if (rc < 0)
            return rc;
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
        rc = db_exec(db, sql, what, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/*
 * The stored fields of common/fields.h that the samples table of a store at
 * DB_SCHEMA_VERSION lacks: 1 when column i is missing in missing[i]. A field
 * added to the table after version 5 needs no step of its own: it is a column
 * the store gains (ALTER TABLE ADD COLUMN does not rewrite the table; NULL in
 * older rows). *n says how many are missing.
 */
static int db_missing_columns(sqlite3 *db, const char *table, unsigned char *missing, int *n,
                              char **err)
{
    sqlite3_stmt *st = NULL;
    int rc = db_prepare(db, "SELECT count(*) FROM pragma_table_info(?2) WHERE name = ?1",
                        &st, err);
    if (rc == 0)
        sqlite3_bind_text(st, 2, table, -1, SQLITE_STATIC);
    *n = 0;
    for (int i = 0; rc == 0 && i < MT_FIELD_COUNT; i++) {
        missing[i] = 0;
        if (!mt_fields[i].column)
            continue;
        sqlite3_bind_text(st, 1, mt_fields[i].name, -1, SQLITE_STATIC);
        int step = sqlite3_step(st);
        if (step != SQLITE_ROW)
            rc = db_fail_sql(err, db, step, "read the samples columns");
        else if (sqlite3_column_int(st, 0) == 0)
            missing[i] = 1, (*n)++;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return rc;
}

/* Add the missing columns, in the order of their places. */
static int db_add_columns(sqlite3 *db, const char *table, const unsigned char *missing, char **err)
{
    char sql[160];
    int rc = 0;
    for (int c = 0; rc == 0 && db_series_metrics[c] != NULL; c++) {
        const struct mt_field *f = mt_field_find(db_series_metrics[c]);
        int i = (int)(f - mt_fields);
        if (!missing[i])
            continue;
        int real = f->type == MT_FIELD_NS || f->type == MT_FIELD_F64;
        snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN %s %s", table, f->name,
                 real ? "REAL" : "INTEGER");
        rc = db_exec(db, sql, "add a samples column", err);
    }
    return rc;
}

/* Bring the store at db to DB_SCHEMA_VERSION (creating it when empty), with a
 * column for every stored field. */
int db_schema_migrate(sqlite3 *db, char **err)
{
    /* samples, and the same columns in a worker group's member_samples (version 6) */
    static const char *const tables[2] = {"samples", "member_samples"};
    unsigned char missing[MT_FIELD_COUNT];
    int64_t version = 0;
    int rc, nmissing = 0, n = 0;

    rc = db_schema_check(db, 0, &version, err);
    for (int t = 0; t < 2 && rc == 0 && version == DB_SCHEMA_VERSION; t++) {
        rc = db_missing_columns(db, tables[t], missing, &n, err);
        nmissing += n;
    }
    if (rc < 0 || (version == DB_SCHEMA_VERSION && nmissing == 0))
        return rc;
    rc = db_exec(db, "BEGIN IMMEDIATE", "begin migration", err);
    if (rc < 0)
        return rc;
    /* Again under the write lock: another writer may have migrated meanwhile. */
    rc = db_schema_check(db, 0, &version, err);
    if (rc == 0)
        rc = db_schema_apply(db, version, err);
    for (int t = 0; t < 2 && rc == 0; t++) {
        rc = db_missing_columns(db, tables[t], missing, &nmissing, err);
        if (rc == 0)
            rc = db_add_columns(db, tables[t], missing, err);
    }
    if (rc == 0)
        rc = db_exec(db, "COMMIT", "commit migration", err);
    if (rc < 0)
        goto fail;
    return 0;
fail:
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}
