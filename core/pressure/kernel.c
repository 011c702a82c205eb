/*
 * kernel.c - DESIGN. The pressure engine's kernel sources (engine_int.h), run on
 * its thread ("memtrim-press"; engine.c) and nowhere else.
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
 *
 * Locking: p->lock (a leaf) only to publish the source in p->stats; everything
 * else here is the thread's own.
 *
 * Descriptors: every one this file keeps is a struct mt_kept (common/fdid.h),
 * reached only through mt_kept_fd(), which checks it is still the file opened:
 * a host that closed it and reopened the number (closefrom after its fork) keeps
 * its file untouched, and the thread reopens its own or polls without it.
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
#include <unistd.h>

#include "engine_int.h"

#define LADDER_LINES 50             /* v1 threshold lines, the limit split in 2 % steps */
#define CGROUP_SUPER_MAGIC 0x27e0eb
#define CGROUP2_SUPER_MAGIC 0x63677270

/* ---- kernel notifications ----------------------------------------------- */

static const char *const source_names[PRESSURE_SOURCE_COUNT] = {
    "none", "poll", "cgroup-v1-threshold", "psi", "memory-events"};

const char *pressure_source_name(int source)
{
    return source >= 0 && source < PRESSURE_SOURCE_COUNT ? source_names[source] : "unknown";
}

static int on_cgroupfs(int fd, int version)
{
    struct statfs sf;
    if (fstatfs(fd, &sf))
        return 0;
    return version == 1 ? sf.f_type == CGROUP_SUPER_MAGIC : sf.f_type == CGROUP2_SUPER_MAGIC;
}

void kernel_disarm(struct pressure *p)
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

/* v1: the ladder is still being drawn (the thread polls meanwhile). */
int kernel_drawing(const struct pressure *p)
{
    return p->control.fd >= 0;
}

/* v1: register the ladder's next line: those from the current usage up
 * first, then the ones below it downwards. 0, or -errno (the caller
 * disarms: a partial ladder would leave gaps unwatched). */
int kernel_draw_line(struct pressure *p)
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
    int64_t usage = kernel_read_usage(p);
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
    kernel_disarm(p);
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
void kernel_arm(struct pressure *p, int64_t limit, const struct mt_cheap *c, double ratio)
{
    int source = PRESSURE_SOURCE_POLL;
    const char *why = NULL, *psi = NULL;
    char dir[PATH_MAX], own[PATH_MAX], events_dir[PATH_MAX];
    int64_t cgroup_limit = c->cgroup_limit_bytes;

    kernel_disarm(p);
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
int wake_fd_ours(struct pressure *p)
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

int kernel_drain(struct pressure *p, const struct pollfd *fds)
{
    uint64_t v;
    int kernel = 0;

    if (fds[0].fd >= 0 && fds[0].revents && wake_fd_ours(p))
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

uint64_t kernel_read_rss(struct pressure *p)
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
int64_t kernel_read_current(struct pressure *p)
{
    return read_kept_number(&p->current);
}

int64_t kernel_read_usage(struct pressure *p)
{
    return read_kept_number(&p->usage);
}
