/*
 * probe.c - reads the process's memory: /proc/self/{statm,status,stat}, the
 * memory cgroup (v1 or v2) and the allocator's stats through its back end
 * (alloc.h: glibc's mallinfo2, jemalloc's epoch + stats.*, ...). Runs on
 * whichever thread asks (housekeeper, HTTP workers through snapshot.c); keeps
 * only the open /proc files (atomics, below) and takes no locks of its own:
 * the allocators' stats calls take their arena locks, which is why
 * snapshot.c rations them.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "common.h"
#include "fdid.h"
#include "probe.h"

/*
 * The /proc files read on every probe stay open and are read with pread
 * from offset 0: a host at its descriptor limit (a client holding every
 * connection it can) must not blind memtrim, nor make it report 0 bytes.
 * Opened at start (probe_proc_open), lock-free (atomics: a fork may happen
 * at any moment, and a lock held then would stay held in the child). A
 * forked child opens its own, since /proc/self was resolved at open time;
 * its parent's three are closed by the atfork child handler (fdid.h's list,
 * each checked there first), and this file forgets their numbers.
 */
enum { PROC_STATM, PROC_STATUS, PROC_STAT, PROC_NFILES };
static const char *const proc_paths[PROC_NFILES] = {"/proc/self/statm", "/proc/self/status",
                                                    "/proc/self/stat"};
static _Atomic pid_t proc_pid;
static _Atomic int proc_fd[PROC_NFILES] = {-1, -1, -1};
/* Each kept descriptor's identity, set before it is published: a number the host closed
 * and reused (closefrom after its fork) is forgotten, never read or closed, and the
 * file opened again. */
static _Atomic uint64_t proc_dev[PROC_NFILES], proc_ino[PROC_NFILES];

/* fd is still the file kept for which, and memtrim's open of it (its stamp, fdid.h): a
 * host's own open of the same file at that number is not. */
static int proc_still(int which, int fd)
{
    struct mt_fdid id;
    mt_fdid_file(atomic_load(&proc_dev[which]), atomic_load(&proc_ino[which]), &id);
    return mt_fdid_is(fd, &id);
}

/* The kept descriptor of one file, opened on first use; a negative errno if it cannot be. */
static int proc_get(int which)
{
    pid_t pid = getpid(), seen = atomic_load(&proc_pid);
    if (seen != pid && atomic_compare_exchange_strong(&proc_pid, &seen, pid))
        for (int i = 0; i < PROC_NFILES; i++)
            atomic_store(&proc_fd[i], -1);
    int fd = atomic_load(&proc_fd[which]);
    if (fd >= 0 && proc_still(which, fd))
        return fd;
    struct mt_fdid id;
    mt_fdid_file(atomic_load(&proc_dev[which]), atomic_load(&proc_ino[which]), &id);
    if (fd >= 0 && atomic_compare_exchange_strong(&proc_fd[which], &fd, -1) &&
        (mt_fdid_unlist(fd, &id), 1))
        mt_log(MT_LOG_WARNING, "fd", "descriptor %d (%s) was closed by someone else in pid %ld "
                                     "(the host?): left alone, reopened",
               fd, proc_paths[which], (long)pid);
    fd = open(proc_paths[which], O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = mt_fdid_take(fd, &id); /* stamps it: the identity is this open's */
    if (rc != 0) {
        close(fd);
        return rc;
    }
    atomic_store(&proc_dev[which], id.dev);
    atomic_store(&proc_ino[which], id.ino);
    int expected = -1;
    if (!atomic_compare_exchange_strong(&proc_fd[which], &expected, fd)) {
        close(fd); /* another thread opened it first */
        return expected;
    }
    mt_fdid_list(fd, &id); /* a forked child closes it (fdid.h) */
    return fd;
}

void probe_proc_open(void)
{
    for (int i = 0; i < PROC_NFILES; i++)
        proc_get(i);
}

static ssize_t read_proc(int which, char *buf, size_t size)
{
    int fd = proc_get(which);
    return fd < 0 ? fd : mt_pread_all(fd, buf, size);
}

static long page_size(void)
{
    static _Atomic long ps; /* any thread may be first (pressure, housekeeper, HTTP) */
    long v = atomic_load_explicit(&ps, memory_order_relaxed);
    if (v == 0) {
        v = sysconf(_SC_PAGESIZE);
        atomic_store_explicit(&ps, v, memory_order_relaxed);
    }
    return v > 0 ? v : 4096;
}

uint64_t probe_rss(void)
{
    char buf[128];
    unsigned long size, resident;
    if (read_proc(PROC_STATM, buf, sizeof(buf)) <= 0)
        return 0;
    if (sscanf(buf, "%lu %lu", &size, &resident) != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)page_size();
}

int probe_statm(struct probe_statm *out)
{
    char buf[128];
    unsigned long size, resident, shared;
    ssize_t n = read_proc(PROC_STATM, buf, sizeof(buf));
    if (n <= 0)
        return n < 0 ? (int)n : -EIO;
    if (sscanf(buf, "%lu %lu %lu", &size, &resident, &shared) != 3)
        return -EIO;
    uint64_t ps = (uint64_t)page_size();
    out->vm_size_bytes = (uint64_t)size * ps;
    out->rss_bytes = (uint64_t)resident * ps;
    out->rss_anon_bytes = resident > shared ? (uint64_t)(resident - shared) * ps : 0;
    return 0;
}

uint64_t probe_peak_rss(void)
{
    char line[256];
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* /proc/self/stat's fields after the command name (which may hold spaces), by
 * their index there: 0 state, 7 minflt, 9 majflt, 11 utime, 12 stime, 21 rss.
 * Read by hand: the housekeeper reads this file every tick, and sscanf's
 * format engine was the largest part of its tick (perf). */
enum { STAT_MINFLT = 7, STAT_MAJFLT = 9, STAT_UTIME = 11, STAT_STIME = 12, STAT_RSS = 21,
       STAT_FIELDS = 22 };

static int read_stat_fields(uint64_t f[STAT_FIELDS])
{
    char buf[1024];
    ssize_t n = read_proc(PROC_STAT, buf, sizeof(buf));
    if (n <= 0)
        return n < 0 ? (int)n : -EIO;
    const char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -EIO;
    p += 2;
    f[0] = (uint64_t)(unsigned char)*p++; /* the state, a letter */
    for (int i = 1; i < STAT_FIELDS; i++) {
        if (*p != ' ')
            return -EIO;
        p++;
        int neg = *p == '-';
        p += neg;
        if (*p < '0' || *p > '9')
            return -EIO;
        uint64_t v = 0;
        for (; *p >= '0' && *p <= '9'; p++)
            v = v * 10 + (uint64_t)(*p - '0'); /* wraps only past 2^64, not for these fields */
        f[i] = neg ? 0 : v; /* no field read here is negative; tty may be */
    }
    return 0;
}

static int64_t stat_cpu_ns(const uint64_t f[STAT_FIELDS])
{
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    return (int64_t)(f[STAT_UTIME] + f[STAT_STIME]) * (1000000000 / hz);
}

static int read_stat(uint64_t *minflt, uint64_t *majflt, int64_t *cpu_ns)
{
    uint64_t f[STAT_FIELDS];
    int rc = read_stat_fields(f);
    if (rc)
        return rc;
    if (minflt)
        *minflt = f[STAT_MINFLT];
    if (majflt)
        *majflt = f[STAT_MAJFLT];
    if (cpu_ns)
        *cpu_ns = stat_cpu_ns(f);
    return 0;
}

int64_t probe_process_cpu_ns(void)
{
    int64_t ns;
    return read_stat(NULL, NULL, &ns) == 0 ? ns : -1;
}

int probe_stat(struct probe_stat *out)
{
    uint64_t f[STAT_FIELDS];
    memset(out, 0, sizeof(*out));
    int rc = read_stat_fields(f);
    if (rc)
        return rc;
    out->minflt = f[STAT_MINFLT];
    out->cpu_ns = stat_cpu_ns(f);
    out->rss_bytes = f[STAT_RSS] * (uint64_t)page_size();
    return 0;
}

static uint64_t status_kb(const char *buf, const char *key)
{
    const char *p = strstr(buf, key);
    return p ? strtoull(p + strlen(key), NULL, 10) * 1024 : 0;
}

/* A mount table naming root as the cgroup filesystem's mount point (MEMTRIM_CGROUP_ROOT). */
static void legacy_mountinfo(char *buf, size_t size, const char *root)
{
    char esc[PATH_MAX];
    size_t o = 0;
    for (const char *p = root; *p && o + 5 < sizeof(esc); p++) {
        if (*p == ' ' || *p == '\\' || *p == '\t' || *p == '\n')
            o += (size_t)snprintf(esc + o, sizeof(esc) - o, "\\%03o", (unsigned char)*p);
        else
            esc[o++] = *p;
    }
    esc[o] = '\0';
    snprintf(buf, size,
             "1 0 0:1 / %.4000s/memory rw - cgroup cgroup rw,memory\n"
             "2 0 0:2 / %.4000s rw - cgroup2 cgroup2 rw\n",
             esc, esc);
}

int probe_cgroup_find(struct probe_cgroup *cg, const char *proc_cgroup, const char *root)
{
    char mounts[2 * PATH_MAX + 256];
    legacy_mountinfo(mounts, sizeof(mounts), root);
    int rc = cgroup_lookup(proc_cgroup, mounts, "", &cg->info);
    cg->version = cg->info.version;
    return rc;
}

/* A /proc file whole, in a buffer of its own (free it); NULL when it cannot be read. */
static char *read_all(const char *path)
{
    size_t size = 16384, total = 0;
    char *buf = mt_malloc(size);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (!buf || fd < 0) {
        free(buf);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    for (;;) {
        if (total + 1 >= size) {
            char *bigger = size < (8u << 20) ? mt_realloc(buf, size * 2) : NULL;
            if (!bigger)
                break; /* a larger table is read as far as it goes */
            buf = bigger;
            size *= 2;
        }
        ssize_t n = read(fd, buf + total, size - 1 - total);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        total += (size_t)n;
    }
    close(fd);
    buf[total] = '\0';
    return buf;
}

char *probe_read_file(const char *path)
{
    return read_all(path);
}

int probe_cgroup_init(struct probe_cgroup *cg)
{
    const char *root = getenv("MEMTRIM_CGROUP_ROOT");
    char *groups = read_all("/proc/self/cgroup");
    int rc = -ENOENT;
    memset(cg, 0, sizeof(*cg));
    if (groups && root && root[0]) {
        rc = probe_cgroup_find(cg, groups, root);
    } else if (groups) {
        char *mounts = read_all("/proc/self/mountinfo");
        rc = cgroup_lookup(groups, mounts ? mounts : "", "", &cg->info);
        cg->version = cg->info.version;
        free(mounts);
    } else {
        cgroup_lookup("", "", "", &cg->info); /* an empty, closed one */
    }
    free(groups);
    return rc;
}

void probe_cgroup_close(struct probe_cgroup *cg)
{
    cgroup_close(&cg->info);
}

int probe_cheap(struct probe_cgroup *cg, struct mt_cheap *out)
{
    char buf[4096];
    int64_t t0 = mt_mono_ns();
    int rc = 0;

    memset(out, 0, sizeof(*out));
    out->timestamp_ms = mt_now_ms();
    out->cgroup_usage_bytes = -1;
    out->cgroup_limit_bytes = -1;
    ssize_t n = read_proc(PROC_STATM, buf, sizeof(buf));
    unsigned long size, resident;
    if (n > 0 && sscanf(buf, "%lu %lu", &size, &resident) == 2)
        out->rss_bytes = (uint64_t)resident * (uint64_t)page_size();
    else
        rc = out->read_errno = n < 0 ? (int)n : -EIO;
    n = read_proc(PROC_STATUS, buf, sizeof(buf));
    if (n > 0) {
        out->rss_anon_bytes = status_kb(buf, "RssAnon:");
        out->rss_file_bytes = status_kb(buf, "RssFile:");
        out->rss_shmem_bytes = status_kb(buf, "RssShmem:");
        out->swap_bytes = status_kb(buf, "VmSwap:");
        out->vm_size_bytes = status_kb(buf, "VmSize:");
        out->rss_peak_bytes = status_kb(buf, "VmHWM:");
    } else if (rc == 0) {
        rc = out->read_errno = n < 0 ? (int)n : -EIO;
    }
    int st = read_stat(&out->minor_faults, &out->major_faults, NULL);
    if (st && rc == 0)
        rc = out->read_errno = st;
    if (cg)
        cgroup_read(&cg->info, out);
    else
        cgroup_read(&(struct cgroup_info){.version = 0}, out);
    out->duration_ns = mt_mono_ns() - t0;
    return rc;
}

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void probe_heap(const struct alloc_ops *a, struct mt_heap *out, int want_arenas)
{
    if (!a)
        a = &alloc_glibc;
    int64_t cpu = probe_process_cpu_ns(); /* before the clock starts: not the call's cost */
    memset(out, 0, sizeof(*out));
    int64_t c0 = thread_cpu_ns();
    int64_t t0 = mt_mono_ns();
    a->stats(out);
    int64_t t1 = mt_mono_ns();
    int64_t c1 = thread_cpu_ns();

    out->timestamp_ms = mt_now_ms();
    out->allocator = alloc_name(a);
    out->arena_count = want_arenas && a->arena_count ? a->arena_count() : -1;
    out->duration_ns = (want_arenas ? mt_mono_ns() : t1) - t0;
    out->cpu_ns = (want_arenas ? thread_cpu_ns() : c1) - c0;
    out->process_cpu_ns = cpu;
}

int64_t probe_cgroup_usage(struct probe_cgroup *cg, int level)
{
    return cg && cg->version ? cgroup_usage(&cg->info, level >= 0 ? level : 0) : -1;
}
