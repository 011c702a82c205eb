/*
 * trim.h - the trim service: one malloc_trim at a time, each one measured,
 * concurrent manual requests coalesced onto the running trim, manual rate
 * limit; each result goes to a sink (the store's queue, core/threads/store.c).
 * trim_request is the one path of every trigger (manual, periodic, burst,
 * pressure): what each obeys (a suspended host, a running trim, the rate
 * limit) and how its refusals are counted is a row of data in trim.c. Any
 * thread may call; the service's mutex guards its state, is never held
 * across malloc_trim, and is held while the sink runs (the sink takes only
 * its own short lock).
 */
#ifndef MEMTRIM_TRIM_H
#define MEMTRIM_TRIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "snapshot.h"
#include "stall.h"
#include "types.h"

#define TRIM_RECENT 128

struct trim_service {
    pthread_mutex_t lock;
    pthread_cond_t done;
    int running;
    int running_obeys; /* the running trim obeys the host's suspend (TRIM_OBEYS_SUSPEND) */
    uint64_t generation; /* bumped when a trim finishes */
    struct mt_trim_result last;
    int64_t next_id;
    int64_t last_manual_mono_ns; /* end of the last manual request that ran or
                                  * shared a trim; 0 = none */
    unsigned waiting; /* callers waiting for the running trim (its result, or trim_hold) */
    /* counters */
    uint64_t trims[MT_TRIGGER_COUNT];
    uint64_t released[MT_TRIGGER_COUNT];
    uint64_t hist[MT_HIST_BUCKETS + 1];
    double seconds_sum;
    uint64_t coalesced, rate_limited;
    uint64_t skips[MT_SKIP_COUNT]; /* trims the policy or the pressure path did not run */
    /* what trims cost (cost.c): wall time by trigger, re-faults once known */
    double seconds[MT_TRIGGER_COUNT];
    uint64_t refaulted[MT_TRIGGER_COUNT], refault_windows[MT_TRIGGER_COUNT];
    /* the host stall the canary measured (stall.h), by trigger: trims measured, the sum
     * and the longest of their longest waits */
    uint64_t stall_trims[MT_TRIGGER_COUNT];
    double stall_sum[MT_TRIGGER_COUNT], stall_max[MT_TRIGGER_COUNT];
    /* under lock (trim_set_stall): the canary timing each release (NULL: none); a trim
     * reads it as it starts, so it may be cleared only when no trim can run */
    struct stall_canary *stall;
    /* the last TRIM_RECENT results, for the doctor (a ring, oldest at recent_head) */
    struct mt_trim_result recent[TRIM_RECENT];
    unsigned recent_head, recent_count;
    /* where each result and each re-fault figure goes, in order (NULL: nowhere):
     * the store's queue in an instance; read under lock (set them before trims run,
     * or under the lock) */
    void (*sink)(void *arg, const struct mt_trim_result *r);
    void (*refault_sink)(void *arg, const struct mt_refault *rf);
    void *sink_arg;
    /* the last per-arena reading's pinned sums for a trim that released under a page
     * (0, or negative when there is none or it is busy): a cache, never malloc_info;
     * called with no lock held; NULL: none */
    int (*pinned)(void *arg, struct mt_arenas_pinned *out);
    /* trim_request's: set before trims run, then read-only */
    void (*sink_wake)(void *arg);    /* hand what the sink holds on now (NULL: none) */
    const atomic_int *suspend_depth; /* > 0: the host holds trims off (NULL: never) */
    int64_t last_skip_ns[MT_TRIGGER_COUNT][MT_SKIP_COUNT]; /* under lock: a refusal's last count */
};

int trim_service_init(struct trim_service *ts);
void trim_service_destroy(struct trim_service *ts);

/* The next trim id will be above max_id (the store's largest, read when it opens). */
void trim_ids_above(struct trim_service *ts, int64_t max_id);

enum trim_mode {
    TRIM_WAIT_IF_BUSY = 1,     /* coalesce onto a running trim (manual requests) */
    TRIM_OBEYS_SUSPEND = 2,    /* refused (-EPERM) while *suspend_depth > 0, checked under
                                * the lock that starts the trim (see trim_hold) */
};

/*
 * Trim now. min_interval_ms >= 0 applies the manual rate limit: between
 * requests, whether they ran a trim or shared one (a request refused 429 does
 * not move it). Returns 0
 * with *out filled (out->coalesced when another trim's result was shared),
 * -EAGAIN when rate-limited (*retry_after_ms set), or -EBUSY when a trim is
 * running and flags lacks TRIM_WAIT_IF_BUSY.
 */
int trim_run(struct trim_service *ts, struct snapshot_cache *sc, int trigger, uint64_t pad,
             int64_t min_interval_ms, int flags, struct mt_trim_result *out,
             int64_t *retry_after_ms);

/* The same, for a trim with a cause: crossing_ns (monotonic) is when the cause
 * arose, and the result's reaction_ns says how long after it malloc_trim began. */
int trim_run_at(struct trim_service *ts, struct snapshot_cache *sc, int trigger, uint64_t pad,
                int64_t min_interval_ms, int flags, int64_t crossing_ns,
                struct mt_trim_result *out, int64_t *retry_after_ms);

/*
 * Why a trim released under a page (enum mt_nothing; MT_NOTHING_NONE when it did
 * not), from its own readings and p, the last per-arena reading (NULL: none). Pure.
 */
int trim_nothing_reason(const struct mt_trim_result *r, const struct mt_arenas_pinned *p,
                        uint64_t page);

/* Who asks (trim_ask.group): the row of the rule table a trigger's trim obeys (trim.c). */
enum trim_asker {
    TRIM_ASK_HOST = 0,   /* this process's own triggers */
    TRIM_ASK_GROUP = 1,  /* a worker group's leader: a member on its request, its own pressure */
    TRIM_ASK_MEMBER = 2, /* a group's member on its own inside the group's zone (pressure
                          * only): only inside the slot its leader gave it */
};

/* What a trigger asks of trim_request. */
struct trim_ask {
    int trigger;             /* enum mt_trigger */
    uint64_t pad;            /* malloc_trim's pad */
    int64_t min_interval_ms; /* the rate limit of a trigger that has one (ManualTrimMinIntervalMs) */
    int64_t crossing_ns;     /* a pressure trim's cause (monotonic; 0 none): its reaction time */
    int group;               /* enum trim_asker: the row (trim.c) */
    int64_t open_ns, close_ns; /* TRIM_ASK_MEMBER: it may start in [open, close) (monotonic) */
};

/*
 * The one trim path of every trigger, by the trigger's rule (trim.c): a trigger
 * that obeys the host's suspend is refused while suspended (-EPERM), one that
 * does not wait for a running trim is refused while one runs (-EBUSY), a rate
 * limited one inside its interval (-EAGAIN, *retry_after_ms); the refusals
 * counted as skips (MT_SKIP_SUSPENDED, MT_SKIP_BUSY) at most as often as the rule
 * says; a slotted one (a group member's own) outside its window (-EAGAIN, counted as
 * MT_SKIP_STAGGER, *retry_after_ms until it opens, -1 when it has closed). 0 with *out when it ran or shared a trim; the sink is woken after the
 * triggers whose results should be stored at once.
 */
int trim_request(struct trim_service *ts, struct snapshot_cache *sc, const struct trim_ask *ask,
                 struct mt_trim_result *out, int64_t *retry_after_ms);

/*
 * The manual rate limit of a request made of several trims (a worker group's, whose
 * members trim in their own processes): 0 admitted (the interval starts again), or
 * -EAGAIN with *retry_after_ms (counted as rate limited). trim_manual_done: the
 * request ended, and the next interval counts from now. trim_count_rate_limited: a
 * request refused for a reason of the caller's (a group trim still running).
 */
int trim_manual_admit(struct trim_service *ts, int64_t min_interval_ms, int64_t *retry_after_ms);
void trim_manual_done(struct trim_service *ts);
void trim_count_rate_limited(struct trim_service *ts);

/*
 * The host has just raised its suspend depth: return once no trim that obeys
 * it is running (at most one trim's duration). The suspend check and the
 * start of a trim are one step under ts->lock, so after this no such trim runs
 * until the host resumes.
 */
void trim_hold(struct trim_service *ts);

/* Count a trim that was not run, by reason (enum mt_skip_reason). */
void trim_count_skip(struct trim_service *ts, int reason);

/* A trim's re-fault window closed: count it and hand the figure to the refault sink. */
void trim_refault_done(struct trim_service *ts, const struct mt_refault *rf);

/*
 * The last trim, when another finished since *generation (which is updated):
 * 1 with *out filled, else 0. Trims closer together than the caller's polls
 * show only the last.
 */
int trim_last(struct trim_service *ts, uint64_t *generation, struct mt_trim_result *out);

/* Fill the trim counters of *out (skips included). */
void trim_counters(struct trim_service *ts, struct mt_counters *out);
/* The stall canary of the trims that start from now on (NULL: none; stall.h). */
void trim_set_stall(struct trim_service *ts, struct stall_canary *c);

/* Copy up to max of the most recent results into buf, oldest first; returns how many. */
unsigned trim_recent(struct trim_service *ts, struct mt_trim_result *buf, unsigned max);

#endif /* MEMTRIM_TRIM_H */
