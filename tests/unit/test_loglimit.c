/*
 * test_loglimit.c - the rate limit of log lines a client can cause
 * (common/loglimit.c): the burst per window, the count of dropped lines
 * handed to the next line written, a new window, a clock that goes back, and
 * the flush. The time is given to the rule, never read.
 *
 * Threads: one. Files: none.
 */
#include "common.h"
#include "harness.h"

static void test_window(void)
{
    struct mt_log_limit l;
    uint64_t dropped = 99;
    mt_log_limit_init(&l, 10 * MT_SEC, 3);
    int64_t t = 1000 * MT_SEC;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(mt_log_limit_take(&l, t + i, &dropped), 1);
        CHECK_EQ_INT(dropped, 0);
    }
    /* A flood inside the window: every line past the burst is dropped and counted. */
    for (int i = 0; i < 6334; i++)
        CHECK_EQ_INT(mt_log_limit_take(&l, t + 5 * MT_SEC, &dropped), 0);
    CHECK_EQ_INT(mt_log_limit_take(&l, t + 10 * MT_SEC - 1, &dropped), 0);
    /* The next window: the first line says how many were dropped. */
    CHECK_EQ_INT(mt_log_limit_take(&l, t + 10 * MT_SEC, &dropped), 1);
    CHECK_EQ_INT(dropped, 6335);
    CHECK_EQ_INT(mt_log_limit_take(&l, t + 10 * MT_SEC + 1, &dropped), 1);
    CHECK_EQ_INT(dropped, 0);
    /* A clock that went back starts a new window instead of blocking for ever. */
    CHECK_EQ_INT(mt_log_limit_take(&l, t + 11 * MT_SEC, &dropped), 1);
    CHECK_EQ_INT(mt_log_limit_take(&l, t + 11 * MT_SEC, &dropped), 0);
    CHECK_EQ_INT(mt_log_limit_take(&l, t, &dropped), 1);
    CHECK_EQ_INT(dropped, 1);
}

static void test_flush(void)
{
    static struct mt_log_limit l = MT_LOG_LIMIT_INIT(60 * MT_SEC, 1);
    uint64_t dropped;
    CHECK_EQ_INT(mt_log_limit_take(&l, MT_SEC, &dropped), 1);
    CHECK_EQ_INT(mt_log_limit_take(&l, 2 * MT_SEC, &dropped), 0);
    CHECK_EQ_INT(mt_log_limit_take(&l, 3 * MT_SEC, &dropped), 0);
    CHECK_EQ_INT(mt_log_limit_flush(&l), 2);
    CHECK_EQ_INT(mt_log_limit_flush(&l), 0);
    CHECK_EQ_INT(mt_log_limit_take(&l, 61 * MT_SEC, &dropped), 1);
    CHECK_EQ_INT(dropped, 0);
    /* A burst of 0 drops everything. */
    struct mt_log_limit none;
    mt_log_limit_init(&none, MT_SEC, 0);
    CHECK_EQ_INT(mt_log_limit_take(&none, 0, &dropped), 0);
    CHECK_EQ_INT(mt_log_limit_flush(&none), 1);
}

int main(void)
{
    RUN(test_window);
    RUN(test_flush);
    return harness_end();
}
