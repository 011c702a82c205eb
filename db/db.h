/*
 * db.h - the SQLite store: samples and trims, retention, queries.
 *
 * Threads: one writer (struct db_writer), owned and used only by the store
 * thread (core/threads/store.c); any number of readers (struct db_reader), one per
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
#include "types.h" /* common/: the value types stored */

#define DB_SCHEMA_VERSION 7

struct db_writer;
struct db_reader;

/* Tests only: SQLite's busy timeout for connections opened from now on, in ms (0: the
 * product's DB_BUSY_TIMEOUT_MS). Atomic; any thread. */
void db_test_busy_timeout_ms(int ms);

/*
 * Open or create the database at path (":memory:" allowed), migrate the schema.
 * Errors: -ENOENT/-ENOTDIR/-EACCES/-EROFS... (cannot open or create: the OS
 * error), -EROFS (read-only file or file system), -EBADMSG (not an SQLite
 * database, or another application's), -EPROTONOSUPPORT (written by a newer
 * memtrim: refused, never touched), -EBUSY (locked by another connection
 * for longer than the busy timeout), -ENOSPC, -ENOMEM, -EIO.
 */
int db_writer_open(const char *path, struct db_writer **out, char **err);
/* Flushes (an error there is not reported: flush first to see it); accepts NULL. */
void db_writer_close(struct db_writer *w);

/*
 * The name readers must give db_reader_open for this writer's store: path
 * itself for a file; for ":memory:" a shared-cache URI private to this writer
 * ("file:memtrim-<ptr>?mode=memory&cache=shared"), valid while it is open.
 * Owned by the writer.
 */
const char *db_writer_reader_path(const struct db_writer *w);

/* The largest trim id (trims.seq) in the store, 0 when it holds none. */
int db_writer_max_trim_id(struct db_writer *w, int64_t *max_id, char **err);

/*
 * Whether the file opened is still the one at the path: 0 (also for in-memory
 * stores and URIs); -ENOENT with *err when it was deleted (close, and open a
 * new file at the path); -ESTALE when another file is there now (a backup
 * moved into place): never write to it, never open it (db_writer_abandon).
 */
int db_writer_check_file(struct db_writer *w, char **err);

/* The device and inode of the file the writer opened: 1, or 0 (not a plain file). */
int db_writer_file_id(const struct db_writer *w, uint64_t *dev, uint64_t *ino);

/* Whether path is that file: 1 (or not a plain path), 0 nothing there, -ESTALE another
 * file, another negative errno when it cannot be told. */
int db_path_is_file(const char *path, uint64_t dev, uint64_t ino);

/*
 * Close a writer whose file was replaced at its path: the open batch is
 * rolled back, and no file at the path is touched (SQLite deletes the WAL
 * and shared-memory files by name at close; persistent WAL keeps them, and
 * truncates the writer's own WAL, by descriptor, to 0 bytes). w is freed.
 */
void db_writer_abandon(struct db_writer *w);
/* The host closed memtrim's descriptors (common/fdid.h, mt_fds_lost): free the writer
 * without one SQLite call, so that none of SQLite's descriptor numbers, the host's now,
 * is locked, written or closed. The connection itself is left (its memory too). */
void db_writer_forget(struct db_writer *w);

/*
 * The one builder of the in-memory store's URI (see db_writer_reader_path): a
 * shared-cache in-memory database named after
 * owner (any address unique while it lives), "file:memtrim-<owner>?mode=memory&cache=shared",
 * into buf. A writer opened on it and readers given it share one store.
 */
void db_memory_uri(char *buf, size_t size, const void *owner);

/*
 * Buffer a sample / a trim; written in the current batch transaction (begun
 * here when none is open; committed by db_writer_flush, or here once it
 * holds DB_BATCH_MAX rows). A sample is keyed by its timestamp_ms: a second
 * sample with the same millisecond replaces the first. A sample with
 * s->pid > 0 is a group member's and goes to member_samples (keyed by pid
 * and time); a trim's pid is stored with it (NULL for 0). On failure (-EBUSY,
 * -ENOSPC, ...) the whole open batch is rolled back (the message says how
 * many rows were dropped) and the writer stays usable: the next call starts
 * a new batch.
 */
int db_writer_add_sample(struct db_writer *w, const struct mt_snapshot *s, char **err);
int db_writer_add_trim(struct db_writer *w, const struct mt_trim_result *t, char **err);

/*
 * A stored trim's re-fault figure, known seconds after the trim (in the
 * current batch, like the adds). A trim not (or no longer) stored is not an
 * error: nothing changes.
 */
int db_writer_set_refault(struct db_writer *w, const struct mt_refault *rf, char **err);

/*
 * Commit the current batch (the store thread calls this every tick); 0 when
 * nothing is pending. On failure the batch is rolled back and dropped.
 */
int db_writer_flush(struct db_writer *w, char **err);

/*
 * Delete rows older than cutoff_ms, at most max_rows per table per call, so
 * it never holds the writer long. *deleted (may be NULL) receives the count.
 * Runs in the current batch and commits it (as db_writer_flush does).
 */
int db_writer_retention(struct db_writer *w, int64_t cutoff_ms, int max_rows, int64_t *deleted,
                        char **err);

/*
 * Readers: their own connection, read-only; path is db_writer_reader_path().
 * ":memory:" itself is -ENOTSUP (an in-memory store is private to its
 * writer's connection). -EAGAIN while the store is not created or not yet
 * migrated to DB_SCHEMA_VERSION by its writer; otherwise the errors of
 * db_writer_open. A reader of an in-memory store reads uncommitted rows.
 */
int db_reader_open(const char *path, struct db_reader **out, char **err);
void db_reader_close(struct db_reader *r);
/* As db_writer_forget, for a reader. */
void db_reader_forget(struct db_reader *r);

/* One stored trim (the trim result plus its row id). */
struct db_trim_row {
    struct mt_trim_result t; /* t.id is the writer's sequence number (0 if stored by schema 1) */
    int64_t row_id;          /* stable id of the row in the store */
};

struct db_trim_query {
    int64_t since_ms;  /* inclusive; INT64_MIN = no bound */
    int64_t until_ms;  /* exclusive; INT64_MAX = no bound */
    int trigger;       /* -1 = any */
    int limit;         /* rows to return, newest first; 0 = summary only */
    int pid;           /* worker groups: one member's trims; 0 = any */
    int64_t self_since_ms; /* pid is the reader's own process: its trims stored without a pid
                            * (while in no group) from this time on count too; 0 = not */
};

struct db_trim_summary {
    int64_t count;
    double duration_p50_seconds;
    double duration_p95_seconds;
    double duration_p99_seconds;
    double duration_max_seconds;
    int64_t released_bytes; /* sum over the range (positive releases only) */
    int64_t refaulted_bytes; /* sum of the known re-fault figures */
};

/*
 * Trims matching q, newest first, into a malloc'd array (*rows, caller frees);
 * the summary covers every matching trim, not only the returned ones.
 * Percentiles use the nearest-rank definition: the p-th percentile of N
 * durations sorted ascending is the one at rank ceil(p * N / 100), 1-based
 * (so always a duration that occurred). All zero when nothing matches.
 * -EINVAL for limit < 0, since >= until or a trigger outside enum mt_trigger.
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
 * Samples where the metric is unknown (NULL: e.g. no mallinfo2 yet) are left
 * out of count/min/avg/max. -EINVAL for an unknown metric, since_ms < 0,
 * until_ms <= since_ms, step_ms <= 0 or more than 100,000 buckets.
 */
int db_query_series(struct db_reader *r, const char *metric, int64_t since_ms, int64_t until_ms,
                    int64_t step_ms, struct db_bucket **buckets, size_t *nbuckets, char **err);
/* The same for one member of a worker group (pid > 0: its own samples). */
int db_query_member_series(struct db_reader *r, int pid, const char *metric, int64_t since_ms,
                           int64_t until_ms, int64_t step_ms, struct db_bucket **buckets,
                           size_t *nbuckets, char **err);

/*
 * The node agent's history (db_agent.c): its own file and tables, nothing of the plugin's
 * schema. A cgroup's sample and a trim (made, or refused with its reason); negative values
 * are stored as unknown (NULL) and read back as -1. The writer is one thread's (the agent's
 * loop); db_agent_history opens a read-only connection of its own on any thread and calls
 * back per row, samples then trims, oldest first, at most max_rows of each. All return 0
 * or a negative errno with *err (the caller frees).
 */
struct db_agent;
struct db_agent_sample {
    int64_t ts_ms;
    const char *cgroup;
    int64_t usage, limit, working_set, anon;
    uint64_t trims, released, oom_kills;
};
struct db_agent_trim {
    int64_t ts_ms;
    const char *cgroup;
    int pid;
    const char *program;
    int64_t released;
    double wall_s, cpu_s;
    const char *reason; /* NULL or "" for a trim made */
};
typedef void (*db_agent_sample_fn)(void *ctx, const struct db_agent_sample *s);
typedef void (*db_agent_trim_fn)(void *ctx, const struct db_agent_trim *t);
int db_agent_open(const char *path, struct db_agent **out, char **err);
void db_agent_close(struct db_agent *a); /* accepts NULL */
int db_agent_begin(struct db_agent *a, char **err);
int db_agent_commit(struct db_agent *a, char **err);
int db_agent_add_sample(struct db_agent *a, const struct db_agent_sample *s, char **err);
int db_agent_add_trim(struct db_agent *a, const struct db_agent_trim *t, char **err);
int db_agent_retention(struct db_agent *a, int64_t cutoff_ms, char **err);
int db_agent_history(const char *path, const char *cgroup, int64_t since_ms, int max_rows,
                     db_agent_sample_fn on_sample, db_agent_trim_fn on_trim, void *ctx, char **err);

#endif /* MEMTRIM_DB_H */
