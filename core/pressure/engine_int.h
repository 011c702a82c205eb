/*
 * engine_int.h - private to core/pressure: the pressure engine's state (struct
 * pressure), shared by its thread (engine.c) and its kernel sources (kernel.c).
 * Threads: "memtrim-press" owns all of it but what p->lock guards.
 * Locks: p->lock guards p->stop, p->stats, the zone and the kernel listener (held only to
 * copy or bump them, across a look at the set (pure) and across the listener's call, which
 * takes no lock of ours: a leaf; the group thread takes it under g->lock).
 */
#ifndef MEMTRIM_ENGINE_INT_H
#define MEMTRIM_ENGINE_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdint.h>

#include "common.h"
#include "fdid.h"
#include "mt_alloc.h"
#include "pressure.h"
#include "snapshot.h"
#include "trim.h"

#define WAKE_LOST_NS (50 * MT_MS)      /* the longest sleep once the host took the wake fd */

struct pressure {
    struct pressure_deps deps; /* what it uses (pressure_create); read-only */
    pthread_t thread;
    int started;
    int wake_fd; /* eventfd: stop, reconfigure, a new heap reading (set before the thread) */
    struct mt_fdid wake_id; /* its identity: written to only while it is still the eventfd */
    pthread_mutex_t lock;
    int stop;                    /* guarded by lock */
    void (*woke)(void *arg, int kernel); /* guarded by lock: the set its wake-ups drive */
    void *woke_arg;
    struct pressure_zone zone;   /* guarded by lock: the instance's one zone (pressure.h) */
    struct pressure_stats stats; /* guarded by lock */

    /* the thread's own */
    int wake_lost;       /* the host took the wake fd's number: sleeps are capped */
    struct mt_kept statm;
    struct mt_kept kfd[2]; /* v1: threshold eventfd; v2: PSI trigger, memory.events */
    struct mt_kept usage;  /* v1: memory.usage_in_bytes, kept open while registered */
    int64_t armed_limit; /* the limit the v1 ladder was drawn for */
    /* v1: the ladder being drawn, one line per step (see the top) */
    struct mt_kept control; /* cgroup.event_control, open until the ladder is whole */
    uint64_t ladder_floor; /* line i is ladder_floor + i * ladder_spacing */
    uint64_t ladder_spacing;
    int ladder_lines, ladder_drawn, ladder_first; /* first: the first line drawn */
    int64_t ladder_started_ns;
    double armed_ratio;
    int kernel_tried;   /* 1 once arming was tried (and its outcome logged) */
    struct cgroup_info *cg; /* the cgroup the probe found (its paths fixed at start) */
    struct mt_log_limit trim_log; /* the line per pressure trim: TRIM_LOG_BURST per 10 s */
    int cg_version;
    int armed_level;        /* the cgroup level whose limit the sources were armed for */
    int armed_events_level; /* whose memory.events kfd[1] watches (v2) */
    struct mt_kept current; /* the limit's cgroup's memory.current (v1 usage_in_bytes) */
    int64_t events[MT_CG_EVENTS]; /* memory.events as kfd[1] last read it; -1 unknown */
    int events_read;        /* events hold a reading from kfd[1] */
    int64_t last_chance_log_ns; /* the last last-chance log line (rate-limited) */
    unsigned last_chance_quiet; /* last-chance trims not logged since */
};

/* ---- the kernel sources (kernel.c) ---- */

/* Choose what wakes the thread for this limit; logs the choice when it changes. */
void kernel_arm(struct pressure *p, int64_t limit, const struct mt_cheap *c, double ratio);
void kernel_disarm(struct pressure *p);
/* v1: the ladder is still being drawn (the thread polls meanwhile). */
int kernel_drawing(const struct pressure *p);
/* v1: register the ladder's next line; 0, or -errno (the caller disarms). */
int kernel_draw_line(struct pressure *p);
/* Empty the notification fds (fds[0] the wake, fds[1..2] kfd[]); 1 when the kernel signalled. */
int kernel_drain(struct pressure *p, const struct pollfd *fds);
/* Whether the wake fd is still the eventfd; once it is not, the thread polls without it. */
int wake_fd_ours(struct pressure *p);

/* ---- readings (kernel.c) ---- */

uint64_t kernel_read_rss(struct pressure *p);     /* /proc/self/statm's resident bytes */
int64_t kernel_read_current(struct pressure *p);  /* the limit's cgroup's charge, -1 unknown */
int64_t kernel_read_usage(struct pressure *p);    /* v1: memory.usage_in_bytes, -1 unknown */

#endif /* MEMTRIM_ENGINE_INT_H */
