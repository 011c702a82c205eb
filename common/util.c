/*
 * util.c - logging, clocks, reading a kept file whole, and
 * the names of triggers and skip reasons. The log sink (a function and its argument) is set by a host
 * adapter, normally before an instance starts, and read by any thread;
 * log_lock guards the pair and is held while a line is written. Starting a thread is in
 * thread.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

const double mt_hist_bounds[MT_HIST_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                0.01,   0.025,   0.05,   0.1,   0.25,   1.0};

static const char *const trigger_names[MT_TRIGGER_COUNT] = {"manual", "periodic", "pressure",
                                                            "burst"};
static const char *const skip_names[MT_SKIP_COUNT] = {
    "below_min_releasable", "suspended", "busy", "no_heap_stats", "host_busy", "budget",
    "stagger"};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static mt_log_fn log_fn;
static void *log_arg;

const char *mt_trigger_name(int trigger)
{
    if (trigger < 0 || trigger >= MT_TRIGGER_COUNT)
        return "unknown";
    return trigger_names[trigger];
}

static const char *const nothing_names[MT_NOTHING_COUNT] = {
    NULL, "not_measured", "nothing_free", "pinned_small_chunks", "pinned_chunk_edges",
    "pinned_thread_arena_top", "not_resident", "unexplained"};

const char *mt_nothing_name(int reason)
{
    return reason > 0 && reason < MT_NOTHING_COUNT ? nothing_names[reason] : NULL;
}

int mt_nothing_parse(const char *name)
{
    for (int i = 1; name && i < MT_NOTHING_COUNT; i++)
        if (strcmp(name, nothing_names[i]) == 0)
            return i;
    return MT_NOTHING_UNEXPLAINED;
}

int mt_trigger_parse(const char *name)
{
    for (int i = 0; name && i < MT_TRIGGER_COUNT; i++)
        if (strcmp(name, trigger_names[i]) == 0)
            return i;
    return -1;
}

const char *mt_skip_reason_name(int reason)
{
    if (reason < 0 || reason >= MT_SKIP_COUNT)
        return "unknown";
    return skip_names[reason];
}

void mt_set_log_sink(mt_log_fn fn, void *arg)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_arg = arg;
    pthread_mutex_unlock(&log_lock);
}

int mt_log_debug_enabled(void)
{
    const char *v = getenv("MEMTRIM_DEBUG");
    return v && *v && strcmp(v, "0") != 0;
}

void mt_log(int level, const char *module, const char *fmt, ...)
{
    static const char *const level_names[] = {"error", "warning", "info", "debug"};
    char msg[1024];

    if (level == MT_LOG_DEBUG && !mt_log_debug_enabled())
        return;
    int n = snprintf(msg, sizeof(msg), "memtrim/%s: ", module);
    va_list ap;

    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof(msg))
        vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&log_lock);
    if (log_fn) {
        log_fn(level, msg, log_arg);
    } else {
        if (level < 0 || level > MT_LOG_DEBUG)
            level = MT_LOG_INFO;
        fprintf(stderr, "%s (%s)\n", msg, level_names[level]);
    }
    pthread_mutex_unlock(&log_lock);
}

void mt_log_fork_prepare(void)
{
    pthread_mutex_lock(&log_lock);
}

void mt_log_fork_parent(void)
{
    pthread_mutex_unlock(&log_lock);
}

void mt_log_fork_child(void)
{
    pthread_mutex_unlock(&log_lock);
}

int64_t mt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void mt_deadline(struct timespec *ts, int64_t after_ns)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(after_ns / 1000000000);
    ts->tv_nsec += (long)(after_ns % 1000000000);
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

int64_t mt_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *mt_strerror(int err, char *buf, size_t len)
{
    return strerror_r(err, buf, len); /* the GNU variant (_GNU_SOURCE): a string, always */
}

ssize_t mt_pread_all(int fd, char *buf, size_t size)
{
    ssize_t n, total = 0;
    while ((size_t)total < size - 1) {
        n = pread(fd, buf + total, size - 1 - (size_t)total, total);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        total += n;
    }
    buf[total] = '\0';
    return total;
}

ssize_t mt_read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n, total = 0;
    while ((size_t)total < size - 1) {
        n = read(fd, buf + total, size - 1 - (size_t)total);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        total += n;
    }
    close(fd);
    buf[total] = '\0';
    return total;
}

int mt_secret_owner_ok(unsigned uid)
{
    return uid == (unsigned)geteuid() || uid == 0;
}
