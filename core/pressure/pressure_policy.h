/*
 * pressure_policy.h - the pressure decision as pure functions of one reading
 * (RSS, the limit, the cgroup's charge, memory.events, the last heap
 * estimate, now) and a small state struct: no
 * clock, no probe, no lock, so the unit tests drive it on synthetic readings
 * (tests/unit/test_pressure.c). The pressure thread (threads/pressure.c)
 * takes the readings, asks pressure_decide, runs the trim and reports its
 * outcome to pressure_after_trim.
 */
#ifndef MEMTRIM_PRESSURE_POLICY_H
#define MEMTRIM_PRESSURE_POLICY_H

#include <stdint.h>

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

/* Decide on one reading; updates st (zone, base_rss). */
int pressure_decide(const struct pressure_input *in, struct pressure_state *st);

/* When a rule that waits on time (the line, the estimate) will next allow a trim, or INT64_MAX. */
int64_t pressure_next_due(const struct pressure_input *in, const struct pressure_state *st);

/* At a pressure trim's start (RSS rss_now): how much of the last trim's release came back
 * since it ended (RSS regrown, at most what it released), or -1 when there is none to judge
 * (none yet, or it released less than TrimMinReleasableBytes: the futile back-off's). A
 * release that more than half came back bought no headroom: st->returned counts such trims
 * in a row (the growth rule's gap below the line doubles with it); one that stayed out
 * resets it. */
int64_t pressure_judge_last(struct pressure_state *st, uint64_t rss_now);

/* The growth rule's wait after a trim now: the futile back-off, and below the line the
 * returned one (0: none). */
int64_t pressure_growth_gap(const struct pressure_input *in, const struct pressure_state *st);

/* Record a pressure trim's outcome in st (futile back-off, growth base). */
void pressure_after_trim(struct pressure_state *st, int64_t start_ns, uint64_t rss_after,
                         int64_t released, uint64_t min_releasable);


#endif /* MEMTRIM_PRESSURE_POLICY_H */
