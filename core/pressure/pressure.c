/*
 * pressure.c - DESIGN. The pressure path: one thread per instance
 * ("memtrim-press") that trims within milliseconds when RSS nears the memory
 * limit, and otherwise sleeps on the kernel. Only this thread runs pressure
 * trims; the housekeeper keeps the heap probe, samples, periodic and burst
 * trims at their slower pace, so a pressure trim never waits behind them
 * (a trim already running is shared: the next reading decides again).
 *
 * What wakes it (pressure_source):
 *  - cgroup v1 memory thresholds: an eventfd registered through
 *    cgroup.event_control on memory.usage_in_bytes at a ladder of lines from
 *    the zone's floor up to the limit; the kernel signals each crossing, so
 *    growth inside the zone wakes it at once and a steady host costs nothing.
 *    Each registration waits out an RCU grace period in the kernel (8-30 ms
 *    measured here), so a ladder (25 lines at the default ratio, up to 50 at
 *    low ones) takes 0.25-1 s: it is drawn one line per step, after that
 *    step's reading, the line above the current usage first, so until it is
 *    whole the thread reads about once per grace period (a ladder drawn in
 *    one go before the first reading left the host unwatched for 0.4 s at
 *    start, and two 150 MB studies back to back in 300 MB got it killed).
 *  - cgroup v2: a PSI trigger on memory.pressure and memory.events changes
 *    wake it at the limit; v2 has no usage thresholds, so the zone is polled.
 *  - poll: /proc/self/statm on an adaptive timer: 2 ms while RSS moves inside
 *    the zone, backing off while it is steady.
 * The decision itself is pressure_policy.c's (pure functions).
 * A read-only or missing cgroup filesystem is no error: it polls, and says
 * so at info level. The housekeeper wakes it when the limit changes or a new
 * heap reading arrives (the releasable estimate), and PATCH /config does.
 *
 * Locking: p->lock guards p->stop and p->stats (held only to copy or bump);
 * everything else belongs to the thread. Never held across a trim or a read.
 *
 * Descriptors: every one this file keeps is a struct mt_kept (common/fdid.h),
 * reached only through mt_kept_fd(), which checks it is still the file opened:
 * a host that closed it and reopened the number (closefrom after its fork) keeps
 * its file untouched, and the thread reopens its own or polls without it. The
 * wake eventfd is the one written by other threads: its number and identity are
 * set before the thread starts and never change; a lost wake caps the sleep at
 * WAKE_LOST_NS, so a stop is still seen at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fdid.h"
#include "mt_alloc.h"
#include "pressure.h"
#include "snapshot.h"
#include "trim.h"

#define POLL_FAST_NS (2 * MT_MS)       /* RSS moving inside the zone */
#define POLL_ZONE_MAX_NS (100 * MT_MS) /* steady inside the zone (poll) */
#define POLL_MOVING_NS (20 * MT_MS)    /* moving outside the zone (poll) */
#define POLL_OUT_MAX_NS (250 * MT_MS)  /* steady outside the zone (poll) */
#define KERNEL_ZONE_NS (1 * MT_SEC)    /* inside the zone, kernel-woken: a safety re-check */
#define IDLE_NS (3600 * MT_SEC)        /* nothing to watch, or kernel-woken outside the zone */
#define WAKE_LOST_NS (50 * MT_MS)      /* the longest sleep once the host took the wake fd */
#define WAKE_CHECK_NS (1 * MT_SEC)     /* the longest sleep: the wake fd is checked this often */
#define MOVED_BYTES (1u << 20)      /* RSS "moves" when a reading differs by this much */
#define LADDER_LINES 50             /* v1 threshold lines, the limit split in 2 % steps */
#define CGROUP_SUPER_MAGIC 0x27e0eb
#define CGROUP2_SUPER_MAGIC 0x63677270

const double mt_reaction_bounds[MT_REACTION_BUCKETS] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025,
                                                        0.05,   0.1,   0.25,  0.5,   1.0,  5.0};

static const char *const source_names[PRESSURE_SOURCE_COUNT] = {
    "none", "poll", "cgroup-v1-threshold", "psi", "memory-events"};

const char *pressure_source_name(int source)
{
    return source >= 0 && source < PRESSURE_SOURCE_COUNT ? source_names[source] : "unknown";
}

/* A PATCH or a hostile workload can make pressure trims many a second: their lines are
 * rate-limited (the counters and the store keep every trim). */
#define TRIM_LOG_BURST 5
#define TRIM_LOG_WINDOW_NS (10 * MT_SEC)

struct pressure {
    struct pressure_deps deps; /* what it uses (pressure_create); read-only */
    pthread_t thread;
    int started;
    int wake_fd; /* eventfd: stop, reconfigure, a new heap reading (set before the thread) */
    struct mt_fdid wake_id; /* its identity: written to only while it is still the eventfd */
    pthread_mutex_t lock;
    int stop;                    /* guarded by lock */
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

/* ---- kernel notifications ----------------------------------------------- */

static int on_cgroupfs(int fd, int version)
{
    struct statfs sf;
    if (fstatfs(fd, &sf))
        return 0;
    return version == 1 ? sf.f_type == CGROUP_SUPER_MAGIC : sf.f_type == CGROUP2_SUPER_MAGIC;
}

static void disarm(struct pressure *p)
{
    for (int i = 0; i < 2; i++)
        mt_kept_close(&p->kfd[i]); /* closing the eventfd unregisters its thresholds */
    mt_kept_close(&p->usage);
    mt_kept_close(&p->control);
    mt_kept_close(&p->current);
    p->events_read = 0;
    p->ladder_lines = p->ladder_drawn = 0;
    p->armed_limit = 0;
}

static int64_t read_usage(struct pressure *p);

/* v1: the ladder is still being drawn (the thread polls meanwhile). */
static int drawing(const struct pressure *p)
{
    return p->control.fd >= 0;
}

/* v1: register the ladder's next line: those from the current usage up
 * first, then the ones below it downwards. 0, or -errno (the caller
 * disarms: a partial ladder would leave gaps unwatched). */
static int draw_line(struct pressure *p)
{
    char cmd[96];
    int k = p->ladder_drawn, up = p->ladder_lines - p->ladder_first;
    int i = k < up ? p->ladder_first + k : p->ladder_first - 1 - (k - up);
    uint64_t line = p->ladder_floor + (uint64_t)i * p->ladder_spacing;
    int efd = mt_kept_fd(&p->kfd[0]), ufd = mt_kept_fd(&p->usage), cfd = mt_kept_fd(&p->control);
    if (efd < 0 || ufd < 0 || cfd < 0)
        return -EBADF; /* the host took one of them: poll */
    int n = snprintf(cmd, sizeof(cmd), "%d %d %llu", efd, ufd, (unsigned long long)line);
    errno = 0;
    if (write(cfd, cmd, (size_t)n) != n)
        return errno ? -errno : -EIO;
    if (++p->ladder_drawn == p->ladder_lines) {
        mt_kept_close(&p->control);
        mt_log(MT_LOG_INFO, "pressure",
               "cgroup v1 threshold ladder drawn: %d lines from %llu to %llu bytes in %.0f ms "
               "(polled meanwhile)",
               p->ladder_lines, (unsigned long long)p->ladder_floor,
               (unsigned long long)(p->ladder_floor +
                                    (uint64_t)(p->ladder_lines - 1) * p->ladder_spacing),
               (double)(mt_mono_ns() - p->ladder_started_ns) / 1e6);
    }
    return 0;
}

/* v1: one eventfd for a threshold at every line of the ladder, and the
 * ladder's plan; step() draws the lines, one per step. 0 or -errno. */
static int arm_v1(struct pressure *p, const char *dir, int64_t limit, double ratio)
{
    char path[PATH_MAX + 32];
    int rc = 0;

    snprintf(path, sizeof(path), "%.4000s/memory.usage_in_bytes", dir);
    if (mt_kept_set(&p->usage, open(path, O_RDONLY | O_CLOEXEC), "memory.usage_in_bytes") < 0)
        return errno ? -errno : -EIO;
    if (!on_cgroupfs(p->usage.fd, 1)) {
        rc = -ENOTSUP;
        goto fail;
    }
    snprintf(path, sizeof(path), "%.4000s/cgroup.event_control", dir);
    mt_kept_set(&p->control, open(path, O_WRONLY | O_CLOEXEC), "cgroup.event_control");
    mt_kept_set(&p->kfd[0], eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "the threshold eventfd");
    if (p->control.fd < 0 || p->kfd[0].fd < 0) {
        rc = errno ? -errno : -EIO;
        goto fail;
    }
    uint64_t floor = pressure_zone_floor(limit, ratio), spacing = (uint64_t)limit / LADDER_LINES;
    if (spacing == 0)
        spacing = (uint64_t)limit;
    p->ladder_floor = floor;
    p->ladder_spacing = spacing;
    p->ladder_lines = (int)(((uint64_t)limit - floor + spacing - 1) / spacing);
    if (p->ladder_lines < 1)
        p->ladder_lines = 1;
    p->ladder_drawn = 0;
    int64_t usage = read_usage(p);
    p->ladder_first = 0;
    if (usage > 0 && (uint64_t)usage > floor) {
        uint64_t above = ((uint64_t)usage - floor + spacing - 1) / spacing;
        p->ladder_first = above < (uint64_t)p->ladder_lines ? (int)above : p->ladder_lines - 1;
    }
    p->ladder_started_ns = mt_mono_ns();
    p->armed_limit = limit;
    p->armed_ratio = ratio;
    return 0;
fail:
    if (rc == 0)
        rc = -EIO;
    disarm(p);
    return rc;
}

/* Read memory.events through kfd[1] (the read re-arms its notification); 0 or -1. */
static int read_events(struct pressure *p)
{
    char buf[512];
    int fd = mt_kept_fd(&p->kfd[1]);
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    if (n < 0)
        return -1;
    buf[n] = '\0';
    if (cgroup_parse_events(buf, p->events) == 0)
        p->events_read = 1;
    return 0;
}

/*
 * v2: a PSI trigger on the own cgroup's memory.pressure (memory stalls) and
 * the notification of memory.events (high, max, oom) of the cgroup whose
 * limit holds (events count up the tree: the outermost limit's file sees
 * every one below it). The source, or 0. *psi says why PSI was not armed.
 */
static int arm_v2(struct pressure *p, const char *own, const char *events_dir, int64_t limit,
                  const char **psi)
{
    char path[PATH_MAX + 32];
    /* Writers without CAP_SYS_RESOURCE get windows that are multiples of 2 s
     * (kernel 6.5+; before, none at all): the 500 ms one first, then 2 s. */
    static const char *const triggers[] = {"some 10000 500000", "some 20000 2000000"};

    snprintf(path, sizeof(path), "%.4000s/memory.pressure", own);
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    *psi = fd < 0 ? (errno == EROFS ? "memory.pressure is on a read-only mount"
                     : errno == EACCES || errno == EPERM ? "memory.pressure is not writable by this user"
                     : "no memory.pressure (PSI off?)")
                  : NULL;
    if (fd >= 0 && on_cgroupfs(fd, 2)) {
        for (size_t i = 0; i < sizeof(triggers) / sizeof(triggers[0]); i++)
            if (write(fd, triggers[i], strlen(triggers[i]) + 1) > 0) {
                mt_kept_set(&p->kfd[0], fd, "the PSI trigger");
                fd = -1;
                mt_log(MT_LOG_INFO, "pressure", "PSI trigger \"%s\" armed on %s", triggers[i],
                       path);
                break;
            }
        if (fd >= 0)
            *psi = "the kernel refused every PSI trigger";
    }
    if (fd >= 0)
        close(fd);
    snprintf(path, sizeof(path), "%.4000s/memory.events", events_dir);
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && on_cgroupfs(fd, 2)) {
        if (mt_kept_set(&p->kfd[1], fd, "memory.events") >= 0 && read_events(p) != 0)
            mt_kept_close(&p->kfd[1]); /* a read arms the notification */
        fd = -1;
    }
    if (fd >= 0)
        close(fd);
    if (p->kfd[0].fd < 0 && p->kfd[1].fd < 0)
        return 0;
    p->armed_limit = limit;
    return p->kfd[0].fd >= 0 ? PRESSURE_SOURCE_PSI : PRESSURE_SOURCE_V2_EVENTS;
}

/* Choose what wakes the thread for this limit; logs the choice when it changes. */
static void arm(struct pressure *p, int64_t limit, const struct mt_cheap *c, double ratio)
{
    int source = PRESSURE_SOURCE_POLL;
    const char *why = NULL, *psi = NULL;
    char dir[PATH_MAX], own[PATH_MAX], events_dir[PATH_MAX];
    int64_t cgroup_limit = c->cgroup_limit_bytes;

    disarm(p);
    p->armed_level = c->cgroup_limit_level >= 0 ? c->cgroup_limit_level : 0;
    p->armed_events_level = c->cgroup_events_level >= 0 ? c->cgroup_events_level : 0;
    cgroup_level_dir(p->cg, p->armed_level, dir, sizeof(dir));
    cgroup_level_dir(p->cg, 0, own, sizeof(own));
    cgroup_level_dir(p->cg, p->armed_events_level, events_dir, sizeof(events_dir));
    if (dir[0] && p->cg_version) { /* the charge the decision reads (pressure_charge) */
        char path[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%.4000s/%s", dir,
                 cgroup_file_name(p->cg_version, CG_FILE_CURRENT));
        mt_kept_set(&p->current, open(path, O_RDONLY | O_CLOEXEC), "the cgroup's usage file");
    }
    if (limit <= 0 || ratio <= 0) {
        source = PRESSURE_SOURCE_NONE;
        why = "no memory limit known (cgroup or MemoryLimitBytes): no pressure trims";
    } else if (!dir[0]) {
        why = "no memory cgroup found: polling /proc/self/statm";
    } else if (cgroup_limit <= 0) {
        why = "the cgroup has no limit of its own (MemoryLimitBytes): polling /proc/self/statm";
    } else if (p->cg_version == 1) {
        int rc = arm_v1(p, dir, limit, ratio);
        if (rc == 0)
            source = PRESSURE_SOURCE_V1_THRESHOLD;
        else
            why = rc == -ENOTSUP ? "the cgroup files are not on a cgroup filesystem: polling"
                                 : "cgroup v1 thresholds unavailable (read-only cgroup "
                                   "filesystem?): polling /proc/self/statm";
    } else if (p->cg_version == 2) {
        int s = arm_v2(p, own, events_dir, limit, &psi);
        if (s) {
            source = s;
            p->armed_ratio = ratio; /* else step() sees a ratio change and re-arms every wake */
            why = psi; /* memory.events alone: say why there is no PSI trigger */
        }
        else
            why = "cgroup v2 PSI and memory.events unavailable: polling /proc/self/statm";
    }
    pthread_mutex_lock(&p->lock);
    int changed = p->stats.source != source || !p->kernel_tried;
    p->stats.source = source;
    pthread_mutex_unlock(&p->lock);
    if (changed)
        mt_log(MT_LOG_INFO, "pressure", "pressure source: %s%s%s%s", pressure_source_name(source),
               why ? " (" : "", why ? why : "", why ? ")" : "");
    p->kernel_tried = 1;
}

/* Empty the notification fds; 1 when the kernel signalled. */
/* Whether the wake fd is still the eventfd; once it is not, the thread polls without it
 * (and says so once). */
static int wake_ours(struct pressure *p)
{
    if (p->wake_lost)
        return 0;
    if (mt_fdid_is(p->wake_fd, &p->wake_id))
        return 1;
    p->wake_lost = 1;
    mt_fdid_unlist(p->wake_fd, &p->wake_id);
    mt_log(MT_LOG_WARNING, "fd", "descriptor %d (the pressure thread's wake) was closed by "
                                 "someone else in pid %ld (the host?): left alone; the thread "
                                 "looks every %lld ms instead",
           p->wake_fd, (long)getpid(), (long long)(WAKE_LOST_NS / MT_MS));
    return 0;
}

static int drain(struct pressure *p, const struct pollfd *fds)
{
    uint64_t v;
    int kernel = 0;

    if (fds[0].fd >= 0 && fds[0].revents && wake_ours(p))
        while (read(p->wake_fd, &v, sizeof(v)) == sizeof(v))
            ;
    for (int i = 0; i < 2; i++) {
        if (fds[i + 1].fd < 0 || !fds[i + 1].revents)
            continue;
        int fd = mt_kept_fd(&p->kfd[i]);
        if (fd < 0) /* the host took the number: what polled was its file */
            continue;
        kernel = 1;
        if (p->cg_version == 1) {
            while (read(fd, &v, sizeof(v)) == sizeof(v))
                ;
        } else if (i == 1 && read_events(p) < 0) {
            mt_kept_close(&p->kfd[i]); /* memory.events vanished: poll without it */
        }
        if (fds[i + 1].revents & (POLLERR | POLLHUP | POLLNVAL) && i == 0 && p->cg_version == 2)
            mt_kept_close(&p->kfd[i]); /* the PSI trigger is gone (cgroup removed) */
    }
    return kernel;
}

/* ---- readings ----------------------------------------------------------- */

static uint64_t read_rss(struct pressure *p)
{
    char buf[128];
    unsigned long long size, resident;
    int fd = mt_kept_fd(&p->statm);
    if (fd < 0)
        fd = mt_kept_set(&p->statm, open("/proc/self/statm", O_RDONLY | O_CLOEXEC),
                         "/proc/self/statm");
    if (fd < 0)
        return probe_rss();
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return probe_rss();
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
        return 0;
    long ps = sysconf(_SC_PAGESIZE);
    return (uint64_t)resident * (uint64_t)(ps > 0 ? ps : 4096);
}

/* A kept cgroup file's one number (memory.current, memory.usage_in_bytes), -1 unknown or
 * "max". */
static int64_t read_kept_number(struct mt_kept *k)
{
    char buf[64];
    int fd = mt_kept_fd(k);
    if (fd < 0)
        return -1;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return strncmp(buf, "max", 3) ? strtoll(buf, NULL, 10) : -1;
}

/* The limit's cgroup's charge (memory.current), -1 unknown. */
static int64_t read_current(struct pressure *p)
{
    return read_kept_number(&p->current);
}

static int64_t read_usage(struct pressure *p)
{
    return read_kept_number(&p->usage);
}

/* ---- the thread --------------------------------------------------------- */

struct loop {
    struct mt_config cfg;
    uint64_t cfg_generation;
    int configured; /* cfg holds a copy */
    struct pressure_state st;
    int64_t calm_ns; /* the last moment no rule held: reactions count from here */
    int64_t interval_ns;
    uint64_t last_rss;
    int64_t limit, cgroup_limit;
    int limit_level, events_level; /* where the cgroup's limit and events were (re-arm on change) */
    int64_t events_seen[MT_CG_EVENTS]; /* memory.events as the last step saw them */
    int events_seen_ok;
};

static void reload(struct pressure *p, struct loop *l)
{
    config_feed_read(&p->deps.config, &l->cfg, &l->cfg_generation, !l->configured);
    l->configured = 1;
}

static void record_trim(struct pressure *p, const struct mt_trim_result *r)
{
    double s = r->reaction_ns >= 0 ? (double)r->reaction_ns / 1e9 : 0;
    int b = 0;
    while (b < MT_REACTION_BUCKETS && s > mt_reaction_bounds[b])
        b++;
    pthread_mutex_lock(&p->lock);
    p->stats.trims++;
    p->stats.reaction_hist[b]++;
    p->stats.reaction_seconds_sum += s;
    p->stats.reaction_last_seconds = s;
    pthread_mutex_unlock(&p->lock);
}

/* A last-chance trim: what the heap held and what the trim gave back, at
 * most one line each 10 s (the kernel may report the limit many times a second). */
static void log_last_chance(struct pressure *p, struct loop *l, const struct mt_snapshot *snap,
                            const struct mt_trim_result *r)
{
    int64_t now = mt_mono_ns();
    if (p->last_chance_log_ns && now - p->last_chance_log_ns < 10 * MT_SEC) {
        p->last_chance_quiet++;
        return;
    }
    const int64_t *e = l->events_seen;
    char heap[160] = "no heap reading yet";
    if (snap->heap.timestamp_ms)
        snprintf(heap, sizeof(heap),
                 "the heap held %llu bytes in use and %llu free (%llu releasable by the last "
                 "reading, %lld ms old)",
                 (unsigned long long)snap->heap.heap_in_use_bytes,
                 (unsigned long long)snap->heap.heap_free_bytes,
                 (unsigned long long)snap->releasable_estimate_bytes,
                 (long long)snap->heap_age_ms);
    mt_log(MT_LOG_WARNING, "pressure",
           "the cgroup reached its limit (memory.events high %lld, max %lld, oom %lld, oom_kill "
           "%lld): last-chance trim; %s; RSS %llu -> %llu, released %lld bytes in %.3f ms, "
           "cgroup charge %lld of %lld bytes (%u more such trims not logged)",
           (long long)e[MT_CG_EV_HIGH], (long long)e[MT_CG_EV_MAX], (long long)e[MT_CG_EV_OOM],
           (long long)e[MT_CG_EV_OOM_KILL], heap, (unsigned long long)r->rss_before_bytes,
           (unsigned long long)r->rss_after_bytes, (long long)r->released_bytes,
           r->duration_ns / 1e6, (long long)read_current(p), (long long)l->limit,
           p->last_chance_quiet);
    p->last_chance_log_ns = now;
    p->last_chance_quiet = 0;
}

/* Run a pressure trim; 1 when another trim was running (look again soon). */
static int do_trim(struct pressure *p, struct loop *l, const struct mt_snapshot *snap, int64_t now)
{
    const struct pressure_deps *d = &p->deps;
    struct mt_trim_result r;

    /* The trim service refuses it while the host is suspended or another trim runs,
     * and counts those skips at most once a second (its rule for pressure trims). */
    struct trim_ask ask = {MT_TRIGGER_PRESSURE, (uint64_t)l->cfg.trim_pad_bytes, -1, l->calm_ns, 0,
                           0, 0};
    int rc = trim_request(d->trims, d->cache, &ask, &r, NULL);
    if (rc == -EPERM) {
        l->calm_ns = now; /* the host holds trims off: no reaction is owed */
        return 0;
    }
    if (rc == -EBUSY) { /* another trim runs: it releases too; decide again right after */
        pthread_mutex_lock(&p->lock);
        p->stats.busy++;
        pthread_mutex_unlock(&p->lock);
        return 1;
    }
    if (rc)
        return 0;
    if (l->st.rule == PRESSURE_RULE_LAST_CHANCE)
        log_last_chance(p, l, snap, &r);
    uint64_t judged = l->st.last_released;
    int64_t back = pressure_judge_last(&l->st, r.rss_before_bytes);
    if (back >= 0) {
        pthread_mutex_lock(&p->lock);
        p->stats.judged_released_bytes += judged;
        p->stats.returned_bytes += (uint64_t)back;
        p->stats.returned_trims += (uint64_t)back * 2 > judged;
        pthread_mutex_unlock(&p->lock);
    }
    pressure_after_trim(&l->st, now, r.rss_after_bytes, r.released_bytes,
                        (uint64_t)l->cfg.trim_min_releasable_bytes);
    record_trim(p, &r); /* (the trim service has woken the store) */
    l->calm_ns = mt_mono_ns();
    l->last_rss = r.rss_after_bytes;
    mt_log_limited(&p->trim_log, MT_LOG_INFO, "pressure",
           "pressure trim released %lld bytes in %.3f ms, %.3f ms after the crossing "
           "(RSS %llu -> %llu)",
           (long long)r.released_bytes, r.duration_ns / 1e6, r.reaction_ns / 1e6,
           (unsigned long long)r.rss_before_bytes, (unsigned long long)r.rss_after_bytes);
    return 0;
}

/* How long to sleep after a reading. */
static int64_t next_interval(struct pressure *p, struct loop *l, const struct pressure_input *in,
                             int moved)
{
    int source = p->stats.source; /* written only by this thread */
    int64_t t;

    if (source == PRESSURE_SOURCE_NONE)
        return IDLE_NS;
    if (drawing(p))
        return POLL_FAST_NS; /* each line drawn blocks a grace period: about every 20 ms */
    if (source == PRESSURE_SOURCE_V1_THRESHOLD) {
        /* The ladder signals growth; but a cgroup filled by page cache or other
         * processes may sit above our lines while RSS climbs under them: poll then. */
        int64_t usage = l->st.zone ? -1 : read_usage(p);
        if (l->st.zone)
            t = KERNEL_ZONE_NS;
        else if (usage >= 0 && (uint64_t)usage >= pressure_zone_floor(in->limit, in->ratio))
            t = moved ? POLL_MOVING_NS : POLL_OUT_MAX_NS;
        else
            t = IDLE_NS;
    } else if (l->st.zone) {
        t = moved ? POLL_FAST_NS : l->interval_ns * 2;
        if (t > POLL_ZONE_MAX_NS)
            t = POLL_ZONE_MAX_NS;
    } else {
        t = moved ? POLL_MOVING_NS : l->interval_ns * 2;
        if (t > POLL_OUT_MAX_NS)
            t = POLL_OUT_MAX_NS;
    }
    if (t < POLL_FAST_NS)
        t = POLL_FAST_NS;
    int64_t due = pressure_next_due(in, &l->st);
    if (due != INT64_MAX) {
        int64_t wait = due - in->now_ns;
        if (wait < t)
            t = wait > POLL_FAST_NS ? wait : POLL_FAST_NS;
    }
    return t;
}

/* One reading and decision; returns the sleep before the next. */
static int64_t step(struct pressure *p, struct loop *l, int kernel, int64_t woke_ns)
{
    struct mt_snapshot snap;
    struct snapshot_want want = {
        .cheap_max_age_ns = INT64_MAX, .heap_max_age_ns = INT64_MAX, .stale_ok = 1};

    reload(p, l);
    want.memory_limit_cfg = l->cfg.memory_limit_bytes;
    snapshot_get(p->deps.cache, &want, &snap); /* what the housekeeper read: no probe here */
    int64_t cgroup_limit = snap.cheap.cgroup_limit_bytes;
    if (snap.memory_limit_bytes != l->limit || cgroup_limit != l->cgroup_limit ||
        snap.cheap.cgroup_limit_level != l->limit_level ||
        snap.cheap.cgroup_events_level != l->events_level ||
        (p->armed_limit && p->armed_ratio != l->cfg.pressure_ratio) || !p->kernel_tried) {
        l->limit = snap.memory_limit_bytes;
        l->cgroup_limit = cgroup_limit;
        l->limit_level = snap.cheap.cgroup_limit_level;
        l->events_level = snap.cheap.cgroup_events_level;
        arm(p, l->limit, &snap.cheap, l->cfg.pressure_ratio);
    }
    /* The kernel's count of limit hits: from the notified file, else the housekeeper's reading. */
    const int64_t *ev = p->events_read ? p->events : snap.cheap.cgroup_events;
    int last_chance = 0;
    if ((p->events_read || snap.cheap.timestamp_ms) &&
        (ev[MT_CG_EV_MAX] >= 0 || ev[MT_CG_EV_OOM] >= 0 || ev[MT_CG_EV_OOM_KILL] >= 0)) {
        if (l->events_seen_ok)
            last_chance = ev[MT_CG_EV_MAX] > l->events_seen[MT_CG_EV_MAX] ||
                          ev[MT_CG_EV_OOM] > l->events_seen[MT_CG_EV_OOM] ||
                          ev[MT_CG_EV_OOM_KILL] > l->events_seen[MT_CG_EV_OOM_KILL];
        memcpy(l->events_seen, ev, sizeof(l->events_seen));
        l->events_seen_ok = 1;
    }
    /* The cgroup's charge counts only when its limit is the one in force. */
    int cg_in_force = cgroup_limit > 0 && l->cfg.memory_limit_bytes <= 0;

    struct pressure_input in = {
        .now_ns = mt_mono_ns(),
        .rss = read_rss(p),
        .limit = l->limit,
        .ratio = l->cfg.pressure_ratio,
        .min_releasable = (uint64_t)l->cfg.trim_min_releasable_bytes,
        .estimate = snap.releasable_estimate_bytes,
        .estimate_known = snap.heap.timestamp_ms != 0,
        .cg_current = cg_in_force ? read_current(p) : -1,
        .cg_file = snap.cheap.cgroup_file_bytes,
        .cg_shmem = snap.cheap.cgroup_shmem_bytes,
        .last_chance = last_chance,
    };
    in.estimate_ns = in.now_ns - (snap.heap_age_ms > 0 ? snap.heap_age_ms * MT_MS : 0);
    int moved = in.rss > l->last_rss + MOVED_BYTES || in.rss + MOVED_BYTES < l->last_rss;
    l->last_rss = in.rss;
    if (kernel && woke_ns > l->calm_ns)
        l->calm_ns = woke_ns; /* the kernel said when: reactions count from its signal */
    int verdict = pressure_decide(&in, &l->st);

    pthread_mutex_lock(&p->lock);
    p->stats.zone = l->st.zone;
    p->stats.backoff_seconds = l->st.zone ? (double)pressure_growth_gap(&in, &l->st) / 1e9 : 0;
    if (l->st.zone)
        p->stats.checks_inside++;
    else
        p->stats.checks_outside++;
    if (kernel)
        p->stats.kernel_wakeups++;
    pthread_mutex_unlock(&p->lock);

    int busy = 0;
    /* A rule that came due by time (a back-off ended, a heap reading arrived) crossed then. */
    if (verdict == PRESSURE_TRIM && l->st.due_ns > l->calm_ns)
        l->calm_ns = l->st.due_ns;
    if (verdict == PRESSURE_TRIM) {
        busy = do_trim(p, l, &snap, in.now_ns);
        if (l->st.rule == PRESSURE_RULE_LAST_CHANCE && !busy) {
            pthread_mutex_lock(&p->lock);
            p->stats.last_chance_trims++;
            pthread_mutex_unlock(&p->lock);
        }
        moved = 1;
        in.now_ns = mt_mono_ns();
    } else {
        l->calm_ns = in.now_ns;
    }
    /* The ladder's next line, after the reading it would have delayed. */
    if (drawing(p)) {
        int rc = draw_line(p);
        if (rc) {
            char why[128];
            mt_log(MT_LOG_WARNING, "pressure",
                   "cgroup v1 threshold ladder: line %d of %d refused (%s): polling /proc/self/statm",
                   p->ladder_drawn + 1, p->ladder_lines, mt_strerror(-rc, why, sizeof(why)));
            disarm(p);
            pthread_mutex_lock(&p->lock);
            p->stats.source = PRESSURE_SOURCE_POLL;
            pthread_mutex_unlock(&p->lock);
        }
    }
    /* A trim that found another running looks again soon. */
    int64_t t = busy ? POLL_FAST_NS : next_interval(p, l, &in, moved);
    l->interval_ns = t;
    return t;
}

static void *pressure_main(void *arg)
{
    struct pressure *p = arg;
    struct loop l;

    memset(&l, 0, sizeof(l));
    l.st.last_trim_ns = mt_mono_ns() - (int64_t)3600 * MT_SEC;
    l.interval_ns = POLL_FAST_NS;
    l.limit = l.cgroup_limit = -2; /* unknown: arm at the first reading */
    l.limit_level = l.events_level = -2;
    l.calm_ns = mt_mono_ns();      /* what held before the start counts from the start */

    int64_t sleep_ns = 0;
    for (;;) {
        /* A number the host took is polled no more (its file's events are not ours). */
        struct pollfd fds[3] = {{p->wake_lost ? -1 : p->wake_fd, POLLIN, 0},
                                {p->kfd[0].fd, p->cg_version == 2 ? POLLPRI : POLLIN, 0},
                                {p->kfd[1].fd, POLLPRI, 0}};
        /* A host that closes the wake fd while the thread sleeps wakes nothing (closing a
         * polled descriptor ends no poll), and pressure_stop then writes no byte to a
         * number that is no longer the eventfd: so the sleep is bounded, and the wake
         * checked after it. */
        if (sleep_ns > (p->wake_lost ? WAKE_LOST_NS : WAKE_CHECK_NS))
            sleep_ns = p->wake_lost ? WAKE_LOST_NS : WAKE_CHECK_NS;
        struct timespec ts = {(time_t)(sleep_ns / MT_SEC), (long)(sleep_ns % MT_SEC)};
        int n = ppoll(fds, 3, &ts, NULL);
        int64_t woke = mt_mono_ns();
        /* Drain before reading stop: pressure_stop sets stop, then wakes. Read
         * the other way round, a stop whose wake was drained with an earlier one
         * (the housekeeper's) was lost, and the thread slept its hour while
         * mt_destroy waited in pthread_join (seen under valgrind in CI). */
        int kernel = n > 0 ? drain(p, fds) : 0;
        if (n == 0)
            wake_ours(p);
        pthread_mutex_lock(&p->lock);
        int stop = p->stop;
        pthread_mutex_unlock(&p->lock);
        if (stop)
            break;
        sleep_ns = step(p, &l, kernel, woke);
    }
    disarm(p);
    return NULL;
}

struct pressure *pressure_create(const struct pressure_deps *deps)
{
    struct pressure *p = mt_calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->deps = *deps;
    struct mt_kept none = MT_KEPT_NONE(NULL);
    p->kfd[0] = p->kfd[1] = p->usage = p->control = p->current = p->statm = none;
    p->stats.reaction_last_seconds = -1;
    mt_log_limit_init(&p->trim_log, TRIM_LOG_WINDOW_NS, TRIM_LOG_BURST);
    p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->wake_fd >= 0 && mt_fdid_take(p->wake_fd, &p->wake_id) != 0) {
        close(p->wake_fd);
        p->wake_fd = -1;
    }
    mt_fdid_list(p->wake_fd, &p->wake_id); /* a forked child closes it (fdid.h) */
    mt_kept_set(&p->statm, open("/proc/self/statm", O_RDONLY | O_CLOEXEC), "/proc/self/statm");
    /* The cgroup the probe found (fixed when the cache was made). */
    p->cg = &deps->cache->cg.info;
    p->cg_version = deps->cache->cg.version;
    if (p->wake_fd < 0 || pthread_mutex_init(&p->lock, NULL)) {
        mt_fdid_unlist(p->wake_fd, &p->wake_id);
        if (p->wake_fd >= 0)
            close(p->wake_fd); /* just opened: certainly ours */
        mt_kept_close(&p->statm);
        free(p);
        return NULL;
    }
    return p;
}

void pressure_free(struct pressure *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->trim_log.lock);
    mt_fdid_unlist(p->wake_fd, &p->wake_id); /* before the close (fdid.h) */
    mt_fdid_close(p->wake_fd, &p->wake_id); /* left alone when the host took it */
    mt_kept_close(&p->statm);
    free(p);
}

int pressure_start(struct pressure *p, char **err)
{
    if (!p || mt_thread_start(&p->thread, "memtrim-press", pressure_main, p)) {
        *err = mt_strdup("cannot start the pressure thread");
        return -ENOMEM;
    }
    pthread_mutex_lock(&p->lock);
    p->started = 1;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void pressure_wake(struct pressure *p)
{
    uint64_t one = 1;
    /* Written only while the number is still the eventfd: a host that closed it and
     * opened a file of its own there gets no 8 bytes of ours (the thread, having lost
     * its wake, looks every WAKE_LOST_NS by itself). */
    if (p && mt_fdid_is(p->wake_fd, &p->wake_id) && write(p->wake_fd, &one, sizeof(one)) < 0) {
        /* a full counter already wakes it */
    }
}

void pressure_stop(struct pressure *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int started = p->started;
    p->stop = 1;
    pthread_mutex_unlock(&p->lock);
    if (!started)
        return;
    pressure_wake(p);
    pthread_join(p->thread, NULL);
    pthread_mutex_lock(&p->lock);
    p->started = 0;
    pthread_mutex_unlock(&p->lock);
}

void pressure_stats_get(struct pressure *p, struct pressure_stats *out)
{
    clockid_t cid;
    struct timespec ts;

    memset(out, 0, sizeof(*out));
    out->reaction_last_seconds = -1;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    /* The thread's CPU clock, read from outside: the thread pays nothing for it. */
    if (p->started && !p->stop && pthread_getcpuclockid(p->thread, &cid) == 0 &&
        clock_gettime(cid, &ts) == 0)
        out->cpu_seconds = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    pthread_mutex_unlock(&p->lock);
}
