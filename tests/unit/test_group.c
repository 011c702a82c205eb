/*
 * test_group.c - a worker group's pressure decision (core/decide/group_policy.c) on
 * synthetic readings: which member trims next, and why; no threads, no
 * clock, no processes (tests/e2e/test_groups.py runs the real group).
 */
#include "group_policy.h"
#include "harness.h"

#define MB(x) ((uint64_t)(x) << 20)
#define MS(x) ((int64_t)(x) * 1000000)

static struct group_pressure_in in(uint64_t usage_mb, int64_t base_mb)
{
    struct group_pressure_in i = {
        .now_ns = MS(10000), .usage = (int64_t)MB(usage_mb),
        .base_usage = base_mb < 0 ? -1 : (int64_t)MB(base_mb), .limit = (int64_t)MB(250),
        .ratio = 0.9, .min_releasable = MB(8)};
    return i;
}

/* A member that read its heap after its last trim: `free_mb` releasable. */
static struct group_candidate fresh(uint64_t free_mb, uint64_t rss_mb)
{
    struct group_candidate c = {.releasable = MB(free_mb), .estimate_fresh = 1,
                                .estimate_after_trim = 1, .rss = MB(rss_mb)};
    return c;
}

static void test_outside_the_zone_nothing(void)
{
    struct group_candidate c[2] = {fresh(80, 90), fresh(70, 80)};
    struct group_pressure_in i = in(120, 0); /* the zone starts at half the limit: 125 MB */
    int rule;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    CHECK_EQ_INT(rule, GROUP_RULE_NONE);
    i.limit = 0; /* no limit known: nothing either */
    i.usage = (int64_t)MB(240);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
}

static void test_estimate_rule_largest_first(void)
{
    /* 170 MB used, 55 MB to the line (225); the members hold 150 MB free: trim, the
     * largest first, whatever their own RSS did (none of them grew). */
    struct group_candidate c[3] = {fresh(70, 80), fresh(80, 85), fresh(1, 10)};
    struct group_pressure_in i = in(170, 170);
    int rule;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 3, &rule), 1);
    CHECK_EQ_INT(rule, GROUP_RULE_ESTIMATE);
    /* what they hold is below the headroom: no trim yet */
    c[0] = fresh(20, 30);
    c[1] = fresh(20, 30);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 3, &rule), -1);
}

static void test_one_at_a_time(void)
{
    struct group_candidate c[2] = {fresh(80, 90), fresh(70, 80)};
    struct group_pressure_in i = in(240, 200);
    int rule;
    c[0].busy = 1; /* the request in flight: the caller marks every member busy */
    c[1].busy = 1;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    c[0].busy = 0; /* answered: the next one may go */
    c[1].busy = 0;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
}

static void test_line_asks_members_that_said_nothing(void)
{
    /* At the line: a member whose last heap reading is older than its last trim, but
     * whose RSS grew since, is asked (it may hold what it freed meanwhile). */
    struct group_candidate c[2] = {fresh(1, 10), {0}};
    c[1].rss = MB(85);
    c[1].rss_after_trim = MB(5);
    c[1].last_trim_ns = MS(9000);
    c[1].releasable = MB(80); /* read before that trim: not believed */
    struct group_pressure_in i = in(230, 230);
    int rule;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 1);
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
    /* ...but not again within GROUP_RETRIM_STALE_NS of the last ask */
    c[1].last_trim_ns = i.now_ns - GROUP_RETRIM_STALE_NS / 2;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* ...nor when its RSS did not grow since (it holds nothing new) */
    c[1].last_trim_ns = MS(9000);
    c[1].rss = MB(6);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* a member that said lately it holds little is not asked, even at the line;
     * once its word is stale (over GROUP_ESTIMATE_STALE_NS) and its RSS grew, it is */
    c[0].rss_after_trim = MB(2);
    c[0].last_trim_ns = MS(5000);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    c[0].estimate_fresh = 0;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
}

static void test_growth_rule(void)
{
    /* Inside the zone, below the line, no fresh estimate: the usage grew by a step
     * (limit / 32 = 7.8 MB, at least 8 MiB) since the last group trim. */
    struct group_candidate c[2] = {{0}, {0}};
    c[0].rss = MB(40);
    c[1].rss = MB(80);
    struct group_pressure_in i = in(160, 155);
    int rule;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    i.base_usage = (int64_t)MB(150);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 1); /* the larger RSS first */
    CHECK_EQ_INT(rule, GROUP_RULE_GROWTH);
    CHECK_EQ_INT(group_growth_step((int64_t)MB(250)), (int64_t)MB(8));
    CHECK_EQ_INT(group_growth_step((int64_t)MB(1024)), (int64_t)MB(32));
}

static void test_growth_since_a_fresh_estimate(void)
{
    /* A member read its heap mid-study (1 MB free at 30 MB RSS) and its RSS grew to 85 MB
     * since: what it grew by may be free now (its study ended, the next reading is spaced
     * out by the probe budget). Below the line without growth its word stands... */
    struct group_candidate c[2] = {fresh(1, 85), fresh(0, 40)};
    c[0].rss_since_estimate = MB(55);
    c[1].rss_since_estimate = MB(4); /* under TrimMinReleasableBytes: nothing new */
    struct group_pressure_in i = in(200, 200);
    int rule;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* ...at the line it is asked (the other, grown by less than 8 MB, is not) */
    i = in(230, 230);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
    /* ...and after growth by a step, ranked by estimate plus growth: a member holding
     * 40 MB by a fresh reading goes before one that grew 30 MB since its reading */
    i = in(200, 150);
    c[0].rss_since_estimate = MB(30);
    c[1] = fresh(40, 45);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 1);
    CHECK_EQ_INT(rule, GROUP_RULE_GROWTH);
    c[1].busy = 1;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    /* ...not again within GROUP_RETRIM_STALE_NS of its last ask */
    c[0].last_trim_ns = i.now_ns - GROUP_RETRIM_STALE_NS / 2;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
}

int main(void)
{
    RUN(test_outside_the_zone_nothing);
    RUN(test_estimate_rule_largest_first);
    RUN(test_one_at_a_time);
    RUN(test_line_asks_members_that_said_nothing);
    RUN(test_growth_rule);
    RUN(test_growth_since_a_fresh_estimate);
    return harness_end();
}
