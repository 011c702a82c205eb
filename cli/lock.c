/*
 * lock.c - one memtrim at a time per target process (lock.h), with a lock no user who may
 * not act on the target can take or block. Two file locks (flock), each dropped by the
 * kernel however the tool ends:
 *   - the target's own /proc/PID/mem: opening it needs the kernel's ptrace access to the
 *     process (root, or its own uid while it is dumpable), which is exactly who may act on
 *     it; it belongs to that process (a reused pid is another directory). Every tool takes
 *     it: it is the one lock every memtrim can reach, a root tool on the host and the node
 *     agent's in a pod whose root filesystem (and /run) is read-only alike;
 *   - for a tool running as root, first, /run/memtrim-command/inject-PID-START (a root-owned
 *     directory no one else may write, made 0700; not /run/memtrim, which a service's
 *     RuntimeDirectory or a pod's emptyDir may own; START is the process's start time, so
 *     the name is that process's): root's tools against each other, in that order. Where
 *     /run is missing or read-only (a container's root), /proc/PID/mem's lock alone, which
 *     still excludes the host's tools, since they take it too. A descriptor of
 *     /proc/PID/mem that a user opened before the process became setuid still holds its
 *     flock: such a process's trims wait and give up (exit 4, nothing done); it cannot be
 *     harmed by it, and two memtrims in one process at once could.
 * The file under /run is unlinked by its holder before the lock is dropped; a waiter checks
 * that the file it locked is still the one named; a killed holder's file is swept by a later
 * tool once its process is gone (sweep_stale). The tool's one thread.
 */
#include "lock.h"

#include "../common/control.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LOCK_DIR "/run/memtrim-command"

static double lock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void lock_pause(void)
{
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

/* flock(LOCK_EX) on fd, retried until the deadline: 0, 1 when held by another, -1. */
static int flock_until(int fd, double deadline)
{
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        if (lock_now() > deadline)
            return 1;
        lock_pause();
    }
    return 0;
}

/* The old lock (control cmd-lock-squat): a name in the abstract namespace, which any local
 * user may bind first. */
static int abstract_lock(pid_t pid, double deadline)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "memtrim-inject-%d", (int)pid);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    while (bind(fd, (struct sockaddr *)&sa, len) != 0) {
        if (errno != EADDRINUSE || lock_now() > deadline) {
            close(fd);
            return -1;
        }
        lock_pause();
    }
    return fd;
}

/* LOCK_DIR, made if missing (0700): a directory of root's that its group and others may not
 * write, never a link. */
static int lock_dir(char *err, size_t errlen)
{
    if (mkdir(LOCK_DIR, 0700) != 0 && errno != EEXIST) {
        if (errno == ENOENT || errno == EROFS)
            return -2; /* no /run (a container's root), or a read-only one */
        snprintf(err, errlen, "cannot make %s: %s", LOCK_DIR, strerror(errno));
        return -1;
    }
    int d = open(LOCK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    if (d < 0 || fstat(d, &sb) != 0) {
        snprintf(err, errlen, "cannot open %s: %s", LOCK_DIR, strerror(errno));
        if (d >= 0)
            close(d);
        return -1;
    }
    if (sb.st_uid != 0 || (sb.st_mode & 022)) {
        snprintf(err, errlen, "%s is not root's alone (uid %u, mode %03o): not used", LOCK_DIR,
                 (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 0777));
        close(d);
        return -1;
    }
    return d;
}

/* A tool killed while it held its lock leaves its file (empty; the lock itself went with it).
 * Each root tool removes up to SWEEP_MAX such files of processes that are gone: one it can
 * flock at once is nobody's (a waiter that opened it sees it unlinked and opens the name
 * again, as after a holder's own unlink). */
#define SWEEP_MAX 64

static void sweep_stale(int dir)
{
    int d = dup(dir);
    DIR *dh = d >= 0 ? fdopendir(d) : NULL;
    if (!dh) {
        if (d >= 0)
            close(d);
        return;
    }
    struct dirent *e;
    for (int seen = 0; seen < SWEEP_MAX && (e = readdir(dh)); seen++) {
        int pid, n = 0;
        unsigned long long start;
        if (sscanf(e->d_name, "inject-%d-%llu%n", &pid, &start, &n) != 2 || e->d_name[n] ||
            pid <= 0 || target_start_time(pid) == start)
            continue; /* not ours, or its process lives */
        int fd = openat(dir, e->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlinkat(dir, e->d_name, 0);
        if (fd >= 0)
            close(fd);
    }
    closedir(dh);
}

/* Root's lock file for this process: held, and still the file named. -2 where /run is
 * missing or read-only: /proc/PID/mem's lock alone. */
static int run_lock(struct target_lock *l, const struct target *t, double deadline, char *err,
                    size_t errlen)
{
    l->dir = lock_dir(err, errlen);
    if (l->dir < 0)
        return l->dir;
    snprintf(l->name, sizeof l->name, "inject-%d-%llu", (int)t->pid, t->start_time);
    for (;;) {
        int fd = openat(l->dir, l->name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            snprintf(err, errlen, "cannot open %s/%s: %s", LOCK_DIR, l->name, strerror(errno));
            return -1;
        }
        int r = flock_until(fd, deadline);
        struct stat held, named;
        if (r == 0 && fstat(fd, &held) == 0 && fstatat(l->dir, l->name, &named,
                                                       AT_SYMLINK_NOFOLLOW) == 0 &&
            held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
            l->run = fd;
            if (!mt_control("cmd-lock-sweep"))
                sweep_stale(l->dir);
            return 0;
        }
        close(fd); /* a holder unlinked it meanwhile: the next one is the file named */
        if (r != 0) {
            if (r < 0)
                snprintf(err, errlen, "flock %s/%s: %s", LOCK_DIR, l->name, strerror(errno));
            return r < 0 ? -1 : 1;
        }
    }
}

/* Whether a user other than root may act on the target (its uids and gids one, not root,
 * dumpable, no capabilities): then that user's tools take /proc/PID/mem's lock too. */
static int others_may_act(const struct target_status *st)
{
    return st->ruid == st->euid && st->euid == st->suid && st->euid != 0 &&
           st->rgid == st->egid && st->egid == st->sgid && st->proc_uid == st->euid &&
           st->cap_prm == 0;
}

int target_lock_take(struct target_lock *l, const struct target *t, double deadline,
                     char *err, size_t errlen)
{
    *l = (struct target_lock){.dir = -1, .run = -1, .mem = -1, .sock = -1};
    if (mt_control("cmd-lock-squat")) {
        l->sock = abstract_lock(t->pid, deadline);
        if (l->sock < 0)
            snprintf(err, errlen, "another memtrim is acting on process %d", (int)t->pid);
        return l->sock < 0 ? 1 : 0;
    }
    int r = geteuid() == 0 ? run_lock(l, t, deadline, err, errlen) : -2;
    /* -2: no LOCK_DIR here. The defect (agent-lock-run-only): root's tool with a LOCK_DIR takes
     * the mem lock only for a target other users may act on, so a tool that has no LOCK_DIR
     * (the agent's in a pod) and one on the host both act on a root process at once. */
    if (r == -2 || (r == 0 && (!mt_control("agent-lock-run-only") || others_may_act(&t->st)))) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/mem", (int)t->pid);
        l->mem = open(path, O_RDONLY | O_CLOEXEC);
        if (l->mem < 0)
            snprintf(err, errlen, "cannot open %s for its lock: %s", path, strerror(errno));
        r = l->mem < 0 ? -1 : flock_until(l->mem, deadline);
        if (r < 0 && l->mem >= 0)
            snprintf(err, errlen, "flock %s: %s", path, strerror(errno));
    }
    if (r > 0)
        snprintf(err, errlen, "another memtrim is acting on process %d", (int)t->pid);
    if (r != 0)
        target_lock_drop(l);
    return r;
}

void target_lock_drop(struct target_lock *l)
{
    if (l->mem >= 0)
        close(l->mem);
    if (l->run >= 0) {
        unlinkat(l->dir, l->name, 0); /* before the lock goes: a waiter sees it gone */
        close(l->run);
    }
    if (l->dir >= 0)
        close(l->dir);
    if (l->sock >= 0)
        close(l->sock);
    *l = (struct target_lock){.dir = -1, .run = -1, .mem = -1, .sock = -1};
}
