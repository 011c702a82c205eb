/*
 * decision.h - the pressure engine's decisions, as pure functions (decision.c): a process's
 * own on one reading (RSS, the limit, the cgroup's charge, memory.events, the last heap
 * estimate, now) and a small state struct, and the decision over a set of members (which
 * member trims next). No clock, no probe, no lock, so the unit tests drive them on
 * synthetic readings (tests/unit/test_pressure.c, test_group.c). The pressure thread
 * (engine.c) takes a process's readings, asks pressure_decide, runs the trim and reports
 * its outcome to pressure_after_trim; a set's caller keeps its zone (zone.h).
 */
#ifndef MEMTRIM_DECISION_H
#define MEMTRIM_DECISION_H

#include <stdint.h>

struct group_pressure_in;
struct group_candidate;
struct pressure_pace;

/* ---- a process's decision (decision.c; tests/unit/test_pressure.c) ---- */

struct pressure_input {
    int64_t now_ns;          /* monotonic */
    uint64_t rss;            /* bytes, from statm */
    int64_t limit;           /* effective memory limit, <= 0 none */
    double ratio;            /* PressureRatio */
    uint64_t min_releasable; /* TrimMinReleasableBytes */
    uint64_t estimate;       /* releasable estimate of the last heap reading */
    int estimate_known;      /* a heap reading exists */
    int64_t estimate_ns;     /* monotonic time of that reading */
    /* The cgroup, when its limit is the one in force (no MemoryLimitBytes): what
     * the kernel charges it (memory.current, fresh) and of that the page cache
     * (memory.stat file, shmem: the last reading); -1 unknown. */
    int64_t cg_current;
    int64_t cg_file;
    int64_t cg_shmem;
    int last_chance;         /* a new memory.events max/oom/oom_kill since the last reading */
};

enum pressure_rule {
    PRESSURE_RULE_GROWTH = 0, /* RSS grew by a step inside the zone */
    PRESSURE_RULE_LINE,       /* RSS at PressureRatio of the limit */
    PRESSURE_RULE_ESTIMATE,   /* free-but-resident heap would take it there */
    PRESSURE_RULE_LAST_CHANCE, /* the kernel hit the limit (memory.events): at once */
};

struct pressure_state {
    uint64_t base_rss;    /* RSS low-water mark since the last pressure trim; 0 = unset */
    int64_t last_trim_ns; /* monotonic start of the last pressure trim */
    int futile;           /* growth trims in a row that released too little */
    int futile_timed;     /* line and estimate trims in a row that released too little */
    int rule;             /* with PRESSURE_TRIM: enum pressure_rule that fired */
    int zone;             /* the last reading was inside the zone */
    int64_t due_ns;       /* with PRESSURE_TRIM: since when the rule that fired held
                           * by its timing (back-off ended, estimate read); 0 growth */
    int trimmed;          /* a pressure trim ran (last_trim_ns is real) */
    uint64_t line;        /* the line at the last reading inside the zone */
    /* What the last pressure trim bought (pressure_judge_last): its release and the RSS it
     * left, judged at the next trim's start; and the trims in a row whose release came
     * back before the next one (the growth rule's back-off below the line). */
    uint64_t last_released; /* 0: nothing to judge (none yet, or it found too little) */
    uint64_t last_rss_after;
    uint64_t regrown;       /* the largest climb a reading saw since then (from the lowest
                             * reading before it): what came back, even if a trim of
                             * another trigger took it again before the next judgement */
    int returned;
};

enum pressure_verdict {
    PRESSURE_OUTSIDE = 0, /* below the zone: the slow pace */
    PRESSURE_WATCH,       /* inside the zone, no trim due */
    PRESSURE_TRIM,        /* trim now */
};

/* The zone's floor: half the limit, or the pressure line if that is lower. */
uint64_t pressure_zone_floor(int64_t limit, double ratio);

/* What the limit sees that the kernel cannot take back by itself: RSS, or the
 * cgroup's charge less its page cache when that is more (other processes,
 * kernel memory); never memory.current alone, which counts cache the kernel
 * reclaims on its own before any OOM. */
uint64_t pressure_charge(const struct pressure_input *in);

/* Whether a last-chance trim can find anything: never trimmed, grown since the
 * last trim, or a heap reading since then that holds TrimMinReleasableBytes. */
int pressure_heap_may_hold(const struct pressure_input *in, const struct pressure_state *st);

/* Decide on one reading; updates st (zone, base_rss). The decision is group_pressure_pick's
 * over the set of one member that is this process (pressure_as_set): one rule table for a
 * process, a group and a node; this keeps the process's pace and its reaction's due time. */
int pressure_decide(const struct pressure_input *in, struct pressure_state *st);

/* A process alone as a set of one member (itself): the set's usage is what its limit sees
 * (pressure_charge; unknown with no RSS), its one candidate the process with its heap
 * estimate (while a reading is known), its pace st's back-off. gin->pace points to pace. */
void pressure_as_set(const struct pressure_input *in, const struct pressure_state *st,
                     struct group_pressure_in *gin, struct group_candidate *c,
                     struct pressure_pace *pace);

/* When a rule that waits on time (the line, the estimate) will next allow a trim, or INT64_MAX. */
int64_t pressure_next_due(const struct pressure_input *in, const struct pressure_state *st);

/* At a pressure trim's start (RSS rss_now): how much of the last trim's release came back
 * since it ended (RSS regrown from the lowest reading before it, now or at any reading
 * pressure_decide saw since: a burst or periodic trim that took it again does not undo
 * that it came back; at most what it released), or -1 when there is none to judge
 * (none yet, or it released less than TrimMinReleasableBytes: the futile back-off's). A
 * release that more than half came back bought no headroom: st->returned counts such trims
 * in a row (the growth rule's gap below the line doubles with it); one that stayed out
 * resets it. */
int64_t pressure_judge_last(struct pressure_state *st, uint64_t rss_now);

/* The growth rule's wait after a trim now: the futile back-off, and below the line the
 * returned one (0: none). */
int64_t pressure_growth_gap(const struct pressure_input *in, const struct pressure_state *st);

/* The verdict went to the process's set (zone.h's pressure_zone_hand), at now with RSS rss:
 * the set trims it, or another member; its growth and the rules' gaps count from here. */
void pressure_handed(struct pressure_state *st, int64_t now_ns, uint64_t rss);

/* Record a pressure trim's outcome in st (futile back-off, growth base). */
void pressure_after_trim(struct pressure_state *st, int64_t start_ns, uint64_t rss_after,
                         int64_t released, uint64_t min_releasable);


/* ---- the decision over a set of members (decision.c; tests/unit/test_group.c) ---- */

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
    int grew;                /* its own reading, now, shows its RSS grew by its growth step
                              * since its last trim (a leader's engine, every 2 ms in the
                              * zone: pressure_zone_hand): the member growth rule */
};

/*
 * A set that keeps its own pace: a process alone, the set of one member that is itself
 * (pressure_as_set). Its back-off is the set's, not its member's: the futile and returned
 * waits of pressure_state, the line's repeat; its growth is its RSS over its low since its
 * last trim, by a step of limit / 20 (TrimMinReleasableBytes at least); and the kernel's
 * report of the limit reached is its last chance, whatever the zone. A group's members
 * keep their pace themselves (NULL: their candidacy, the stagger, the usage's growth).
 */
struct pressure_pace {
    int64_t since_ns;        /* since the set's last pressure trim */
    int64_t growth_gap_ns;   /* the growth rule waits this long after it */
    int64_t line_gap_ns;     /* the line rule */
    int64_t estimate_gap_ns; /* the estimate rule */
    uint64_t grown;          /* the growth counted since the last trim's low */
    uint64_t growth_step;
    int last_chance;         /* the kernel reached the limit, and the heap may hold something */
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
    int64_t retrim_ns;       /* between asks of a member that said nothing: 0 for
                              * GROUP_RETRIM_STALE_NS (outside members: outside.h) */
    const struct pressure_pace *pace; /* the set's own pace, NULL: its members' (below) */
    int last_chance;         /* the kernel reached the set's limit (memory.events max, oom:
                              * a leader's engine, pressure_zone_hand); a set with its pace
                              * says it in pace */
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
    GROUP_RULE_LAST_CHANCE, /* the kernel reached the limit (memory.events) */
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
 * leader's grant, core/group/group_leader.c); 0: no member may (below the zone and not
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
 * A set with its own pace (in->pace: a process alone, pressure_as_set) has its rules
 * timed by it: the kernel's last chance first, whatever the zone, for any member not
 * busy; growth by its grown and growth_step, before the line; the line and the estimate
 * once their gaps passed; no member's own retrim gap (the set's pace is its only one).
 * Two rules of every set carry what a member read at its own pace (a group's leader, a
 * worker itself, read by its engine every 2 ms: pressure_zone_hand): the kernel's last
 * chance (in->last_chance) is the line's rule whatever the zone (the most held first, a
 * member that said nothing after its retrim gap); and inside the zone a member that grew
 * by its growth step (c->grew) is asked, whatever its retrim gap and the stagger's wait
 * (it trims in its own process), when no rule of the set picked another first.
 */
int group_pressure_pick(const struct group_pressure_in *in, const struct group_candidate *c,
                        int n, int *rule);

#endif /* MEMTRIM_DECISION_H */
