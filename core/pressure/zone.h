/*
 * zone.h - the set's zone (zone.c): its readings of the usage and the limit, whether it is
 * inside, what the members were last told. No locks, no threads: the caller keeps the zone
 * under its own lock (the group thread, core/group, under g->lock) and hands it the readings.
 */
#ifndef MEMTRIM_ZONE_H
#define MEMTRIM_ZONE_H

#include <stdint.h>

#include "decision.h"


#define PZ_USAGE_MOVED_BYTES (1LL << 20)
#define PZ_ZONE_HOLD_NS (5LL * 1000 * 1000 * 1000) /* inside the zone this long after the usage left it */
/* A grant to trim alone lasts its lease from its sending (core/group: ACT_LEASE_NS); it is
 * sent again every PZ_ACT_RENEW_NS while it stands, and when its threshold moved by
 * TrimMinReleasableBytes (PZ_ACT_RESEND_NS apart at least) or the members changed. */
#define PZ_ACT_RENEW_NS (500LL * 1000 * 1000)
#define PZ_ACT_RESEND_NS (50LL * 1000 * 1000)

struct pressure_zone {
    int own;                          /* this process's charge in its zone (the engine's
                                       * thread's last reading; pressure_zone_init keeps it) */
    int64_t usage, limit, base_usage; /* base: the low-water mark since the last trim */
    const char *usage_source;         /* "cgroup", "members" (their RSS summed), "none" */
    int64_t zone_seen_ns;             /* the usage was last inside the zone then */
    int64_t moved_usage;              /* the usage when it last moved by PZ_USAGE_MOVED_BYTES */
    int64_t moving_until_ns;          /* the zone's tick until then (the usage climbs) */
    struct group_rise rise;           /* the usage's recent climbs (group_ahead) */
    int zone;                         /* inside (or ahead of, or holding) the zone */
    int act;                          /* members may trim alone (the grant was sent) */
    int act_line;                     /* ...at once, the set at its line */
    uint64_t act_threshold;           /* ...holding this much free (the last grant's) */
    int64_t act_sent_ns, act_width_ns; /* the last grant went out then, with this slot width */
    uint64_t act_gen;                 /* the members' count of changes at the last grant */
    /* The leader's engine and its set (pressure_zone_hand): the last look saw other
     * members; what the engine handed to the next look (cleared by it). */
    int others;
    int handed_grew, handed_last_chance;
    uint64_t handed_rss;
};

/* The members' sums a look reads (RSS now, at their recent peaks, after their trims). */
struct pressure_sums {
    int64_t rss, peak, now;
};

void pressure_zone_init(struct pressure_zone *z); /* the set's part anew (own stays) */
/* A look's readings into in (limit: the configured one, or the one found; usage: the
 * cgroup's, < 0 unknown: the members' RSS summed), and the usage's moves. */
void pressure_zone_inputs(struct pressure_zone *z, int64_t now, int64_t limit, int64_t usage,
                          const struct pressure_sums *sum, struct group_pressure_in *in);
/* Whether the members keep the zone's pace now: inside the zone (PressureRatio), ahead of
 * it (group_ahead), or within PZ_ZONE_HOLD_NS of it. */
int pressure_zone_inside(struct pressure_zone *z, int64_t now, double ratio,
                         const struct group_pressure_in *in);
/* Whether the members must hear of the zone again (it began or ended, the grant came or
 * went, the line was reached or left, or the grant is due again). */
int pressure_zone_news(const struct pressure_zone *z, int zone, uint64_t threshold,
                       int64_t width_ns, int at_line, int64_t now, uint64_t min,
                       uint64_t members_gen);
/* The members were told: the zone and the grant as sent. */
void pressure_zone_told(struct pressure_zone *z, int zone, int act, int at_line,
                        uint64_t threshold, int64_t width_ns, int64_t now, uint64_t members_gen);
/* A member was picked to trim: growth counts again from the low after this trim. */
void pressure_zone_trimmed(struct pressure_zone *z);

/* One look at a set (its caller's, under the caller's lock): its readings, the limit (the
 * configured one, or the one found), the usage (the cgroup's, < 0 unknown: the members'
 * RSS summed), the rules' settings, the stagger's slot width (GroupTrimSlotMs), and the
 * members' count of changes. */
struct pressure_look_in {
    int64_t now, limit, usage;
    double ratio;               /* PressureRatio */
    uint64_t min_releasable;    /* TrimMinReleasableBytes */
    uint64_t burst_bytes;       /* TrimReleasableTriggerBytes */
    int64_t width_ns;           /* the stagger's slot width, 0: members trim only when asked */
    uint64_t members_gen;
    int self;                   /* 1: c[0] is the process whose engine this is (a leader) */
};

/* What the look decided. */
struct pressure_look {
    struct group_pressure_in in; /* the decision's input as read */
    int zone;                    /* the members keep the zone's pace (pressure_zone_inside) */
    uint64_t threshold;          /* the grant: what a member must hold free to trim alone, 0 none */
    int at_line;                 /* the usage at the line */
    int64_t line_bytes;          /* the line a member's own reading of the cgroup compares
                                  * (0: the usage is the members' sum, no cgroup's) */
    int news;                    /* the members must hear of the zone (pressure_zone_news) */
    int pick, rule;              /* the candidate that trims next (-1 none), and why */
    int guess;                   /* ...picked on no fresh estimate of TrimMinReleasableBytes */
};

/* Look at the set: the readings into the zone, whether the members keep its pace, the
 * grant, the line, whether they must hear of it, and the member to trim (the zone counts
 * its growth from the low after that trim). */
void pressure_zone_look(struct pressure_zone *z, const struct pressure_look_in *li,
                        struct group_candidate *c, int n, const struct pressure_sums *sum,
                        struct pressure_look *out);

/*
 * The engine's verdict on its own process (decision.h's pressure_decide, rule its enum
 * pressure_rule, rss the reading) while that process leads a set with other members: the
 * set decides, the process is one member of it (issue 38: one decision per wake-up). 1:
 * handed to the set's next look (the engine wakes it and trims nothing itself); its growth
 * is that member's own growth (c->grew, its RSS as read now), the kernel's last chance the
 * set's (in->last_chance). 0: no other member: the engine trims its process itself.
 */
int pressure_zone_hand(struct pressure_zone *z, int rule, uint64_t rss);

#endif /* MEMTRIM_ZONE_H */
