/*
 * test_group.c - a worker group's pressure decision (core/pressure/decision.c, zone.c, stagger.c) on
 * synthetic readings: which member trims next, and why; no threads, no
 * clock, no processes (tests/e2e/test_groups.py runs the real group).
 */
#include <string.h>

#include "coop.h"
#include "decision.h"
#include "stagger.h"
#include "zone.h"
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

static void test_rise_is_the_largest_recent_climb(void)
{
    static struct group_rise r; /* 32 KiB: not on the stack */
    memset(&r, 0, sizeof(r));
    CHECK_EQ_INT(group_rise(&r, MS(0)), 0);
    /* a study: 5 MB -> 85 MB in 50 ms, held, then trimmed back to 5 */
    group_rise_note(&r, MS(0), (int64_t)MB(5));
    group_rise_note(&r, MS(25), (int64_t)MB(45));
    group_rise_note(&r, MS(50), (int64_t)MB(85));
    group_rise_note(&r, MS(100), (int64_t)MB(85));
    group_rise_note(&r, MS(150), (int64_t)MB(5));
    CHECK_EQ_INT(group_rise(&r, MS(150)), MB(80));
    /* two studies at once: one climb of their sum */
    group_rise_note(&r, MS(200), (int64_t)MB(85));
    group_rise_note(&r, MS(250), (int64_t)MB(165));
    CHECK_EQ_INT(group_rise(&r, MS(260)), MB(160));
    /* a fall is no climb; after the window (2 s) the climbs are forgotten */
    group_rise_note(&r, MS(300), (int64_t)MB(5));
    CHECK_EQ_INT(group_rise(&r, MS(2200)), MB(160));
    group_rise_note(&r, MS(2400), (int64_t)MB(5));
    CHECK_EQ_INT(group_rise(&r, MS(2400)), 0);
    /* a slow drift (1 MB every 100 ms for 10 s) counts as what it climbed in the window,
     * not as the 100 MB since its start */
    for (int t = 0; t <= 100; t++)
        group_rise_note(&r, MS(3000 + 100 * t), (int64_t)MB(5 + t));
    uint64_t drift = group_rise(&r, MS(13000));
    CHECK_MSG(drift >= MB(19) && drift <= MB(21), "drift %llu MB", (unsigned long long)(drift >> 20));
    /* more readings than the queues hold (a reading every 1 us, climbing): the oldest go,
     * nothing overflows, and the climb is still seen */
    memset(&r, 0, sizeof(r));
    for (int t = 0; t < 3 * GROUP_RISE_SLOTS; t++)
        group_rise_note(&r, 1000 * (int64_t)t, (int64_t)MB(5) + 4096 * (int64_t)t);
    CHECK(group_rise(&r, 1000 * 3 * GROUP_RISE_SLOTS) >= 4096 * (uint64_t)(GROUP_RISE_SLOTS - 1));
    group_rise_note(&r, MS(10), -1); /* an unknown usage is no reading */
    CHECK(group_rise(&r, MS(10)) > 0);
}

static void test_ahead_of_the_zone(void)
{
    /* A worker freed its 80 MB study: 85 MB used, below the zone (125 MB). The usage's
     * last climb was 80 MB: the next worker's study, from here, would reach the zone, so
     * the member holding it free trims now, not once that climb has begun. */
    struct group_candidate c[2] = {fresh(81, 85), fresh(0, 4)};
    struct group_pressure_in i = in(85, 5);
    int rule;
    i.kept = MB(340); /* 4 workers at their peak, 85 MB each: the zone without trims */
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1); /* no climb seen: as before */
    i.rise = MB(80);
    CHECK(group_ahead(&i));
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_AHEAD);
    i.kept = 0; /* not known: not ahead */
    CHECK(!group_ahead(&i));
    /* 2 such workers under 400 MB (the zone from 200 MB): one holds its last study, the
     * other has just freed hers; 165 MB, and an 80 MB climb from here would reach the
     * zone. But each at its peak is 170 MB, below it: a worker that keeps its freed
     * study reuses it, nothing climbs; a trim would only fault it back in. */
    struct group_pressure_in two = in(165, 85);
    two.limit = (int64_t)MB(400);
    two.rise = MB(80);
    two.kept = MB(170);
    CHECK(!group_ahead(&two));
    CHECK_EQ_INT(group_pressure_pick(&two, c, 2, &rule), -1);
    two.kept = MB(255); /* three of them: their peaks would reach the zone */
    CHECK(group_ahead(&two));
    CHECK_EQ_INT(group_pressure_pick(&two, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_AHEAD);
    i.kept = MB(340);
    /* a climb that from here stays below the zone: nothing (a server at a quarter of its
     * limit, its studies small) */
    i.rise = MB(30);
    CHECK(!group_ahead(&i));
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* a climb smaller than a growth step is no climb (jitter), wherever the usage is */
    i = in(120, 120);
    i.kept = MB(340);
    i.rise = MB(6);
    CHECK(!group_ahead(&i));
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* ahead, but nobody holds TrimMinReleasableBytes by a fresh reading: nothing */
    i = in(85, 5);
    i.rise = MB(80);
    i.kept = MB(340);
    c[0] = fresh(6, 85);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    c[0] = fresh(81, 85);
    c[0].estimate_fresh = 0; /* read before its last trim, or over a second ago */
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* inside the zone, below the line, under the burst size, less than the headroom:
     * the estimate rule holds it, the climb does not */
    c[0] = fresh(40, 45);
    i = in(170, 170);
    i.kept = MB(250);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    i.rise = MB(40);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_AHEAD);
    /* TrimMinReleasableBytes 0: a member holding nothing is never asked */
    i.min_releasable = 0;
    c[0] = fresh(0, 45);
    c[1] = fresh(0, 4);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* no limit known: never ahead */
    i = in(85, 5);
    i.rise = MB(80);
    i.kept = MB(340);
    i.limit = 0;
    CHECK(!group_ahead(&i));
}

static void test_ahead_inside_the_zone_needs_the_peaks_at_the_line(void)
{
    /* 256 MB: the zone from 128 MB, the line at 230, a growth step of 8 MiB. One worker
     * holds 120 MB live, the other serves requests of 20 MB, each freed after it: 150 MB
     * used. Untrimmed, the second reuses what it freed and the usage stays flat; trimmed,
     * each request faults its 20 MB back in, a climb of more than a step, which would
     * keep the group ahead, and trimming it after each request, for ever. Their peaks
     * (30 + 125 MB) stay below the line: nothing needs those pages. */
    struct group_candidate c[2] = {fresh(20, 30), fresh(0, 125)};
    struct group_pressure_in i = in(150, 150);
    int rule;
    i.limit = (int64_t)MB(256);
    i.rise = MB(20);
    i.kept = MB(155);
    CHECK(!group_ahead(&i));
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    CHECK_EQ_INT(rule, GROUP_RULE_NONE);
    /* members whose peaks would reach the line: ahead, as below the zone */
    i.kept = MB(235);
    CHECK(group_ahead(&i));
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_AHEAD);
    /* below the zone the peaks need only reach the zone (the 4-worker case) */
    i = in(100, 100);
    i.limit = (int64_t)MB(256);
    i.rise = MB(80);
    i.kept = MB(155);
    CHECK(group_ahead(&i));
}

/* What a member must hold to trim on its own (the leader's grant): below the zone and
 * not ahead nothing; at the line or ahead TrimMinReleasableBytes; inside below the line
 * the headroom or the burst size, whichever is less, TrimMinReleasableBytes at least. */
static void test_act_threshold(void)
{
    struct group_pressure_in i = in(100, 100); /* 250 MB: the zone from 125, the line 225 */
    CHECK(group_act_threshold(&i) == 0);
    i.rise = MB(80);
    i.kept = MB(340); /* ahead of the next climb */
    CHECK(group_act_threshold(&i) == MB(8));
    i = in(170, 170); /* inside, 55 MB below the line */
    CHECK(group_act_threshold(&i) == MB(55));
    i.burst_bytes = MB(40);
    CHECK(group_act_threshold(&i) == MB(40));
    i = in(220, 220); /* 5 MB below the line: TrimMinReleasableBytes at least */
    CHECK(group_act_threshold(&i) == MB(8));
    i = in(230, 230); /* at the line */
    CHECK(group_act_threshold(&i) == MB(8));
    i.limit = 0; /* no limit known */
    CHECK(group_act_threshold(&i) == 0);
    i = in(230, 230);
    i.ratio = 0; /* PressureRatio 0: no pressure */
    CHECK(group_act_threshold(&i) == 0);
}

static void test_kept_counts_shared_pages_once(void)
{
    /* A master and 2 workers forked after it touched 40 MB they still share (5 MB of
     * their own each), 70 MB studies, 400 MB (the zone from 200). Both workers hold
     * their freed study: 40 + 15 + 140 = 195 MB used, 275 by their RSS summed. Kept,
     * each study reuses its worker's pages: nothing climbs, they stay below the zone.
     * The RSS peaks summed (275) say the zone; less the 80 MB counted twice, 195. */
    CHECK_EQ_INT(group_kept((int64_t)MB(195), MB(275), MB(275)), MB(195));
    struct group_candidate c[2] = {fresh(70, 115), fresh(70, 115)};
    struct group_pressure_in i = in(195, 195);
    int rule;
    i.limit = (int64_t)MB(400);
    i.rise = MB(70);                     /* the last study's climb */
    i.kept = MB(275);                    /* the peaks summed, as before */
    CHECK(group_ahead(&i));              /* trimmed every study, each faulted back */
    i.kept = group_kept(i.usage, MB(275), MB(275));
    CHECK(!group_ahead(&i));
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    /* one worker trimmed (45 MB) and 40 MB into its next study, its report lagging at
     * 45: the usage 165, the RSS 205, the peaks 275: 235, above the 195 it would hold
     * untrimmed (the lag counts those 40 MB twice): a lag errs toward the peaks summed */
    CHECK_EQ_INT(group_kept((int64_t)MB(165), MB(205), MB(275)), MB(235));
    /* no RSS counted twice (the usage above the RSS: page cache, a lagging report):
     * the peaks; never below the usage; unknown usage: 0 */
    CHECK_EQ_INT(group_kept((int64_t)MB(300), MB(250), MB(340)), MB(340));
    CHECK_EQ_INT(group_kept((int64_t)MB(100), MB(400), MB(350)), MB(100));
    CHECK_EQ_INT(group_kept(-1, MB(400), MB(350)), 0);
}

/* The set's zone (struct pressure_zone, core/pressure): inside at PressureRatio of the
 * limit, held PZ_ZONE_HOLD_NS after the usage left it; the members hear of it when it
 * changes, when the grant is due again, and when the members changed. */
static void test_the_zone_of_a_set(void)
{
    struct pressure_zone z;
    struct pressure_sums sum = {.rss = 100 << 20, .peak = 100 << 20, .now = 100 << 20};
    struct group_pressure_in in;
    const int64_t limit = 1000 << 20, s = 1000LL * 1000 * 1000;
    pressure_zone_init(&z);
    CHECK(z.usage == -1 && strcmp(z.usage_source, "none") == 0);
    memset(&in, 0, sizeof(in));
    pressure_zone_inputs(&z, 1 * s, limit, 950 << 20, &sum, &in); /* the cgroup's usage */
    CHECK(in.usage == 950 << 20 && z.limit == limit && strcmp(z.usage_source, "cgroup") == 0);
    CHECK(pressure_zone_inside(&z, 1 * s, 0.9, &in));
    CHECK(pressure_zone_news(&z, 1, 0, 0, 0, 1 * s, 1, 0)); /* it began */
    pressure_zone_told(&z, 1, 1, 0, 8 << 20, 100 * 1000 * 1000, 1 * s, 0);
    CHECK(!pressure_zone_news(&z, 1, 8 << 20, 100 * 1000 * 1000, 0, 1 * s + 1, 1, 0));
    CHECK(pressure_zone_news(&z, 1, 8 << 20, 100 * 1000 * 1000, 0, 1 * s + 1, 1, 1)); /* a join */
    CHECK(pressure_zone_news(&z, 1, 8 << 20, 100 * 1000 * 1000, 0, 1 * s + PZ_ACT_RENEW_NS, 1, 0));
    memset(&in, 0, sizeof(in));
    pressure_zone_inputs(&z, 2 * s, limit, -1, &sum, &in); /* no cgroup: the members' RSS */
    CHECK(in.usage == 100 << 20 && strcmp(z.usage_source, "members") == 0);
    CHECK(pressure_zone_inside(&z, 2 * s, 0.9, &in));                 /* held */
    CHECK(!pressure_zone_inside(&z, 1 * s + PZ_ZONE_HOLD_NS, 0.9, &in)); /* the hold ended */
    pressure_zone_trimmed(&z);
    memset(&in, 0, sizeof(in));
    pressure_zone_inputs(&z, 3 * s, limit, 200 << 20, &sum, &in);
    CHECK(in.base_usage == 200 << 20); /* growth counts from the low after the trim */
}

/* The stagger: member k's slot is the k-th of every `slots`, from the epoch; at the line,
 * or after a missed slot, now until the grant ends; a slot a new grant moved is no miss. */
static void test_the_stagger(void)
{
    const int64_t ms = 1000 * 1000;
    struct pressure_slots sl = {.epoch_ns = 1000 * ms, .width_ns = 10 * ms,
                                .until_ns = 3000 * ms, .slot = 2, .slots = 4};
    int64_t open, close;
    pressure_slot_window(&sl, 1005 * ms, &open, &close); /* in slot 0: its next, slot 2 */
    CHECK(open == 1020 * ms && close == 1030 * ms);
    pressure_slot_window(&sl, 1025 * ms, &open, &close); /* inside its own */
    CHECK(open == 1020 * ms && close == 1030 * ms);
    pressure_slot_window(&sl, 1031 * ms, &open, &close); /* past it: the next rotation's */
    CHECK(open == 1060 * ms && close == 1070 * ms);
    sl.until_ns = 1065 * ms;
    pressure_slot_window(&sl, 1031 * ms, &open, &close); /* the grant ends inside it */
    CHECK(open == 1060 * ms && close == 1065 * ms);
    sl.until_ns = 3000 * ms;
    pressure_slot_take(&sl, 1005 * ms, 1, 0, 0, &open, &close); /* at the line: now */
    CHECK(open == 1005 * ms && close == 3000 * ms);
    pressure_slot_take(&sl, 1031 * ms, 0, 1020 * ms, 0, &open, &close); /* missed: now */
    CHECK(open == 1031 * ms && close == 3000 * ms);
    /* waited for a slot at 1020 that a new grant moved to 1060: not missed before 1030 */
    pressure_slot_take(&sl, 1025 * ms, 0, 1020 * ms, 0, &open, &close);
    CHECK(open == 1020 * ms);
    sl.epoch_ns = 1010 * ms; /* the moved grant: its slot 2 opens at 1030 */
    pressure_slot_take(&sl, 1025 * ms, 0, 1020 * ms, 0, &open, &close);
    CHECK(open == 1030 * ms && close == 1040 * ms);
    pressure_slot_take(&sl, 1025 * ms, 0, 1020 * ms, 1, &open, &close); /* the old rule */
    CHECK(open == 1025 * ms);
}

/* A cooperative member's report as the decision reads it: its estimate fresh only when
 * read after its last trim and young; its RSS after a trim since its report counted as
 * what it holds now; its peak only within COOP_PEAK_NS. */
static void test_a_cooperative_member(void)
{
    const int64_t s = 1000LL * 1000 * 1000;
    struct group_candidate c;
    struct pressure_sums sum = {0, 0, 0};
    struct coop_reading r = {.rss = 300 << 20, .peak_rss = 400 << 20, .peak_ns = 5 * s,
                             .report_ns = 9 * s, .heap_ms = 9000, .releasable = 50 << 20,
                             .rss_at_heap = 280 << 20, .last_trim_ms = 8000};
    coop_candidate(&c, &sum, &r, 10 * s, 9500);
    CHECK(c.releasable == 50 << 20 && c.estimate_fresh && c.estimate_after_trim);
    CHECK(c.rss_since_estimate == 20 << 20 && !c.busy);
    CHECK(sum.rss == 300 << 20 && sum.peak == 400 << 20 && sum.now == 300 << 20);
    r.last_trim_ns = 9500 * 1000 * 1000LL; /* trimmed after its report, to 120 MB */
    r.rss_after = 120 << 20;
    r.last_trim_ms = 9500; /* its estimate predates that trim */
    r.busy = 1;
    memset(&sum, 0, sizeof(sum));
    coop_candidate(&c, &sum, &r, 16 * s, 16000); /* its peak is older than COOP_PEAK_NS */
    CHECK(!c.estimate_fresh && !c.estimate_after_trim && c.busy && c.rss_after_trim == 120 << 20);
    CHECK(sum.now == 120 << 20 && sum.peak == 300 << 20);
}

/* A set with its own pace (a process alone is one: test_pressure's trace): its gaps time the
 * rules, no member's retrim gap does; the kernel's last chance picks a member not busy
 * whatever the zone; growth comes before the line. */
static void test_a_set_with_its_own_pace(void)
{
    struct pressure_pace pace = {.since_ns = MS(5), .growth_gap_ns = MS(10),
                                 .line_gap_ns = MS(1000), .estimate_gap_ns = MS(500),
                                 .grown = MB(20), .growth_step = MB(12)};
    struct group_pressure_in i = in(100, -1); /* below the zone (125 MB) */
    i.pace = &pace;
    struct group_candidate c[2] = {fresh(0, 60), fresh(0, 90)};
    c[0].estimate_fresh = c[1].estimate_fresh = 0;
    c[1].busy = 1;
    int rule;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    pace.last_chance = 1;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0); /* the one not busy */
    CHECK_EQ_INT(rule, GROUP_RULE_LAST_CHANCE);
    pace.last_chance = 0;
    i.usage = (int64_t)MB(230); /* at the line (225), grown by a step: the gaps not passed */
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    pace.since_ns = MS(10); /* the growth gap passed, the line's not: growth */
    c[0].last_trim_ns = i.now_ns - MS(1); /* no member's retrim gap with the set's pace */
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_GROWTH);
    pace.grown = 0;
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
    pace.since_ns = MS(1000); /* the line's repeat passed */
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
    /* At the line, its repeat not due: a fresh estimate, once the estimate's wait passed. */
    pace.since_ns = MS(600);
    c[0] = fresh(10, 60);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_ESTIMATE);
    pace.since_ns = MS(400);
    CHECK_EQ_INT(group_pressure_pick(&i, c, 2, &rule), -1);
}

/* A leader with other members is member 0 of its set (issue 38: one decision per
 * wake-up): its engine's verdict goes to the set's next look, which decides. Its growth
 * (its engine's reading, every 2 ms in the zone) is the member growth rule: member 0 is
 * asked inside the zone though it was trimmed 5 ms ago, the stagger waits on another
 * member and no rule of the set holds; the kernel's last chance is the set's: its line's
 * rule, whatever the zone. A leader alone (no other member in its last look) keeps its
 * own decision. */
static void test_a_leader_is_member_0_of_its_set(void)
{
    const int64_t s = 1000LL * 1000 * 1000;
    struct pressure_zone z;
    struct pressure_sums sum = {.rss = (int64_t)MB(200), .peak = (int64_t)MB(200),
                                .now = (int64_t)MB(200)};
    struct pressure_look_in li = {.now = 10 * s, .limit = (int64_t)MB(250),
                                  .usage = (int64_t)MB(150), .ratio = 0.9,
                                  .min_releasable = MB(8), .burst_bytes = MB(64), .self = 1};
    struct pressure_look lk;
    pressure_zone_init(&z);
    /* the leader alone: its engine trims it itself */
    struct group_candidate c[3] = {fresh(0, 60), fresh(2, 70), fresh(1, 50)};
    pressure_zone_look(&z, &li, c, 1, &sum, &lk);
    CHECK_EQ_INT(pressure_zone_hand(&z, PRESSURE_RULE_GROWTH, MB(80)), 0);
    /* with two members besides it: the set decides */
    pressure_zone_look(&z, &li, c, 3, &sum, &lk);
    CHECK_EQ_INT(lk.pick, -1); /* inside the zone (125 MB), no rule of the set holds */
    c[0].estimate_fresh = 0; /* its RSS grew since its heap reading, trimmed 5 ms ago */
    c[0].rss_after_trim = MB(55);
    c[0].last_trim_ns = li.now - MS(5);
    c[0].busy = 1; /* a request to another member is in flight (the stagger's wait) */
    li.now += MS(2);
    CHECK_EQ_INT(pressure_zone_hand(&z, PRESSURE_RULE_GROWTH, MB(80)), 1);
    pressure_zone_look(&z, &li, c, 3, &sum, &lk);
    CHECK_EQ_INT(lk.pick, 0); /* it trims in its own process: no request to it waits */
    CHECK_EQ_INT(lk.rule, GROUP_RULE_GROWTH);
    CHECK(c[0].rss == MB(80) && lk.guess);
    c[0].grew = c[0].busy = 0;
    li.now += MS(2);
    pressure_zone_look(&z, &li, c, 3, &sum, &lk); /* handed once: the next look alone */
    CHECK_EQ_INT(lk.pick, -1);
    /* the kernel reached the limit: below the zone, the line's rule: the member not busy
     * that holds the most free (not the largest RSS: a worker at its study's peak holds it
     * live; member 0 said nothing since its trim 9 ms ago, within its retrim gap) */
    li.usage = (int64_t)MB(100);
    c[0].rss = MB(200);
    c[1] = fresh(60, 120);
    c[1].busy = 1;
    c[2] = fresh(30, 90);
    CHECK_EQ_INT(pressure_zone_hand(&z, PRESSURE_RULE_LAST_CHANCE, MB(70)), 1);
    pressure_zone_look(&z, &li, c, 3, &sum, &lk);
    CHECK_EQ_INT(lk.pick, 2);
    CHECK_EQ_INT(lk.rule, GROUP_RULE_LAST_CHANCE);
    /* the members left (its look saw it alone): its own decision again */
    pressure_zone_look(&z, &li, c, 1, &sum, &lk);
    CHECK_EQ_INT(pressure_zone_hand(&z, PRESSURE_RULE_LINE, MB(80)), 0);
}

int main(void)
{
    RUN(test_a_cooperative_member);
    RUN(test_the_stagger);
    RUN(test_the_zone_of_a_set);
    RUN(test_outside_the_zone_nothing);
    RUN(test_a_set_with_its_own_pace);
    RUN(test_a_leader_is_member_0_of_its_set);
    RUN(test_estimate_rule_largest_first);
    RUN(test_one_at_a_time);
    RUN(test_line_asks_members_that_said_nothing);
    RUN(test_growth_rule);
    RUN(test_growth_since_a_fresh_estimate);
    RUN(test_rise_is_the_largest_recent_climb);
    RUN(test_ahead_of_the_zone);
    RUN(test_ahead_inside_the_zone_needs_the_peaks_at_the_line);
    RUN(test_kept_counts_shared_pages_once);
    RUN(test_act_threshold);
    return harness_end();
}
