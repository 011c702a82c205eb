/*
 * cost.h - what trimming costs the host, and the rules that bound it, as
 * pure functions on small state structs (no clocks read, no locks, no
 * files: the caller passes the readings and the time). The housekeeper owns
 * one of each and calls them from its thread only:
 *   - re-faults: after a trim, the host's minor faults over the following
 *     seconds bound the bytes that came straight back;
 *   - the adaptive gap: when most of what periodic or burst trims release
 *     comes back, their gaps lengthen (bounded), and reset when it stops;
 *   - the host's CPU share over the last ticks, and the deferral of
 *     periodic and burst trims while it is busy, up to a bound;
 *   - the trim budget: periodic and burst trims together take at most a
 *     share of wall time (a duty cycle, like the probe budget).
 * Pressure and manual trims are never held back by any of these.
 */
#ifndef MEMTRIM_COST_H
#define MEMTRIM_COST_H

#include <stdint.h>
#include "types.h"

/* What the cost gate (cost_hk.c) answers a periodic or burst trim; policy.c reads it. */
enum cost_gate {
    COST_GATE_RUN = 0, /* run the trim now */
    COST_GATE_WAIT,    /* the host is busy: keep the trim due, ask again next tick */
    COST_GATE_SKIP,    /* the budget is spent: skip it (counted) */
};

/* ---- re-faults ----------------------------------------------------------- */

/* The window open after one trim. */
struct cost_refault {
    int open;
    int64_t id, start_ms; /* the trim's */
    int trigger;
    int64_t released;     /* bytes it released (RSS before - after) */
    uint64_t minflt0;     /* the process's minor faults right after it */
    uint64_t own_minflt0; /* the caller's own thread's, to leave out */
    uint64_t rss0, rss_peak;
    int64_t opened_ns;
    int64_t ended_ns; /* the trim's end on the same clock (the caller sets it; <= opened_ns) */
    int gap_decided; /* the adaptive gap has already taken this trim into account */
};

/* Open a window for trim r (its minflt_after and rss_after are the baseline). */
void cost_refault_open(struct cost_refault *w, const struct mt_trim_result *r,
                       uint64_t own_minflt, int64_t now_ns);

/* Note an RSS reading taken while the window is open. */
void cost_refault_observe(struct cost_refault *w, uint64_t rss);

/* Whether the window has lasted window_ns. */
int cost_refault_due(const struct cost_refault *w, int64_t now_ns, int64_t window_ns);

/*
 * The upper bound of the released bytes that came back by now: the minor
 * faults since the trim (the caller's own left out) times the page size, or
 * the RSS growth when larger (one fault can map a huge page), never more
 * than the trim released. 0 when it released nothing.
 */
int64_t cost_refault_bytes(const struct cost_refault *w, uint64_t minflt, uint64_t own_minflt,
                           long page_size);

/*
 * Whether the release came back "at once": refaulted (cost_refault_bytes) and
 * the RSS growth seen since the trim (cost_refault_observe) are each more than
 * half of it, by at_once_ns after the trim's end. Memory a host re-uses that fast
 * was never free for anyone else.
 */
int cost_back_at_once(const struct cost_refault *w, int64_t refaulted, int64_t now_ns,
                      int64_t at_once_ns);
/* How long after the trim's end (now_ns - ended_ns) the release is read back, both
 * figures more than half of it as above; -1 when it is not (yet) back. */
int64_t cost_back_after(const struct cost_refault *w, int64_t refaulted, int64_t now_ns);

/* ---- the adaptive gap ----------------------------------------------------- */

struct cost_gap {
    int shift; /* the gaps are multiplied by 2^shift */
};

/*
 * A periodic or burst trim's window closed: released bytes, of which
 * refaulted came back. When more than half came back the gap doubles, up to
 * max_factor; when less, it resets to 1. A release below min_bytes says
 * nothing either way. Returns the factor now in force.
 */
double cost_gap_update(struct cost_gap *g, int64_t released, int64_t refaulted, int64_t min_bytes,
                       double max_factor);
double cost_gap_factor(const struct cost_gap *g, double max_factor);
/* Memory that came back at once: the gap goes straight to max_factor. Returns it. */
double cost_gap_saturate(struct cost_gap *g, double max_factor);

/* ---- the host's CPU share -------------------------------------------------- */

#define COST_CPU_TICKS 2 /* the share is over the last 2 ticks (0.5 s at 250 ms) */

struct cost_cpu {
    int64_t wall[COST_CPU_TICKS + 1];
    int64_t cpu[COST_CPU_TICKS + 1];
    unsigned head, n;
};

/* One tick's reading: the monotonic time and the host's CPU time (memtrim's own left out). */
void cost_cpu_push(struct cost_cpu *c, int64_t wall_ns, int64_t host_cpu_ns);

/* The host's CPU time over the window as a share of ncpu processors, 0..1; -1 unknown. */
double cost_cpu_share(const struct cost_cpu *c, double ncpu);

/* A quiet host (share of ncpu, as above): under quiet_cpus processors' worth and under
 * the same share of what it may use (a host capped at 0.2 CPU is not quiet at 0.2). */
int cost_host_quiet(double share, double ncpu, double quiet_cpus);

/* ---- deferral while the host is busy --------------------------------------- */

struct cost_defer {
    int64_t since; /* when the waiting trim was first held back; 0 = none waits */
};

enum cost_defer_verdict {
    COST_DEFER_RUN = 0, /* run now: the host is not busy, or the bound has passed */
    COST_DEFER_START,   /* hold it back; a new deferral (count it) */
    COST_DEFER_WAIT,    /* still holding it back */
};

/* A periodic or burst trim wants to run at now_ns; busy says the host is busy. */
int cost_defer_check(struct cost_defer *d, int busy, int64_t now_ns, int64_t max_ns);
/* No trim waits any more (it ran, or is no longer wanted). */
void cost_defer_clear(struct cost_defer *d);

/* ---- the trim budget -------------------------------------------------------- */

struct cost_budget {
    int64_t next_ns;   /* the next charged trim may start then */
    int skip_counted;  /* a skip was counted since the last charge */
};

int cost_budget_allows(const struct cost_budget *b, int64_t now_ns);
/*
 * A charged trim ended at end_ns and took duration_ns: the next may start
 * duration * 100 / percent later, so charged trims take less than percent
 * of wall time (percent >= 100: no limit).
 */
void cost_budget_charge(struct cost_budget *b, int64_t end_ns, int64_t duration_ns,
                        double percent);

#endif /* MEMTRIM_COST_H */
