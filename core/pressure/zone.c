/*
 * zone.c - the set's zone (zone.h): the usage and the limit a look reads, whether the set
 * is inside the zone (or ahead of it, or holding it), and what its members were last told.
 * No locks, no threads, no clock of its own: the caller (the group thread, core/group,
 * under g->lock) keeps it and hands it the readings; tests/unit/test_group.c drives it.
 */
#include <string.h>

#include "control.h"
#include "zone.h"

void pressure_zone_init(struct pressure_zone *z)
{
    int own = z->own;
    memset(z, 0, sizeof(*z));
    z->own = own;
    z->usage = -1;
    z->limit = -1;
    z->base_usage = -1;
    z->usage_source = "none";
}

void pressure_zone_inputs(struct pressure_zone *z, int64_t now, int64_t limit, int64_t usage,
                          const struct pressure_sums *sum, struct group_pressure_in *in)
{
    in->limit = limit;
    in->usage = usage >= 0 ? usage : sum->rss;
    if (z->base_usage < 0 || in->usage < z->base_usage)
        z->base_usage = in->usage;
    in->base_usage = z->base_usage;
    group_rise_note(&z->rise, now, in->usage);
    in->rise = group_rise(&z->rise, now);
    /* The members at their peaks, less what their RSS counts twice, or the usage if more
     * (group_kept): the usage less the members' RSS is no measure of the rest (their
     * reports lag the cgroup's reading mid-study). */
    in->kept = group_kept(in->usage, (uint64_t)sum->now, (uint64_t)sum->peak);
    z->usage = in->usage;
    /* Climbing above a quarter of the limit, or by a growth step since the last reading
     * (a study starting far below it: its climb is what group_ahead learns from): the
     * next readings at the zone's tick for a second (a worker fills 80 MB in 50 ms: the
     * 100 ms tick saw the zone half of that late, and a first study's climb not at all). */
    if (in->usage - z->moved_usage >= PZ_USAGE_MOVED_BYTES ||
        z->moved_usage - in->usage >= PZ_USAGE_MOVED_BYTES) {
        if (in->limit > 0 && in->usage > z->moved_usage &&
            (in->usage >= in->limit / 4 ||
             in->usage - z->moved_usage >= group_growth_step(in->limit)))
            z->moving_until_ns = now + 1000LL * 1000 * 1000;
        z->moved_usage = in->usage;
    }
    z->limit = in->limit > 0 ? in->limit : -1;
    z->usage_source = usage >= 0 ? "cgroup" : "members";
}

/* Inside the zone, or ahead of it (the last climb, again from here, would reach it):
 * there the members watch their heap, so that a freed study is seen at once; and
 * PZ_ZONE_HOLD_NS after the usage left it: a group's usage swings in and out with every
 * study, and the next one must find them fast. */
int pressure_zone_inside(struct pressure_zone *z, int64_t now, double ratio,
                         const struct group_pressure_in *in)
{
    int inside = (in->limit > 0 && ratio > 0 &&
                  (uint64_t)in->usage >= pressure_zone_floor(in->limit, ratio)) ||
                 group_ahead(in);
    if (inside)
        z->zone_seen_ns = now;
    return inside || (z->zone && now - z->zone_seen_ns < PZ_ZONE_HOLD_NS);
}

int pressure_zone_news(const struct pressure_zone *z, int zone, uint64_t threshold,
                       int64_t width_ns, int at_line, int64_t now, uint64_t min,
                       uint64_t members_gen)
{
    int act = zone && threshold > 0;
    if (zone != z->zone || act != z->act)
        return 1;
    if (!act)
        return 0;
    if (at_line != z->act_line)
        return 1;
    uint64_t moved = threshold > z->act_threshold ? threshold - z->act_threshold
                                                  : z->act_threshold - threshold;
    return now - z->act_sent_ns >= PZ_ACT_RENEW_NS || z->act_gen != members_gen ||
           z->act_width_ns != width_ns ||
           (now - z->act_sent_ns >= PZ_ACT_RESEND_NS && moved >= (min ? min : 1));
}

void pressure_zone_told(struct pressure_zone *z, int zone, int act, int at_line,
                        uint64_t threshold, int64_t width_ns, int64_t now, uint64_t members_gen)
{
    z->zone = zone;
    z->act = act;
    z->act_line = at_line;
    z->act_threshold = threshold;
    z->act_sent_ns = now;
    z->act_width_ns = width_ns;
    z->act_gen = members_gen;
}

void pressure_zone_trimmed(struct pressure_zone *z)
{
    z->base_usage = INT64_MAX;
}

int pressure_zone_hand(struct pressure_zone *z, int rule, uint64_t rss)
{
    /* the control: the leader's engine decides for it beside its set (two decisions) */
    if (!z->others || mt_control("eng-leader-decides-alone"))
        return 0;
    if (rule == PRESSURE_RULE_LAST_CHANCE)
        z->handed_last_chance = 1;
    else if (rule == PRESSURE_RULE_GROWTH)
        z->handed_grew = 1;
    z->handed_rss = rss;
    return 1;
}

void pressure_zone_look(struct pressure_zone *z, const struct pressure_look_in *li,
                        struct group_candidate *c, int n, const struct pressure_sums *sum,
                        struct pressure_look *out)
{
    struct group_pressure_in *in = &out->in;
    *in = (struct group_pressure_in){.now_ns = li->now, .ratio = li->ratio,
                                     .min_releasable = li->min_releasable,
                                     .burst_bytes = li->burst_bytes,
                                     .last_chance = z->handed_last_chance};
    int self = li->self && n > 0;
    if (self && z->handed_rss > c[0].rss)
        c[0].rss = z->handed_rss; /* the engine's reading is the newer */
    if (self && z->handed_grew)
        c[0].grew = 1;
    z->others = n > self;
    z->handed_grew = z->handed_last_chance = 0;
    z->handed_rss = 0;
    pressure_zone_inputs(z, li->now, li->limit, li->usage, sum, in);
    int zone = pressure_zone_inside(z, li->now, li->ratio, in);
    uint64_t threshold = zone && li->width_ns > 0 ? group_act_threshold(in) : 0;
    /* The zone's hold (below it, not ahead, within PZ_ZONE_HOLD_NS of it): a member's own
     * burst rule skips its cost rules there and trims TrimReleasableTriggerBytes; the grant
     * lets it do that at once, in its slot, and while its leader cannot answer. */
    if (zone && li->width_ns > 0 && threshold == 0)
        threshold = in->burst_bytes;
    /* The line (the decision's): the usage that a member's own reading of the cgroup
     * compares (line_bytes; none when the usage is the members' sum). */
    int64_t line = in->limit > 0 && in->ratio > 0 ? (int64_t)((double)in->limit * in->ratio) : 0;
    out->zone = zone;
    out->threshold = threshold;
    out->at_line = line > 0 && in->usage >= line;
    out->line_bytes = li->usage >= 0 ? line : 0;
    out->news = pressure_zone_news(z, zone, threshold, li->width_ns, out->at_line, li->now,
                                   in->min_releasable, li->members_gen);
    out->pick = group_pressure_pick(in, c, n, &out->rule);
    out->guess = out->pick >= 0 && !(c[out->pick].estimate_fresh &&
                                     c[out->pick].releasable >= in->min_releasable);
    if (out->pick >= 0)
        pressure_zone_trimmed(z); /* growth counts again from the low after this trim */
}
