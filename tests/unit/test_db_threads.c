/*
 * test_db_threads.c - the store as the plugin uses it: one writer thread
 * (the housekeeper) committing a sample per tick while reader threads (HTTP
 * workers) query, on a file (WAL) and on ":memory:" (shared cache). Readers
 * must never fail; on a file they always see whole batches (an in-memory
 * store's readers read uncommitted, so they may see part of the open batch:
 * db.h says so). Run it under TSan too.
 *
 * Threads: the main thread writes; READERS threads read, each on its own
 * connection. Files: a mkdtemp directory under /tmp.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db.h"
#include "harness.h"

#define READERS 3
#define TICKS 1500
#define PER_TICK 2 /* samples per batch: readers must never see an odd count */
#define MIN_QUERIES 5 /* each reader's queries while the writer writes, at least */

static atomic_int writing;

struct reader_arg {
    const char *path;
    atomic_int queries; /* read by the writer: it writes on until every reader has queried */
    int errors, torn;
    char first_error[256];
};

static void *reader_main(void *p)
{
    struct reader_arg *a = p;
    struct db_reader *r = NULL;
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 10, 0, 0};
    char *err = NULL;

    if (db_reader_open(a->path, &r, &err) < 0) {
        snprintf(a->first_error, sizeof(a->first_error), "open: %s", err ? err : "");
        a->errors++;
        free(err);
        return NULL;
    }
    while (atomic_load(&writing)) {
        struct db_bucket *b = NULL;
        struct db_trim_row *rows = NULL;
        struct db_trim_summary s;
        size_t n = 0;
        int rc = db_query_series(r, "rss_bytes", 0, INT64_MAX / 2, INT64_MAX / 2, &b, &n, &err);
        if (rc == 0 && n == 1 && b[0].count % PER_TICK != 0)
            a->torn++;
        free(b);
        if (rc == 0)
            rc = db_query_trims(r, &q, &rows, &n, &s, &err);
        free(rows);
        if (rc < 0) {
            if (a->errors++ == 0)
                snprintf(a->first_error, sizeof(a->first_error), "%d %s", rc, err ? err : "");
            free(err);
            err = NULL;
        }
        atomic_fetch_add(&a->queries, 1);
    }
    db_reader_close(r);
    return NULL;
}

static int all_queried(struct reader_arg *args, int min)
{
    for (int i = 0; i < READERS; i++)
        if (atomic_load(&args[i].queries) < min)
            return 0;
    return 1;
}

static void run(const char *path)
{
    struct db_writer *w = NULL;
    struct reader_arg args[READERS];
    pthread_t th[READERS];
    char *err = NULL;
    int write_errors = 0;

    CHECK_EQ_INT(db_writer_open(path, &w, &err), 0);
    if (w == NULL) {
        printf("open %s: %s\n", path, err ? err : "");
        free(err);
        return;
    }
    atomic_store(&writing, 1);
    memset(args, 0, sizeof(args));
    for (int i = 0; i < READERS; i++) {
        atomic_init(&args[i].queries, 0);
        args[i].path = db_writer_reader_path(w);
        pthread_create(&th[i], NULL, reader_main, &args[i]);
    }
    /* TICKS batches at least, and on until every reader has queried meanwhile
     * (a loaded machine may not run a reader at all in TICKS batches' time). */
    for (int t = 0; t < TICKS || (t < 100 * TICKS && !all_queried(args, MIN_QUERIES)); t++) {
        for (int k = 0; k < PER_TICK; k++) {
            struct mt_snapshot s;
            memset(&s, 0, sizeof(s));
            s.cheap.timestamp_ms = 1000000 + t * 1000 + k;
            s.cheap.rss_bytes = (uint64_t)t;
            write_errors += db_writer_add_sample(w, &s, NULL) != 0;
        }
        if (t % 10 == 0) {
            struct mt_trim_result tr;
            memset(&tr, 0, sizeof(tr));
            tr.start_ms = 1000000 + t * 1000;
            tr.duration_ns = t;
            write_errors += db_writer_add_trim(w, &tr, NULL) != 0;
        }
        write_errors += db_writer_flush(w, NULL) != 0;
        if (t % 500 == 0)
            write_errors += db_writer_retention(w, 1000000 + (t - 1000) * 1000LL, 100, NULL, NULL);
    }
    atomic_store(&writing, 0);
    for (int i = 0; i < READERS; i++) {
        pthread_join(th[i], NULL);
        printf("%s: reader %d: %d queries, %d errors %s, %d torn batches\n", path, i,
               atomic_load(&args[i].queries), args[i].errors, args[i].first_error, args[i].torn);
        CHECK(atomic_load(&args[i].queries) >= MIN_QUERIES);
        CHECK_EQ_INT(args[i].errors, 0);
        if (strcmp(path, ":memory:") != 0)
            CHECK_EQ_INT(args[i].torn, 0);
    }
    CHECK_EQ_INT(write_errors, 0);
    db_writer_close(w);
}

int main(void)
{
    char dir[64], path[96];

    if (harness_tmpdir(dir, sizeof(dir), "test-dbt"))
        return 1;
    snprintf(path, sizeof(path), "%s/threads.sqlite", dir);
    run(path);
    run(":memory:");
    harness_rmtree(dir);
    return harness_end();
}
