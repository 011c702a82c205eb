/*
 * group_policy.h - the pressure decision over a set of members (group_policy.c): the
 * set's zone (struct pressure_zone: its readings of the usage and the limit, whether it
 * is inside, what the members were last told), and which member trims next. A member is
 * a way to trim one process (a worker group's, through its channel; the leader itself).
 * No locks, no threads: the caller keeps the zone under its own lock (the group thread,
 * core/group/group_pressure.c, under g->lock) and hands it the readings.
 */
#ifndef MEMTRIM_GROUP_POLICY_H
#define MEMTRIM_GROUP_POLICY_H

#include <stdint.h>

/* ---- the pressure decision (pure; group_policy.c; tests/unit/test_group.c) ---- */

struct group_candidate {
    uint64_t releasable;     /* the member's last releasable estimate (0 when unknown) */
    int estimate_fresh;      /* that estimate was read after the member's last group trim
                              * and is younger than GROUP_ESTIMATE_STALE_NS */
    int estimate_after_trim; /* it was read after the member's last group trim (maybe old) */
    uint64_t rss;            /* its last RSS */
    uint64_t rss_since_estimate; /* what its RSS grew by since the heap reading of that estimate
                              * (freed since, or live: not known until the next reading) */
    uint64_t rss_after_trim; /* its RSS right after its last trim (any), 0 none yet */
    int64_t last_trim_ns;    /* monotonic start of its last group pressure trim, 0 none */
    int busy;                /* a group request to it is in flight */
};

struct group_pressure_in {
    int64_t now_ns;
    int64_t usage;           /* the cgroup's usage, or the sum of the members' RSS; < 0 unknown */
    int64_t base_usage;      /* its low-water mark since the last group trim (growth rule) */
    int64_t limit;           /* the effective limit, <= 0 none */
    double ratio;            /* PressureRatio */
    uint64_t min_releasable; /* TrimMinReleasableBytes */
    uint64_t burst_bytes;    /* TrimReleasableTriggerBytes: inside the zone, a member holding
                              * this much free trims at once (its own burst rule would, but
                              * for its cost rules) */
    uint64_t rise;           /* the usage's largest recent climb (group_rise), 0 none */
    uint64_t kept;           /* the usage were every member at its recent peak RSS (what it
                              * would hold had nobody trimmed it since), 0 unknown */
};

#define GROUP_ESTIMATE_STALE_NS (1000LL * 1000 * 1000) /* 1 s */
#define GROUP_RETRIM_STALE_NS (50LL * 1000 * 1000) /* between asks of one that said nothing */
#define GROUP_GROWTH_MIN (8LL << 20)             /* the growth step: limit / 32, at least 8 MiB */

enum group_rule {
    GROUP_RULE_NONE = 0,
    GROUP_RULE_LINE,     /* usage at PressureRatio of the limit: biggest first, whatever they said */
    GROUP_RULE_ESTIMATE, /* inside the zone, the members hold free more than the headroom */
    GROUP_RULE_GROWTH,   /* inside the zone, the usage grew by a step since the last trim */
    GROUP_RULE_AHEAD,    /* the usage's last climb, again from here, would reach the zone */
};

/*
 * The usage's largest climb over the last GROUP_RISE_WINDOW_NS: for each reading,
 * how far it lies above the lowest reading of the window before it, and the
 * largest of those within the window (two monotonic queues: O(1) a reading,
 * amortized; a full queue forgets its oldest entry). A worker's study shows as
 * a climb of its size; studies that overlap, as one climb of their sum.
 */
#define GROUP_RISE_WINDOW_NS (2LL * 1000 * 1000 * 1000) /* 2 s */
#define GROUP_RISE_SLOTS 1024

struct group_rise_q {
    int64_t t[GROUP_RISE_SLOTS], v[GROUP_RISE_SLOTS];
    int head, n;
};

struct group_rise {
    struct group_rise_q low;   /* the usage, increasing: its front is the window's lowest */
    struct group_rise_q climb; /* the climbs, decreasing: its front is the largest */
};

/* One reading of the usage (bytes, >= 0) at now (monotonic ns). */
void group_rise_note(struct group_rise *r, int64_t now, int64_t usage);

/* The largest climb whose reading lies within the window before now; 0 none. */
uint64_t group_rise(struct group_rise *r, int64_t now);

/*
 * Would the usage's recent climb, repeated from the usage now, reach the zone? (Inside
 * the zone, after such a climb, it would.) Only a climb of a growth step or more counts:
 * a server that sits still, or drifts, never is "ahead". Nor is a group whose members,
 * each at its recent peak RSS, would stay below the zone (in->kept): there a worker that
 * kept what it freed would reuse it for its next study, the usage would not climb
 * again, and trimming it ahead would only make the next study fault its pages back in
 * (2 workers of 80 MB under 400 MB: trimmed, each study climbs anew, and the climbs would
 * keep the group "ahead" for ever). Inside the zone (where in->kept, at least the usage,
 * is always there) the members at their peaks must reach the line instead: a worker
 * whose 20 MB requests reuse what it freed, beside another's 120 MB under 256 MB, would
 * else be trimmed after every request, each one's refault a climb of a growth step.
 */
int group_ahead(const struct group_pressure_in *in);

/*
 * in->kept from the usage, the members' RSS now and their recent peaks, each summed:
 * the peaks less what the RSS sum exceeds the usage by (pages that forked workers
 * share with their master, files mapped in each: counted once in every member's
 * RSS, once in the usage), and at least the usage. A member's report that lags the
 * usage mid-study makes that excess smaller: then it is the peaks summed. 0 when the
 * usage is unknown (< 0).
 */
uint64_t group_kept(int64_t usage, uint64_t rss_sum, uint64_t peak_sum);

/* The growth rule's step for a limit. */
int64_t group_growth_step(int64_t limit);

/*
 * What a member must hold free to trim on its own now, without the leader's request (the
 * leader's grant, core/group/group_pressure.c); 0: no member may (below the zone and not
 * ahead of it). The rules of group_pressure_pick for one member alone: at the line or
 * ahead of the next climb, TrimMinReleasableBytes (in->min_releasable); inside the zone
 * below the line, the headroom to the line or burst_bytes, whichever is less (what one
 * member holding it would be picked for), and TrimMinReleasableBytes at least.
 */
uint64_t group_act_threshold(const struct group_pressure_in *in);

/*
 * Which member trims next: the index into c[0..n), or -1 (none due); *rule
 * says why. Outside the zone (half the limit, or the line if lower) nothing.
 * Inside it: at the line, or when the usage grew by group_growth_step since
 * the last group trim, the candidate with the largest estimate (a member
 * that has said nothing since its last trim may hold what it freed since:
 * it counts when its RSS grew by TrimMinReleasableBytes since its last trim,
 * by that growth); below the line without growth, only when the fresh
 * estimates add up to more than the headroom to the line, or one member holds
 * burst_bytes free. A fresh estimate is no proof that a member holds little
 * when its RSS grew by TrimMinReleasableBytes since that reading (a worker's
 * study read mid-way, freed since; its heap readings spaced out by the probe
 * budget): at the line or after growth it counts, estimate plus that growth,
 * as a member that said nothing. A member trimmed by
 * the group is asked again once a fresh estimate shows it holds
 * TrimMinReleasableBytes, or once its estimate is stale (older than its
 * last trim or than GROUP_ESTIMATE_STALE_NS) and its RSS grew as said
 * (GROUP_RETRIM_STALE_NS apart at least).
 * Ahead of the zone (group_ahead: the usage's last climb, repeated from here,
 * would reach the zone), below the zone too: the member holding the most free
 * by a fresh estimate of TrimMinReleasableBytes or more trims at once, so that
 * a worker's freed study is given back before the next worker's climb needs
 * it, as `malloc_trim` after every study would, and not only once that climb
 * has brought the usage into the zone (measured: 50-60 ms later).
 * The caller runs one at a time (staggered).
 */
int group_pressure_pick(const struct group_pressure_in *in, const struct group_candidate *c,
                        int n, int *rule);

/* ---- the set's zone (group_policy.c; kept by its caller) ---- */

#define PZ_USAGE_MOVED_BYTES (1LL << 20)
#define PZ_ZONE_HOLD_NS (5LL * 1000 * 1000 * 1000) /* inside the zone this long after the usage left it */
/* A grant to trim alone lasts its lease from its sending (core/group: ACT_LEASE_NS); it is
 * sent again every PZ_ACT_RENEW_NS while it stands, and when its threshold moved by
 * TrimMinReleasableBytes (PZ_ACT_RESEND_NS apart at least) or the members changed. */
#define PZ_ACT_RENEW_NS (500LL * 1000 * 1000)
#define PZ_ACT_RESEND_NS (50LL * 1000 * 1000)

struct pressure_zone {
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
};

/* The members' sums a look reads (RSS now, at their recent peaks, after their trims). */
struct pressure_sums {
    int64_t rss, peak, now;
};

void pressure_zone_init(struct pressure_zone *z);
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

/* ---- the stagger (group_policy.c) ---- */

/*
 * The members' own trims inside the zone take turns: slots of width_ns from epoch_ns,
 * slot k of every `slots` for member k, granted until until_ns (the leader's grant).
 * A member's window around now: the slot it is in, or its next one; closed at the
 * grant's end. The caller checked the grant (slots >= 1, 0 <= slot < slots, width_ns > 0,
 * epoch_ns >= 0: core/group/group_member.c's grant_ok).
 */
struct pressure_slots {
    int64_t epoch_ns, width_ns, until_ns;
    int slot, slots;
};
void pressure_slot_window(const struct pressure_slots *sl, int64_t now, int64_t *open,
                          int64_t *close);
/*
 * The window a member's own trim may start in: its slot (pressure_slot_window), or now
 * until the grant ends when the set is at its line (surviving the limit comes before not
 * stalling the node together) or when it missed the slot it waited for (waited_at, 0
 * none: only a whole slot's width after it was that slot surely missed; a new grant that
 * moved its slot meanwhile is no missed slot). moved_is_missed: a control's old rule.
 */
void pressure_slot_take(const struct pressure_slots *sl, int64_t now, int at_line,
                        int64_t waited_at, int moved_is_missed, int64_t *open, int64_t *close);

#endif /* MEMTRIM_GROUP_POLICY_H */
