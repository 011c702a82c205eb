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

int main(void)
{
    if (harness_tmpdir(dir, sizeof(dir), "store"))
        return 1;
    RUN(test_one_queue);
    RUN(test_full_queue);
    RUN(test_readers_state);
    harness_rmtree(dir);
    return harness_end();
}
