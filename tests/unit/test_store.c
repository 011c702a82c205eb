/*
 * test_store.c - the store thread's one queue: trims and samples arrive by
 * it and are written together; a full queue counts what it drops, samples
 * first; the readers' interface says disabled, unavailable or ok.
 * Threads: the test and the store thread. Files: a mkdtemp directory.
 */
#include <errno.h>
#include <sqlite3.h>

#include "harness.h"
#include "store.h"

static char dir[64];

static struct mt_counters counters(struct store *st)
{
    struct mt_counters c;
    memset(&c, 0, sizeof(c));
    store_counters(st, &c);
    return c;
}

static int64_t rows(const char *path, const char *table)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    char sql[64];
    int64_t n = -1;
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", table);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

static void test_one_queue(void)
{
    struct store st;
    char *err = NULL;
    const char *path = harness_path(dir, "one.sqlite");
    CHECK_EQ_INT(store_init(&st, path, 24), 0);
    CHECK_EQ_INT(store_start(&st, &err), 0);
    for (int i = 1; i <= 3; i++) {
        struct mt_trim_result r = {.id = i, .trigger = MT_TRIGGER_MANUAL, .start_ms = mt_now_ms()};
        store_push_trim(&st, &r);
    }
    for (int i = 1; i <= 2; i++) {
        struct mt_snapshot s = {.cheap = {.timestamp_ms = mt_now_ms() + i, .rss_bytes = 1u << 20}};
        store_push_sample(&st, &s);
    }
    store_wake(&st);
    WAIT_FOR(counters(&st).samples_stored == 2, 10);
    CHECK_EQ_INT(counters(&st).samples_stored, 2);
    uint64_t generation = 0;
    char why[64];
    CHECK_EQ_INT(st.readers.state(st.readers.ctx, &generation, why, sizeof(why)), 0);
    CHECK_EQ_INT(generation, 1);
    CHECK_EQ_INT(store_stop(&st), 0);
    CHECK_EQ_INT(rows(path, "trims"), 3);
    CHECK_EQ_INT(rows(path, "samples"), 2);
    struct mt_counters c = counters(&st);
    CHECK_EQ_INT(c.trims_dropped, 0);
    CHECK_EQ_INT(c.samples_dropped, 0);
    store_destroy(&st);
}

/* Nobody writes (the thread is not started): the queue fills and counts. */
static void test_full_queue(void)
{
    struct store st;
    CHECK_EQ_INT(store_init(&st, harness_path(dir, "full.sqlite"), 24), 0);
    st.started = 1; /* as if its thread were stuck on a hung disk */
    for (int i = 0; i < STORE_QUEUE_SAMPLES + 2; i++) {
        struct mt_snapshot s = {.cheap = {.timestamp_ms = i + 1}};
        store_push_sample(&st, &s);
    }
    CHECK_EQ_INT(counters(&st).samples_dropped, 2); /* samples have a share of their own */
    for (int i = 0; i < STORE_QUEUE_LEN; i++) {
        struct mt_trim_result r = {.id = i + 1};
        store_push_trim(&st, &r);
    }
    CHECK_EQ_INT(counters(&st).trims_dropped, STORE_QUEUE_SAMPLES);
    st.started = 0;
    store_destroy(&st);
}

static void test_readers_state(void)
{
    struct store off, on;
    uint64_t generation = 7;
    char why[128] = "";
    CHECK_EQ_INT(store_init(&off, "", 24), 0);
    CHECK(!store_enabled(&off));
    CHECK_EQ_INT(off.readers.state(off.readers.ctx, &generation, why, sizeof(why)), -ENODEV);
    store_destroy(&off);
    CHECK_EQ_INT(store_init(&on, ":memory:", 24), 0);
    CHECK(store_enabled(&on));
    CHECK_CONTAINS(on.path, "mode=memory"); /* a shared-cache URI private to this store */
    CHECK_EQ_INT(on.readers.state(on.readers.ctx, &generation, why, sizeof(why)), -EAGAIN);
    CHECK_CONTAINS(why, "opening");
    store_destroy(&on);
}

static void push_samples(struct store *st, int n, int64_t base)
{
    for (int i = 0; i < n; i++) {
        struct mt_snapshot s = {.cheap = {.timestamp_ms = base + i, .rss_bytes = 1u << 20}};
        store_push_sample(st, &s);
    }
    store_wake(st);
}

/* Every sample pushed so far is accounted for: stored, or dropped (at the push, when the
 * queue's share of samples was full, or by the writer). */
static int settled(struct store *st, uint64_t pushed)
{
    struct mt_counters c = counters(st);
    return c.samples_stored + c.samples_dropped == pushed;
}

/* Push n samples a queue's share at a time (STORE_QUEUE_SAMPLES: more at once are dropped
 * at the push), each share stored before the next: n more rows, none dropped. */
static void store_samples(struct store *st, int n, int64_t base)
{
    uint64_t want = counters(st).samples_stored;
    for (int done = 0; done < n; done += STORE_QUEUE_SAMPLES) {
        int k = n - done < STORE_QUEUE_SAMPLES ? n - done : STORE_QUEUE_SAMPLES;
        push_samples(st, k, base + done);
        want += (uint64_t)k;
        WAIT_FOR(counters(st).samples_stored == want, 10); /* a hang guard */
    }
    CHECK_EQ_INT(counters(st).samples_stored, want);
}

static int health_is(struct store *st, const char *want)
{
    char state[32], reason[256];
    store_health(st, state, sizeof(state), reason, sizeof(reason));
    return strcmp(state, want) == 0;
}

static void file_bytes(const char *path, char *buf, size_t size, size_t *len)
{
    FILE *f = fopen(path, "rb");
    *len = f ? fread(buf, 1, size, f) : 0;
    if (f)
        fclose(f);
}

/*
 * Issue 24, finding 4: `mv backup.sqlite memtrim.sqlite` while the host runs. The
 * store noticed and reopened at the path, and the old store's WAL (memtrim.sqlite-wal,
 * by name) was read into the backup: at stop the file held the old rows, the backup's
 * were gone. Now it stops writing, says "replaced", and the backup keeps its rows;
 * a file that is no database is never turned into one.
 */
static void test_replaced_file_is_left_alone(void)
{
    struct store st;
    char *err = NULL;
    const char *path = harness_path(dir, "live.sqlite");
    const char *backup = harness_path(dir, "backup.sqlite");

    /* a backup made by an earlier run: 7 samples */
    CHECK_EQ_INT(store_init(&st, backup, 24), 0);
    CHECK_EQ_INT(store_start(&st, &err), 0);
    push_samples(&st, 7, mt_now_ms() - 100000);
    WAIT_FOR(counters(&st).samples_stored == 7, 10);
    CHECK_EQ_INT(store_stop(&st), 0);
    store_destroy(&st);
    CHECK_EQ_INT(rows(backup, "samples"), 7);

    CHECK_EQ_INT(store_init(&st, path, 24), 0);
    store_test_tick(&st, 20 * 1000000LL, 0);
    CHECK_EQ_INT(store_start(&st, &err), 0);
    store_samples(&st, 50, mt_now_ms() - 50000);
    CHECK_EQ_INT(counters(&st).samples_dropped, 0);
    CHECK_EQ_INT(rename(backup, path), 0); /* its -wal and -shm stay: the live store's */
    push_samples(&st, 30, mt_now_ms() - 30000);
    WAIT_FOR(health_is(&st, "replaced") && settled(&st, 80), 10);
    CHECK(health_is(&st, "replaced"));
    CHECK(settled(&st, 80));
    CHECK_EQ_INT(counters(&st).samples_stored, 50); /* none of the 30 written */
    char state[32], reason[256];
    store_health(&st, state, sizeof(state), reason, sizeof(reason));
    CHECK_CONTAINS(reason, "replaced by another file");
    uint64_t generation;
    char why[300];
    CHECK_EQ_INT(st.readers.state(st.readers.ctx, &generation, why, sizeof(why)), -EAGAIN);
    CHECK_CONTAINS(why, "replaced");
    uint64_t dropped = counters(&st).samples_dropped;
    push_samples(&st, 10, mt_now_ms() - 10000); /* dropped and counted, never written */
    WAIT_FOR(settled(&st, 90), 10);
    CHECK_EQ_INT(counters(&st).samples_dropped, dropped + 10);
    CHECK_EQ_INT(store_stop(&st), 0);
    CHECK_EQ_INT(counters(&st).samples_stored, 50);
    store_destroy(&st);
    /* the backup at the path: its 7 rows, none of the live store's 50 + 30 */
    CHECK_EQ_INT(rows(path, "samples"), 7);

    /* a file that is no database, moved into place */
    const char *junk = harness_path(dir, "junk.txt");
    const char *path2 = harness_path(dir, "live2.sqlite");
    FILE *f = fopen(junk, "wb");
    static const char text[] = "not a database, an operator's notes\n";
    if (f) {
        for (int i = 0; i < 200; i++)
            fputs(text, f);
        fclose(f);
    }
    CHECK_EQ_INT(store_init(&st, path2, 24), 0);
    store_test_tick(&st, 20 * 1000000LL, 0);
    CHECK_EQ_INT(store_start(&st, &err), 0);
    store_samples(&st, 50, mt_now_ms() - 50000);
    char before[16384], after[16384];
    size_t nb = 0, na = 0;
    file_bytes(junk, before, sizeof(before), &nb);
    CHECK_EQ_INT(rename(junk, path2), 0);
    push_samples(&st, 30, mt_now_ms() - 30000);
    WAIT_FOR(health_is(&st, "replaced"), 10);
    CHECK(health_is(&st, "replaced"));
    CHECK_EQ_INT(store_stop(&st), 0);
    store_destroy(&st);
    file_bytes(path2, after, sizeof(after), &na);

    CHECK_MSG(na == nb && memcmp(before, after, nb) == 0, "the file moved into place changed: "
              "%zu bytes, was %zu", na, nb);
    /* and opening it still says it is no database (no old WAL is read into it) */
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path2, &db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "SELECT count(*) FROM samples", NULL, NULL, NULL);
    CHECK_MSG(rc == SQLITE_NOTADB, "sqlite3 on the notes: %d (%s)", rc, db ? sqlite3_errmsg(db) : "");
    sqlite3_close(db);
}

int main(void)
{
    if (harness_tmpdir(dir, sizeof(dir), "store"))
        return 1;
    RUN(test_one_queue);
    RUN(test_full_queue);
    RUN(test_readers_state);
    RUN(test_replaced_file_is_left_alone);
    harness_rmtree(dir);
    return harness_end();
}
